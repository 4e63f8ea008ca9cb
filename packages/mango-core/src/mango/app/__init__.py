"""mango's application layer: SessionManager, admission, reconciliation."""

from mango.app.clock import ManualClock, SystemClock
from mango.app.memory_store import InMemoryBindingStore
from mango.app.packages import PackageSetupFailed, install_packages, package_commands
from mango.app.session_manager import ReconcileReport, SessionManager

__all__ = [
    "InMemoryBindingStore",
    "ManualClock",
    "PackageSetupFailed",
    "ReconcileReport",
    "SessionManager",
    "SystemClock",
    "install_packages",
    "package_commands",
]

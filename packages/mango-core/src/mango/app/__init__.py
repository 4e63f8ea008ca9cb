"""mango's application layer: SessionManager, admission, reconciliation."""

from mango.app.clock import ManualClock, SystemClock
from mango.app.memory_store import InMemoryBindingStore
from mango.app.packages import (
    PackageSetupFailed,
    PackageSetupInterrupted,
    install_packages,
    package_commands,
)
from mango.app.session_manager import ReconcileReport, SessionManager, SessionSandbox
from mango.app.wrappers import SandboxWrapper

__all__ = [
    "InMemoryBindingStore",
    "ManualClock",
    "PackageSetupFailed",
    "PackageSetupInterrupted",
    "ReconcileReport",
    "SandboxWrapper",
    "SessionManager",
    "SessionSandbox",
    "SystemClock",
    "install_packages",
    "package_commands",
]

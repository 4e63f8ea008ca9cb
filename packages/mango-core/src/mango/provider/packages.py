"""Package setup as SessionManager runs it: what a ``package-setup`` provider must run.

A provider that declares ``package-setup`` installs nothing itself:
SessionManager runs the commands of :func:`package_commands` through
``Sandbox.exec``, in that order, after the setup allowlist and before the
final one and the binding (see :mod:`mango.app.session_manager`). What the
provider owes is a sandbox in which they work: the package managers in its
image, their network during setup, their exit status and stderr reported
faithfully, and what they installed kept for the life of the sandbox
(across attaches from restarted workers). The conformance suite drives
:func:`install_packages` exactly as SessionManager does, so a check of a
provider is a check of the step it will really meet.
"""

from __future__ import annotations

from mango.app.packages import install_packages, package_commands
from mango.domain.errors import PackageSetupFailed, PackageSetupInterrupted

__all__ = ["PackageSetupFailed", "PackageSetupInterrupted", "install_packages", "package_commands"]

"""``mango`` with crash injection: the recovery tests' entry point, never installed.

Run as ``python faulty_mango.py ARGS...`` (the same arguments as ``mango``)
with ``MANGO_FAULT_POINT`` set to a point of :mod:`mango.temporal.faults`:
every SessionManager the command opens (``mango worker``'s and the direct
commands') is built on a provider and store that SIGKILL the process the
first time it reaches that point. The production ``mango`` reads no such
variable; this entry hands the wrappers in through
:func:`mango.cli.main.main`'s ``wrap_ports`` seam instead. An unknown point
fails here, before anything starts.
"""

from __future__ import annotations

import sys

from mango.cli.main import main
from mango.domain.errors import MangoError
from mango.domain.ports import BindingStore, Provider
from mango.temporal.faults import fault_point_from_env, inject_faults

if __name__ == "__main__":
    try:
        point = fault_point_from_env()
    except MangoError as exc:
        sys.exit(f"error: {exc}")

    def crash_at_point(provider: Provider, store: BindingStore) -> tuple[Provider, BindingStore]:
        """The manager's ports, wrapped to crash at ``point``."""
        return inject_faults(provider, store, point)

    main(wrap_ports=crash_at_point)

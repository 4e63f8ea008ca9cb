"""SessionManager: exactly one durable sandbox per Session.

The package splits SessionManager by job, each module below the ones that
use it (an import-linter contract keeps the order):

* :mod:`.manager`: the public API;
* :mod:`.interpreter`: the lifecycle interpreter (a command walked through the table);
* :mod:`.reconcile`: reconciliation passes and their report;
* :mod:`.eviction`: the idle eviction pass and its report;
* :mod:`.registry`: effect handlers and guard checks, checked against a table;
* :mod:`.resources`: the resource effects (materialize, publish outputs);
* :mod:`.provisioning`, :mod:`.teardown`, :mod:`.fleet` and :mod:`.pause`: the lifecycle's
  own effects;
* :mod:`.guards`: the table's guards and the ownership and proof checks;
* :mod:`.context`: the operation, its one observation path, outcomes and facts;
* :mod:`.clients`: the loss-recording client handed out, the client cache, the locks.
"""

from mango.app.session_manager.clients import SessionSandbox
from mango.app.session_manager.context import (
    USE_INTERVAL,
    EffectHandler,
    Facts,
    GuardCheck,
    Outcome,
)
from mango.app.session_manager.eviction import EvictionReport
from mango.app.session_manager.manager import SessionManager
from mango.app.session_manager.reconcile import ReconcileReport
from mango.app.session_manager.registry import Handlers, default_handlers

__all__ = [
    "USE_INTERVAL",
    "EffectHandler",
    "EvictionReport",
    "Facts",
    "GuardCheck",
    "Handlers",
    "Outcome",
    "ReconcileReport",
    "SessionManager",
    "SessionSandbox",
    "default_handlers",
]

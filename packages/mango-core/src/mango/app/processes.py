"""Background processes of a Session's sandbox: the capability check SessionManager makes.

The operations themselves are the sandbox's (:class:`~mango.domain.ports.ProcessSandbox`);
what belongs here is the refusal: a provider that does not declare
``background-processes``, or whose sandbox does not implement the protocol,
is refused with :class:`~mango.domain.errors.CapabilityNotSupported` before
anything is provisioned or started. Nothing is emulated through ``exec``.
"""

from __future__ import annotations

from typing import cast

from mango.app.wrappers import SandboxWrapper
from mango.domain.capabilities import Capability, CapabilitySet
from mango.domain.errors import CapabilityNotSupported
from mango.domain.ports import ProcessSandbox, Sandbox

__all__ = ["PROCESSES_HINT", "check_declared", "process_sandbox"]

PROCESSES_HINT = (
    "'mango providers' shows the capabilities of each installed provider; "
    "local and docker declare background-processes"
)
_CAPABILITY = Capability.BACKGROUND_PROCESSES


def check_declared(provider: str, declared: CapabilitySet) -> None:
    """Raise :class:`CapabilityNotSupported` unless ``declared`` has background processes."""
    if _CAPABILITY not in declared:
        raise CapabilityNotSupported(
            provider,
            [f"{provider} does not support {_CAPABILITY.description} ({_CAPABILITY.value})"],
            hint=PROCESSES_HINT,
        )


def process_sandbox(provider: str, sandbox: Sandbox, session_id: str) -> ProcessSandbox:
    """``sandbox`` as a :class:`ProcessSandbox`; refused if it does not implement one.

    The check looks through :class:`~mango.app.wrappers.SandboxWrapper` layers
    (SessionManager's client is one): since Python 3.12 a runtime protocol
    check sees only attributes a class defines, not those its ``__getattr__``
    delegates, so the wrapper itself never passes it. The wrapper is returned:
    its delegation reaches the provider's methods.
    """
    provided: object = sandbox
    while isinstance(provided, SandboxWrapper):
        provided = provided.inner
    if not isinstance(provided, ProcessSandbox):
        raise CapabilityNotSupported(
            provider,
            [
                (
                    f"the sandbox of session {session_id!r} does not implement background "
                    f"processes, though {provider} declares {_CAPABILITY.value}"
                )
            ],
            hint=PROCESSES_HINT,
        )
    return cast("ProcessSandbox", sandbox)

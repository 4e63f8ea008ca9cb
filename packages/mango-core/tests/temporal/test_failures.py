"""mango errors through the Temporal failure converter keep class, fields, hint and verdict."""

from __future__ import annotations

import importlib
from typing import Any

import attrs
import pytest
from temporalio.api.failure.v1 import Failure
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.testing import ActivityEnvironment

from mango.app import SessionManager
from mango.domain import (
    AdmissionRejected,
    CapabilitySet,
    MangoError,
    PermanentError,
    ProviderUnavailable,
    SandboxRef,
    SandboxSpec,
)
from mango.domain.ports import Sandbox
from mango.postgres import PostgresBindingStore
from mango.temporal import MangoActivities
from mango.temporal.failures import raise_as_mango_error, to_application_error
from mango.temporal.messages import AcquireInput
from mango.temporal.payloads import data_converter

# Every module that defines MangoError subclasses, so __subclasses__ sees them all.
for _module in ("mango.app.packages", "mango.app.tools", "mango_provider_docker.execution"):
    importlib.import_module(_module)

SAMPLES: dict[str, Any] = {
    "message": "something went wrong",
    "hint": "do this instead",
    "provider": "docker",
    "reasons": ("gpu is not supported", "network=limited needs an egress proxy"),
    "state": "bound",
    "command": "acquire",
    "name": "nope",
    "available": ("docker", "local"),
    "status": 503,
    "retry_after": 2.5,
    "excerpt": "quota exceeded",
    "size": 8 * 1024**3,
    "limit": 16 * 1024**2,
    "expected_size": 8 * 1024**3 + 1,
    "expected_sha256": "0" * 64,
    "sha256": "f" * 64,
    "file_id": "file-" + "0" * 32,
    "store_id": "memstore-" + "0" * 32,
    "process_id": "proc-0123",
    "path": "/var/lib/mango/sandboxes/mango-0123.deleting-4567/workspace/mnt",
    "idle_seconds": 7200.5,
    "finished": False,
}
"""A value for every constructor parameter a MangoError subclass takes."""


def all_mango_errors() -> list[type[MangoError]]:
    """MangoError and every subclass defined by mango itself, sorted by name."""
    found: dict[str, type[MangoError]] = {}
    pending: list[type[MangoError]] = [MangoError]
    while pending:
        cls = pending.pop()
        if cls.__module__.startswith(("mango.", "mango_provider_docker")):
            found[cls.__qualname__] = cls
        pending.extend(cls.__subclasses__())
    return [found[name] for name in sorted(found)]


def example(cls: type[MangoError]) -> MangoError:
    """An instance of ``cls`` with every constructor argument set."""
    import inspect

    parameters = list(inspect.signature(cls.__init__).parameters)[1:]
    missing = [name for name in parameters if name not in SAMPLES]
    assert not missing, f"add a sample for {cls.__name__}({', '.join(missing)}) to SAMPLES"
    return cls(**{name: SAMPLES[name] for name in parameters})


def through_the_wire(error: BaseException) -> ApplicationError:
    """``error`` as an activity reports it, encoded and decoded by the data converter."""
    failure = Failure()
    data_converter.failure_converter.to_failure(
        to_application_error(error), data_converter.payload_converter, failure
    )
    decoded = data_converter.failure_converter.from_failure(
        failure, data_converter.payload_converter
    )
    assert isinstance(decoded, ApplicationError)
    return decoded


def client_side(app: ApplicationError) -> MangoError:
    """What a client raises for ``app`` wrapped as the SDK wraps activity failures."""
    wrapper = ActivityError(
        "Activity task failed",
        scheduled_event_id=1,
        started_event_id=2,
        identity="worker",
        activity_type="acquire_sandbox",
        activity_id="1",
        retry_state=RetryState.NON_RETRYABLE_FAILURE,
    )
    wrapper.__cause__ = app
    with pytest.raises(MangoError) as caught:
        raise_as_mango_error(wrapper)
    return caught.value


@pytest.mark.parametrize("cls", all_mango_errors(), ids=lambda cls: cls.__name__)
def test_every_error_round_trips_with_its_fields(cls: type[MangoError]) -> None:
    """Class, message, hint, every constructor field and the verdict come back exactly."""
    original = example(cls)
    if original.hint is None:
        original.hint = "set after construction"
    app = through_the_wire(original)
    assert app.type == cls.__name__
    rebuilt = client_side(app)
    assert type(rebuilt) is cls
    assert str(rebuilt) == str(original)
    assert vars(rebuilt) == vars(original)
    assert rebuilt.permanent is original.permanent


def test_admission_reasons_and_unknown_provider_listing_survive() -> None:
    """The fields callers act on are real tuples again on the client."""
    rejected = client_side(through_the_wire(AdmissionRejected("docker", ["a", "b"])))
    assert isinstance(rejected, AdmissionRejected)
    assert (rejected.provider, rejected.reasons) == ("docker", ("a", "b"))


def test_wrapped_errors_carry_the_mango_error_found_along_the_chain() -> None:
    """A foreign wrapper raised from a mango error travels as that mango error."""
    try:
        try:
            raise AdmissionRejected("docker", ["no gpu"], hint="pick another provider")
        except AdmissionRejected as inner:
            raise RuntimeError("while acquiring") from inner
    except RuntimeError as outer:
        rebuilt = client_side(through_the_wire(outer))
    assert isinstance(rebuilt, AdmissionRejected)
    assert rebuilt.reasons == ("no gpu",)
    assert rebuilt.hint == "pick another provider"


class QuotaExhausted(ProviderUnavailable):
    """A provider's own error, unknown to the client."""

    def __init__(self, message: str, *, region: str) -> None:
        super().__init__(message, hint="wait for the quota to refill")
        self.region = region


class VendorRefusal(ProviderUnavailable):
    """A provider's own subclass that overrides its ancestor's verdict."""

    permanent = True


def test_unknown_subclasses_come_back_as_their_nearest_known_ancestor() -> None:
    """Type name is kept on the wire; the client raises the ancestor with fields and verdict."""
    app = through_the_wire(QuotaExhausted("quota spent", region="eu-1"))
    assert app.type == "QuotaExhausted"
    rebuilt = client_side(app)
    assert type(rebuilt) is ProviderUnavailable
    assert (str(rebuilt), rebuilt.hint) == ("quota spent", "wait for the quota to refill")
    assert not rebuilt.permanent
    refusal = client_side(through_the_wire(VendorRefusal("account closed")))
    assert type(refusal) is ProviderUnavailable
    assert refusal.permanent


def test_failures_of_older_workers_still_convert() -> None:
    """A failure with only the hint as detail (older workers) rebuilds with message and hint."""
    old = ApplicationError(
        "provider 'docker' cannot run this sandbox: no gpu",
        "pick another provider",
        type="AdmissionRejected",
        non_retryable=True,
    )
    rebuilt = client_side(old)
    assert type(rebuilt) is AdmissionRejected
    assert str(rebuilt) == "provider 'docker' cannot run this sandbox: no gpu"
    assert rebuilt.hint == "pick another provider"


def test_non_mango_failures_stay_generic() -> None:
    """A failure without a mango type is a MangoError with the deepest message."""
    rebuilt = client_side(ApplicationError("disk on fire", type="OSError"))
    assert type(rebuilt) is MangoError
    assert "disk on fire" in str(rebuilt)
    assert not isinstance(rebuilt, PermanentError)


@attrs.define
class Refusing:
    """A provider that rejects every spec at admission."""

    name: str = "local"
    capabilities: CapabilitySet = attrs.field(factory=CapabilitySet)

    async def create(self, session_key: str, spec: SandboxSpec) -> Sandbox:
        raise AdmissionRejected(self.name, ["gpu is not supported", "memory too large"])

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> Sandbox:
        raise AssertionError("never bound")

    async def aclose(self) -> None:
        return None


@pytest.mark.postgres
async def test_activity_failure_carries_admission_reasons(store: PostgresBindingStore) -> None:
    """A real acquire activity's rejection reaches the client with every reason."""
    await store.ensure_session("s1")
    acts = MangoActivities(SessionManager(Refusing(), store), store, heartbeat_interval=0.05)
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(acts.acquire_sandbox, AcquireInput("s1"))
    assert (caught.value.type, caught.value.non_retryable) == ("AdmissionRejected", True)
    rebuilt = client_side(through_the_wire(caught.value))
    assert isinstance(rebuilt, AdmissionRejected)
    assert rebuilt.reasons == ("gpu is not supported", "memory too large")
    assert rebuilt.provider == "local"

"""Resource effects: materialize File Resources, publish outputs, finish removals, clean up.

* ``materialize-resources`` (a bound Session, before a tool step): the
  bound sandbox (the cached client, else an attach) is brought in line with
  the Session's resource rows (:func:`mango.app.materializer.materialize`);
* ``publish-outputs`` (a bound Session): its outputs directory is published
  as the Session's output files (:func:`mango.app.outputs.publish_outputs`);
* ``finish-removals`` (no bound sandbox): removals are finished in the rows;
* ``remove-session-files`` (a finished deletion): the Session's resource rows
  and output files go before its row.

The first two report a sandbox that vanished as :class:`Lost`, as attach
does, so the table records the loss and the command then meets ``lost``. A
manager built without :class:`~mango.app.session_files.SessionFiles` has no
resources to materialize and no outputs to publish: the effects do nothing.
"""

from __future__ import annotations

import attrs

from mango.app.materializer import MaterializeReport, finish_removals, materialize
from mango.app.outputs import PublishReport, publish_outputs
from mango.app.session_manager.context import (
    Done,
    EffectHandler,
    Facts,
    Lost,
    Outcome,
    Ports,
)
from mango.app.session_manager.provisioning import ATTACH_RESOURCE, AttachInput
from mango.domain.errors import MangoError, SandboxNotFound
from mango.domain.ports import Sandbox

__all__ = [
    "FINISH_REMOVALS",
    "MATERIALIZE_RESOURCES",
    "PUBLISH_OUTPUTS",
    "REMOVE_SESSION_FILES",
    "Materialized",
    "Published",
    "SessionOnly",
    "session_only",
]


@attrs.frozen
class Materialized(Outcome):
    """The sandbox's (or only the rows') resources are in line with the Session's rows."""

    report: MaterializeReport


@attrs.frozen
class Published(Outcome):
    """The sandbox's outputs directory is the Session's outputs now."""

    report: PublishReport


async def _bound_client(ports: Ports, given: AttachInput) -> Sandbox | Lost:
    """The provider's own client of the bound sandbox (cached, else attached), or the loss."""
    attached = await ATTACH_RESOURCE.perform(ports, given)
    if isinstance(attached, Lost):
        return attached
    cached = ports.clients.get(given.session_id)
    if cached is None:  # pragma: no cover - attach just cached it
        raise MangoError(f"session {given.session_id!r} has no client after its attach")
    return cached.raw


def _lost(ports: Ports, session_id: str, sandbox: Sandbox, exc: SandboxNotFound) -> Lost:
    ports.clients.forget(session_id, sandbox.ref)
    return Lost(sandbox.ref, exc)


async def materialize_resources(ports: Ports, given: AttachInput) -> Materialized | Lost:
    """Bring the bound sandbox's File Resources in line with the Session's rows."""
    if ports.files is None:
        return Materialized(MaterializeReport())
    client = await _bound_client(ports, given)
    if isinstance(client, Lost):
        return client
    try:
        report = await materialize(ports.files, given.session_id, client, ports.provider.name)
    except SandboxNotFound as exc:
        return _lost(ports, given.session_id, client, exc)
    return Materialized(report)


async def publish(ports: Ports, given: AttachInput) -> Published | Lost:
    """Publish the bound sandbox's outputs directory."""
    if ports.files is None:
        return Published(PublishReport())
    client = await _bound_client(ports, given)
    if isinstance(client, Lost):
        return client
    try:
        report = await publish_outputs(ports.files, given.session_id, client, ports.provider.name)
    except SandboxNotFound as exc:
        return _lost(ports, given.session_id, client, exc)
    return Published(report)


MATERIALIZE_RESOURCES = EffectHandler(
    gather=ATTACH_RESOURCE.gather, perform=materialize_resources, outcomes=(Materialized, Lost)
)
PUBLISH_OUTPUTS = EffectHandler(
    gather=ATTACH_RESOURCE.gather, perform=publish, outcomes=(Published, Lost)
)


@attrs.frozen
class SessionOnly:
    """Only the Session."""

    session_id: str


def session_only(facts: Facts) -> SessionOnly:
    """The Session the facts are about."""
    return SessionOnly(facts.session_id)


async def finish(ports: Ports, given: SessionOnly) -> Materialized:
    """No sandbox holds the Session's resources: finish removals in the rows."""
    if ports.files is None:
        return Materialized(MaterializeReport())
    return Materialized(await finish_removals(ports.files, given.session_id))


async def remove_session_files(ports: Ports, given: SessionOnly) -> Done:
    """Remove the fenced Session's resource rows and output files."""
    if ports.files is not None:
        await ports.files.remove_session_files(given.session_id)
    return Done()


FINISH_REMOVALS = EffectHandler(gather=session_only, perform=finish, outcomes=(Materialized,))
REMOVE_SESSION_FILES = EffectHandler(gather=session_only, perform=remove_session_files)

"""SessionManager's public API.

Every operation is one lifecycle command, held under the Session's lock and
run by the interpreter (:mod:`.interpreter`) through the table the manager
was built with.

Over 400 lines on purpose: this is the public API of SessionManager, one
short method per operation, and a third of its length is their docstrings,
the contract callers read (what each raises, what it leaves behind); the work
itself already lives in the sibling modules (the interpreter, provisioning,
teardown, eviction, resources, reconcile), so splitting this further would
only split that contract.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Sequence

import attrs

from mango.app import telemetry
from mango.app.admission import admit_environment
from mango.app.materializer import MaterializeReport
from mango.app.memories import MemoryStores
from mango.app.memory_wave import WaveReport, writeback_failure
from mango.app.outputs import PublishReport
from mango.app.processes import check_declared, process_sandbox
from mango.app.session_files import SessionFiles
from mango.app.session_manager.clients import ClientCache, SessionLocks, SessionSandbox
from mango.app.session_manager.context import (
    USE_INTERVAL,
    Evicted,
    Facts,
    Lost,
    Operation,
    Ports,
    SessionDeleted,
    observe_session,
)
from mango.app.session_manager.eviction import EvictionReport, evict_idle
from mango.app.session_manager.interpreter import Interpreter
from mango.app.session_manager.memory import MemoryWaved
from mango.app.session_manager.pause import PausedIdle
from mango.app.session_manager.reconcile import (
    ReconcileReport,
    finish_deletions,
    reconcile_provisioning,
)
from mango.app.session_manager.registry import Handlers, default_handlers
from mango.app.session_manager.resources import Materialized, Published
from mango.app.session_manager.skills import SkillsMaterialized
from mango.app.skills import CreatedSession, SessionSkills, SkillReport
from mango.domain.capabilities import Capability, CapabilitySet
from mango.domain.deadline import deadline_scope
from mango.domain.errors import (
    CapabilityNotSupported,
    ConfigurationError,
    InvalidInput,
    InvalidTransition,
    MangoError,
    PreconditionFailed,
    ProtocolError,
    SandboxNotFound,
    SessionDeleting,
)
from mango.domain.fleet import EvictAction
from mango.domain.lifecycle import (
    LIFECYCLE,
    LifecycleCommand,
    LifecycleState,
    LifecycleTable,
)
from mango.domain.memories import MemoryAccess, MemoryRepository, MemoryStoreMount
from mango.domain.ports import (
    BindingStore,
    PortSandbox,
    ProcessSandbox,
    Provider,
    ResourceLockSandbox,
    Sandbox,
)
from mango.domain.registry import Quirk
from mango.domain.resources import SessionResource
from mango.domain.sandbox_ports import ExposedPort, check_port
from mango.domain.skills import SkillRef
from mango.domain.validators import non_negative_number, positive_int
from mango.domain.values import SandboxRef, SandboxSpec, validate_session_id

__all__ = ["MemoryStep", "SessionManager"]

log = logging.getLogger("mango.app.session_manager")
_C = LifecycleCommand

_STALE_REPORT = (InvalidTransition, PreconditionFailed, SessionDeleting)
"""What a loss report meets when the Session no longer holds that binding:
nothing to record (no binding, another binding, a deletion under way)."""


def _quirks(values: Iterable[Quirk | str]) -> frozenset[Quirk]:
    return frozenset(Quirk(value) for value in values)


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.define
class MemoryStep:
    """The Memory Store wave around one tool step (:meth:`SessionManager.tool_step`)."""

    begin: WaveReport = attrs.field(factory=WaveReport)
    end: WaveReport | None = None
    """The writeback after the tool (None until the step is done, or without stores)."""

    @property
    def failure(self) -> str | None:
        """``Memory Store writeback failed: ...`` if a change was discarded, else None."""
        errors = self.begin.errors + (self.end.errors if self.end is not None else ())
        return writeback_failure(WaveReport(errors=errors))


@attrs.define
class SessionManager:
    """One logical sandbox per Session, durable across worker restarts.

    The BindingStore is the source of truth; the in-process map is only a
    cache of live clients. Operations on one Session are serialised inside
    the process; across processes the database elects one winner.

    ``capabilities`` are the provider's *declared* capabilities (from its
    registration); they default to what the provider reports. ``quirks`` are
    the contract deviations its registration declares. ``package_manager_hosts``
    (deployment configuration, ``MANGO_PACKAGE_MANAGER_HOSTS``) join a
    limited-network sandbox's allowlist while its packages are installed.
    ``max_sandboxes`` (``MANGO_MAX_SANDBOXES``) bounds the live sandboxes of
    the whole deployment: the store decides, so every SessionManager on one
    database shares it. ``use_interval`` is how often (seconds, per Session)
    an acquire writes the Session's last use, which the idle eviction reads.
    ``table`` and ``handlers`` are the lifecycle it runs (the default table
    and its handlers unless given); they are checked against each other here,
    and a misfit raises :class:`~mango.domain.errors.LifecycleTableError`.

    Every public operation accepts ``deadline``: an absolute time on the
    running loop's clock (:func:`mango.domain.deadline.deadline_in` makes one
    from seconds). Maintenance inside the operation (package setup, a
    provider's resume) is bounded by what remains of it.
    """

    provider: Provider
    store: BindingStore
    capabilities: CapabilitySet | None = None
    quirks: frozenset[Quirk] = attrs.field(default=frozenset(), converter=_quirks)
    package_manager_hosts: tuple[str, ...] = attrs.field(
        default=(), kw_only=True, converter=_str_tuple
    )
    max_sandboxes: int | None = attrs.field(
        default=None, kw_only=True, validator=attrs.validators.optional(positive_int)
    )
    use_interval: float = attrs.field(
        default=USE_INTERVAL, kw_only=True, validator=non_negative_number
    )
    evict_action: EvictAction = attrs.field(
        default=EvictAction.PAUSE, kw_only=True, converter=EvictAction
    )
    """``MANGO_EVICT_ACTION``: the idle eviction pauses where the provider declares ``pause``
    (the default), or always destroys."""
    table: LifecycleTable = attrs.field(default=LIFECYCLE, kw_only=True)
    handlers: Handlers = attrs.field(factory=default_handlers, kw_only=True)
    files: SessionFiles | None = attrs.field(default=None, kw_only=True)
    """The Session resource and output rows and the Files store, for the resource steps."""
    skills: SessionSkills | None = attrs.field(default=None, kw_only=True)
    """The skills and the Sessions' pins, for the skills step."""
    memory: MemoryRepository | None = attrs.field(default=None, kw_only=True)
    """Memory Stores and the Sessions' attachments (``memory_stores``, the wave steps)."""
    _clients: ClientCache = attrs.field(init=False)
    _locks: SessionLocks = attrs.field(factory=SessionLocks, init=False)
    _ports: Ports = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.handlers.check(self.table)
        self._clients = ClientCache(self._record_loss, capabilities=self._declared)
        self._ports = Ports(
            self.provider,
            self.store,
            self._clients,
            self.package_manager_hosts,
            max_sandboxes=self.max_sandboxes,
            use_interval=self.use_interval,
            files=self.files,
            skills=self.skills,
            memory=self.memory,
        )

    @property
    def _declared(self) -> CapabilitySet:
        return self.capabilities if self.capabilities is not None else self.provider.capabilities

    # ------------------------------------------------------------------ public API

    async def ensure_session(self, session_id: str, spec: SandboxSpec | None = None) -> None:
        """Create the Session row if absent; a fenced Session raises :class:`SessionDeleting`.

        With ``spec``, admission comes first: a spec this provider cannot run
        raises :class:`AdmissionRejected` (every reason) and writes nothing.
        """
        validate_session_id(session_id)
        if spec is not None:
            self.admit(spec)
        record = await self.store.ensure_session(session_id)
        if record.deleting:
            raise SessionDeleting(
                f"session {session_id!r} is being deleted",
                hint="wait for the deletion to finish, then use a new session id",
            )

    async def create_session(
        self,
        session_id: str,
        spec: SandboxSpec | None = None,
        *,
        skills: Iterable[str | SkillRef] = (),
        memory: Sequence[tuple[str, MemoryAccess | str]] = (),
    ) -> CreatedSession:
        """Create the Session with what it needs from creation on: skills and Memory Stores.

        ``skills`` are ``NAME@VERSION`` pins (at most one version per name,
        500 MiB expanded in all); ``memory`` are ``(store id, access)``
        attachments (at most 8), mounted at ``/mnt/memory/<slug>`` when its
        sandbox is created. Admission comes first, with the resource
        capabilities the Session needs (a provider without ``skill-bundles``
        refuses pins, one without ``memory-stores`` attachments: every reason
        listed, nothing written); a store that does not exist is
        :class:`~mango.domain.errors.MemoryStoreNotFound`. Then the Session
        and its pins are written in one step, and its stores attached. An
        existing Session with the same pins and stores is success
        (``created=False``); with other pins, or other stores once it has a
        sandbox, it is :class:`InvalidInput`, fenced :class:`SessionDeleting`.
        """
        validate_session_id(session_id)
        refs = tuple(skills)
        wanted = [(store, MemoryAccess(access)) for store, access in memory]
        needs = ((Capability.SKILL_BUNDLES,) if refs else ()) + (
            (Capability.MEMORY_STORES,) if wanted else ()
        )
        self.admit(spec or SandboxSpec(), needs)
        mounts = await self.memory_stores.mounts(wanted) if wanted else ()
        if self.skills is None:
            if refs:
                raise ConfigurationError(
                    "this SessionManager has no skill catalog, so Sessions cannot pin skills",
                    hint="open it with mango.open_session_manager(), or pass skills=...",
                )
            existed = await self.store.get_session(session_id) is not None
            await self.ensure_session(session_id, spec)
            result = CreatedSession(session_id, not existed)
        else:
            created, pinned = await self.skills.create_session(session_id, refs)
            result = CreatedSession(session_id, created, pinned)
        if mounts:
            attached = tuple(await self.memory_stores.repository.attachments(session_id))
            if attached != mounts and (
                await self.store.get_binding(session_id) or await self.store.get_intent(session_id)
            ):
                raise InvalidInput(
                    f"session {session_id!r} has a sandbox already: memory stores are attached "
                    "when a Session is created",
                    hint="use a new session id",
                )
            await self.memory_stores.repository.attach(session_id, mounts)
        return result

    @property
    def session_skills(self) -> SessionSkills:
        """The skills and pins this manager works with (``mango skills``)."""
        if self.skills is None:
            raise ConfigurationError(
                "this SessionManager has no skill catalog",
                hint="open it with mango.open_session_manager(), or pass skills=SessionSkills(...)",
            )
        return self.skills

    def admit(self, spec: SandboxSpec, resources: tuple[Capability, ...] = ()) -> None:
        """Raise if ``spec`` cannot run on this provider (every reason listed).

        The one admission function of every path
        (:func:`mango.app.admission.admit_environment`), on the declared capabilities.
        """
        admit_environment(self.provider.name, self._declared, spec, resources)

    async def observe(self, session_id: str) -> LifecycleState:
        """The Session's lifecycle state as the store records it (no provider call)."""
        validate_session_id(session_id)
        observed = await observe_session(self._ports, session_id, use_cache=False)
        return observed.state

    async def acquire(
        self, session_id: str, spec: SandboxSpec, *, deadline: float | None = None
    ) -> SessionSandbox:
        """Return the Session's sandbox, provisioning it on first use.

        The client (a :class:`SessionSandbox`) has the Sandbox operations and
        the file API (``list_dir``, ``stat``, ``exists``, ``remove``,
        ``rename``, ``make_dir``), which raises :class:`CapabilityNotSupported`
        where the provider does not declare ``file-api``.

        Raises :class:`SandboxNotFound` if the bound resource is gone (the loss
        is persisted; never an empty replacement), :class:`SessionDeleting` if
        the Session is fenced, :class:`AdmissionRejected` if the spec cannot
        run here.
        """
        validate_session_id(session_id)
        self.admit(spec)
        spec = await self.session_spec(session_id, spec)
        with deadline_scope(deadline):
            async with self._locks.hold(session_id):
                facts = await self._run(Operation(session_id, _C.ACQUIRE, spec))
        if facts.sandbox is None:  # pragma: no cover - the table ends every acquire bound or failed
            raise MangoError(f"acquiring session {session_id!r} produced no sandbox")
        return facts.sandbox

    async def acquire_existing(
        self, session_id: str, spec: SandboxSpec, *, deadline: float | None = None
    ) -> SessionSandbox | None:
        """Return the Session's bound sandbox (as :meth:`acquire`), or None; never provisions."""
        validate_session_id(session_id)
        self.admit(spec)
        spec = await self.session_spec(session_id, spec)
        with deadline_scope(deadline):
            async with self._locks.hold(session_id):
                facts = await self._run(Operation(session_id, _C.ACQUIRE_EXISTING, spec))
        return facts.sandbox

    async def release(
        self, session_id: str, *, deadline: float | None = None, force: bool = False
    ) -> None:
        """Fence the Session and tear its sandbox down; idempotent.

        Never creates; it attaches only to write a bound sandbox's Memory
        Stores back first (a Session with stores; ``final-memory-writeback``).
        The bound reference (or, for an intent-only Session, what
        ``Provider.find`` reports) is removed with ``Provider.destroy``; with
        no binding left, a purging provider also purges what it holds under
        the Session's names. If destroy fails the
        binding is kept so a retry can finish. A lost reference counts as
        already destroyed.

        ``force``: for an operator whose Session cannot be deleted because
        the provider's records were damaged. The provider purges whatever it
        owns under the Session's deterministic names without trusting those
        records, and a bound resource it refuses as another owner's
        (:class:`OwnershipError`) is left alone and its binding dropped.
        Transient failures still fail (nothing is forced past a backend that
        cannot answer). A Session
        bound to (or being provisioned by) another provider is refused with
        :class:`OwnershipError` before anything changes: it is not fenced.
        """
        validate_session_id(session_id)
        with deadline_scope(deadline):
            async with self._locks.hold(session_id):
                await self._run(Operation(session_id, _C.DELETE, force=force))

    async def delete_session(
        self, session_id: str, *, deadline: float | None = None, force: bool = False
    ) -> bool:
        """Release the sandbox and delete the Session row; False if it was already gone.

        ``force`` as for :meth:`release`.
        """
        await self.release(session_id, deadline=deadline, force=force)
        # Our own release fenced it: a row that is gone now was deleted, not never made.
        return await self.finish_deletion(session_id, deadline=deadline)

    async def finish_deletion(self, session_id: str, *, deadline: float | None = None) -> bool:
        """Delete a fenced Session's row once its sandbox is released; False if already gone.

        Its resource rows and output files go first (``deletion-finished``).
        """
        validate_session_id(session_id)
        with deadline_scope(deadline):
            async with self._locks.hold(session_id):
                facts = await self._run(
                    Operation(session_id, _C.DELETION_FINISHED), fenced_here=True
                )
        deleted = facts.last(SessionDeleted)
        return deleted is not None and deleted.deleted

    # ------------------------------------------------------------------ pause and ports

    def _require(self, capability: Capability) -> None:
        if capability not in self._declared:
            name = self.provider.name
            raise CapabilityNotSupported(
                name,
                [f"{name} does not support {capability.description}"],
                hint=f"choose a provider that declares {capability.value} "
                "(mango providers lists them)",
            )

    async def pause(self, session_id: str, *, deadline: float | None = None) -> None:
        """Pause the Session's bound sandbox; idempotent for a paused one.

        The binding is marked paused before the provider pauses the resource,
        so a crash between the two leaves a paused record that the next use
        resumes. The next :meth:`acquire` (or resource step) resumes it
        before handing it out. :class:`CapabilityNotSupported` where the
        provider does not declare ``pause``; :class:`InvalidTransition` for a
        Session with no bound sandbox; :class:`SandboxNotFound` (recorded) for
        a vanished one.
        """
        validate_session_id(session_id)
        self._require(Capability.PAUSE)
        with deadline_scope(deadline):
            async with self._locks.hold(session_id):
                await self._run(Operation(session_id, _C.PAUSE, fresh=True))

    async def resume(self, session_id: str, *, deadline: float | None = None) -> None:
        """Resume the Session's paused sandbox; idempotent for a running one.

        The provider resumes the resource before the pause mark goes. Errors
        as for :meth:`pause`.
        """
        validate_session_id(session_id)
        self._require(Capability.PAUSE)
        with deadline_scope(deadline):
            async with self._locks.hold(session_id):
                await self._run(Operation(session_id, _C.RESUME, fresh=True))

    async def expose_port(
        self,
        session_id: str,
        port: int,
        spec: SandboxSpec | None = None,
        *,
        deadline: float | None = None,
    ) -> ExposedPort:
        """Where ``port`` in the Session's bound sandbox is reached (resumed if paused).

        The answer is a URL with no credential in it and the headers a
        request to it must carry (empty for Docker; a preview token for
        Daytona). Never provisions: a server listens in a sandbox that exists.
        :class:`CapabilityNotSupported` where the provider does not declare
        ``exposed-ports``; :class:`InvalidInput` for a port outside 1 to 65535
        or a Session with no sandbox.
        """
        validate_session_id(session_id)
        self._require(Capability.EXPOSED_PORTS)
        check_port(port)
        sandbox = await self.acquire_existing(session_id, spec or SandboxSpec(), deadline=deadline)
        if sandbox is None:
            raise InvalidInput(
                f"session {session_id!r} has no sandbox to expose a port of",
                hint="start it first (mango exec --session ...), then expose the port",
            )
        raw = sandbox.inner if isinstance(sandbox, SessionSandbox) else sandbox
        if not isinstance(raw, PortSandbox):
            raise CapabilityNotSupported(
                self.provider.name, [f"{self.provider.name} sandboxes expose no ports"]
            )
        with deadline_scope(deadline):
            exposed: object = await raw.expose_port(port)
        # A plugin written before ExposedPort answers a bare URL: it keeps working.
        if isinstance(exposed, str):
            try:
                return ExposedPort(exposed)
            except ValueError as exc:
                raise ProtocolError(f"{self.provider.name}: expose_port: {exc}") from exc
        if not isinstance(exposed, ExposedPort):
            raise ProtocolError(
                f"{self.provider.name}: expose_port answered {type(exposed).__name__}, "
                "not an ExposedPort"
            )
        return exposed

    # ------------------------------------------------------------------ resources

    @property
    def session_files(self) -> SessionFiles:
        """The Session resources, outputs and Files store this manager works with."""
        if self.files is None:
            raise ConfigurationError(
                "this SessionManager has no Files store, so Sessions have no resources or outputs",
                hint="open it with mango.open_session_manager(), or pass files=SessionFiles(...)",
            )
        return self.files

    async def add_file_resource(
        self, session_id: str, file_id: str, mount_path: str | None = None
    ) -> SessionResource:
        """Attach a stored file to the Session (created if absent) at ``mount_path``.

        Admission first (every reason listed), then every rule of
        :meth:`SessionFiles.add_resource`; the next :meth:`materialize` copies it.
        """
        self.admit(SandboxSpec(), (Capability.FILE_RESOURCES,))
        files = self.session_files
        await self.ensure_session(session_id)
        return await files.add_resource(session_id, file_id, mount_path)

    async def remove_resource(
        self,
        session_id: str,
        resource_id: str,
        spec: SandboxSpec | None = None,
        *,
        deadline: float | None = None,
    ) -> MaterializeReport:
        """Remove a resource: marked at once, then out of a bound sandbox (never provisions)."""
        await self.session_files.begin_remove(session_id, resource_id)
        return await self.materialize(session_id, spec or SandboxSpec(), deadline=deadline)

    async def materialize(
        self, session_id: str, spec: SandboxSpec, *, deadline: float | None = None
    ) -> MaterializeReport:
        """Bring the bound sandbox's skills and File Resources in line with the Session's rows.

        Run before every tool step (after :meth:`acquire`): only what changed
        is done (a pinned skill damaged on the host is repaired). Never
        provisions; with no bound sandbox only removals are finished in the
        rows. :class:`SandboxNotFound` for a vanished sandbox.
        """
        validate_session_id(session_id)
        spec = await self.session_spec(session_id, spec)
        with deadline_scope(deadline):
            async with self._locks.hold(session_id):
                facts = await self._run(Operation(session_id, _C.MATERIALIZE, spec))
        done = facts.last(Materialized)
        return done.report if done is not None else MaterializeReport()

    async def materialize_skills(
        self, session_id: str, spec: SandboxSpec, *, deadline: float | None = None
    ) -> SkillReport:
        """:meth:`materialize`, reporting what the skills step did instead."""
        validate_session_id(session_id)
        with deadline_scope(deadline):
            async with self._locks.hold(session_id):
                facts = await self._run(Operation(session_id, _C.MATERIALIZE, spec))
        done = facts.last(SkillsMaterialized)
        return done.report if done is not None else SkillReport()

    async def publish_outputs(
        self, session_id: str, spec: SandboxSpec | None = None, *, deadline: float | None = None
    ) -> PublishReport | None:
        """Publish the bound sandbox's outputs directory; None if it has none (never creates one).

        Admission first (every reason listed); :class:`OutputRejected` names
        the entry that cannot be published (nothing is published partly).
        """
        validate_session_id(session_id)
        chosen = spec or SandboxSpec()
        self.admit(chosen, (Capability.SESSION_OUTPUTS,))
        chosen = await self.session_spec(session_id, chosen)
        with deadline_scope(deadline):
            async with self._locks.hold(session_id):
                facts = await self._run(Operation(session_id, _C.PUBLISH_OUTPUTS, chosen))
        done = facts.last(Published)
        return done.report if done is not None else None

    # ------------------------------------------------------------------ memory stores

    @property
    def memory_stores(self) -> MemoryStores:
        """The Memory Store operations (create, list, archive, read, write, versions)."""
        if self.memory is None:
            raise ConfigurationError(
                "this SessionManager has no memory repository, so it has no Memory Stores",
                hint="open it with mango.open_session_manager(), or pass memory=...",
            )
        return MemoryStores(self.memory)

    async def session_spec(self, session_id: str, spec: SandboxSpec) -> SandboxSpec:
        """``spec`` with the Session's Memory Store mounts (what its sandbox is created with)."""
        if self.memory is None or spec.memory_stores:
            return spec
        mounts: tuple[MemoryStoreMount, ...] = tuple(await self.memory.attachments(session_id))
        return attrs.evolve(spec, memory_stores=mounts) if mounts else spec

    @contextlib.asynccontextmanager
    async def tool_step(
        self, session_id: str, spec: SandboxSpec, *, deadline: float | None = None
    ) -> AsyncIterator[MemoryStep]:
        """Run the block as one tool step of the Session's Memory Store wave.

        Call it after :meth:`acquire`. Before the block: join the running
        wave, or write back what an interrupted step left and refresh the
        mounts (``refresh-memory``); the block runs holding the resource
        lock shared; after it, once the wave's last tool is done, its
        changes are committed (``write-back-memory``). A change that could
        not be committed is discarded and :attr:`MemoryStep.failure` says so
        (the tool's result must say the writeback failed). Without Memory
        Stores it only runs the block.
        """
        spec = await self.session_spec(session_id, spec)
        step = MemoryStep()
        if self.memory is None or not spec.memory_stores:
            yield step
            return
        step.begin = await self._wave(session_id, _C.REFRESH_MEMORY, spec, deadline)
        cached = self._clients.get(session_id)
        if cached is None:  # pragma: no cover - the bound step just cached it
            raise MangoError(f"session {session_id!r} has no sandbox for its tool step")
        raw: object = cached.raw
        if not isinstance(raw, ResourceLockSandbox):  # pragma: no cover - admitted with stores
            raise MangoError(f"session {session_id!r} has no lockable sandbox for its tool step")
        async with raw.resource_lock(exclusive=False):
            yield step
        try:
            step.end = await self._wave(session_id, _C.WRITE_BACK_MEMORY, spec, deadline)
        except SessionDeleting:
            # Fenced meanwhile: the deletion's final writeback commits these changes.
            step.end = WaveReport()

    async def _wave(
        self, session_id: str, command: LifecycleCommand, spec: SandboxSpec, deadline: float | None
    ) -> WaveReport:
        with deadline_scope(deadline):
            async with self._locks.hold(session_id):
                facts = await self._run(Operation(session_id, command, spec))
        done = facts.last(MemoryWaved)
        return done.report if done is not None else WaveReport()

    # ------------------------------------------------------------------ reconciliation

    async def reconcile_provisioning(
        self, limit: int = 100, *, deadline: float | None = None
    ) -> ReconcileReport:
        """Finish or destroy what a crash left between intent and binding.

        Every listed intent of this provider is attempted even if some fail.
        """
        report = await reconcile_provisioning(self, self.store, self.provider.name, limit, deadline)
        telemetry.count_reconciled(self.provider.name, report.completed)
        return report

    async def finish_deletions(
        self, limit: int = 100, *, deadline: float | None = None
    ) -> ReconcileReport:
        """Finish deletions that were fenced but not completed (after a crash)."""
        report = await finish_deletions(self, self.store, limit, deadline)
        telemetry.count_reconciled(self.provider.name, report.completed)
        return report

    @property
    def idle_action(self) -> str:
        """What :meth:`evict` does: ``pause`` where the provider declares it and
        ``evict_action`` allows, else ``destroy``."""
        pauses = self.evict_action is EvictAction.PAUSE and Capability.PAUSE in self._declared
        return EvictAction.PAUSE.value if pauses else EvictAction.DESTROY.value

    async def evict(
        self, session_id: str, *, idle_for: float, deadline: float | None = None
    ) -> bool:
        """Destroy (or pause) the Session's sandbox if it was unused for ``idle_for`` seconds.

        Where :attr:`idle_action` is ``pause`` the same compare-and-set marks
        the binding paused and the provider pauses the resource; the next
        acquire resumes it. Otherwise:

        The binding is marked evicted first, by a compare-and-set on its last
        use, so an acquire that recorded its use meanwhile keeps the sandbox
        (False); the next acquire then fails with
        :class:`~mango.domain.errors.SandboxEvicted`. An eviction whose
        destroy failed is finished by the next call. ``idle_for`` must be
        at least ``use_interval`` (a busy Session's use is written that
        coarsely).
        """
        validate_session_id(session_id)
        self._check_idle_for(idle_for)
        with deadline_scope(deadline):
            async with self._locks.hold(session_id):
                command = _C.PAUSE_IDLE if self.idle_action == "pause" else _C.EVICT
                operation = Operation(session_id, command, idle_for=idle_for, fresh=True)
                facts = await self._run(operation)
        return facts.last(Evicted) is not None or facts.last(PausedIdle) is not None

    async def evict_idle(
        self, idle_for: float, limit: int = 100, *, deadline: float | None = None
    ) -> EvictionReport:
        """Evict this provider's Sessions unused for ``idle_for`` seconds (see :meth:`evict`)."""
        self._check_idle_for(idle_for)
        return await evict_idle(self, self.store, self.provider.name, idle_for, limit, deadline)

    def _check_idle_for(self, idle_for: float) -> None:
        if (
            isinstance(idle_for, bool)
            or not isinstance(idle_for, int | float)
            or not self.use_interval <= idle_for < float("inf")
        ):
            raise InvalidInput(
                f"idle_for must be a number of seconds of at least {self.use_interval:g} "
                f"(how coarsely uses are written), got {idle_for!r}"
            )

    async def processes(
        self, session_id: str, spec: SandboxSpec, *, provision: bool = True
    ) -> ProcessSandbox | None:
        """The Session's sandbox for its background processes (capability ``background-processes``).

        Refused with :class:`CapabilityNotSupported` before anything is
        acquired when the provider does not declare the capability (or its
        sandbox does not implement :class:`~mango.domain.ports.ProcessSandbox`).
        With ``provision`` the sandbox is acquired as for ``exec`` (made on
        first use); without it, ``None`` if the Session has no bound sandbox
        (a mistyped id never creates one). Process ids are durable: any
        worker reaches a process started by another through this.
        """
        validate_session_id(session_id)
        check_declared(self.provider.name, self._declared)
        if provision:
            sandbox: Sandbox | None = await self.acquire(session_id, spec)
        else:
            sandbox = await self.acquire_existing(session_id, spec)
        return None if sandbox is None else process_sandbox(self.provider.name, sandbox, session_id)

    async def aclose(self) -> None:
        """Forget cached clients and close the provider's connections."""
        self._clients.clear()
        await self.provider.aclose()

    # ------------------------------------------------------------------ the interpreter

    async def _run(self, operation: Operation, *, fenced_here: bool = False) -> Facts:
        """Run one lifecycle command through the table (see :mod:`.interpreter`)."""
        return await Interpreter(self.table, self.handlers, self._ports).run(
            operation, fenced_here=fenced_here
        )

    async def _record_loss(self, session_id: str, ref: SandboxRef, exc: SandboxNotFound) -> None:
        """A handed-out client met :class:`SandboxNotFound`: evict it and persist the loss.

        Runs ``reference-lost`` through the table; the caller sees the
        original error whatever happens here.
        """
        self._clients.forget(session_id, ref)
        operation = Operation(session_id, _C.REFERENCE_LOST, reported=Lost(ref, exc))
        try:
            async with self._locks.hold(session_id):
                await self._run(operation)
        except asyncio.CancelledError:
            raise
        except _STALE_REPORT as err:
            log.debug("session %s: nothing to record for the loss of %s: %s", session_id, ref, err)
        except Exception as err:  # noqa: BLE001 - the caller must see SandboxNotFound itself
            log.warning("session %s: could not record the loss of %s: %s", session_id, ref, err)

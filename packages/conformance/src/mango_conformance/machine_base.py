"""The plumbing of the lifecycle machine: configuration, the async bridge, invariants, teardown.

Each machine instance (one Hypothesis example) drives the async ports
through its own event loop (:class:`~mango_conformance.bridge.AsyncBridge`),
closed in :meth:`MachineBase.teardown`. Teardown never raises: it destroys
what the run created (falling back to a fresh provider) and writes whatever
it cannot clean up to the leak ledger.
"""

# Invariants are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
from collections.abc import Awaitable
from pathlib import Path
from typing import ClassVar, Self, TypeVar, cast

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant

from mango.provider import ConformanceTarget, Provider, Sandbox, is_permanent
from mango_conformance.bridge import AsyncBridge
from mango_conformance.cleanup import destroy_or_record, retire_uncertain
from mango_conformance.keys import new_session_key, run_id
from mango_conformance.ledger import Leak, LeakLedger, current_ledger
from mango_conformance.model import Handle, MachineLimits, SessionModel, quiet_note
from mango_conformance.options import SuiteOptions
from mango_conformance.profiles import DEFAULT_PROFILE, PROFILES
from mango_conformance.progress import MachineProgress

__all__ = ["MachineBase"]

T = TypeVar("T")

_instances = itertools.count()


class MachineBase(RuleBasedStateMachine):
    """Configuration, plumbing, model-only invariants and teardown of the lifecycle machine.

    The rules live in :class:`~mango_conformance.machine.LifecycleMachine`.
    """

    target: ClassVar[ConformanceTarget | None] = None
    options: ClassVar[SuiteOptions] = SuiteOptions()
    limits: ClassVar[MachineLimits] = MachineLimits.from_profile(PROFILES[DEFAULT_PROFILE])
    scratch_dir: ClassVar[Path | None] = None
    """Each instance works in a fresh sub-directory; ``None`` means a temporary directory."""
    ledger: ClassVar[LeakLedger | None] = None
    """Where teardown records leaks; ``None`` means the current pytest session's ledger."""
    where: ClassVar[str] = ""
    progress: ClassVar[MachineProgress | None] = None
    """Told when each example ends (the suite prints progress from it); None: silent."""

    @classmethod
    def bind(
        cls,
        target: ConformanceTarget,
        *,
        options: SuiteOptions | None = None,
        limits: MachineLimits | None = None,
        scratch_dir: Path | None = None,
        ledger: LeakLedger | None = None,
        where: str = "",
        progress: MachineProgress | None = None,
    ) -> type[Self]:
        """A subclass of this machine bound to ``target``."""
        suffix = "".join(part.capitalize() for part in target.provider.split("-"))
        namespace = {
            "target": target,
            "options": cls.options if options is None else options,
            "limits": cls.limits if limits is None else limits,
            "scratch_dir": scratch_dir,
            "ledger": ledger,
            "where": where,
            "progress": progress,
            "__module__": cls.__module__,
        }
        return cast("type[Self]", type(f"{cls.__name__}{suffix}", (cls,), namespace))

    def __init__(self) -> None:
        super().__init__()
        target = type(self).target
        if target is None:
            raise TypeError(f"{type(self).__name__} has no target: use bind()")
        self._target = target
        self._name = target.provider
        self._ledger = self.ledger if self.ledger is not None else current_ledger()
        self._leaks_before = len(self._ledger)
        if self.scratch_dir is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="mango-conformance-"))
        else:
            self._scratch = self.scratch_dir / f"run-{next(_instances)}"
            self._scratch.mkdir(parents=True, exist_ok=True)
        self._bridge = AsyncBridge(self.options.operation_timeout)
        self._stack = contextlib.AsyncExitStack()
        self._clients: list[Provider] = []
        self._sessions: dict[str, SessionModel] = {}
        self._retired: set[str] = set()
        self._extras: list[tuple[str, Sandbox]] = []
        self._uncertain: list[tuple[Provider, str]] = []
        self._calls = 0
        self._tokens = itertools.count()

    # ------------------------------------------------------------------ plumbing

    def _call(self, awaitable: Awaitable[T], what: str) -> T:
        self._calls += 1
        return self._bridge.run(awaitable, f"{self._name}: {what}")

    async def _enter(self) -> Provider:
        return await self._stack.enter_async_context(self._target.open(self._scratch))

    def _open_client(self) -> int:
        provider = self._bridge.run(self._enter(), f"{self._name}: open()")
        assert provider.name == self._name, (
            f"a fresh provider is named {provider.name!r}, the target {self._name!r}"
        )
        assert all(provider is not other for other in self._clients), (
            "entering the target again returned an existing provider object"
        )
        self._clients.append(provider)
        return len(self._clients) - 1

    def _draw_client(self, data: st.DataObject) -> int:
        choices = list(range(len(self._clients)))
        if len(self._clients) < self.limits.max_clients:
            choices.append(len(self._clients))  # a fresh client: a restarted worker
        index = data.draw(st.sampled_from(choices), label="client")
        if index == len(self._clients):
            self._open_client()
        return index

    def _can_call(self) -> bool:
        budget = self.limits.call_budget
        return budget is None or self._calls < budget

    def _live(self) -> list[SessionModel]:
        return [session for session in self._sessions.values() if session.live]

    def _draw_session(self, data: st.DataObject, candidates: list[SessionModel]) -> SessionModel:
        # Candidates stay in creation order: keys carry a process-wide counter, so
        # sorting them would reorder Sessions between a run and its replay.
        index = data.draw(st.integers(0, len(candidates) - 1), label="session")
        return candidates[index]

    def _draw_handle(self, data: st.DataObject, session: SessionModel) -> Handle:
        index = data.draw(st.integers(0, len(session.handles) - 1), label="handle")
        return session.handles[index]

    def _add_handle(
        self, session: SessionModel, client: int, sandbox: Sandbox, origin: str
    ) -> None:
        if len(session.handles) < self.limits.max_handles:
            session.handles.append(Handle(client, sandbox, origin))

    def _token(self) -> str:
        return f"mango-escape-{run_id()}-{next(self._tokens)}"

    def _check_one_file(self, data: st.DataObject, session: SessionModel, sandbox: Sandbox) -> None:
        if not session.files:
            return
        path = data.draw(st.sampled_from(sorted(session.files)), label="known file")
        self._check_file(session, sandbox, path)

    def _check_file(self, session: SessionModel, sandbox: Sandbox, path: str) -> None:
        got = self._call(sandbox.read_file(path), f"read_file({path!r})")
        assert got == session.files[path], f"{path}: read {got!r}, wrote {session.files[path]!r}"

    def _create_session(self, client: int) -> None:
        key = new_session_key()
        provider = self._clients[client]
        try:
            sandbox = self._call(provider.create(key, self.options.spec), f"create({key!r})")
        except Exception as exc:
            if not is_permanent(exc):
                self._uncertain.append((provider, key))
            raise
        ref = sandbox.ref
        quiet_note(f"created {key} -> {ref}")
        session = SessionModel(key=key, ref=ref)
        session.handles.append(Handle(client, sandbox, "create"))
        self._sessions[key] = session
        assert ref.provider == self._name, f"ref names provider {ref.provider!r}"
        assert ref.external_id, "ref has an empty external id"
        assert sandbox.root, "root is empty"
        for other in self._live():
            if other.key != key:
                assert other.ref != ref, f"{key} got the ref of live Session {other.key}"

    # ------------------------------------------------------------------ invariants

    @invariant()
    def live_refs_are_distinct(self) -> None:
        """No two live Sessions share a ref."""
        refs = [session.ref for session in self._live()]
        assert len(refs) == len(set(refs))

    @invariant()
    def retired_keys_stay_retired(self) -> None:
        """A destroyed Session never becomes live again."""
        assert all(
            not session.live for key, session in self._sessions.items() if key in self._retired
        )

    @invariant()
    def handles_are_bounded(self) -> None:
        """Every Session keeps between one and ``max_handles`` handles."""
        assert all(
            1 <= len(session.handles) <= self.limits.max_handles
            for session in self._sessions.values()
        )

    @invariant()
    def live_sessions_are_capped(self) -> None:
        """The cost guard holds: never more live Sessions than allowed."""
        assert len(self._live()) <= self.limits.max_live_sandboxes

    # ------------------------------------------------------------------ teardown

    def teardown(self) -> None:
        """Destroy everything the run created, close clients and the loop. Never raises."""
        try:
            limit = self.options.operation_timeout
            count = len(self._sessions) + len(self._extras) + len(self._uncertain)
            self._bridge.run(
                self._cleanup(), f"{self._name}: teardown", timeout=limit * (2 + 3 * count)
            )
        except Exception as exc:  # noqa: BLE001 - teardown reports, it never raises
            self._ledger.record(
                Leak(self._name, "", None, f"teardown failed: {exc!r}", where=self.where)
            )
        finally:
            self._bridge.close()
            if len(self._ledger) == self._leaks_before:
                shutil.rmtree(self._scratch, ignore_errors=True)
            if self.progress is not None:
                self.progress.example_done(self._calls)

    async def _cleanup(self) -> None:
        limit = self.options.operation_timeout
        targets = [(s.key, s.handles[0].sandbox) for s in self._sessions.values()]
        for key, sandbox in [*targets, *self._extras]:
            await destroy_or_record(
                sandbox,
                key,
                provider_name=self._name,
                reopen=self._enter,
                spec=self.options.spec,
                limit=limit,
                ledger=self._ledger,
                where=self.where,
            )
        await retire_uncertain(
            self._uncertain,
            spec=self.options.spec,
            limit=limit,
            ledger=self._ledger,
            where=self.where,
        )
        try:
            await self._stack.aclose()
        except Exception as exc:  # noqa: BLE001 - recorded, never raised
            self._ledger.record(
                Leak(self._name, "", None, f"provider aclose() failed: {exc!r}", where=self.where)
            )

"""Mutant providers: the local provider with exactly one defect each.

The suite must catch every one of them (``test_mutants.py``); a mutant that
passes would mean a check is vacuous. Imported by path from pytester runs.

The ``limited-network`` and ``package-setup`` mutants wrap the OpenSandbox
provider on its fake instead (the one provider that implements both, with
the fake's egress gateway, image and testbed), each with one defect; the
``file-resources``, ``session-outputs`` and ``memory-stores`` mutants wrap
the Docker provider on the local daemon (the one that implements them).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import itertools
import json
import os
import signal
import tarfile
import zipfile
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs

from mango.app import SandboxWrapper
from mango.domain.capabilities import CapabilitySet
from mango.domain.errors import (
    ContentMismatch,
    PathEscapeError,
    ProcessNotFound,
    ResourceConflict,
    SandboxNotFound,
)
from mango.domain.memories import MemoryFile, MemorySnapshot, MemoryStoreMount
from mango.domain.ports import Provider, Sandbox
from mango.domain.registry import ConformanceTarget
from mango.domain.resources import FileResourceMount
from mango.domain.sandbox_ports import (
    ExposedPort,
    ProcessHandle,
    ProcessInfo,
    ProcessOutput,
    ProcessState,
)
from mango.domain.skills import SkillMount
from mango.domain.testbed import ConformanceTestbed
from mango.domain.values import (
    Command,
    ExecEvent,
    ExecResult,
    NetworkMode,
    OutputChunk,
    OutputStream,
    OwnedResource,
    SandboxRef,
    SandboxSpec,
)
from mango.local import LocalProvider
from mango_conformance import provider_target

_counter = itertools.count()


@attrs.define
class WrappedSandbox(SandboxWrapper):
    """Delegates everything to the local sandbox; mutants override one method."""


@attrs.define
class WrappedProvider:
    """Delegates to ``inner`` (default: a local provider under ``scratch/sandboxes``).

    Mutants override one method.
    """

    scratch: Path
    inner: Provider = attrs.field(default=None)
    sandbox_class: ClassVar[type[WrappedSandbox]] = WrappedSandbox

    def __attrs_post_init__(self) -> None:
        if self.inner is None:
            self.inner = LocalProvider(self.scratch / "sandboxes")

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self) -> CapabilitySet:
        return self.inner.capabilities

    def wrap(self, sandbox: Sandbox) -> WrappedSandbox:
        return self.sandbox_class(sandbox)

    async def create(self, session_key: str, spec: SandboxSpec) -> WrappedSandbox:
        return self.wrap(await self.inner.create(session_key, spec))

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> WrappedSandbox:
        return self.wrap(await self.inner.attach(session_key, ref, spec))

    async def find(self, session_key: str) -> SandboxRef | None:
        return await self.inner.find(session_key)

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        await self.inner.destroy(session_key, ref)

    async def list_owned(self) -> Sequence[OwnedResource]:
        return await self.inner.list_owned()

    async def health(self) -> str:
        return await self.inner.health()

    async def aclose(self) -> None:
        await self.inner.aclose()


class NonIdempotentCreate(WrappedProvider):
    """Every create makes a new resource, even for a key seen before."""

    async def create(self, session_key: str, spec: SandboxSpec) -> WrappedSandbox:
        return self.wrap(await self.inner.create(f"{session_key}-{next(_counter)}", spec))


class AttachSkipsOwnership(WrappedProvider):
    """Attach trusts the ref: any key and any provider name get the resource."""

    def _owners(self) -> Path:
        return self.scratch / "owners.json"

    def _load(self) -> dict[str, str]:
        try:
            loaded: dict[str, str] = json.loads(self._owners().read_text())
        except FileNotFoundError:
            return {}
        return loaded

    async def create(self, session_key: str, spec: SandboxSpec) -> WrappedSandbox:
        sandbox = await super().create(session_key, spec)
        owners = self._load()
        owners[sandbox.ref.external_id] = session_key
        self._owners().write_text(json.dumps(owners))
        return sandbox

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> WrappedSandbox:
        owner = self._load().get(ref.external_id, session_key)
        real = SandboxRef(provider=self.inner.name, external_id=ref.external_id)
        return self.wrap(await self.inner.attach(owner, real, spec))


class DestroyOnceSandbox(WrappedSandbox):
    """A second destroy reports the resource as missing instead of succeeding."""

    async def destroy(self) -> None:
        if not await asyncio.to_thread(Path(self.root).is_dir):
            raise SandboxNotFound(f"{self.ref} is already gone")
        await self.inner.destroy()


class DestroyFailsSecondTime(WrappedProvider):
    """Destroy is not idempotent."""

    sandbox_class = DestroyOnceSandbox


class NotFoundIsGeneric(WrappedProvider):
    """A lost resource surfaces as a bare RuntimeError instead of SandboxNotFound."""

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> WrappedSandbox:
        try:
            return await super().attach(session_key, ref, spec)
        except SandboxNotFound as exc:
            raise RuntimeError(f"backend error: {exc}") from None


class SwallowCancelSandbox(WrappedSandbox):
    """Turns a cancellation into an ordinary result."""

    async def exec(self, command: Command) -> ExecResult:
        try:
            return await self.inner.exec(command)
        except asyncio.CancelledError:
            return ExecResult(exit_code=-1, cancelled=True)


class CancellationIgnored(WrappedProvider):
    """Cancelling an exec does not cancel the awaiting task."""

    sandbox_class = SwallowCancelSandbox


class AppendingWriteSandbox(WrappedSandbox):
    """Writes over an existing file without truncating it (``r+`` instead of ``w``)."""

    async def write_file(self, path: str, data: bytes) -> None:
        try:
            old = await self.inner.read_file(path)
        except FileNotFoundError:
            old = b""
        await self.inner.write_file(path, data + old[len(data) :])


class WriteDoesNotTruncate(WrappedProvider):
    """A shorter write leaves the tail of the old content."""

    sandbox_class = AppendingWriteSandbox


class EscapingSandbox(WrappedSandbox):
    """Resolves ``..`` itself and reads or writes wherever it lands."""

    def _outside(self, path: str) -> Path | None:
        if ".." not in path.split("/") or path.startswith("/"):
            return None
        return Path(os.path.normpath(Path(self.root) / path))

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        outside = self._outside(path)
        if outside is None:
            return await super().read_file(path, max_bytes=max_bytes)
        return await asyncio.to_thread(outside.read_bytes)

    async def write_file(self, path: str, data: bytes) -> None:
        outside = self._outside(path)
        if outside is None:
            await super().write_file(path, data)
            return
        await asyncio.to_thread(outside.parent.mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread(outside.write_bytes, data)


class EscapeAllowed(WrappedProvider):
    """Paths with ``..`` are followed out of the workspace."""

    sandbox_class = EscapingSandbox


class MergedStderrSandbox(WrappedSandbox):
    """Delivers stderr inside stdout, as backends with one output channel do."""

    async def exec(self, command: Command) -> ExecResult:
        result = await self.inner.exec(command)
        return attrs.evolve(
            result,
            stdout=result.stdout + result.stderr,
            stderr=b"",
            stdout_truncated=result.stdout_truncated or result.stderr_truncated,
            stderr_truncated=False,
        )


class StderrMerged(WrappedProvider):
    """stderr is always empty; its bytes arrive on stdout (the ``stderr-merged`` quirk)."""

    sandbox_class = MergedStderrSandbox


class LeaderOnlySandbox(WrappedSandbox):
    """A kill reaches only the leader: background children leave its process group.

    The process-tree script's child is started under ``setsid``, so the local
    provider's group kill misses it, as a backend that signals only the
    leader would. Destroy ends those children by pid so nothing outlives the test.
    """

    async def exec(self, command: Command) -> ExecResult:
        argv = tuple(arg.replace("sleep 300 &", "setsid sleep 300 &") for arg in command.argv)
        return await self.inner.exec(attrs.evolve(command, argv=argv))

    async def destroy(self) -> None:
        await asyncio.to_thread(_kill_escaped, Path(self.root))
        await self.inner.destroy()


def _kill_escaped(root: Path) -> None:
    for pid_file in root.glob("*.child"):
        try:
            pid = int(pid_file.read_text())
            if b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        except (ValueError, OSError):
            continue  # gone already, or never started


class LeaderOnlyKill(WrappedProvider):
    """Timeout and cancel kill the leader only (the ``timeout-kills-leader-only`` quirk)."""

    sandbox_class = LeaderOnlySandbox


async def _replay(result: ExecResult) -> AsyncIterator[ExecEvent]:
    for stream, data in (
        (OutputStream.STDOUT, result.stdout),
        (OutputStream.STDERR, result.stderr),
    ):
        if data:
            yield OutputChunk(stream, data)
    yield attrs.evolve(result, stdout=b"", stderr=b"")


class ReplayingStreamSandbox(WrappedSandbox):
    """exec_stream waits until the command has finished, then replays its output."""

    @contextlib.asynccontextmanager
    async def exec_stream(self, command: Command) -> AsyncIterator[AsyncIterator[ExecEvent]]:
        yield _replay(await self.inner.exec(command))


class StreamAfterExit(WrappedProvider):
    """Streamed output arrives only once the command has ended."""

    sandbox_class = ReplayingStreamSandbox


_orphans: set[asyncio.Task[ExecResult]] = set()


class OrphaningStreamSandbox(WrappedSandbox):
    """Leaving exec_stream early leaves the command running (its task is not cancelled)."""

    @contextlib.asynccontextmanager
    async def exec_stream(self, command: Command) -> AsyncIterator[AsyncIterator[ExecEvent]]:
        task = asyncio.ensure_future(self.inner.exec(command))
        _orphans.add(task)
        task.add_done_callback(_orphans.discard)

        async def events() -> AsyncIterator[ExecEvent]:
            async for event in _replay(await asyncio.shield(task)):
                yield event

        yield events()


class StreamLeavesOrphans(WrappedProvider):
    """Leaving a stream early does not kill the command."""

    sandbox_class = OrphaningStreamSandbox


def _exit_zero(result: ExecResult) -> ExecResult:
    if result.timed_out or result.cancelled:
        return result  # -1 by mango's own rule, not an exit status the backend read
    return attrs.evolve(result, exit_code=0)


class ExitZeroSandbox(WrappedSandbox):
    """Every command that ran to its end reports exit code 0, on both exec paths."""

    async def exec(self, command: Command) -> ExecResult:
        return _exit_zero(await self.inner.exec(command))

    @contextlib.asynccontextmanager
    async def exec_stream(self, command: Command) -> AsyncIterator[AsyncIterator[ExecEvent]]:
        async with self.inner.exec_stream(command) as events:

            async def rewritten() -> AsyncIterator[ExecEvent]:
                async for event in events:
                    yield _exit_zero(event) if isinstance(event, ExecResult) else event

            yield rewritten()


class ExecIgnoresExitCodes(WrappedProvider):
    """The backend never reads a command's exit status: every exit is 0."""

    sandbox_class = ExitZeroSandbox


class UnboundedReadSandbox(WrappedSandbox):
    """Ignores ``max_bytes``: a buffered read returns the whole file, however large."""

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        del max_bytes
        return await self.inner.read_file(path, max_bytes=1 << 40)


class UnboundedRead(WrappedProvider):
    """``read_file`` has no bound."""

    sandbox_class = UnboundedReadSandbox


class BufferingWriteSandbox(WrappedSandbox):
    """``write_stream`` joins every chunk in memory, then writes the whole (the old CLI)."""

    async def write_stream(self, path: str, chunks: AsyncIterable[bytes]) -> None:
        await self.inner.write_file(path, b"".join([bytes(chunk) async for chunk in chunks]))


class BufferedWriteStream(WrappedProvider):
    """A streamed write holds the whole stream in memory."""

    sandbox_class = BufferingWriteSandbox


class InPlaceWriteSandbox(WrappedSandbox):
    """``write_stream`` truncates the target and appends each chunk to it, no temporary."""

    async def write_stream(self, path: str, chunks: AsyncIterable[bytes]) -> None:
        await self.inner.write_file(path, b"")
        target = Path(self.inner.root, path)
        async for chunk in chunks:
            with target.open("ab") as handle:  # noqa: ASYNC230 - a mutant, not a provider
                handle.write(bytes(chunk))


class NonAtomicWriteStream(WrappedProvider):
    """A streamed write that fails midway leaves a half file under the final name."""

    sandbox_class = InPlaceWriteSandbox


class EagerWriteSandbox(WrappedSandbox):
    """``write_stream`` takes the first chunk before it checks the path."""

    async def write_stream(self, path: str, chunks: AsyncIterable[bytes]) -> None:
        iterator = aiter(chunks)
        first = await anext(iterator, b"")

        async def rest() -> AsyncIterator[bytes]:
            yield first
            async for chunk in iterator:
                yield chunk

        await self.inner.write_stream(path, rest())


class WriteStreamChecksLate(WrappedProvider):
    """A refused streamed write has already consumed its source."""

    sandbox_class = EagerWriteSandbox


@attrs.define
class AliasedProcessesSandbox(WrappedSandbox):
    """Hands out ids that only this client knows (a per-instance map, as if kept in memory)."""

    aliases: dict[str, str] = attrs.field(factory=dict, kw_only=True)

    def _inner_id(self, process_id: str) -> str:
        if process_id not in self.aliases:
            raise ProcessNotFound(process_id)
        return self.aliases[process_id]

    async def start(self, command: Command) -> ProcessHandle:
        handle: ProcessHandle = await self.inner.start(command)  # type: ignore[attr-defined]
        alias = f"mem-{next(_counter)}"
        self.aliases[alias] = handle.id
        return attrs.evolve(handle, id=alias)

    async def processes(self) -> list[ProcessInfo]:
        known = {inner: alias for alias, inner in self.aliases.items()}
        infos = await self.inner.processes()  # type: ignore[attr-defined]
        return [attrs.evolve(info, id=known[info.id]) for info in infos if info.id in known]

    async def logs(self, process_id: str, **options: Any) -> ProcessOutput:
        return await self.inner.logs(self._inner_id(process_id), **options)  # type: ignore[attr-defined, no-any-return]

    async def wait(self, process_id: str, **options: Any) -> ProcessInfo:
        info = await self.inner.wait(self._inner_id(process_id), **options)  # type: ignore[attr-defined]
        return attrs.evolve(info, id=process_id)

    async def send_stdin(self, process_id: str, data: bytes) -> None:
        await self.inner.send_stdin(self._inner_id(process_id), data)  # type: ignore[attr-defined]

    async def kill(self, process_id: str) -> ProcessInfo:
        info = await self.inner.kill(self._inner_id(process_id))  # type: ignore[attr-defined]
        return attrs.evolve(info, id=process_id)


class ProcessIdsNotDurable(WrappedProvider):
    """A fresh provider instance (a restarted worker) knows none of the processes."""

    sandbox_class = AliasedProcessesSandbox


class LogsFromStartSandbox(WrappedSandbox):
    """Every read of a log starts at byte 0, whatever offset was asked for."""

    async def logs(
        self, process_id: str, *, since: int = 0, max_bytes: int | None = None
    ) -> ProcessOutput:
        del since
        return await self.inner.logs(process_id, max_bytes=max_bytes)  # type: ignore[attr-defined, no-any-return]


class ProcessLogsIgnoreOffset(WrappedProvider):
    """``logs(since=...)`` is not resumable."""

    sandbox_class = LogsFromStartSandbox


class DroppedStdinSandbox(WrappedSandbox):
    """``send_stdin`` accepts the bytes and throws them away."""

    async def send_stdin(self, process_id: str, data: bytes) -> None:
        await self.inner.logs(process_id)  # type: ignore[attr-defined]  # still checks the id


class ProcessStdinDropped(WrappedProvider):
    """Nothing sent to a running process reaches it."""

    sandbox_class = DroppedStdinSandbox


class RaisingWaitSandbox(WrappedSandbox):
    """A wait whose timeout expires raises instead of answering RUNNING."""

    async def wait(self, process_id: str, *, timeout: float | None = None) -> ProcessInfo:
        info: ProcessInfo = await self.inner.wait(process_id, timeout=timeout)  # type: ignore[attr-defined]
        if info.state is ProcessState.RUNNING:
            raise TimeoutError(f"{process_id} still runs after {timeout}s")
        return info


class ProcessWaitTimeoutRaises(WrappedProvider):
    """The expired wait is an error."""

    sandbox_class = RaisingWaitSandbox


class LeaderOnlyProcessKillSandbox(WrappedSandbox):
    """``kill`` signals the leader's pid only; its children live on."""

    async def kill(self, process_id: str) -> ProcessInfo:
        info: ProcessInfo = await self.inner.wait(process_id, timeout=0)  # type: ignore[attr-defined]
        if info.state is ProcessState.RUNNING and info.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(info.pid, signal.SIGKILL)
        return attrs.evolve(info, state=ProcessState.KILLED)


class ProcessKillLeaderOnly(WrappedProvider):
    """A killed background process leaves its grandchildren running."""

    sandbox_class = LeaderOnlyProcessKillSandbox


class UntypedUnknownIdSandbox(WrappedSandbox):
    """An unknown process id is a bare KeyError, not ProcessNotFound."""

    async def _known(self, process_id: str) -> str:
        infos = await self.inner.processes()  # type: ignore[attr-defined]
        if process_id not in {info.id for info in infos}:
            raise KeyError(process_id)
        return process_id

    async def logs(self, process_id: str, **options: Any) -> ProcessOutput:
        return await self.inner.logs(await self._known(process_id), **options)  # type: ignore[attr-defined, no-any-return]

    async def wait(self, process_id: str, **options: Any) -> ProcessInfo:
        return await self.inner.wait(await self._known(process_id), **options)  # type: ignore[attr-defined, no-any-return]

    async def send_stdin(self, process_id: str, data: bytes) -> None:
        await self.inner.send_stdin(await self._known(process_id), data)  # type: ignore[attr-defined]

    async def kill(self, process_id: str) -> ProcessInfo:
        return await self.inner.kill(await self._known(process_id))  # type: ignore[attr-defined, no-any-return]


class UnknownProcessIdUntyped(WrappedProvider):
    """Callers cannot tell a wrong id from a backend failure."""

    sandbox_class = UntypedUnknownIdSandbox


@attrs.define
class HidingDestroySandbox(WrappedSandbox):
    """Moves the process records aside before destroying, so nothing kills the processes."""

    hide: Callable[[str], None] = attrs.field(kw_only=True)

    async def destroy(self) -> None:
        await asyncio.to_thread(self.hide, self.ref.external_id)
        await self.inner.destroy()


class ProcessesOutliveDestroy(WrappedProvider):
    """A destroy leaves every background process running (until the provider closes)."""

    def _hidden(self) -> Path:
        return self.scratch / "hidden"

    def hide(self, external_id: str) -> None:
        """Move every ``pid.json`` of the sandbox out of the destroy's sight (kept for aclose)."""
        records = Path(external_id).parent / ".procs" / Path(external_id).name
        if not records.is_dir():
            return
        kept = self._hidden() / ".procs" / f"{records.name}-{next(_counter)}"
        for record in records.iterdir():
            if (record / "pid.json").is_file():
                (kept / record.name).mkdir(parents=True)
                (record / "pid.json").rename(kept / record.name / "pid.json")

    def wrap(self, sandbox: Sandbox) -> WrappedSandbox:
        return HidingDestroySandbox(sandbox, hide=self.hide)

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        await asyncio.to_thread(self.hide, ref.external_id)
        await self.inner.destroy(session_key, ref)

    async def aclose(self) -> None:
        # Never leak the survivors past the run: kill them the way a real destroy would.
        from mango.local.processes import kill_recorded_processes

        if (self._hidden() / ".procs").is_dir():
            for hidden in (self._hidden() / ".procs").iterdir():
                kill_recorded_processes(self._hidden(), hidden.name)
        await super().aclose()


def _unbounded(scratch: Path) -> Provider:
    return LocalProvider(scratch / "sandboxes", max_output_bytes=1 << 40)


MUTANTS: dict[str, Callable[[Path], Provider]] = {
    "non-idempotent-create": NonIdempotentCreate,
    "attach-skips-ownership": AttachSkipsOwnership,
    "destroy-fails-second-time": DestroyFailsSecondTime,
    "not-found-is-generic": NotFoundIsGeneric,
    "cancellation-ignored": CancellationIgnored,
    "unbounded-output": _unbounded,
    "unbounded-read": UnboundedRead,
    "buffered-write-stream": BufferedWriteStream,
    "non-atomic-write-stream": NonAtomicWriteStream,
    "write-stream-checks-late": WriteStreamChecksLate,
    "write-does-not-truncate": WriteDoesNotTruncate,
    "escape-allowed": EscapeAllowed,
    "stderr-merged": StderrMerged,
    "leader-only-kill": LeaderOnlyKill,
    "stream-after-exit": StreamAfterExit,
    "stream-leaves-orphans": StreamLeavesOrphans,
    "exec-ignores-exit-codes": ExecIgnoresExitCodes,
    "process-ids-not-durable": ProcessIdsNotDurable,
    "process-logs-ignore-offset": ProcessLogsIgnoreOffset,
    "process-stdin-dropped": ProcessStdinDropped,
    "process-wait-timeout-raises": ProcessWaitTimeoutRaises,
    "process-kill-leader-only": ProcessKillLeaderOnly,
    "unknown-process-id-untyped": UnknownProcessIdUntyped,
    "processes-outlive-destroy": ProcessesOutliveDestroy,
}
"""Each mutant's factory, by name."""


# ---------------------------------------------------------------------------
# limited-network and package-setup: mutants of the OpenSandbox provider on its fake.


def _ledger_path(scratch: Path, name: str) -> Path:
    return scratch / f"mutant-{name}.json"


def _read_ledger(path: Path) -> dict[str, list[str]]:
    try:
        loaded: dict[str, list[str]] = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return loaded


@attrs.define
class RemoteSandbox(WrappedSandbox):
    """A wrapped OpenSandbox sandbox that knows the mutant's scratch directory."""

    scratch: Path = attrs.field(kw_only=True)


@attrs.define
class RemoteWrapped(WrappedProvider):
    """Wraps an OpenSandbox provider (``inner``, from the fake's target)."""

    sandbox_class: ClassVar[type[WrappedSandbox]] = RemoteSandbox

    def wrap(self, sandbox: Sandbox) -> WrappedSandbox:
        return self.sandbox_class(sandbox, scratch=self.scratch)  # type: ignore[call-arg]


class IgnoringAllowlistSandbox(RemoteSandbox):
    """``apply_limited_network`` accepts any list and changes nothing."""

    async def apply_limited_network(self, allowed_hosts: Sequence[str]) -> None:
        del allowed_hosts


class AllowlistIgnored(RemoteWrapped):
    """The allowlist is never applied: the sandbox keeps the policy it was created with."""

    sandbox_class = IgnoringAllowlistSandbox


class MergingAllowlistSandbox(RemoteSandbox):
    """Only ever adds hosts: each list is merged into everything applied before."""

    async def apply_limited_network(self, allowed_hosts: Sequence[str]) -> None:
        path = _ledger_path(self.scratch, "merged")
        ledger = _read_ledger(path)
        merged = sorted({*ledger.get(self.ref.external_id, []), *allowed_hosts})
        ledger[self.ref.external_id] = merged
        path.write_text(json.dumps(ledger))
        await self.inner.apply_limited_network(merged)  # type: ignore[attr-defined]


class AllowlistMerged(RemoteWrapped):
    """Replacing the allowlist merges instead (a PATCH of the new hosts, never a removal)."""

    sandbox_class = MergingAllowlistSandbox


class TrustingRecordSandbox(RemoteSandbox):
    """Compares the wanted list with what it last applied (its own record), not the backend."""

    async def apply_limited_network(self, allowed_hosts: Sequence[str]) -> None:
        path = _ledger_path(self.scratch, "applied")
        ledger = _read_ledger(path)
        wanted = sorted(allowed_hosts)
        if ledger.get(self.ref.external_id) == wanted:
            return
        await self.inner.apply_limited_network(wanted)  # type: ignore[attr-defined]
        ledger[self.ref.external_id] = wanted
        path.write_text(json.dumps(ledger))


class DriftNotRepaired(RemoteWrapped):
    """A policy changed behind the provider stays: re-applying the same list is skipped."""

    sandbox_class = TrustingRecordSandbox


class LimitedCreatedUnrestricted(RemoteWrapped):
    """A ``limited`` spec is created with unrestricted network (no egress policy at all)."""

    async def create(self, session_key: str, spec: SandboxSpec) -> WrappedSandbox:
        if spec.network is NetworkMode.LIMITED:
            spec = attrs.evolve(spec, network=NetworkMode.BRIDGE, network_allowed_hosts=())
        return await super().create(session_key, spec)


_PACKAGE_MANAGERS = frozenset({"apt-get", "cargo", "gem", "go", "npm", "python3"})


def _is_package_step(command: Command) -> bool:
    return command.argv[0] in _PACKAGE_MANAGERS and (
        "install" in command.argv or "update" in command.argv
    )


class SwallowingSetupSandbox(RemoteSandbox):
    """A package manager's failure comes back as exit 0 (as if run ``... || true``)."""

    async def exec(self, command: Command) -> ExecResult:
        result = await self.inner.exec(command)
        if _is_package_step(command) and not (result.timed_out or result.cancelled):
            return attrs.evolve(result, exit_code=0)
        return result


class PackageFailureSwallowed(RemoteWrapped):
    """A failed install looks successful, so SessionManager would bind without the packages."""

    sandbox_class = SwallowingSetupSandbox


@attrs.define
class ReorderingSetupSandbox(RemoteSandbox):
    """Holds each first package step back (answering success) and runs it after the next one."""

    held: list[Command] = attrs.field(factory=list, kw_only=True)

    async def exec(self, command: Command) -> ExecResult:
        if not _is_package_step(command):
            return await self.inner.exec(command)
        if not self.held:
            self.held.append(command)
            return ExecResult()
        result = await self.inner.exec(command)
        await self.inner.exec(self.held.pop())
        return result


class PackagesOutOfOrder(RemoteWrapped):
    """The package steps run out of order (``apt-get install`` before ``apt-get update``)."""

    sandbox_class = ReorderingSetupSandbox


_RESET_IMAGE = (
    'bin=$(dirname "$(command -v apt-get)") && for f in "$bin"/*; do '
    '[ "${f##*/}" = apt-get ] || rm -f "$f"; done'
)
"""Put the fake image's ``/usr/bin`` back as it was (only ``apt-get``)."""


class ImageResetOnAttach(RemoteWrapped):
    """Attach gives the sandbox its image afresh: only the workspace survives a restart."""

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> WrappedSandbox:
        sandbox = await super().attach(session_key, ref, spec)
        await sandbox.exec(Command(("sh", "-c", _RESET_IMAGE)))
        return sandbox


REMOTE_MUTANTS: dict[str, type[RemoteWrapped]] = {
    "allowlist-ignored": AllowlistIgnored,
    "allowlist-merged": AllowlistMerged,
    "drift-not-repaired": DriftNotRepaired,
    "limited-created-unrestricted": LimitedCreatedUnrestricted,
    "package-failure-swallowed": PackageFailureSwallowed,
    "packages-out-of-order": PackagesOutOfOrder,
    "image-reset-on-attach": ImageResetOnAttach,
    "opensandbox-unchanged": RemoteWrapped,
}
"""The OpenSandbox mutants; ``opensandbox-unchanged`` is the control (no defect)."""


def _remote_target(name: str) -> ConformanceTarget:
    from mango_provider_opensandbox.conformance import (
        open_conformance_provider,
        open_conformance_testbed,
    )

    mutant = REMOTE_MUTANTS[name]

    @contextlib.asynccontextmanager
    async def open_mutant(scratch: Path) -> AsyncIterator[Provider]:
        async with open_conformance_provider(scratch) as inner:
            yield mutant(scratch, inner)

    return ConformanceTarget(
        provider="opensandbox",
        open=open_mutant,
        testbed=open_conformance_testbed,
        description=f"mutant: {name}",
    )


# ---------------------------------------------------------------------------
# file-resources and session-outputs: mutants of the Docker provider on the local daemon.

_UPLOADS = "/mnt/session/uploads"
_OUTPUTS = "/mnt/session/outputs"


@attrs.define
class DockerWrappedSandbox(WrappedSandbox):
    """A wrapped Docker sandbox that delegates the resource protocols by name.

    Defined here rather than found through ``__getattr__``: from Python 3.12 a
    runtime protocol check does not look through ``__getattr__``.
    """

    async def has_file_resource(self, mount: FileResourceMount) -> bool:
        return await self.inner.has_file_resource(mount)  # type: ignore[attr-defined, no-any-return]

    async def import_file_resource(
        self, mount: FileResourceMount, chunks: AsyncIterable[bytes]
    ) -> None:
        await self.inner.import_file_resource(mount, chunks)  # type: ignore[attr-defined]

    async def remove_file_resource(self, runtime_path: str, identity: str) -> None:
        await self.inner.remove_file_resource(runtime_path, identity)  # type: ignore[attr-defined]

    def resource_lock(self, *, exclusive: bool = False) -> Any:
        return self.inner.resource_lock(exclusive=exclusive)  # type: ignore[attr-defined]

    def open_session_outputs(self) -> Any:
        return self.inner.open_session_outputs()  # type: ignore[attr-defined]

    async def has_skill_bundles(self, mounts: Sequence[SkillMount]) -> Sequence[bool]:
        return await self.inner.has_skill_bundles(mounts)  # type: ignore[attr-defined, no-any-return]

    async def import_skill_bundle(self, mount: SkillMount, chunks: AsyncIterable[bytes]) -> None:
        await self.inner.import_skill_bundle(mount, chunks)  # type: ignore[attr-defined]

    def memory_sync_lock(self, *, wait: bool) -> Any:
        return self.inner.memory_sync_lock(wait=wait)  # type: ignore[attr-defined]

    async def read_memory_store(self, mount: MemoryStoreMount) -> MemorySnapshot:
        return await self.inner.read_memory_store(mount)  # type: ignore[attr-defined, no-any-return]

    async def replace_memory_store(
        self, mount: MemoryStoreMount, files: Sequence[MemoryFile]
    ) -> None:
        await self.inner.replace_memory_store(mount, files)  # type: ignore[attr-defined]

    @property
    def host_dir(self) -> Path:
        return Path(self.inner.host_dir)  # type: ignore[attr-defined]

    async def pause(self) -> None:
        await self.inner.pause()  # type: ignore[attr-defined]

    async def resume(self) -> None:
        await self.inner.resume()  # type: ignore[attr-defined]

    async def is_paused(self) -> bool:
        return await self.inner.is_paused()  # type: ignore[attr-defined, no-any-return]

    async def expose_port(self, port: int) -> ExposedPort:
        return await self.inner.expose_port(port)  # type: ignore[attr-defined, no-any-return]

    def host_target(self, runtime_path: str) -> Path:
        return self.host_dir / "files" / runtime_path[len(_UPLOADS) + 1 :]

    def marker(self, runtime_path: str) -> Path:
        return self.host_dir / "state" / hashlib.sha256(runtime_path.encode()).hexdigest()


class DockerWrapped(WrappedProvider):
    """Wraps a Docker provider (``inner``, from the daemon's conformance target)."""

    sandbox_class = DockerWrappedSandbox

    async def pause(self, session_key: str, ref: SandboxRef) -> None:
        await self.inner.pause(session_key, ref)  # type: ignore[attr-defined]

    async def resume(self, session_key: str, ref: SandboxRef) -> None:
        await self.inner.resume(session_key, ref)  # type: ignore[attr-defined]


async def _gathered(chunks: AsyncIterable[bytes]) -> bytes:
    return b"".join([chunk async for chunk in chunks])


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _in_workspace(path: str) -> str:
    """An uploads path as a workspace-relative path of the writable copy."""
    return ".uploads/" + path[len(_UPLOADS) + 1 :]


class WorkspaceUploadsSandbox(DockerWrappedSandbox):
    """File Resources copied into the writable workspace (``/workspace/.uploads``).

    Commands and file tools are pointed there by rewriting the uploads path,
    as a backend without read-only mounts might do: everything works, but
    anything in the sandbox can change the copies.
    """

    async def exec(self, command: Command) -> ExecResult:
        argv = tuple(arg.replace(_UPLOADS, "/workspace/.uploads") for arg in command.argv)
        return await self.inner.exec(attrs.evolve(command, argv=argv))

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        if path.startswith(_UPLOADS + "/"):
            path = _in_workspace(path)
        return await self.inner.read_file(path, max_bytes=max_bytes)

    async def write_file(self, path: str, data: bytes) -> None:
        if path.startswith(_UPLOADS + "/"):
            path = _in_workspace(path)
        await self.inner.write_file(path, data)

    def _marker_path(self, runtime_path: str) -> str:
        return ".uploads-state/" + hashlib.sha256(runtime_path.encode()).hexdigest()

    async def has_file_resource(self, mount: FileResourceMount) -> bool:
        try:
            recorded = await self.inner.read_file(self._marker_path(mount.runtime_path))
            data = await self.inner.read_file(_in_workspace(mount.runtime_path))
        except FileNotFoundError:
            return False
        return recorded == mount.identity.encode() and len(data) == mount.size

    async def import_file_resource(
        self, mount: FileResourceMount, chunks: AsyncIterable[bytes]
    ) -> None:
        data = await _gathered(chunks)
        if hashlib.sha256(data).hexdigest() != mount.sha256:
            raise ContentMismatch("the copy is not what the mount says")
        await self.inner.write_file(_in_workspace(mount.runtime_path), data)
        await self.inner.write_file(self._marker_path(mount.runtime_path), mount.identity.encode())

    async def remove_file_resource(self, runtime_path: str, identity: str) -> None:
        if ".." in runtime_path.split("/"):
            raise PathEscapeError(f"{runtime_path!r} has '..'")
        try:
            recorded = await self.inner.read_file(self._marker_path(runtime_path))
        except FileNotFoundError:
            recorded = identity.encode()
        if recorded == identity.encode():
            await self.inner.exec(
                Command(
                    (
                        "rm",
                        "-rf",
                        "/workspace/" + _in_workspace(runtime_path),
                        "/workspace/" + self._marker_path(runtime_path),
                    )
                )
            )


class UploadsInWorkspace(DockerWrapped):
    """File Resources are writable copies: a command in the sandbox can change them."""

    sandbox_class = WorkspaceUploadsSandbox


class InPlaceImportSandbox(DockerWrappedSandbox):
    """Writes an import straight onto the target (truncate, then the bytes as they come)."""

    async def import_file_resource(
        self, mount: FileResourceMount, chunks: AsyncIterable[bytes]
    ) -> None:
        target = self.host_target(mount.runtime_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.chmod(0o644)
        data = b""
        with target.open("wb") as sink:
            async for chunk in chunks:
                sink.write(chunk)
                sink.flush()
                data += chunk
        await self.inner.import_file_resource(mount, _once(data))  # type: ignore[attr-defined]


class ImportInPlace(DockerWrapped):
    """A replacement that fails half-way leaves half a file visible (no atomic rename)."""

    sandbox_class = InPlaceImportSandbox


class IdentityBlindRemovalSandbox(DockerWrappedSandbox):
    """Removes whatever copy is at the path, whichever identity asks."""

    async def remove_file_resource(self, runtime_path: str, identity: str) -> None:
        marker = self.marker(runtime_path) if ".." not in runtime_path else None
        if marker is not None and marker.exists():
            identity = marker.read_text().split("\n")[0]
        await self.inner.remove_file_resource(runtime_path, identity)  # type: ignore[attr-defined]


class RemovalIgnoresIdentity(DockerWrapped):
    """A stale resource's removal deletes the newer copy that reused its path."""

    sandbox_class = IdentityBlindRemovalSandbox


class OnceOnlyRemovalSandbox(DockerWrappedSandbox):
    """A removal of a copy that is not there fails instead of succeeding."""

    async def remove_file_resource(self, runtime_path: str, identity: str) -> None:
        if ".." not in runtime_path and not self.host_target(runtime_path).exists():
            raise FileNotFoundError(f"no File Resource at {runtime_path}")
        await self.inner.remove_file_resource(runtime_path, identity)  # type: ignore[attr-defined]


class RemovalNotIdempotent(DockerWrapped):
    """Removing twice, or after an interrupted import, raises."""

    sandbox_class = OnceOnlyRemovalSandbox


class ConsumingExportSandbox(DockerWrappedSandbox):
    """An export moves the files out: the directory is empty afterwards."""

    @contextlib.asynccontextmanager
    async def open_session_outputs(self) -> AsyncIterator[AsyncIterator[bytes]]:
        async with self.inner.open_session_outputs() as chunks:  # type: ignore[attr-defined]
            yield chunks
        await self.inner.exec(Command(("sh", "-c", f"rm -rf {_OUTPUTS}/*")))


class ExportConsumes(DockerWrapped):
    """A second export finds nothing: not repeatable."""

    sandbox_class = ConsumingExportSandbox


class BufferingExportSandbox(DockerWrappedSandbox):
    """The whole archive is read into memory and handed on as one chunk."""

    @contextlib.asynccontextmanager
    async def open_session_outputs(self) -> AsyncIterator[AsyncIterator[bytes]]:
        async with self.inner.open_session_outputs() as chunks:  # type: ignore[attr-defined]
            data = await _gathered(chunks)
        yield _once(data)


class ExportBuffered(DockerWrapped):
    """Memory grows with the outputs' size."""

    sandbox_class = BufferingExportSandbox


class DereferencingExportSandbox(DockerWrappedSandbox):
    """Links are exported as the files they point to (inside the sandbox); FIFOs are dropped."""

    @contextlib.asynccontextmanager
    async def open_session_outputs(self) -> AsyncIterator[AsyncIterator[bytes]]:
        async with self.inner.open_session_outputs() as chunks:  # type: ignore[attr-defined]
            data = await _gathered(chunks)
        rebuilt = io.BytesIO()
        with (
            tarfile.open(fileobj=io.BytesIO(data)) as source,
            tarfile.open(fileobj=rebuilt, mode="w", format=tarfile.PAX_FORMAT) as out,
        ):
            for member in source.getmembers():
                if member.isfifo() or member.isdev():
                    continue
                if member.issym() or member.islnk():
                    target = member.linkname
                    if member.islnk():
                        target = f"{_OUTPUTS}/{target.removeprefix('./')}"
                    elif not target.startswith("/"):
                        target = f"{_OUTPUTS}/{target}"
                    read = await self.inner.exec(Command(("cat", target)))
                    copy = tarfile.TarInfo(member.name)
                    copy.size = len(read.stdout)
                    out.addfile(copy, io.BytesIO(read.stdout))
                    continue
                out.addfile(member, source.extractfile(member) if member.isreg() else None)
        yield _once(rebuilt.getvalue())


class ExportFollowsLinks(DockerWrapped):
    """A symlink to /etc/passwd would publish the file; a FIFO vanishes unnoticed."""

    sandbox_class = DereferencingExportSandbox


class ToolsElsewhereSandbox(DockerWrappedSandbox):
    """File tools keep ``/mnt/session/outputs`` paths in the workspace instead."""

    @staticmethod
    def _moved(path: str) -> str:
        if path.startswith(_OUTPUTS + "/"):
            return "mnt-outputs/" + path[len(_OUTPUTS) + 1 :]
        return path

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        return await self.inner.read_file(self._moved(path), max_bytes=max_bytes)

    async def write_file(self, path: str, data: bytes) -> None:
        await self.inner.write_file(self._moved(path), data)


class ToolsSeeAnotherRoot(DockerWrapped):
    """The tools' outputs directory is not the shell's."""

    sandbox_class = ToolsElsewhereSandbox


def _writable(spec: SandboxSpec) -> SandboxSpec:
    mounts = tuple(attrs.evolve(m, access="read_write") for m in spec.memory_stores)
    return attrs.evolve(spec, memory_stores=mounts)


class ReadOnlyWritable(DockerWrapped):
    """A read_only Memory Store is bound writable: a command can change it."""

    async def create(self, session_key: str, spec: SandboxSpec) -> WrappedSandbox:
        return self.wrap(await self.inner.create(session_key, _writable(spec)))

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> WrappedSandbox:
        return self.wrap(await self.inner.attach(session_key, ref, _writable(spec)))


class StaleKeepingSandbox(DockerWrappedSandbox):
    """A replace adds and overwrites, but leaves the files it was not given."""

    async def replace_memory_store(
        self, mount: MemoryStoreMount, files: Sequence[MemoryFile]
    ) -> None:
        before = await self.inner.read_memory_store(mount)  # type: ignore[attr-defined]
        await self.inner.replace_memory_store(mount, files)  # type: ignore[attr-defined]
        given = {item.path for item in files}
        root = self.host_dir / "memory" / mount.slug
        for item in before.files:
            if item.path not in given:
                target = root / item.path[1:]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(item.content, encoding="utf-8")


class ReplaceKeepsStale(DockerWrapped):
    """A refresh leaves behind memories the heads no longer have."""

    sandbox_class = StaleKeepingSandbox


class IgnoredToolLockSandbox(DockerWrappedSandbox):
    """The sync lock's try never fails: a refresh may run under an active tool."""

    @contextlib.asynccontextmanager
    async def memory_sync_lock(self, *, wait: bool) -> AsyncIterator[bool]:
        del wait
        yield True


class SyncLockIgnoresTools(DockerWrapped):
    """Tools do not hold a refresh back."""

    sandbox_class = IgnoredToolLockSandbox


# pause and exposed-ports: mutants of the Docker provider (Engine pause, 127.0.0.1 ports).


class FlagPauseSandbox(DockerWrappedSandbox):
    """Pause only sets a flag of this client: the container keeps running."""

    paused: bool = False

    async def pause(self) -> None:
        self.paused = True

    async def resume(self) -> None:
        self.paused = False

    async def is_paused(self) -> bool:
        return self.paused


class PauseIsAFlag(DockerWrapped):
    """``pause`` remembers, the backend never pauses (and the provider's form does nothing)."""

    sandbox_class = FlagPauseSandbox

    async def pause(self, session_key: str, ref: SandboxRef) -> None:
        return None

    async def resume(self, session_key: str, ref: SandboxRef) -> None:
        return None


class StrictResumeSandbox(DockerWrappedSandbox):
    """Resume of a running sandbox fails (as the Engine's unpause does)."""

    async def resume(self) -> None:
        if not await self.inner.is_paused():  # type: ignore[attr-defined]
            raise ResourceConflict("the container is not paused")
        await self.inner.resume()  # type: ignore[attr-defined]


class ResumeNotIdempotent(DockerWrapped):
    """``resume`` of a running sandbox is an error."""

    sandbox_class = StrictResumeSandbox


class WipingResumeSandbox(DockerWrappedSandbox):
    """Resume starts the workspace afresh (as a restore from an empty snapshot would)."""

    async def resume(self) -> None:
        await self.inner.resume()  # type: ignore[attr-defined]
        await self.inner.exec(Command(("sh", "-c", "rm -rf -- ./* ./.[!.]*")))


class ResumeLosesWorkspace(DockerWrapped):
    """The workspace does not survive a pause."""

    sandbox_class = WipingResumeSandbox


class OffByOnePortSandbox(DockerWrappedSandbox):
    """``expose_port`` answers with the URL of the next host port."""

    async def expose_port(self, port: int) -> ExposedPort:
        exposed = await self.inner.expose_port(port)  # type: ignore[attr-defined]
        base, host_port = exposed.url.rsplit(":", 1)
        return attrs.evolve(exposed, url=f"{base}:{int(host_port) + 1}")


class PortUrlWrong(DockerWrapped):
    """The exposed URL reaches nothing in the sandbox."""

    sandbox_class = OffByOnePortSandbox


class RememberingPortSandbox(DockerWrappedSandbox):
    """``expose_port`` answers from a cache: a destroyed sandbox's port still has a URL."""

    async def expose_port(self, port: int) -> ExposedPort:
        # A plain subclass of the slotted wrapper: its instances have a __dict__.
        remembered: dict[int, ExposedPort] = vars(self).setdefault("remembered", {})
        if port not in remembered:
            remembered[port] = await self.inner.expose_port(port)  # type: ignore[attr-defined]
        return remembered[port]


class PortOutlivesSandbox(DockerWrapped):
    """A gone sandbox's port is not ``SandboxNotFound``."""

    sandbox_class = RememberingPortSandbox


PAUSE_MUTANTS: dict[str, type[DockerWrapped]] = {
    "pause-is-a-flag": PauseIsAFlag,
    "resume-not-idempotent": ResumeNotIdempotent,
    "resume-loses-workspace": ResumeLosesWorkspace,
    "port-url-wrong": PortUrlWrong,
    "port-outlives-sandbox": PortOutlivesSandbox,
}
"""The pause and exposed-ports mutants (run with the Docker target and a port testbed)."""


class UnverifiedSkillSandbox(DockerWrappedSandbox):
    """Takes whatever archive arrives: the mount's checksum is replaced by the bytes' own."""

    async def import_skill_bundle(self, mount: SkillMount, chunks: AsyncIterable[bytes]) -> None:
        data = await _gathered(chunks)
        trusted = attrs.evolve(mount, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        await self.inner.import_skill_bundle(trusted, _once(data))  # type: ignore[attr-defined]


class SkillUnverified(DockerWrapped):
    """An archive of another SHA-256 is published."""

    sandbox_class = UnverifiedSkillSandbox


class InPlaceSkillSandbox(DockerWrappedSandbox):
    """Extracts each entry at the runtime path as it comes, stopping at the first unsafe one."""

    async def import_skill_bundle(self, mount: SkillMount, chunks: AsyncIterable[bytes]) -> None:
        data = await _gathered(chunks)
        target = self.host_dir / "skills" / mount.name
        with contextlib.suppress(zipfile.BadZipFile), zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                relative = info.filename[len(mount.name) + 1 :]
                if ".." in relative.split("/"):
                    break
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                (target / relative).write_bytes(archive.read(info))
        await self.inner.import_skill_bundle(mount, _once(data))  # type: ignore[attr-defined]


class SkillExtractInPlace(DockerWrapped):
    """A failed import leaves the entries before the bad one at the runtime path."""

    sandbox_class = InPlaceSkillSandbox


class ExecBitsDroppedSandbox(DockerWrappedSandbox):
    """Publishes every file 0444, executables included."""

    async def import_skill_bundle(self, mount: SkillMount, chunks: AsyncIterable[bytes]) -> None:
        await self.inner.import_skill_bundle(mount, chunks)  # type: ignore[attr-defined]
        for path in (self.host_dir / "skills" / mount.name).rglob("*"):
            if path.is_file():
                path.chmod(0o444)


class SkillDropsExecBits(DockerWrapped):
    """A skill's scripts cannot run."""

    sandbox_class = ExecBitsDroppedSandbox


class RememberingSkillSandbox(DockerWrappedSandbox):
    """Answers ``has`` from what this client imported, not from the sandbox."""

    imported: set[str] = attrs.field(factory=set)

    async def has_skill_bundles(self, mounts: Sequence[SkillMount]) -> Sequence[bool]:
        return [mount.identity in self.imported for mount in mounts]

    async def import_skill_bundle(self, mount: SkillMount, chunks: AsyncIterable[bytes]) -> None:
        await self.inner.import_skill_bundle(mount, chunks)  # type: ignore[attr-defined]
        self.imported.add(mount.identity)


class SkillStateInMemory(DockerWrapped):
    """A fresh client believes no skill is there: every step would import again."""

    sandbox_class = RememberingSkillSandbox


DOCKER_MUTANTS: dict[str, type[DockerWrapped]] = {
    "uploads-in-workspace": UploadsInWorkspace,
    "import-in-place": ImportInPlace,
    "removal-ignores-identity": RemovalIgnoresIdentity,
    "removal-not-idempotent": RemovalNotIdempotent,
    "export-consumes": ExportConsumes,
    "export-buffered": ExportBuffered,
    "export-follows-links": ExportFollowsLinks,
    "tools-see-another-root": ToolsSeeAnotherRoot,
    "skill-unverified": SkillUnverified,
    "skill-extract-in-place": SkillExtractInPlace,
    "skill-drops-exec-bits": SkillDropsExecBits,
    "skill-state-in-memory": SkillStateInMemory,
    "memory-read-only-writable": ReadOnlyWritable,
    "memory-replace-keeps-stale": ReplaceKeepsStale,
    "memory-lock-ignores-tools": SyncLockIgnoresTools,
    "docker-unchanged": DockerWrapped,
    **PAUSE_MUTANTS,
}
"""The Docker mutants; ``docker-unchanged`` is the control (no defect)."""


def _docker_target(name: str) -> ConformanceTarget:
    from mango_provider_docker.conformance import PORT_TESTBED, open_conformance_provider

    mutant = DOCKER_MUTANTS[name]

    @contextlib.asynccontextmanager
    async def open_mutant(scratch: Path) -> AsyncIterator[Provider]:
        async with open_conformance_provider(scratch) as inner:
            yield mutant(scratch, inner)

    @contextlib.asynccontextmanager
    async def port_testbed(scratch: Path) -> AsyncIterator[ConformanceTestbed]:
        del scratch
        yield ConformanceTestbed(ports=PORT_TESTBED)

    return ConformanceTarget(
        provider="docker",
        open=open_mutant,
        description=f"mutant: {name}",
        testbed=port_testbed,
    )


def target_for(name: str) -> ConformanceTarget:
    """The conformance target of the mutant ``name`` (it keeps its base's provider name)."""
    if name in REMOTE_MUTANTS:
        return _remote_target(name)
    if name in DOCKER_MUTANTS:
        return _docker_target(name)
    from fileapi_mutants import FILE_API_MUTANTS

    factory = MUTANTS[name] if name in MUTANTS else FILE_API_MUTANTS[name]
    return provider_target("local", factory, description=f"mutant: {name}")

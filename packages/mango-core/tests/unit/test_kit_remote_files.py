"""The remote half of the kit: RemoteFiles over a file API, ProviderView's one "gone?" rule.

The file API here is a real one: a host directory reached through ``lstat``,
chunked reads, ``makedirs`` and writes (the shape of every sandbox daemon's
stat / download / mkdir / upload). The control plane is a table the test
sets, so each answer's meaning can be checked on its own.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import BinaryIO

import attrs
import pytest

from mango.provider import (
    Command,
    ConfigurationError,
    Entry,
    ExecResult,
    FileTooLarge,
    InvalidInput,
    MangoError,
    OutputStream,
    PathEscapeError,
    PathPolicy,
    PermanentError,
    ProviderUnavailable,
    ResolvedPath,
    SandboxNotFound,
    SandboxNotRunning,
    SandboxRef,
    SandboxSpec,
    file_not_found,
)
from mango.provider.files import Download, file_bytes
from mango.provider.http import RemoteRejected
from mango.provider.output import ExecChannel
from mango.provider.remote import Presence, ProviderView, RemoteSandbox

CHUNK = 1000


@attrs.define(eq=False, kw_only=True)
class TableView(ProviderView):
    """A provider view whose control plane answers from a table (missing: not found)."""

    table: dict[str, Presence | MangoError] = attrs.field(factory=dict)
    asked: list[str] = attrs.field(factory=list)
    removed: list[str] = attrs.field(factory=list)

    async def presence(self, sandbox_id: str) -> Presence:
        self.asked.append(sandbox_id)
        answer = self.table.get(sandbox_id)
        if answer is None:
            raise SandboxNotFound(sandbox_id)
        if isinstance(answer, MangoError):
            raise answer
        return answer

    async def remove(self, sandbox_id: str) -> None:
        self.removed.append(sandbox_id)
        self.table.pop(sandbox_id, None)


@attrs.define(eq=False)
class DirSandbox(RemoteSandbox):
    """A remote sandbox whose file API is a host directory; exec echoes the argv."""

    _provider: TableView
    _ref: SandboxRef
    _spec: SandboxSpec
    _path_policy: PathPolicy
    uploads: list[str] = attrs.field(factory=list)
    made: list[tuple[str, ...]] = attrs.field(factory=list)
    fail_with: MangoError | None = None
    grow_by: int = 0
    """Bytes the file gains between the stat and the download (a log being written)."""
    announce: bool = False
    """Whether the download announces the file's size (as a multipart part or a tar header)."""
    fail_replace: MangoError | None = None
    discarded: list[str] = attrs.field(factory=list)

    async def _exec_body(
        self, command: Command, channel: ExecChannel, timeout: float | None
    ) -> ExecResult:
        channel.feed(OutputStream.STDOUT, b"x" * 100)
        return channel.result(exit_code=len(command.argv))

    async def _stat(self, path: str) -> Entry | None:
        if self.fail_with is not None:
            raise self.fail_with
        try:
            return Entry.from_mode(*_mode_and_size(path))
        except FileNotFoundError:
            return None

    @asynccontextmanager
    async def _download(self, resolved: ResolvedPath, path: str) -> AsyncIterator[Download]:
        if self.grow_by:
            _append(resolved.path, b"+" * self.grow_by)
        try:
            handle = _open(resolved.path)
        except FileNotFoundError:
            raise file_not_found(path) from None

        async def chunks() -> AsyncIterator[bytes]:
            while chunk := handle.read(CHUNK):
                yield chunk

        try:
            size = os.fstat(handle.fileno()).st_size if self.announce else None
            yield Download(chunks(), size)
        finally:
            handle.close()

    async def _make_dirs(self, paths: tuple[str, ...]) -> None:
        self.made.append(paths)
        for path in paths:
            os.mkdir(path)  # noqa: PTH102 - the API's mkdir, as a daemon does it

    async def _upload(self, path: str, data: bytes) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.uploads.append(path)
        put(path, data)

    async def _upload_stream(self, path: str, chunks: AsyncIterator[bytes]) -> None:
        self.uploads.append(path)
        with Path(path).open("xb") as handle:  # noqa: ASYNC230 - a host directory as the API
            async for chunk in chunks:
                handle.write(chunk)

    async def _replace(self, source: str, destination: str) -> None:
        if self.fail_replace is not None:
            raise self.fail_replace
        _rename(source, destination)

    async def _discard(self, path: str) -> None:
        self.discarded.append(path)
        _unlink(path)

    async def _lost(self, error: MangoError) -> MangoError:
        return await self._provider.lost(self.sandbox_id, error)


def put(path: str | Path, data: bytes) -> None:
    Path(path).write_bytes(data)


def names(directory: Path) -> list[str]:
    return sorted(entry.name for entry in directory.iterdir())


def _rename(source: str, destination: str) -> None:
    Path(source).replace(destination)


def _unlink(path: str) -> None:
    Path(path).unlink(missing_ok=True)


def exists(path: str) -> bool:
    return Path(path).exists()


def _append(path: str, data: bytes) -> None:
    with Path(path).open("ab") as handle:
        handle.write(data)


def _open(path: str) -> BinaryIO:
    return Path(path).open("rb")


def _mode_and_size(path: str) -> tuple[int, int]:
    info = os.lstat(path)
    return info.st_mode, info.st_size


@pytest.fixture
def view() -> TableView:
    return TableView(
        name="dir", max_output_bytes=64, max_read_bytes=4096, table={"sb": Presence.RUNNING}
    )


@pytest.fixture
def sandbox(tmp_path: Path, view: TableView) -> DirSandbox:
    root = tmp_path / "workspace"
    root.mkdir()
    return DirSandbox(view, SandboxRef("dir", "sb"), SandboxSpec(), PathPolicy(str(root)))


async def test_write_then_read_round_trips_and_makes_the_missing_parents(
    sandbox: DirSandbox,
) -> None:
    """A write creates the missing parents (outermost first) once; the read is exact."""
    await sandbox.write_file("a/b/c.bin", bytearray(b"hello"))
    root = sandbox.root
    assert sandbox.made == [(f"{root}/a", f"{root}/a/b")]
    assert sandbox.uploads == [f"{root}/a/b/c.bin"]
    assert await sandbox.read_file("a/b/c.bin") == b"hello"
    await sandbox.write_file("a/b/c.bin", memoryview(b"again"))
    assert sandbox.made == [(f"{root}/a", f"{root}/a/b")], "existing parents are not made again"
    assert await sandbox.read_file("a/b/c.bin") == b"again"


@pytest.mark.parametrize("data", [5, "text", None, [1, 2]])
async def test_a_write_of_anything_but_bytes_is_invalid_input_and_sends_nothing(
    sandbox: DirSandbox, data: object
) -> None:
    """No upload and no directory for a non-bytes value: never bytes(5) for a 5."""
    with pytest.raises(InvalidInput, match="takes bytes"):
        await sandbox.write_file("d/x.bin", data)  # type: ignore[arg-type]
    assert (sandbox.uploads, sandbox.made) == ([], [])
    assert not exists(f"{sandbox.root}/d")


async def _chunks(*parts: object) -> AsyncIterator[object]:
    for part in parts:
        yield part


async def test_write_stream_goes_through_a_temporary_renamed_over_the_target(
    sandbox: DirSandbox,
) -> None:
    """Parents made, the chunks uploaded to a dot temporary beside it, then the rename."""
    root = Path(sandbox.root)
    await sandbox.write_stream("a/b.bin", _chunks(b"he", b"", bytearray(b"llo")))  # type: ignore[arg-type]
    assert (root / "a/b.bin").read_bytes() == b"hello"
    (temporary,) = sandbox.uploads
    assert Path(temporary).parent == root / "a"
    assert Path(temporary).name.startswith(".b.bin.mango-")
    assert names(root / "a") == ["b.bin"]
    assert sandbox.discarded == []


async def test_a_failed_replace_discards_the_temporary_and_means_what_it_means(
    sandbox: DirSandbox, view: TableView
) -> None:
    """The old file stays, the temporary goes; a retryable failure of a gone sandbox is lost."""
    root = Path(sandbox.root)
    put(root / "f.txt", b"old")
    sandbox.fail_replace = PermanentError("the rename was refused")
    with pytest.raises(PermanentError):
        await sandbox.write_stream("f.txt", _chunks(b"new"))  # type: ignore[arg-type]
    assert (root / "f.txt").read_bytes() == b"old"
    assert sandbox.discarded == sandbox.uploads
    assert names(root) == ["f.txt"]
    sandbox.fail_replace = ProviderUnavailable("the daemon went away")
    del view.table["sb"]
    with pytest.raises(SandboxNotFound):
        await sandbox.write_stream("f.txt", _chunks(b"new"))  # type: ignore[arg-type]
    assert (root / "f.txt").read_bytes() == b"old"


async def test_a_non_bytes_chunk_fails_the_stream_and_leaves_nothing(sandbox: DirSandbox) -> None:
    """InvalidInput for a str chunk mid-stream; the temporary is removed."""
    with pytest.raises(InvalidInput, match="chunks of bytes"):
        await sandbox.write_stream("t.txt", _chunks(b"ok", "text"))  # type: ignore[arg-type]
    assert names(Path(sandbox.root)) == []


def test_file_bytes_accepts_bytes_like_values_only() -> None:
    """bytes, bytearray and memoryview become bytes; an int is refused."""
    assert file_bytes(bytearray(b"ab")) == b"ab"
    assert file_bytes(memoryview(b"cd")) == b"cd"
    with pytest.raises(InvalidInput):
        file_bytes(5)


async def test_the_stat_size_is_checked_before_the_transfer(sandbox: DirSandbox) -> None:
    """Past the bound: FileTooLarge with the stat's size, the caller's bound and the cap."""
    put(f"{sandbox.root}/big.bin", b"x" * 5000)
    with pytest.raises(FileTooLarge) as caught:
        await sandbox.read_file("big.bin")
    assert (caught.value.size, caught.value.limit) == (5000, 4096)
    with pytest.raises(FileTooLarge):
        await sandbox.read_file("big.bin", max_bytes=4999)
    assert await sandbox.read_file("big.bin", max_bytes=5000) == b"x" * 5000
    with pytest.raises(InvalidInput):
        await sandbox.read_file("big.bin", max_bytes=0)


async def test_a_file_that_grew_is_stopped_while_it_is_read(sandbox: DirSandbox) -> None:
    """The stat said 4000; 3000 more arrived: the read stops past the bound, not at the end."""
    put(f"{sandbox.root}/log", b"x" * 4000)
    sandbox.grow_by = 3000
    with pytest.raises(FileTooLarge) as caught:
        await sandbox.read_file("log")
    assert caught.value.limit == 4096
    assert 4096 < caught.value.size <= 4096 + CHUNK


async def test_an_announced_size_is_checked_before_the_body(sandbox: DirSandbox) -> None:
    """A transfer that announces its size (a part length, a tar header) fails with that size."""
    put(f"{sandbox.root}/log", b"x" * 4000)
    sandbox.grow_by = 3000
    sandbox.announce = True
    with pytest.raises(FileTooLarge) as caught:
        await sandbox.read_file("log")
    assert (caught.value.size, caught.value.limit) == (7000, 4096)


async def test_open_file_streams_any_size_in_the_apis_chunks(sandbox: DirSandbox) -> None:
    """No bound on a stream; the chunks are the download's."""
    data = bytes(range(256)) * 40
    put(f"{sandbox.root}/big.bin", data)
    async with sandbox.open_file("big.bin") as chunks:
        got = [chunk async for chunk in chunks]
    assert b"".join(got) == data
    assert max(map(len, got)) == CHUNK


async def test_the_path_policy_holds_for_reads_streams_and_writes(sandbox: DirSandbox) -> None:
    """Links are refused everywhere, a directory is no file, a missing one is missing."""
    root = Path(sandbox.root)
    (root / "d").mkdir()
    (root / "up").symlink_to("/")
    for path in ("up/etc/passwd", "up", "../x"):
        with pytest.raises(PathEscapeError):
            await sandbox.read_file(path)
        with pytest.raises(PathEscapeError):
            await sandbox.write_file(path, b"no")
    with pytest.raises(PathEscapeError):
        async with sandbox.open_file("up/etc/passwd"):
            pass
    with pytest.raises(PermanentError):
        await sandbox.read_file("d")
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("d/nope")
    with pytest.raises(FileNotFoundError):
        async with sandbox.open_file("nope"):
            pass
    assert sandbox.uploads == []


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (None, SandboxNotFound),
        (Presence.GONE, SandboxNotFound),
        (Presence.STOPPED, SandboxNotRunning),
        (Presence.RUNNING, ProviderUnavailable),
        (ConfigurationError("refused key"), ProviderUnavailable),
    ],
)
async def test_a_failed_file_call_asks_whether_the_sandbox_is_gone(
    sandbox: DirSandbox,
    view: TableView,
    answer: Presence | MangoError | None,
    expected: type[MangoError],
) -> None:
    """Gone is SandboxNotFound, paused is SandboxNotRunning; else (or if it cannot tell) the
    failure stands, for reads, streams and writes alike."""
    failure = ProviderUnavailable("the daemon hiccupped")
    if answer is None:
        del view.table["sb"]
    else:
        view.table["sb"] = answer
    sandbox.fail_with = failure
    for attempt in (
        sandbox.read_file("f"),
        sandbox.write_file("f", b"x"),
    ):
        with pytest.raises(expected) as caught:
            await attempt
        assert (caught.value is failure) is (expected is ProviderUnavailable)
    with pytest.raises(expected):
        async with sandbox.open_file("f"):
            pass
    assert view.asked == ["sb"] * 3


async def test_decided_errors_cost_no_control_plane_call(view: TableView) -> None:
    """A refused path, a file too large, a missing or a stopped sandbox says what happened."""
    for error in (
        PathEscapeError("link"),
        InvalidInput("bad"),
        FileTooLarge("big", size=2, limit=1),
        SandboxNotFound("gone"),
        SandboxNotRunning("paused"),
    ):
        assert await view.lost("sb", error) is error
    assert view.asked == []


async def test_a_refusal_is_asked_about(view: TableView) -> None:
    """A daemon may answer 4xx because its sandbox is paused: the control plane tells."""
    view.table["sb"] = Presence.STOPPED
    refused = RemoteRejected("execute: HTTP 400: sandbox is paused", status=400, excerpt="")
    assert isinstance(await view.lost("sb", refused), SandboxNotRunning)
    view.table["sb"] = Presence.RUNNING
    assert await view.lost("sb", refused) is refused
    assert view.asked == ["sb", "sb"]


async def test_gone_and_torn_down_read_the_same_answer(view: TableView) -> None:
    """Exec's question is the files' question: gone or not found is True, stopped is not."""
    view.table.update(a=Presence.GONE, b=Presence.STOPPED, c=Presence.RUNNING)
    assert await view.gone("a") is True
    assert await view.gone("missing") is True
    assert await view.gone("b") is False
    assert await view.torn_down("a", settle=0.05) is True
    assert await view.torn_down("c", settle=0.05) is False
    view.table["d"] = ProviderUnavailable("outage")
    assert await view.torn_down("d", settle=0.05) is False


async def test_an_unconfirmed_not_found_is_asked_before_it_means_gone(view: TableView) -> None:
    """confirm_missing: only the control plane's own answer turns a 404 into a loss."""
    answer = SandboxNotFound("timeout: HTTP 404")
    view.table.update(
        paused=Presence.STOPPED,
        running=Presence.RUNNING,
        dead=Presence.GONE,
        down=ProviderUnavailable("control plane down"),
    )
    assert isinstance(await view.confirm_missing("missing", answer), SandboxNotFound)
    assert isinstance(await view.confirm_missing("dead", answer), SandboxNotFound)
    paused = await view.confirm_missing("paused", answer)
    assert isinstance(paused, SandboxNotRunning)
    for sandbox_id in ("running", "down"):
        meaning = await view.confirm_missing(sandbox_id, answer)
        assert isinstance(meaning, ProviderUnavailable)
        assert not isinstance(meaning, SandboxNotFound | SandboxNotRunning)
        assert "timeout: HTTP 404" in str(meaning)  # the original failure is named
    assert view.asked == ["missing", "dead", "paused", "running", "down"]


async def test_destroy_cancels_running_commands_and_removes_the_sandbox(
    sandbox: DirSandbox, view: TableView
) -> None:
    """The tracker's handles are destroyed before the control-plane delete; twice is fine."""
    handle = view.tracker.register("sb")
    await sandbox.destroy()
    assert handle.destroyed
    assert view.removed == ["sb"]
    view.tracker.unregister("sb", handle)
    await sandbox.destroy()
    assert view.removed == ["sb", "sb"]


async def test_the_sandbox_surface_comes_from_ref_spec_policy_and_view(
    sandbox: DirSandbox,
) -> None:
    """ref, spec, root and destroy's id from the sandbox; the output cap from the view."""
    assert sandbox.ref == SandboxRef("dir", "sb")
    assert sandbox.sandbox_id == "sb"
    assert sandbox.spec == SandboxSpec()
    assert sandbox.root.endswith("/workspace")
    result = await sandbox.exec(Command(("a", "b", "c")))
    assert (result.exit_code, result.stdout, result.stdout_truncated) == (3, b"x" * 64, True)

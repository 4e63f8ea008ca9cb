"""Session outputs end to end on Docker, PostgreSQL and each Files store; hostile outputs.

What a publication did is read back from the rows and the store's own blob
listing, and every hostile case checks that nothing was published partly:
the outputs and blobs after the refusal are exactly those before it.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
from collections.abc import AsyncIterator
from hashlib import sha256
from pathlib import Path
from typing import Any

import attrs
import pytest

from mango.app import SandboxWrapper, SessionManager
from mango.app.outputs import observe_publications, publish_outputs
from mango.app.session_files import SessionFiles
from mango.domain import Command, OutputRejected, PreconditionFailed, SandboxSpec
from mango.domain.files import NewFile, file_blob_key, new_file_id
from mango.domain.outputs import StagedOutput, output_filename
from mango.postgres import PostgresBindingStore

pytestmark = pytest.mark.postgres

SPEC = SandboxSpec(timeout=120.0)


@pytest.fixture
def files(session_files: SessionFiles) -> SessionFiles:
    """The Session resources and outputs of the test (conftest's)."""
    return session_files


def sh(script: str, *args: str) -> Command:
    return Command(("sh", "-c", script, "sh", *args), timeout=120.0)


async def outputs(files: SessionFiles, session_id: str) -> dict[str, tuple[int | None, str]]:
    """``{path: (size, file id)}`` of the Session's published outputs."""
    return {
        row.output_path or "": (row.size, row.file_id)
        for row in await files.list_outputs(session_id)
    }


async def blobs(files: SessionFiles) -> set[str]:
    return {entry.key async for entry in files.files.blobs.scan("")}


async def read(files: SessionFiles, session_id: str, path: str) -> bytes:
    async with files.open_output(session_id, path) as chunks:
        return b"".join([chunk async for chunk in chunks])


async def test_publish_uploads_only_what_changed_and_drops_what_is_gone(
    docker_manager: SessionManager, files: SessionFiles, tmp_path: Path
) -> None:
    """Tool and shell writes are published; unchanged files are not uploaded again."""
    sid = "pub-1"
    await docker_manager.ensure_session(sid)
    sandbox = await docker_manager.acquire(sid, SPEC)
    await sandbox.write_file("/mnt/session/outputs/nested/tool.txt", b"tool")
    await sandbox.exec(sh("printf shell > /mnt/session/outputs/shell.txt"))
    report = await docker_manager.publish_outputs(sid, SPEC)
    assert report is not None
    assert (report.files, report.published, report.unchanged, report.removed) == (2, 2, 0, 0)
    first = await outputs(files, sid)
    assert {path: size for path, (size, _) in first.items()} == {
        "nested/tool.txt": 4,
        "shell.txt": 5,
    }
    assert await read(files, sid, "nested/tool.txt") == b"tool"
    stored_before = await blobs(files)

    again = await docker_manager.publish_outputs(sid, SPEC)
    assert again is not None
    assert (again.published, again.unchanged) == (0, 2)
    assert await outputs(files, sid) == first
    assert await blobs(files) == stored_before

    await sandbox.exec(sh("printf changed > /mnt/session/outputs/shell.txt"))
    await sandbox.exec(sh("rm /mnt/session/outputs/nested/tool.txt"))
    changed = await docker_manager.publish_outputs(sid, SPEC)
    assert changed is not None
    assert (changed.files, changed.published, changed.unchanged, changed.removed) == (1, 1, 0, 1)
    now = await outputs(files, sid)
    assert list(now) == ["shell.txt"]
    assert now["shell.txt"][1] != first["shell.txt"][1]
    assert await read(files, sid, "shell.txt") == b"changed"
    assert len(await blobs(files)) == 1
    target = tmp_path / "out.txt"
    await files.download_output(sid, "shell.txt", target)
    assert target.read_bytes() == b"changed"

    assert await docker_manager.delete_session(sid)
    assert await blobs(files) == set()


async def test_publishing_never_creates_a_sandbox(
    docker_manager: SessionManager, files: SessionFiles
) -> None:
    """A Session with no sandbox publishes nothing and gets no container."""
    await docker_manager.ensure_session("pub-none")
    assert await docker_manager.publish_outputs("pub-none", SPEC) is None
    assert await docker_manager.provider.find("pub-none") is None
    assert await outputs(files, "pub-none") == {}


HOSTILE = {
    "symlink": ("ln -s /etc/passwd link", "link", "symlink"),
    "hardlink": ("echo x > a && ln a hard", "hard", "hardlink"),
    "fifo": ("mkfifo pipe", "pipe", "FIFO"),
    "newline": ("touch \"$(printf 'new\\nline')\"", "'new\\nline'", "control character"),
    "invalid-utf8": ("touch \"$(printf 'bad\\377name')\"", "bad", "UTF-8"),
    "too-large": ("dd if=/dev/zero of=big bs=1 count=0 seek=501M 2>/dev/null", "big", "bytes"),
    "too-many": (
        "mkdir many && cd many && seq 1 100000 | xargs touch && ls | wc -l",
        "many/",
        "one file more than the 500",
    ),
}


@pytest.mark.parametrize("store_kind", ["fs"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_hostile_outputs_fail_naming_the_path_and_publish_nothing(
    docker_manager: SessionManager, files: SessionFiles, case: str
) -> None:
    """A link, FIFO, bad name, 501 MiB file or 100 000 files: OutputRejected, nothing changed."""
    script, path, reason = HOSTILE[case]
    sid = f"hostile-{case}"
    await docker_manager.ensure_session(sid)
    sandbox = await docker_manager.acquire(sid, SPEC)
    await sandbox.exec(sh("echo kept > /mnt/session/outputs/keep.txt"))
    await docker_manager.publish_outputs(sid, SPEC)
    before, stored = await outputs(files, sid), await blobs(files)
    made = await sandbox.exec(sh(f"cd /mnt/session/outputs && {script}"))
    assert made.exit_code == 0, made
    await sandbox.exec(sh("echo new > /mnt/session/outputs/zz-new.txt"))
    with pytest.raises(OutputRejected, match=reason) as refused:
        await docker_manager.publish_outputs(sid, SPEC)
    assert path in (refused.value.path or ""), refused.value
    assert refused.value.permanent
    assert await outputs(files, sid) == before
    assert await blobs(files) == stored


@attrs.define
class GrowsBetweenPasses(SandboxWrapper):
    """The real sandbox, whose ``grow`` file gains a line each time its outputs are exported."""

    def resource_lock(self, *, exclusive: bool = False) -> Any:
        return self.inner.resource_lock(exclusive=exclusive)  # type: ignore[attr-defined]

    @contextlib.asynccontextmanager
    async def open_session_outputs(self) -> AsyncIterator[AsyncIterator[bytes]]:
        result = await self.inner.exec(sh("echo more >> /mnt/session/outputs/grow"))
        assert result.exit_code == 0
        async with self.inner.open_session_outputs() as chunks:  # type: ignore[attr-defined]
            yield chunks


@pytest.mark.parametrize("store_kind", ["fs"])
async def test_a_file_growing_during_the_export_is_detected(
    docker_manager: SessionManager, files: SessionFiles
) -> None:
    """The second pass sees another size: OutputRejected naming it, nothing published."""
    sid = "grows"
    await docker_manager.ensure_session(sid)
    bound = (await docker_manager.acquire(sid, SPEC)).ref
    raw = await docker_manager.provider.attach(sid, bound, SPEC)  # the provider's own client
    growing = GrowsBetweenPasses(raw)
    with pytest.raises(OutputRejected, match="changed size") as refused:
        await publish_outputs(files, sid, growing, "docker")
    assert refused.value.path == "grow"
    assert await outputs(files, sid) == {}
    assert await blobs(files) == set()


@attrs.define
class GrowsLastInPassTwo(SandboxWrapper):
    """The real sandbox; its second export grows ``grow`` and lists it after every other entry.

    The bytes are the daemon's own archive, re-ordered so that the new files
    before ``grow`` are uploaded before the change is seen, whatever order
    the daemon walks the directory in.
    """

    exports: int = 0

    def resource_lock(self, *, exclusive: bool = False) -> Any:
        return self.inner.resource_lock(exclusive=exclusive)  # type: ignore[attr-defined]

    @contextlib.asynccontextmanager
    async def open_session_outputs(self) -> AsyncIterator[AsyncIterator[bytes]]:
        self.exports += 1
        if self.exports == 1:
            async with self.inner.open_session_outputs() as chunks:  # type: ignore[attr-defined]
                yield chunks
            return
        result = await self.inner.exec(sh("echo more >> /mnt/session/outputs/grow"))
        assert result.exit_code == 0
        async with self.inner.open_session_outputs() as chunks:  # type: ignore[attr-defined]
            archive = b"".join([chunk async for chunk in chunks])
        rewritten = io.BytesIO()
        with (
            tarfile.open(fileobj=io.BytesIO(archive)) as source,
            tarfile.open(fileobj=rewritten, mode="w", format=tarfile.PAX_FORMAT) as target,
        ):
            members = sorted(source.getmembers(), key=lambda m: m.name.endswith("/grow"))
            for member in members:
                target.addfile(member, source.extractfile(member) if member.isfile() else None)

        async def one() -> AsyncIterator[bytes]:
            yield rewritten.getvalue()

        yield one()


@pytest.mark.parametrize("store_kind", ["fs"])
async def test_a_change_seen_late_in_the_second_pass_publishes_nothing(
    docker_manager: SessionManager, files: SessionFiles
) -> None:
    """New files already uploaded and a removal are undone with the refusal: all or nothing."""
    sid = "grows-late"
    await docker_manager.ensure_session(sid)
    sandbox = await docker_manager.acquire(sid, SPEC)
    await sandbox.exec(sh("cd /mnt/session/outputs && echo a > old.txt && echo b > grow"))
    await docker_manager.publish_outputs(sid, SPEC)
    before, stored = await outputs(files, sid), await blobs(files)
    assert set(before) == {"old.txt", "grow"}
    await sandbox.exec(
        sh("cd /mnt/session/outputs && rm old.txt && for i in 1 2 3; do echo $i > new-$i.txt; done")
    )
    uploaded: list[str] = []
    undo = observe_publications(lambda _step, path: uploaded.append(path))
    raw = await docker_manager.provider.attach(sid, sandbox.ref, SPEC)
    try:
        with pytest.raises(OutputRejected, match="changed size") as refused:
            await publish_outputs(files, sid, GrowsLastInPassTwo(raw), "docker")
    finally:
        undo()
    assert refused.value.path == "grow"
    assert sorted(uploaded) == ["new-1.txt", "new-2.txt", "new-3.txt"]  # staged, then undone
    assert await outputs(files, sid) == before
    assert await blobs(files) == stored


async def _staged(files: SessionFiles, session_id: str, path: str, data: bytes) -> StagedOutput:
    """An output uploaded in full, its row still ``uploading`` (as pass 2 leaves it)."""
    store = files.files
    file_id = new_file_id()
    key = file_blob_key(store.namespace, file_id)
    new = NewFile(file_id, output_filename(path), "text/plain", key, session_id, path)
    await store.catalog.begin_upload(new)

    async def body() -> AsyncIterator[bytes]:
        yield data

    info = await store.blobs.put(key, body(), size=len(data), sha256=sha256(data).hexdigest())
    return StagedOutput(file_id, info)


@pytest.mark.parametrize("store_kind", ["fs"])
async def test_a_commit_changes_nothing_unless_it_can_change_everything(
    store: PostgresBindingStore, files: SessionFiles
) -> None:
    """Too many paths, or one staged upload given up meanwhile: refused, no row became ready."""
    sid = "commit-1"
    await store.ensure_session(sid)
    first = await _staged(files, sid, "a.txt", b"a")
    second = await _staged(files, sid, "b.txt", b"b")
    with pytest.raises(OutputRejected, match="more than the 1 a Session may have") as refused:
        await files.outputs.commit_snapshot(sid, ["a.txt", "b.txt"], [first, second], limit=1)
    assert refused.value.path == "b.txt"
    await files.files.catalog.abandon_upload(second.file_id)  # as the reconciler gives it up
    with pytest.raises(PreconditionFailed, match="abandoned before it was published"):
        await files.outputs.commit_snapshot(sid, ["a.txt", "b.txt"], [first, second])
    assert await outputs(files, sid) == {}
    done = await files.outputs.commit_snapshot(sid, ["a.txt"], [first])
    assert [row.output_path for row in done.ready] == ["a.txt"]
    assert set(await outputs(files, sid)) == {"a.txt"}

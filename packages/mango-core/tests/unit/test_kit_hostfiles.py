"""The kit's host-side File Resources: atomic verified imports, markers, removal, the lock."""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mango.domain.errors import ContentMismatch, InvalidInput, ProviderUnavailable
from mango.domain.resources import UPLOADS_ROOT, FileResourceMount
from mango.provider.hostfiles import IMPORT_PREFIX, HostFileResources, observe_imports

FIRST = "res-" + "1" * 32
SECOND = "res-" + "2" * 32
PATH = f"{UPLOADS_ROOT}/nested/data.txt"


def mount(data: bytes, identity: str = FIRST, path: str = PATH) -> FileResourceMount:
    return FileResourceMount(identity, path, len(data), hashlib.sha256(data).hexdigest())


async def stream(*parts: bytes, fail: bool = False) -> AsyncIterator[bytes]:
    for part in parts:
        yield part
    if fail:
        raise OSError("the source broke off")


@pytest.fixture
def resources(tmp_path: Path) -> HostFileResources:
    (tmp_path / "files").mkdir(mode=0o755)
    (tmp_path / "state").mkdir(mode=0o700)
    return HostFileResources(tmp_path / "files", tmp_path / "state", lock_timeout=2.0)


def visible(resources: HostFileResources) -> dict[str, bytes]:
    """Every file below the files root, as a sandbox would see it."""
    return {
        str(path.relative_to(resources.files_root)): path.read_bytes()
        for path in resources.files_root.rglob("*")
        if path.is_file()
    }


async def test_an_import_is_read_only_marked_and_found(resources: HostFileResources) -> None:
    """The copy is 0444 with its parents 0755, and ``has`` finds exactly this identity."""
    data = b"first content\n"
    assert not await resources.has(mount(data))
    await resources.import_(mount(data), stream(data[:4], data[4:]))
    target = resources.files_root / "nested" / "data.txt"
    assert target.read_bytes() == data
    assert stat.S_IMODE(target.stat().st_mode) == 0o444
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o755
    assert await resources.has(mount(data))
    assert not await resources.has(mount(data, SECOND))
    assert not await resources.has(mount(data + b"!"))
    assert visible(resources) == {"nested/data.txt": data}


@pytest.mark.parametrize(
    ("parts", "fail", "error"),
    [
        ((b"partial",), True, OSError),
        ((b"wrong bytes!!",), False, ContentMismatch),
        ((b"short",), False, ContentMismatch),
        ((b"replacement content", b" and more"), False, ContentMismatch),
    ],
)
async def test_a_failed_replacement_leaves_the_previous_copy_and_no_leftover(
    resources: HostFileResources, parts: tuple[bytes, ...], fail: bool, error: type[Exception]
) -> None:
    """Broken reader, other digest, too few or too many bytes: the old copy stays, whole."""
    old = b"first content\n"
    await resources.import_(mount(old), stream(old))
    new = b"replacement content"
    with pytest.raises(error):
        await resources.import_(mount(new, SECOND), stream(*parts, fail=fail))
    assert visible(resources) == {"nested/data.txt": old}
    assert await resources.has(mount(old))


async def test_removal_respects_a_newer_identity_and_is_idempotent(
    resources: HostFileResources,
) -> None:
    """A stale identity's removal keeps the newer copy; removing twice is fine; parents pruned."""
    old, new = b"old", b"newer"
    await resources.import_(mount(old), stream(old))
    await resources.import_(mount(new, SECOND), stream(new))
    await resources.remove(PATH, FIRST)
    assert visible(resources) == {"nested/data.txt": new}
    assert await resources.has(mount(new, SECOND))
    await resources.remove(PATH, SECOND)
    await resources.remove(PATH, SECOND)
    assert visible(resources) == {}
    assert not (resources.files_root / "nested").exists()
    assert not await resources.has(mount(new, SECOND))
    assert list(resources.state_root.iterdir()) == [resources.state_root / ".lock"]


async def test_what_a_crash_leaves_is_finished_by_the_next_import_or_removal(
    resources: HostFileResources, tmp_path: Path
) -> None:
    """A crash after the temporary file (or after the rename) is repaired on the next call.

    The observer raises where a SIGKILL would stop the process, so the state is
    exactly what a crash at that step leaves (no cleanup runs for a kill).
    """
    data = b"crash me"

    class Crash(BaseException):
        pass

    def at(step: str) -> object:
        def observer(seen: str, _target: Path) -> None:
            if seen == step:
                raise Crash

        return observe_imports(observer)  # type: ignore[arg-type]

    undo = at("written")
    try:
        with pytest.raises(Crash):
            await resources.import_(mount(data), stream(data))
    finally:
        undo()  # type: ignore[operator]
    # BaseException skips nothing here: the temporary file is unlinked in finally, so
    # leave one behind by hand, as a SIGKILL would.
    leftover = (
        resources.files_root
        / "nested"
        / f"{IMPORT_PREFIX}{hashlib.sha256(PATH.encode()).hexdigest()[:16]}-x"
    )
    leftover.write_bytes(data[:3])
    assert not await resources.has(mount(data))
    await resources.import_(mount(data), stream(data))
    assert visible(resources) == {"nested/data.txt": data}

    undo = at("renamed")
    try:
        with pytest.raises(Crash):
            await resources.import_(mount(b"again", SECOND), stream(b"again"))
    finally:
        undo()  # type: ignore[operator]
    assert not await resources.has(mount(b"again", SECOND))  # marker still names FIRST
    await resources.import_(mount(b"again", SECOND), stream(b"again"))
    assert await resources.has(mount(b"again", SECOND))
    leftover.write_bytes(b"stale")
    await resources.remove(PATH, SECOND)
    assert visible(resources) == {}


async def test_nested_resources_are_refused(resources: HostFileResources) -> None:
    """A file where a directory of another resource would go (or the reverse) is InvalidInput."""
    await resources.import_(mount(b"a", path=f"{UPLOADS_ROOT}/a"), stream(b"a"))
    with pytest.raises(InvalidInput, match="nested"):
        await resources.import_(mount(b"b", SECOND, f"{UPLOADS_ROOT}/a/b"), stream(b"b"))
    await resources.import_(mount(b"c", SECOND, f"{UPLOADS_ROOT}/d/c"), stream(b"c"))
    with pytest.raises(InvalidInput, match="nested"):
        await resources.import_(mount(b"d", FIRST, f"{UPLOADS_ROOT}/d"), stream(b"d"))


async def test_shared_holders_exclude_only_exclusive_ones(resources: HostFileResources) -> None:
    """Two shared holders at once; an import waits for them and gives up past its bound."""
    async with resources.lock(exclusive=False), resources.lock(exclusive=False):
        with pytest.raises(ProviderUnavailable, match="held"):
            await resources.import_(mount(b"x"), stream(b"x"))
    await resources.import_(mount(b"x"), stream(b"x"))
    lock_file = resources.state_root / ".lock"
    async with resources.lock(exclusive=True):
        for mode in (fcntl.LOCK_SH, fcntl.LOCK_EX):
            fd = os.open(lock_file, os.O_RDWR)
            try:
                with pytest.raises(BlockingIOError):
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
            finally:
                os.close(fd)
    assert await resources.has(mount(b"x"))


async def test_the_umask_never_narrows_the_modes(resources: HostFileResources) -> None:
    """Under umask 077 the copy is still 0444 and its directories 0755."""
    previous = os.umask(0o077)
    try:
        await resources.import_(mount(b"m", path=f"{UPLOADS_ROOT}/u/m"), stream(b"m"))
    finally:
        os.umask(previous)
    assert stat.S_IMODE((resources.files_root / "u").stat().st_mode) == 0o755
    assert stat.S_IMODE((resources.files_root / "u" / "m").stat().st_mode) == 0o444

"""Removing a local sandbox's files without ever leaving them: no mount point, no link is crossed.

Commands of the local provider run on the host, as the worker's user. As
root, a command can bind-mount a host directory into its workspace (``mount
--bind /srv/data mnt``); a removal that walked into it would erase the host's
data, then fail on the busy mount point and leave the Session stuck. So
:func:`remove_tree`:

* refuses a tree that holds a mount point, before it removes anything: the
  mount table (``/proc/self/mountinfo``) lists every mount at or below the
  path, also a bind mount of a directory of the same file system, which no
  ``st_dev`` comparison can see. :class:`~mango.domain.errors.RemovalBlocked`
  names the mount points and the ``umount`` command that detaches them;
  nothing is unmounted on the operator's behalf (a mount is someone's
  decision, and mango may not have the privilege);
* walks the tree by directory descriptors (``openat`` with ``O_NOFOLLOW``,
  ``unlinkat``), so a link is removed as a link and a directory swapped for
  one mid-walk is never followed, and it refuses any directory on another
  device than the tree's root (a mount the table did not show, one made
  while the walk ran) and a directory the kernel reports busy;
* reports a file the kernel will not let go (``chattr +i`` immutable or
  ``+a`` append-only, which stop even root and ``--force``) as
  :class:`~mango.domain.errors.RemovalBlocked` naming it and ``chattr -i``;
* gives the owner's access back to directories a command made unreadable or
  unwritable (``chmod 000``), so a non-root worker can always remove its own
  files;
* walks iteratively, so a hostile depth is not a ``RecursionError``.

Whatever blocked a removal stays where it was; the next removal (deleting
the Session again, the reconciler) finishes once it is gone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shlex
import stat
import struct
from collections.abc import Iterator
from pathlib import Path

import attrs

from mango.domain.errors import RemovalBlocked

__all__ = ["MOUNTINFO", "explain", "mounts_within", "remove_tree"]

MOUNTINFO = Path("/proc/self/mountinfo")

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_OPEN_PATH = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY

# linux/fs.h: FS_IOC_GETFLAGS is _IOR('f', 1, long); the flags that stop an unlink.
_FS_IOC_GETFLAGS = (2 << 30) | (struct.calcsize("l") << 16) | (ord("f") << 8) | 1
_FS_IMMUTABLE_FL = 0x10
_FS_APPEND_FL = 0x20
_OCTAL_ESCAPE = re.compile(rb"\\([0-7]{3})")


def mounts_within(path: Path) -> list[Path]:
    """Every mount point at or below ``path``, deepest first; empty if the table is unreadable.

    ``path`` must be canonical (no symlink in it), as the mount table is.
    """
    try:
        table = MOUNTINFO.read_bytes()
    except OSError:
        return []  # no /proc: the walk's device check and EBUSY still refuse to cross
    top = os.fsencode(path)
    found = set()
    for line in table.splitlines():
        fields = line.split(b" ")
        if len(fields) < 5:
            continue
        point = _OCTAL_ESCAPE.sub(lambda match: bytes([int(match[1], 8)]), fields[4])
        if point == top or point.startswith(top.rstrip(b"/") + b"/"):
            found.add(point)
    return [Path(os.fsdecode(point)) for point in sorted(found, key=len, reverse=True)]


def _mounted(points: list[Path], *, untouched: bool = True) -> RemovalBlocked:
    listed = ", ".join(str(point) for point in points)
    are = "is a mount point" if len(points) == 1 else "are mount points"
    command = "umount " + " ".join(shlex.quote(str(point)) for point in points)
    return RemovalBlocked(
        f"cannot remove the sandbox: {listed} {are} inside it, and removing through a "
        "mount would delete the mounted files"
        + (" (nothing below it was touched)" if untouched else ""),
        path=str(points[0]),
        hint=f"detach it with '{command}' (as the user who mounted it), then delete again",
    )


def _other_device(path: Path) -> RemovalBlocked:
    return RemovalBlocked(
        f"cannot remove the sandbox: {path} is on another file system (a mount point); "
        "nothing was removed below it",
        path=str(path),
        hint=f"detach it with 'umount {shlex.quote(str(path))}', then delete again",
    )


def _flags(fd: int) -> int | None:
    try:
        raw = fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(struct.calcsize("l")))
    except OSError:
        return None  # the file system keeps no such flags
    return int(struct.unpack("l", raw)[0])


def _entry_flags(dir_fd: int, name: str) -> int | None:
    # Regular files and directories only: opening a device node could act on the device.
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            return None
        fd = os.open(name, _OPEN_FILE, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return _flags(fd)
    finally:
        os.close(fd)


def _pinned(directory: Path, dir_fd: int, name: str, exc: OSError) -> RemovalBlocked | None:
    """An immutable or append-only flag on ``name`` or its directory, explained; else None."""
    for path, flags in (
        (directory, _flags(dir_fd)),
        (directory / name, _entry_flags(dir_fd, name)),
    ):
        if flags is None:
            continue
        letter = "i" if flags & _FS_IMMUTABLE_FL else "a" if flags & _FS_APPEND_FL else None
        if letter is not None:
            kind = "immutable" if letter == "i" else "append-only"
            what = "anything in it" if path == directory else "it"
            return RemovalBlocked(
                f"cannot remove the sandbox: {path} is {kind} (chattr +{letter}), so not even "
                f"root may delete {what}: {exc.strerror}",
                path=str(path),
                hint=f"clear the flag with 'chattr -{letter} {shlex.quote(str(path))}' "
                "(as root), then delete again",
            )
    return None


def _give_access(dir_fd: int) -> None:
    # A command may leave its directories without write or search permission.
    # As their owner we may give it back; root needs none of this.
    with contextlib.suppress(OSError):
        if os.fstat(dir_fd).st_uid == os.geteuid():
            os.fchmod(dir_fd, 0o700)


def _open_directory(dir_fd: int, name: str) -> int:
    """Open the directory ``name`` in ``dir_fd`` without following a link; unlock it if needed."""
    try:
        return os.open(name, _OPEN_DIR, dir_fd=dir_fd)
    except PermissionError:
        pass
    # Unreadable (chmod 000): chmod it through an O_PATH descriptor, never by name,
    # so a link swapped in meanwhile cannot redirect the chmod.
    handle = os.open(name, _OPEN_PATH, dir_fd=dir_fd)
    try:
        with contextlib.suppress(OSError):
            if os.fstat(handle).st_uid == os.geteuid():
                Path(f"/proc/self/fd/{handle}").chmod(0o700)
    finally:
        os.close(handle)
    return os.open(name, _OPEN_DIR, dir_fd=dir_fd)


def _remove_entry(directory: Path, dir_fd: int, name: str, *, is_dir: bool) -> None:
    """``unlinkat`` (``rmdir`` for a directory), retrying once with the owner's access back."""
    for attempt in range(2):
        try:
            if is_dir:
                os.rmdir(name, dir_fd=dir_fd)
            else:
                os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                raise _mounted([directory / name], untouched=False) from exc
            if exc.errno == errno.EPERM:
                pinned = _pinned(directory, dir_fd, name, exc)
                if pinned is not None:
                    raise pinned from exc
            if exc.errno in (errno.EACCES, errno.EPERM) and attempt == 0:
                _give_access(dir_fd)
                continue
            raise
        return


_OPEN_LEVELS = 64
"""Directories of the walk kept open at once; deeper ones are reopened through ``..``."""


def _names(dir_fd: int) -> Iterator[str]:
    # By descriptor: os.listdir accepts one, Path.iterdir does not.
    return iter(os.listdir(dir_fd))


@attrs.define
class _Level:
    """One directory of the walk: where it is, its descriptor (None while closed), what is left."""

    path: Path
    fd: int | None
    identity: tuple[int, int]
    names: Iterator[str]


@attrs.define
class _Walk:
    """Empties one directory tree by descriptors, depth first, never leaving its device."""

    device: int
    levels: list[_Level]

    @classmethod
    def of(cls, path: Path, top_fd: int) -> _Walk:
        """A walk of the directory open as ``top_fd`` (``path``); the caller closes ``top_fd``."""
        top = os.fstat(top_fd)
        return cls(top.st_dev, [_Level(path, top_fd, (top.st_dev, top.st_ino), _names(top_fd))])

    def run(self) -> None:
        """Remove everything below the top; close every descriptor it opened, whatever happens."""
        try:
            while self.levels:
                level = self.levels[-1]
                name = next(level.names, None)
                if name is None:
                    self._leave(level)
                else:
                    self._visit(level, _open_fd(level), name)
        finally:
            for level in self.levels[1:]:
                if level.fd is not None:
                    os.close(level.fd)

    def _visit(self, level: _Level, dir_fd: int, name: str) -> None:
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(info.st_mode):
            _remove_entry(level.path, dir_fd, name, is_dir=False)
            return
        if info.st_dev != self.device:
            raise _other_device(level.path / name)
        try:
            child = _open_directory(dir_fd, name)
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            # Swapped for a file or a link since the stat: remove that instead.
            _remove_entry(level.path, dir_fd, name, is_dir=False)
            return
        opened = os.fstat(child)
        if opened.st_dev != self.device:  # swapped for a mount point since the stat
            os.close(child)
            raise _other_device(level.path / name)
        identity = (opened.st_dev, opened.st_ino)
        self.levels.append(_Level(level.path / name, child, identity, _names(child)))
        if len(self.levels) > _OPEN_LEVELS + 1:
            # Bound the descriptors a hostile depth costs (the top's stays open).
            far = self.levels[-_OPEN_LEVELS - 1]
            if far.fd is not None:
                os.close(far.fd)
                far.fd = None

    def _leave(self, level: _Level) -> None:
        """``level`` is empty: remove it from its parent (reopened through ``..`` if closed)."""
        self.levels.pop()
        if not self.levels:
            return
        parent = self.levels[-1]
        child_fd = _open_fd(level)
        if parent.fd is None:
            parent.fd = _reopen_parent(child_fd, parent)
        os.close(child_fd)
        level.fd = None
        _remove_entry(parent.path, parent.fd, level.path.name, is_dir=True)


def _open_fd(level: _Level) -> int:
    if level.fd is None:  # pragma: no cover - the deepest levels are always open
        raise AssertionError(f"the walk's directory {level.path} is closed")
    return level.fd


def _reopen_parent(child_fd: int, parent: _Level) -> int:
    """Open ``parent`` again through ``..`` of its child; refuse if it is another directory now."""
    fd = os.open("..", _OPEN_DIR, dir_fd=child_fd)
    info = os.fstat(fd)
    if (info.st_dev, info.st_ino) != parent.identity:
        os.close(fd)
        raise OSError(errno.ESTALE, "a directory moved while it was being removed", parent.path)
    return fd


def explain(path: Path, exc: OSError) -> RemovalBlocked | None:
    """Why renaming or removing ``path`` failed with ``exc``, if a mount or a flag pinned it."""
    if exc.errno == errno.EBUSY or path in mounts_within(path):
        return _mounted([path], untouched=True)
    if exc.errno != errno.EPERM:
        return None
    try:
        parent_fd = os.open(path.parent, _OPEN_DIR)
    except OSError:
        return None
    try:
        return _pinned(path.parent, parent_fd, path.name, exc)
    finally:
        os.close(parent_fd)


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything below it, never crossing a mount point or a link.

    A link or a file at ``path`` is removed as such. Idempotent: nothing there
    is success. Raises :class:`RemovalBlocked` (nothing below a mount point or
    past a pinned file is touched) and :class:`OSError` for anything else.
    """
    mounted = mounts_within(path)
    if mounted:
        raise _mounted(mounted)
    try:
        parent_fd = os.open(path.parent, _OPEN_DIR)
    except (FileNotFoundError, NotADirectoryError):
        return  # no parent directory, so nothing there
    try:
        try:
            info = os.stat(path.name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(info.st_mode):
            _remove_entry(path.parent, parent_fd, path.name, is_dir=False)
            return
        if info.st_dev != os.fstat(parent_fd).st_dev:
            raise _other_device(path)
        top_fd = _open_directory(parent_fd, path.name)
        try:
            _Walk.of(path, top_fd).run()
        finally:
            os.close(top_fd)
        _remove_entry(path.parent, parent_fd, path.name, is_dir=True)
    finally:
        os.close(parent_fd)

"""Session outputs in the pure core: what may be published, and the rows that record it.

A sandbox's commands and tools write below :data:`~mango.domain.resources.OUTPUTS_ROOT`;
publishing turns that directory into stored files of the Session (rows of
``mango_files`` with the Session and an ``output_path``). What may be
published (:func:`output_path`, :data:`MAX_OUTPUT_FILES`,
:data:`MAX_OUTPUT_FILE_BYTES`): regular files and directories only, names of
valid UTF-8 with no control character, no absolute path and no ``..``, at
most 1024 bytes (255 per component), at most 500 files of at most 500 MiB
each, no name twice. Anything else fails the whole publication with
:class:`~mango.domain.errors.OutputRejected` naming the entry.

:class:`OutputCatalog` keeps the rows consistent: a snapshot's publication
replaces the Session's previous outputs path by path (an unchanged file keeps
its row, a removed file's row goes), and at most one ``ready`` row exists per
path.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Protocol

import attrs

from mango.domain.archives import EntryType, TarReader
from mango.domain.errors import OutputRejected
from mango.domain.files import BlobInfo, StoredFile
from mango.domain.paths import MAX_COMPONENT_BYTES, MAX_PATH_BYTES

__all__ = [
    "MAX_OUTPUT_FILES",
    "MAX_OUTPUT_FILE_BYTES",
    "OutputCatalog",
    "OutputCommit",
    "OutputEntry",
    "OutputFile",
    "StagedOutput",
    "output_filename",
    "output_path",
    "printable_name",
    "read_outputs",
]

MAX_OUTPUT_FILES = 500
"""Files one Session may publish."""
MAX_OUTPUT_FILE_BYTES = 500 * 1024 * 1024
"""Largest file one Session may publish (500 MiB)."""

_UNSAFE_IN_FILENAMES = frozenset('<>:"|?*\\')
_FILENAME_BYTES = 255


def _control(char: str) -> bool:
    code = ord(char)
    return code < 0x20 or 0x7F <= code < 0xA0


def printable_name(name: str) -> str:
    """``name`` as messages and error fields show it: as it is if clean, else ``repr``-quoted."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return repr(name)
    return repr(name) if any(_control(char) for char in name) else name


def _reject(name: str, why: str) -> OutputRejected:
    while name.startswith("./"):
        name = name[2:]
    return OutputRejected(
        f"cannot publish the Session's outputs: {name!r} {why}",
        path=printable_name(name),
        hint="change or remove it in /mnt/session/outputs, then publish again",
    )


def output_path(name: str) -> str | None:
    """The output path an archive entry named ``name`` publishes to; None for the root.

    Leading ``./`` and a trailing ``/`` are dropped, ``.`` components and
    repeated slashes folded. Raises :class:`OutputRejected` naming the entry
    for a name that is not UTF-8, holds a control character, is absolute,
    has a ``..`` component, or is too long.
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise _reject(name, "is not valid UTF-8") from None
    if any(_control(char) for char in name):
        raise _reject(name, "contains a control character")
    if name.startswith("/"):
        raise _reject(name, "is an absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise _reject(name, "climbs out of the outputs directory ('..')")
    if not parts:
        return None
    for part in parts:
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            raise _reject(name, f"has a component longer than {MAX_COMPONENT_BYTES} bytes")
    path = "/".join(parts)
    if len(path.encode("utf-8")) > MAX_PATH_BYTES:
        raise _reject(name, f"is longer than {MAX_PATH_BYTES} bytes")
    return path


def output_filename(path: str) -> str:
    """The stored file's name for output ``path``: ``/`` -> ``__``, unsafe characters -> ``_``.

    At most 255 bytes: a longer name keeps its start and ends with ``-`` and
    the first 16 hex digits of the path's SHA-256, so names stay distinct.
    """
    name = "".join(
        "_" if char in _UNSAFE_IN_FILENAMES or _control(char) else char
        for char in path.replace("/", "__")
    )
    if name in {".", ".."}:
        name = name.replace(".", "_")
    if len(name.encode("utf-8")) <= _FILENAME_BYTES:
        return name
    suffix = "-" + hashlib.sha256(path.encode("utf-8")).hexdigest()[:16]
    budget = _FILENAME_BYTES - len(suffix)
    head = name.encode("utf-8")[:budget].decode("utf-8", "ignore")
    return head + suffix


@attrs.frozen
class OutputFile:
    """One regular file of an outputs archive, as :func:`read_outputs` hands it on."""

    path: str
    size: int
    body: AsyncIterator[bytes] = attrs.field(repr=False)
    """The file's bytes; read them before asking for the next file (or they are skipped)."""


async def read_outputs(
    chunks: AsyncIterator[bytes],
    *,
    max_files: int = MAX_OUTPUT_FILES,
    max_file_bytes: int = MAX_OUTPUT_FILE_BYTES,
) -> AsyncGenerator[OutputFile, None]:
    """The regular files of an outputs archive (a tar stream), checked as they come.

    Directories are passed over. Anything else fails with
    :class:`OutputRejected` naming the entry, before its body is read: a
    symlink, hardlink, device, FIFO or other special entry, a name
    :func:`output_path` refuses, a name seen before, the file past
    ``max_files``, a file larger than ``max_file_bytes``. A malformed or cut
    archive is :class:`~mango.domain.errors.ProviderUnavailable`.
    """
    reader = TarReader(chunks, "the Session's outputs archive")
    seen: set[str] = set()
    files = 0
    while (entry := await reader.next()) is not None:
        path = output_path(entry.name)
        if path is None:
            if entry.type is not EntryType.DIRECTORY:
                raise _reject(entry.name, f"is a {entry.type.value} at the root")
            continue
        if path in seen:
            raise _reject(entry.name, "appears twice in the archive")
        seen.add(path)
        if entry.type is EntryType.DIRECTORY:
            continue
        if entry.type is not EntryType.REGULAR:
            target = f" (to {printable_name(entry.linkname)!r})" if entry.linkname else ""
            raise _reject(
                entry.name, f"is a {entry.type.value}{target}: only regular files are published"
            )
        files += 1
        if files > max_files:
            raise _reject(
                entry.name, f"is one file more than the {max_files} a Session may publish"
            )
        if entry.size > max_file_bytes:
            raise _reject(
                entry.name,
                f"has {entry.size} bytes, more than the {max_file_bytes} a published file may have",
            )
        yield OutputFile(path, entry.size, reader.body())


@attrs.frozen
class OutputEntry:
    """One file of an outputs snapshot: its path, size and SHA-256."""

    path: str
    size: int
    sha256: str


@attrs.frozen
class StagedOutput:
    """An output uploaded in full and verified, its row still ``uploading``."""

    file_id: str
    info: BlobInfo


@attrs.frozen
class OutputCommit:
    """A committed publication: the new ``ready`` rows and the rows that became garbage.

    ``garbage`` holds the rows moved to ``deleting`` (a path the snapshot no
    longer has, a replaced row, a staged upload whose content was already
    ready at its path) and any ``deleting`` rows an earlier publication left.
    """

    ready: tuple[StoredFile, ...] = ()
    garbage: tuple[StoredFile, ...] = ()


class OutputCatalog(Protocol):
    """The output rows of Sessions (``mango_files`` rows with a Session and a path).

    Every change locks the Session's row first, so two publications of one
    Session, or a publication and the Session's deletion, never interleave.
    """

    async def list_outputs(self, session_id: str) -> Sequence[StoredFile]:
        """The Session's ``ready`` outputs, by path."""
        ...

    async def find_output(self, session_id: str, path: str) -> StoredFile | None:
        """The Session's ``ready`` output at ``path``, or None."""
        ...

    async def commit_snapshot(
        self,
        session_id: str,
        paths: Sequence[str],
        staged: Sequence[StagedOutput],
        *,
        limit: int = MAX_OUTPUT_FILES,
    ) -> OutputCommit:
        """Make ``paths`` the Session's outputs, all in one transaction, or change nothing.

        Every ``staged`` upload becomes the ready row of its path (the row it
        replaces goes to ``deleting``; the same size and digest as the ready
        row there: the staged row goes to ``deleting`` instead), and every
        ready output whose path is not in ``paths`` goes to ``deleting``.
        More than ``limit`` paths is :class:`OutputRejected`; a staged row
        no longer ``uploading`` (given up by the reconciler) or of another
        Session is :class:`~mango.domain.errors.PreconditionFailed`; a
        fenced Session :class:`~mango.domain.errors.SessionDeleting`, an
        absent one :class:`~mango.domain.errors.InvalidInput`.
        """
        ...

    async def drop_session_outputs(self, session_id: str) -> Sequence[StoredFile]:
        """Move every file of the Session to ``deleting`` and return them (its deletion)."""
        ...

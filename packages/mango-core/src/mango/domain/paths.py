"""Path rules for workspace-relative paths, as pure functions.

A workspace path names a file below a sandbox's root. The rules are the same
for every provider, so a path that one backend accepts no other refuses:

* it is relative: a leading ``/`` is refused (:class:`PathEscapeError`);
* no component is ``..`` (:class:`PathEscapeError`), even one that would stay
  inside, so the rule can be checked without knowing the tree;
* ``.`` components and repeated slashes are folded away;
* a file path that ends in ``/`` (or ``/.``) names a directory: refused, never
  folded into the file ``notes.d`` for ``notes.d/``;
* no NUL, no control character (U+0000-U+001F, U+007F), no backslash;
* it is valid Unicode that encodes to UTF-8: a string holding surrogate escapes
  (what :func:`os.fsdecode` makes of undecodable bytes) is refused;
* each component is at most :data:`MAX_COMPONENT_BYTES` UTF-8 bytes and the whole
  path at most :data:`MAX_PATH_BYTES`.

Symlinks cannot be judged here (that needs the tree); providers refuse to
follow them.
"""

from __future__ import annotations

from mango.domain.errors import InvalidPathError, PathEscapeError

__all__ = [
    "MAX_COMPONENT_BYTES",
    "MAX_PATH_BYTES",
    "normalize_workspace_dir",
    "normalize_workspace_path",
    "split_absolute_path",
    "split_workspace_path",
]

MAX_PATH_BYTES = 1024
MAX_COMPONENT_BYTES = 255


def _check_characters(path: str) -> None:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidPathError(
            f"path {path!r} is not valid UTF-8 (undecodable byte at offset {exc.start})"
        ) from None
    for index, char in enumerate(path):
        code = ord(char)
        if code == 0:
            raise InvalidPathError(f"path {path!r} contains a NUL byte at offset {index}")
        if code < 0x20 or code == 0x7F:
            raise InvalidPathError(
                f"path {path!r} contains control character U+{code:04X} at offset {index}"
            )
        if char == "\\":
            raise InvalidPathError(
                f"path {path!r} contains a backslash; use '/' to separate components"
            )


def _check_string(path: str) -> None:
    if not isinstance(path, str):
        raise InvalidPathError(f"path must be a string, got {type(path).__name__}")
    _check_characters(path)
    if len(path.encode("utf-8")) > MAX_PATH_BYTES:
        raise InvalidPathError(f"path is longer than {MAX_PATH_BYTES} bytes")


def _components(path: str) -> tuple[str, ...]:
    """Return the components of a checked ``path`` (``/`` and ``.`` folded)."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            raise PathEscapeError(f"path {path!r} contains '..'; it may not leave the workspace")
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            raise InvalidPathError(
                f"path component {part[:32]!r}... is longer than {MAX_COMPONENT_BYTES} bytes"
            )
        parts.append(part)
    return tuple(parts)


def split_workspace_path(path: str, *, allow_root: bool = False) -> tuple[str, ...]:
    """Validate ``path`` and return its components (empty tuple for the root).

    Raises :class:`InvalidPathError` or :class:`PathEscapeError`; the root
    (``""`` or ``"."``) is accepted only with ``allow_root``.
    """
    _check_string(path)
    if path.startswith("/"):
        raise PathEscapeError(f"path {path!r} is absolute; give a path relative to the workspace")
    parts = _components(path)
    if not parts and not allow_root:
        raise InvalidPathError(f"path {path!r} names the workspace root, not a file")
    if not allow_root and path.rsplit("/", 1)[-1] in ("", "."):
        raise InvalidPathError(
            f"path {path!r} ends in '/', so it names a directory, not a file",
            hint=f"give the file's name after it (for example '{parts[-1]}/NAME')",
        )
    return parts


def split_absolute_path(path: str) -> tuple[str, ...]:
    """Validate the absolute ``path`` by the same rules; return its components below ``/``.

    ``"/"`` gives the empty tuple. Raises :class:`InvalidPathError` if ``path``
    is not absolute, and the errors of :func:`split_workspace_path` otherwise.
    """
    _check_string(path)
    if not path.startswith("/"):
        raise InvalidPathError(f"path {path!r} is not absolute")
    return _components(path)


def normalize_workspace_path(path: str) -> str:
    """Return the normal form (``a/b/c``) of a workspace-relative file path."""
    return "/".join(split_workspace_path(path))


def normalize_workspace_dir(path: str | None) -> str:
    """Return the normal form of a workspace-relative directory; ``""`` is the root."""
    if path is None:
        return ""
    return "/".join(split_workspace_path(path, allow_root=True))

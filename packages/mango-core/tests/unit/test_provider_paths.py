"""The provider kit's path policy against an in-memory tree whose stat follows links like Linux."""

from __future__ import annotations

import asyncio
import errno
import os
import posixpath

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mango.domain.paths import normalize_workspace_dir, normalize_workspace_path
from mango.provider import (
    ConfigurationError,
    Entry,
    EntryKind,
    ExtraRoot,
    InvalidInput,
    InvalidPathError,
    PathEscapeError,
    PathPolicy,
    PermanentError,
)
from mango.provider.paths import MAX_CONCURRENT_STATS

DIR = EntryKind.DIRECTORY
REG = EntryKind.REGULAR
LINK = EntryKind.SYMLINK
OTHER = EntryKind.OTHER


@attrs.define
class Node:
    """One entry of the in-memory tree; ``target`` only for links."""

    kind: EntryKind
    target: str = ""
    size: int = 0


@attrs.define
class Tree:
    """A tiny POSIX tree: stat follows links in every component but the last, as lstat does."""

    nodes: dict[str, Node] = attrs.field(factory=lambda: {"/": Node(DIR)})
    calls: list[str] = attrs.field(factory=list)

    def add(self, path: str, kind: EntryKind, target: str = "", size: int = 0) -> None:
        """Add ``path`` (parents must exist as directories)."""
        self.nodes[path] = Node(kind, target, size)

    def dirs(self, *paths: str) -> Tree:
        """Add directories, parents first."""
        for path in paths:
            self.add(path, DIR)
        return self

    def _follow(self, path: str, depth: int = 0) -> str:
        """Resolve every link in ``path``; raise ``OSError`` like the kernel on loops/ENOTDIR."""
        if depth > 8:
            raise OSError(errno.ELOOP, "too many links", path)
        real = "/"
        for part in [part for part in path.split("/") if part]:
            node = self.nodes.get(real)
            if node is None:
                raise FileNotFoundError(errno.ENOENT, "missing", path)
            if node.kind is not DIR:
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
            real = posixpath.join(real, part)
            node = self.nodes.get(real)
            if node is not None and node.kind is LINK:
                target = posixpath.join(posixpath.dirname(real), node.target)
                real = self._follow(posixpath.normpath(target), depth + 1)
        return real

    async def stat(self, path: str) -> Entry | None:
        """The stat callback: never follows the last component."""
        self.calls.append(path)
        await asyncio.sleep(0)  # let concurrent stats interleave
        if path == "/":
            return Entry(DIR)
        try:
            parent = self._follow(posixpath.dirname(path))
        except FileNotFoundError:
            return None
        parent_node = self.nodes.get(parent)
        if parent_node is None:
            return None
        if parent_node.kind is not DIR:
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        node = self.nodes.get(posixpath.join(parent, posixpath.basename(path)))
        return None if node is None else Entry(node.kind, node.size)


def policy(**overrides: object) -> PathPolicy:
    """The §1.5 layout: workspace, uploads/outputs (writable), skills (read-only), control."""
    settings_: dict[str, object] = {
        "extra_roots": (
            ExtraRoot("/mnt/session/uploads", writable=True),
            ExtraRoot("/mnt/session/outputs", writable=True),
            ExtraRoot("/workspace/skills"),
        ),
        "control_dirs": ("/var/lib/mango",),
        "accept_absolute": True,
    }
    settings_.update(overrides)
    return PathPolicy("/workspace", **settings_)  # type: ignore[arg-type]


def layout() -> Tree:
    """The directories of :func:`policy`, plus a file in each root."""
    tree = Tree().dirs(
        "/workspace",
        "/workspace/skills",
        "/mnt",
        "/mnt/session",
        "/mnt/session/uploads",
        "/mnt/session/outputs",
        "/var",
        "/var/lib",
        "/var/lib/mango",
        "/etc",
    )
    for path in ("/workspace/a.txt", "/workspace/skills/SKILL.md", "/mnt/session/uploads/u.txt"):
        tree.add(path, REG, size=3)
    tree.add("/etc/passwd", REG, size=10)
    tree.add("/var/lib/mango/marker", REG, size=1)
    return tree


async def test_reads_a_regular_file_through_directories() -> None:
    """A relative path resolves under the root and reports the stat of the target."""
    tree = layout().dirs("/workspace/d")
    tree.add("/workspace/d/f", REG, size=42)
    resolved = await policy().resolve_read("./d//f", tree.stat)
    assert resolved.path == "/workspace/d/f"
    assert resolved.anchor == "/workspace"
    assert resolved.entry == Entry(REG, 42)
    assert sorted(tree.calls) == ["/workspace", "/workspace/d", "/workspace/d/f"]


async def test_write_lists_missing_parents_outermost_first() -> None:
    """Only the parents that do not exist are listed, in creation order."""
    tree = layout().dirs("/workspace/a")
    resolved = await policy().resolve_write("a/b/c/f.txt", tree.stat)
    assert resolved.entry is None
    assert resolved.missing_dirs == ("/workspace/a/b", "/workspace/a/b/c")
    existing = await policy().resolve_write("a.txt", tree.stat)
    assert existing.entry == Entry(REG, 3)
    assert existing.missing_dirs == ()


async def test_directory_resolution_allows_the_root_and_lists_missing() -> None:
    """A working directory may be the root; ``create`` lists what is missing."""
    tree = layout()
    assert (await policy().resolve_directory("", tree.stat)).path == "/workspace"
    made = await policy().resolve_directory("x/y", tree.stat, create=True)
    assert made.missing_dirs == ("/workspace/x", "/workspace/x/y")
    with pytest.raises(FileNotFoundError):
        await policy().resolve_directory("x/y", tree.stat)
    with pytest.raises(PermanentError, match="not a directory"):
        await policy().resolve_directory("a.txt", tree.stat)


async def test_missing_file_or_parent_is_file_not_found() -> None:
    """Reads of absent paths raise FileNotFoundError, whatever is absent."""
    tree = layout()
    for path in ("nope", "no/such/file"):
        with pytest.raises(FileNotFoundError):
            await policy().resolve_read(path, tree.stat)


@pytest.mark.parametrize("path", ["link/x", "d/link/x", "link"])
async def test_symlinks_anywhere_are_escapes(path: str) -> None:
    """A link as any component, even one pointing inside, is refused for read and write."""
    tree = layout().dirs("/workspace/d", "/workspace/real")
    tree.add("/workspace/real/x", REG)
    tree.add("/workspace/link", LINK, target="real")
    tree.add("/workspace/d/link", LINK, target="/etc")
    for resolve in (policy().resolve_read, policy().resolve_write):
        with pytest.raises(PathEscapeError):
            await resolve(path, tree.stat)


async def test_non_regular_targets_and_file_parents_are_permanent() -> None:
    """Directories and FIFOs are not files; a file cannot be a parent."""
    tree = layout().dirs("/workspace/d")
    tree.add("/workspace/fifo", OTHER)
    for path, message in (("d", "is a directory"), ("fifo", "not a regular file")):
        with pytest.raises(PermanentError, match=message) as caught:
            await policy().resolve_write(path, tree.stat)
        assert not isinstance(caught.value, PathEscapeError)
    with pytest.raises(PermanentError, match="not a directory"):
        await policy().resolve_write("a.txt/below/deeper", tree.stat)


async def test_a_stat_failure_below_a_file_counts_only_after_its_parents() -> None:
    """The tree raises ENOTDIR below a file; the policy reports the file parent instead."""
    tree = layout()
    with pytest.raises(PermanentError, match=r"component 'a\.txt' is not a directory"):
        await policy().resolve_read("a.txt/x/y", tree.stat)


async def test_a_stat_failure_after_good_parents_propagates() -> None:
    """An error from the provider's stat on a reachable component is not swallowed."""

    async def failing(path: str) -> Entry | None:
        if path == "/workspace/d/f":
            raise ConnectionError("stat failed")
        return Entry(DIR)

    with pytest.raises(ConnectionError):
        await policy().resolve_read("d/f", failing)


async def test_a_replaced_or_missing_root_is_refused() -> None:
    """The anchor itself must be a real directory."""
    tree = layout()
    tree.add("/workspace", LINK, target="/etc")
    with pytest.raises(PathEscapeError, match="replaced"):
        await policy().resolve_read("passwd", tree.stat)
    del tree.nodes["/workspace"]
    with pytest.raises(PermanentError, match="missing"):
        await policy().resolve_write("x", tree.stat)


async def test_absolute_paths_inside_the_workspace_or_below_extra_roots() -> None:
    """Absolute paths are accepted inside the root, or strictly below an extra root."""
    tree = layout()
    resolved = await policy().resolve_read("/workspace/a.txt", tree.stat)
    assert (resolved.anchor, resolved.path) == ("/workspace", "/workspace/a.txt")
    upload = await policy().resolve_read("/mnt/session/uploads/u.txt", tree.stat)
    assert upload.anchor == "/mnt/session/uploads"
    assert "/mnt/session" not in tree.calls  # adapter-made ancestors are not stat-ed
    out = await policy().resolve_write("/mnt/session/outputs/r/report.md", tree.stat)
    assert out.missing_dirs == ("/mnt/session/outputs/r",)
    for path in ("/etc/passwd", "/mnt/session/other", "/mnt/session", "/", "/mnt/session/uploads"):
        with pytest.raises(PathEscapeError, match="outside"):
            policy().locate(path, directory=True)
    with pytest.raises(InvalidPathError, match="names a root"):
        policy().locate("/workspace/")
    assert policy().locate("/workspace", directory=True).parts == ()


async def test_absolute_paths_are_refused_unless_accepted() -> None:
    """Without ``accept_absolute`` (the built-in providers), every absolute path escapes."""
    strict = policy(accept_absolute=False)
    for path in ("/workspace/a.txt", "/mnt/session/uploads/u.txt"):
        with pytest.raises(PathEscapeError, match="absolute"):
            strict.locate(path)


async def test_the_skills_root_is_read_only() -> None:
    """Reads inside the read-only root work; writes are refused, however spelled."""
    tree = layout()
    assert (await policy().resolve_read("skills/SKILL.md", tree.stat)).entry == Entry(REG, 3)
    assert (await policy().resolve_read("/workspace/skills/SKILL.md", tree.stat)).path
    for path in ("skills/SKILL.md", "/workspace/skills/new", "skills/a/b", "./skills//x"):
        with pytest.raises(PathEscapeError, match="read-only"):
            await policy().resolve_write(path, tree.stat)
    with pytest.raises(PathEscapeError, match="read-only"):
        await policy().resolve_directory("skills/made", tree.stat, create=True)
    assert tree.calls == [
        "/workspace",
        "/workspace/skills",
        "/workspace/skills/SKILL.md",
        "/workspace",
        "/workspace/skills",
        "/workspace/skills/SKILL.md",
    ]


async def test_control_dirs_are_never_reachable() -> None:
    """Not through an extra root above them, nor inside the workspace, nor for reading."""
    guarded = policy(
        extra_roots=(ExtraRoot("/var/lib", writable=True),),
        control_dirs=("/var/lib/mango", "/workspace/.mango"),
    )
    tree = layout()
    for path in ("/var/lib/mango/marker", "/var/lib/mango", ".mango/state", "/workspace/.mango"):
        for write in (False, True):
            with pytest.raises(PathEscapeError, match="reserved"):
                guarded.locate(path, write=write, directory=True)
        with pytest.raises(PathEscapeError):
            await guarded.resolve_read(path, tree.stat)
    assert tree.calls == []
    assert guarded.locate("/var/lib/other").anchor == "/var/lib"


def test_roots_are_validated() -> None:
    """Adapter configuration errors surface at construction."""
    for root in ("relative", "/a/../b", "/a\x00b", os.fsdecode(b"/caf\xe9")):
        with pytest.raises(ConfigurationError):
            PathPolicy(root)
    with pytest.raises(ConfigurationError, match="control directory"):
        PathPolicy("/var/lib/mango/ws", control_dirs=("/var/lib/mango",))
    assert PathPolicy("/workspace/").root == "/workspace"
    assert PathPolicy("//srv/./ws").root == "/srv/ws"


@pytest.mark.parametrize("raw", [b"caf\xe9.txt", b"dir/\xff\xfe/x", b"/workspace/\x80"])
async def test_non_utf8_paths_are_invalid_input(raw: bytes) -> None:
    """Surrogate-escaped strings from os.fsdecode raise InvalidInput, never UnicodeEncodeError."""
    path = os.fsdecode(raw)
    for accept_absolute in (False, True):
        with pytest.raises(InvalidInput):
            policy(accept_absolute=accept_absolute).locate(path)
    with pytest.raises(InvalidInput):
        normalize_workspace_path(path)
    with pytest.raises(InvalidInput):
        normalize_workspace_dir(path)


async def test_concurrent_stats_are_bounded() -> None:
    """A deep path is classified with at most MAX_CONCURRENT_STATS stats in flight."""
    in_flight = 0
    peak = 0

    async def counting(path: str) -> Entry | None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0)
        in_flight -= 1
        return Entry(DIR) if path.count("/") <= 41 else None

    resolved = await policy().resolve_write("/".join(["d"] * 40) + "/f", counting)
    assert resolved.missing_dirs == ()
    assert 1 < peak <= MAX_CONCURRENT_STATS


# --- property: nothing accepted ever goes through a link or outside the allowed roots ---

NAMES = ("a", "b", "l", "skills", ".mango")
TARGETS = ("/etc", "/var/lib/mango", "/mnt/session", "..", "a", "/workspace", "b/missing")


@st.composite
def trees(draw: st.DrawFn) -> Tree:
    """A random tree under the workspace and uploads, with links pointing anywhere."""
    tree = layout()
    for base in ("/workspace", "/mnt/session/uploads"):
        parents = [base]
        for _ in range(draw(st.integers(0, 12))):
            parent = draw(st.sampled_from(parents))
            path = posixpath.join(parent, draw(st.sampled_from(NAMES)))
            if path in tree.nodes:
                continue
            kind = draw(st.sampled_from((DIR, DIR, REG, LINK, OTHER)))
            tree.add(path, kind, target=draw(st.sampled_from(TARGETS)))
            if kind is DIR:
                parents.append(path)
    return tree


paths = st.builds(
    lambda prefix, parts: prefix + "/".join(parts),
    st.sampled_from(
        (
            "",
            "./",
            "skills/",
            "/workspace/",
            "/workspace/skills/",
            "/mnt/session/uploads/",
            "/mnt/session/outputs/",
            "/var/lib/",
            "/etc/",
        )
    ),
    st.lists(st.sampled_from((*NAMES, ".", "..", "x")), min_size=0, max_size=5),
)


def _lexically_clean(tree: Tree, anchor: str, target: str) -> None:
    """Every existing node from ``anchor`` to ``target`` is a real directory (or the file)."""
    node = tree.nodes[anchor]
    assert node.kind is DIR
    current = anchor
    for part in posixpath.relpath(target, anchor).split("/"):
        if part == ".":
            continue
        current = posixpath.join(current, part)
        found = tree.nodes.get(current)
        if found is None:
            return
        assert found.kind is not LINK
        if current != target:
            assert found.kind is DIR


def _allowed(resolved_path: str, anchor: str, *, write: bool) -> None:
    roots = {"/workspace", "/mnt/session/uploads", "/mnt/session/outputs", "/workspace/skills"}
    assert anchor in roots
    inside_root = resolved_path == "/workspace" or resolved_path.startswith("/workspace/")
    below_extra = any(resolved_path.startswith(root + "/") for root in roots)
    assert inside_root or below_extra
    assert not resolved_path.startswith("/var/lib/mango")
    if write:
        assert not resolved_path.startswith("/workspace/skills/")
        assert resolved_path != "/workspace/skills"


@settings(max_examples=300, deadline=None)
@given(tree=trees(), path=paths, write=st.booleans())
def test_no_accepted_path_goes_through_a_link_or_out(tree: Tree, path: str, write: bool) -> None:
    """Whatever the tree and the path, an accepted path is clean, allowed, and stat-equivalent."""

    async def scenario() -> None:
        resolve = policy().resolve_write if write else policy().resolve_read
        try:
            resolved = await resolve(path, tree.stat)
        except (InvalidInput, PermanentError, FileNotFoundError):
            return
        assert ".." not in resolved.path.split("/")
        _allowed(resolved.path, resolved.anchor, write=write)
        _lexically_clean(tree, resolved.anchor, resolved.path)
        # Following links gives the same place: nothing on the way was a link.
        parent = posixpath.dirname(resolved.path)
        if not resolved.missing_dirs:
            assert tree._follow(parent) == parent
        if write:
            for directory in resolved.missing_dirs:
                assert directory not in tree.nodes
        else:
            assert tree.nodes[resolved.path].kind is REG

    asyncio.run(scenario())


def test_kit_names_are_exported() -> None:
    """The path-policy names are on the provider surface (RUF022 keeps ``__all__`` sorted)."""
    import mango.provider
    import mango.provider.paths

    for name in mango.provider.paths.__all__:
        if name != "MAX_CONCURRENT_STATS":
            assert getattr(mango.provider, name) is getattr(mango.provider.paths, name)

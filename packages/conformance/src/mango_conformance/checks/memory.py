"""The ``memory-stores`` group: a Session's Memory Stores at ``/mnt/memory/<slug>``.

What the Memory Store wave relies on (:class:`~mango.provider.MemoryStoreSandbox`):

* M-1..M-6, round trip: a replace makes the mount hold exactly the given
  files (what was there before and is not given goes), a read gives them
  back with the baseline the replace recorded (memory ids and SHA-256), a
  shell in the sandbox reads the same bytes, and a sandbox attached through
  a fresh provider reads the same; the baseline is not in the mount;
* the sandbox's own edits (a change, a new file in a new directory, a
  removal) are what a read reports, against the unchanged baseline;
* a ``read_only`` store is read-only even to root in the sandbox, and a
  read-only mount still refreshes from the worker's side;
* what a store cannot hold is refused naming the file: a symlink, a FIFO,
  a file past 100 KiB; a replace with a file that has no memory id changes
  nothing;
* the sync lock excludes tools: ``memory_sync_lock(wait=False)`` is not
  held while a tool holds the resource lock shared, and is held otherwise.

The checks make their own mounts (store ids that need no database), so they
need no testbed.
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

from typing import Protocol, cast

import attrs
import pytest

from mango.provider import (
    Capability,
    InvalidMemory,
    MemoryFile,
    MemorySnapshot,
    MemoryStoreMount,
    MemoryStoreSandbox,
    PermanentError,
    ResourceLockSandbox,
    Sandbox,
    SandboxSpec,
)
from mango_conformance.checks import mark_checks
from mango_conformance.harness import Harness

__all__ = ["MemoryStoreChecks", "memory_spec"]

_MEMORY = Capability.MEMORY_STORES.value
WRITABLE = MemoryStoreMount("memstore-" + "1" * 32, "notes", "read_write")
READ_ONLY = MemoryStoreMount("memstore-" + "2" * 32, "shared-facts", "read_only")

TAMPER = (
    'for a in "printf x > $1/a.md" "rm -f $1/a.md" "touch $1/planted" "mkdir $1/dir"; do '
    'sh -c "$a" 2>/dev/null && printf "ALLOWED: %s\\n" "$a"; done; :'
)
"""Try every way a command could change the read-only mount ``$1``; print each that worked."""


def memory_spec(harness: Harness) -> SandboxSpec:
    """The options' spec with the two stores of the checks attached."""
    return attrs.evolve(harness.options.spec, memory_stores=(WRITABLE, READ_ONLY))


class _MemorySandbox(Sandbox, MemoryStoreSandbox, ResourceLockSandbox, Protocol):
    """A sandbox with Memory Stores (what a declaring provider hands out)."""


def _memory(harness: Harness, sandbox: Sandbox) -> _MemorySandbox:
    assert isinstance(sandbox, MemoryStoreSandbox), (
        f"{harness.name} declares {_MEMORY} but its sandbox is not a MemoryStoreSandbox"
    )
    return cast(_MemorySandbox, sandbox)


def _files(*items: tuple[str, str, str]) -> list[MemoryFile]:
    return [MemoryFile(path, content, memory_id) for path, content, memory_id in items]


async def _replace(
    sandbox: _MemorySandbox, mount: MemoryStoreMount, files: list[MemoryFile]
) -> None:
    async with sandbox.memory_sync_lock(wait=True):
        await sandbox.replace_memory_store(mount, files)


async def _read(sandbox: _MemorySandbox, mount: MemoryStoreMount) -> MemorySnapshot:
    async with sandbox.memory_sync_lock(wait=True):
        return await sandbox.read_memory_store(mount)


def _holds(
    harness: Harness, sandbox: _MemorySandbox, mount: MemoryStoreMount, files: list[MemoryFile]
) -> None:
    """The mount holds exactly ``files``, with them as its baseline, in a read and a shell."""
    snapshot = harness.run(_read(sandbox, mount))
    assert snapshot.initialized, f"no baseline after a replace of {mount.runtime_path}"
    got = [(item.path, item.content) for item in snapshot.files]
    assert got == sorted((item.path, item.content) for item in files), (
        f"{mount.runtime_path} holds {got}, not what the replace wrote"
    )
    baseline = [(entry.memory_id, entry.path, entry.sha256) for entry in snapshot.baseline]
    assert baseline == sorted(
        ((item.memory_id, item.path, item.sha256) for item in files), key=lambda e: e[1]
    ), f"the baseline of {mount.runtime_path} is {baseline}, not the replaced files"
    listing = harness.sh(sandbox, 'cd "$1" && find . -type f | sort', mount.runtime_path)
    expected = "".join(f".{item.path}\n" for item in sorted(files, key=lambda f: f.path))
    assert listing.stdout.decode() == expected, (
        f"the sandbox sees {listing.stdout.decode()!r} in {mount.runtime_path}, "
        f"not {expected!r} (the baseline must stay outside the mount)"
    )
    for item in files:
        shell = harness.sh(sandbox, 'cat -- "$1$2"', mount.runtime_path, item.path)
        assert shell.stdout.decode() == item.content, f"cat {item.path} in the sandbox"


async def _try_while_shared(sandbox: _MemorySandbox) -> tuple[bool, bool]:
    async with (
        sandbox.resource_lock(exclusive=False),
        sandbox.memory_sync_lock(wait=False) as during,
    ):
        pass
    async with sandbox.memory_sync_lock(wait=False) as after:
        pass
    return during, after


class MemoryStoreChecks:
    """The ``memory-stores`` checks; they run where the capability is declared."""

    @pytest.mark.mango_capability(_MEMORY)
    def test_memory_stores_round_trip(self, conformance: Harness) -> None:
        """M-1..M-6: replace, read, shell, the sandbox's edits, a fresh attach, a smaller set."""
        key = conformance.new_key("memory")
        spec = memory_spec(conformance)
        sandbox = _memory(conformance, conformance.create(key, spec=spec))
        first = conformance.run(_read(sandbox, WRITABLE))
        assert (first.initialized, first.files) == (False, ()), "M-1: a new mount is empty"
        files = _files(("/a.md", "alpha\n", "mem-a"), ("/deep/b.md", "beta ✓\n", "mem-b"))
        conformance.run(_replace(sandbox, WRITABLE, files))
        _holds(conformance, sandbox, WRITABLE, files)  # M-2
        edited = conformance.sh(
            sandbox, 'cd "$1" && printf more >> a.md && mkdir -p n && printf c > n/c.md'
            " && rm deep/b.md", WRITABLE.runtime_path,
        )  # fmt: skip
        assert edited.exit_code == 0, f"M-3: the sandbox cannot edit a read_write store: {edited}"
        snapshot = conformance.run(_read(sandbox, WRITABLE))
        assert [(f.path, f.content) for f in snapshot.files] == [
            ("/a.md", "alpha\nmore"),
            ("/n/c.md", "c"),
        ], "M-3: a read does not report the sandbox's edits"
        assert [e.memory_id for e in snapshot.baseline] == ["mem-a", "mem-b"], (
            "M-3: the sandbox's edits changed the baseline"
        )
        attached = _memory(
            conformance,
            conformance.attach(key, sandbox.ref, conformance.open_provider(), spec=spec),
        )
        again = conformance.run(_read(attached, WRITABLE))
        assert again == snapshot, "M-4: a fresh provider's attach reads another mount"
        smaller = _files(("/z.md", "only\n", "mem-z"))
        conformance.run(_replace(attached, WRITABLE, smaller))
        _holds(conformance, attached, WRITABLE, smaller)  # M-5: nothing stale stays
        conformance.run(_replace(attached, WRITABLE, []))
        _holds(conformance, attached, WRITABLE, [])  # M-6

    @pytest.mark.mango_capability(_MEMORY)
    def test_memory_stores_read_only_even_to_root(self, conformance: Harness) -> None:
        """No command (root included) changes a read_only store; the worker still refreshes it."""
        sandbox = _memory(conformance, conformance.create(spec=memory_spec(conformance)))
        files = _files(("/a.md", "fact\n", "mem-f"))
        conformance.run(_replace(sandbox, READ_ONLY, files))
        user = conformance.sh(sandbox, "id -u").stdout.strip()
        tampered = conformance.sh(sandbox, TAMPER, READ_ONLY.runtime_path)
        assert tampered.stdout == b"", (
            f"a command running as uid {user.decode() or '?'} changed the read_only store: "
            f"{tampered.stdout.decode(errors='replace').strip()}"
        )
        with pytest.raises(PermanentError):
            conformance.run(sandbox.write_file(f"{READ_ONLY.runtime_path}/a.md", b"tool"))
        _holds(conformance, sandbox, READ_ONLY, files)
        newer = _files(("/a.md", "newer fact\n", "mem-g"))
        conformance.run(_replace(sandbox, READ_ONLY, newer))
        _holds(conformance, sandbox, READ_ONLY, newer)

    @pytest.mark.mango_capability(_MEMORY)
    def test_memory_stores_refuse_what_a_store_cannot_hold(self, conformance: Harness) -> None:
        """A symlink, a FIFO, a file past 100 KiB: refused by name; a bad replace changes none."""
        sandbox = _memory(conformance, conformance.create(spec=memory_spec(conformance)))
        files = _files(("/keep.md", "kept\n", "mem-k"))
        conformance.run(_replace(sandbox, WRITABLE, files))
        root = WRITABLE.runtime_path
        for script, path in [
            ('ln -s /etc/passwd "$1/link"', "/link"),
            ('mkfifo "$1/pipe"', "/pipe"),
            ("head -c 102401 /dev/zero | tr '\\0' a > \"$1/big.md\"", "/big.md"),
        ]:
            made = conformance.sh(sandbox, script, root)
            assert made.exit_code == 0, f"could not make {path}: {made}"
            with pytest.raises(InvalidMemory) as refused:
                conformance.run(_read(sandbox, WRITABLE))
            assert refused.value.path == path, f"the refusal names {refused.value.path!r}"
            conformance.sh(sandbox, 'rm -f "$1$2"', root, path)
        with pytest.raises(InvalidMemory):
            conformance.run(_replace(sandbox, WRITABLE, _files(("/x.md", "no id", ""))))
        _holds(conformance, sandbox, WRITABLE, files)
        plain = conformance.create()
        with pytest.raises(PermanentError):
            conformance.run(_read(_memory(conformance, plain), WRITABLE))

    @pytest.mark.mango_capability(_MEMORY)
    def test_memory_stores_sync_lock_excludes_tools(self, conformance: Harness) -> None:
        """Not held while a tool holds the resource lock shared; held when nothing runs."""
        sandbox = _memory(conformance, conformance.create(spec=memory_spec(conformance)))
        during, after = conformance.run(_try_while_shared(sandbox))
        assert not during, "memory_sync_lock(wait=False) was held while a tool held the lock"
        assert after, "memory_sync_lock(wait=False) was not held with no tool running"


mark_checks(MemoryStoreChecks, pytest.mark.mango_capability_group)

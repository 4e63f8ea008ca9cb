"""The ``file-resources`` group: stored files copied read-only into a sandbox.

What the materializer relies on (:class:`~mango.provider.FileResourceSandbox`):

* F-1..F-11: ``has`` is False before an import and True after it, and the
  copy is what a file tool and a shell read at the mount path; a replacement
  whose reader breaks off is an error; removing a stale identity never
  touches the newer copy; a fresh provider's attach still has it; removal is
  idempotent; a path with ``..`` is a permanent error;
* read-only even to root: no command in the sandbox (as whichever user the
  image runs, root in the test images) can change, replace or remove the
  copy, and a file tool's write is refused;
* atomic replacement: a replacement that fails (a reader that breaks off,
  bytes of another digest) leaves the previous copy exactly as it was;
* idempotent removal after an interruption: what an interrupted import left
  is cleaned by the next removal, repeating it is harmless, and nothing is
  left in the directory.

The checks write their own small files, so they need no testbed.
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import AsyncIterator
from typing import Protocol, cast

import pytest

from mango.provider import (
    UPLOADS_ROOT,
    Capability,
    ContentMismatch,
    FileResourceMount,
    FileResourceSandbox,
    PermanentError,
    Sandbox,
    is_permanent,
)
from mango_conformance.checks import mark_checks
from mango_conformance.harness import Harness
from mango_conformance.scripts import CAT_ARG

__all__ = ["FileResourceChecks", "mount"]

FIRST = "sesrsc_first"
SECOND = "sesrsc_second"
PATH = f"{UPLOADS_ROOT}/nested/data.txt"
_FILES = Capability.FILE_RESOURCES.value

TAMPER = (
    'for a in "printf x > $1" "chmod 666 $1" "rm -f $1" "mv $1 $1.moved" '
    '"touch ${1%/*}/planted"; do sh -c "$a" 2>/dev/null && printf "ALLOWED: %s\\n" "$a"; done; '
    ":"
)
"""Try every way a command could change the copy ``$1``; print each one that worked."""


def mount(data: bytes, identity: str = FIRST, path: str = PATH) -> FileResourceMount:
    """The mount of ``data`` at ``path`` for ``identity``."""
    return FileResourceMount(identity, path, len(data), hashlib.sha256(data).hexdigest())


class BrokeOff(OSError):
    """The reader's source failed part-way (what an interrupted download raises)."""


async def chunks(*parts: bytes, fail: bool = False) -> AsyncIterator[bytes]:
    """``parts`` one by one, then (with ``fail``) an error instead of the end."""
    for part in parts:
        yield part
    if fail:
        raise BrokeOff("the source broke off")


class _ResourceSandbox(Sandbox, FileResourceSandbox, Protocol):
    """A sandbox with File Resources (what a declaring provider hands out)."""


def _resources(harness: Harness, sandbox: Sandbox) -> _ResourceSandbox:
    assert isinstance(sandbox, FileResourceSandbox), (
        f"{harness.name} declares {_FILES} but its sandbox is not a FileResourceSandbox"
    )
    return cast(_ResourceSandbox, sandbox)


def _mounted(harness: Harness, sandbox: _ResourceSandbox, data: bytes, identity: str) -> None:
    """M: ``has`` is True, a file tool and a shell read exactly ``data`` at the path."""
    assert harness.run(sandbox.has_file_resource(mount(data, identity))), (
        f"has_file_resource is False right after {identity}'s import"
    )
    read = harness.run(sandbox.read_file(PATH))
    assert read == data, f"read_file({PATH!r}) gave {read[:80]!r}, not the imported bytes"
    shell = harness.sh(sandbox, CAT_ARG, PATH)
    assert (shell.exit_code, shell.stdout) == (0, data), (
        f"cat {PATH} in the sandbox gave {shell.stdout[:80]!r} (exit {shell.exit_code})"
    )


def _listing(harness: Harness, sandbox: Sandbox, directory: str) -> bytes:
    return harness.sh(sandbox, 'ls -A "$1" 2>/dev/null; :', directory).stdout


class FileResourceChecks:
    """The ``file-resources`` checks; they run where the capability is declared."""

    @pytest.mark.mango_capability(_FILES)
    def test_file_resources_lifecycle(self, conformance: Harness) -> None:
        """F-1..F-11: import, replace, stale removal, fresh attach, idempotent removal, escape."""
        key = conformance.new_key("files")
        created = conformance.create(key)
        sandbox = _resources(conformance, created)
        first, second = b"first resource\n", b"second resource, longer\n"
        assert not conformance.run(sandbox.has_file_resource(mount(first))), "F-1: has before"
        conformance.run(sandbox.import_file_resource(mount(first), chunks(first)))
        _mounted(conformance, sandbox, first, FIRST)
        with pytest.raises(BrokeOff):  # F-3: the failure is the reader's, passed through
            conformance.run(
                sandbox.import_file_resource(mount(second, SECOND), chunks(b"partial", fail=True))
            )
        conformance.run(sandbox.remove_file_resource(PATH, FIRST))  # F-4
        conformance.run(sandbox.remove_file_resource(PATH, SECOND))  # F-5
        conformance.run(sandbox.import_file_resource(mount(second, SECOND), chunks(second)))  # F-6
        conformance.run(sandbox.remove_file_resource(PATH, FIRST))  # F-7: stale
        _mounted(conformance, sandbox, second, SECOND)  # F-8
        attached = conformance.attach(key, created.ref, conformance.open_provider())
        attached_resources = _resources(conformance, attached)
        _mounted(conformance, attached_resources, second, SECOND)  # F-9
        conformance.run(attached_resources.remove_file_resource(PATH, SECOND))  # F-10
        conformance.run(attached_resources.remove_file_resource(PATH, SECOND))
        assert not conformance.run(attached_resources.has_file_resource(mount(second, SECOND)))
        with pytest.raises(PermanentError) as escape:  # F-11
            conformance.run(
                attached_resources.remove_file_resource(f"{UPLOADS_ROOT}/../escape", SECOND)
            )
        assert is_permanent(escape.value)

    @pytest.mark.mango_capability(_FILES)
    def test_file_resources_are_read_only_even_to_root(self, conformance: Harness) -> None:
        """No command (root included) and no file tool can change, replace or remove a copy."""
        sandbox = _resources(conformance, conformance.create())
        data = b"read only\n"
        conformance.run(sandbox.import_file_resource(mount(data), chunks(data)))
        user = conformance.sh(sandbox, "id -u").stdout.strip()
        tampered = conformance.sh(sandbox, TAMPER, PATH)
        assert tampered.stdout == b"", (
            f"a command running as uid {user.decode() or '?'} changed the File Resource: "
            f"{tampered.stdout.decode(errors='replace').strip()}"
        )
        with pytest.raises(PermanentError):
            conformance.run(sandbox.write_file(PATH, b"a tool's write"))
        _mounted(conformance, sandbox, data, FIRST)
        assert _listing(conformance, sandbox, posixpath.dirname(PATH)) == b"data.txt\n"

    @pytest.mark.mango_capability(_FILES)
    def test_file_resources_replace_atomically(self, conformance: Harness) -> None:
        """A failed replacement (a broken reader, another digest) leaves the old copy whole."""
        sandbox = _resources(conformance, conformance.create())
        old, new = b"the previous copy\n", b"the replacement\n"
        conformance.run(sandbox.import_file_resource(mount(old), chunks(old)))
        with pytest.raises(BrokeOff):
            conformance.run(
                sandbox.import_file_resource(mount(new, SECOND), chunks(new[:6], fail=True))
            )
        _mounted(conformance, sandbox, old, FIRST)
        with pytest.raises(ContentMismatch):
            conformance.run(
                sandbox.import_file_resource(mount(new, SECOND), chunks(b"x" * len(new)))
            )
        _mounted(conformance, sandbox, old, FIRST)
        assert _listing(conformance, sandbox, posixpath.dirname(PATH)) == b"data.txt\n", (
            "a failed replacement left something beside the copy"
        )

    @pytest.mark.mango_capability(_FILES)
    def test_file_resources_removal_is_idempotent_after_an_interruption(
        self, conformance: Harness
    ) -> None:
        """An interrupted import, then removals repeated: nothing left, never an error."""
        created = conformance.create()
        sandbox = _resources(conformance, created)
        data = b"interrupted\n" * 64
        with pytest.raises(BrokeOff):
            conformance.run(
                sandbox.import_file_resource(mount(data), chunks(data[:100], fail=True))
            )
        for _ in range(2):
            conformance.run(sandbox.remove_file_resource(PATH, FIRST))
        conformance.run(sandbox.import_file_resource(mount(data), chunks(data)))
        for _ in range(2):
            conformance.run(sandbox.remove_file_resource(PATH, FIRST))
        assert not conformance.run(sandbox.has_file_resource(mount(data)))
        assert _listing(conformance, created, UPLOADS_ROOT) == b"", (
            "removing the resource left files or directories below the uploads root"
        )


mark_checks(FileResourceChecks, pytest.mark.mango_capability_group)

"""The ``session-outputs`` group: ``/mnt/session/outputs``, exported as the backend's tar stream.

What the publisher relies on (:class:`~mango.provider.SessionOutputSandbox`
and the :class:`~mango.provider.ResourceLockSandbox` it holds shared):

* tools and the shell see one root (O-1, O-2): a file tool's write below
  the mount is what a command reads, and the other way round;
* the export is repeatable under the lock (O-3, O-4): two exports while the
  shared lock is held give exactly the files written, no more (no control
  or staging files), byte for byte;
* the export streams: a large file arrives in bounded chunks, never as one
  buffer;
* hostile entries reach the publisher as they are, so it refuses them: a
  symlink to ``/etc/passwd``, a hardlink and a FIFO each make
  :func:`mango.provider.outputs.read_outputs` fail naming the entry (an
  export that resolved the link would publish the host's file).
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import pytest

from mango.provider import (
    OUTPUTS_ROOT,
    Capability,
    OutputRejected,
    ResourceLockSandbox,
    Sandbox,
    SessionOutputSandbox,
)
from mango.provider.outputs import EntryType, TarReader, read_outputs
from mango_conformance.checks import mark_checks
from mango_conformance.harness import Harness

__all__ = ["LARGE_BYTES", "MAX_CHUNK_BYTES", "OutputChecks", "exported"]

_OUTPUTS = Capability.SESSION_OUTPUTS.value
LARGE_BYTES = 32 * 1024 * 1024
MAX_CHUNK_BYTES = 4 * 1024 * 1024
"""Largest chunk a streamed export may hand on (the Engine's come in 256 KiB)."""
HOSTILE = {
    "symlink": ("ln -s /etc/passwd link", EntryType.SYMLINK, {"link"}),
    # Which of two names is archived as the link depends on the directory order.
    "hardlink": ("printf data > plain && ln plain hard", EntryType.HARDLINK, {"plain", "hard"}),
    "fifo": ("mkfifo pipe", EntryType.FIFO, {"pipe"}),
}


def _exporter(harness: Harness, sandbox: Sandbox) -> SessionOutputSandbox:
    assert isinstance(sandbox, SessionOutputSandbox), (
        f"{harness.name} declares {_OUTPUTS} but its sandbox is not a SessionOutputSandbox"
    )
    assert isinstance(sandbox, ResourceLockSandbox), (
        f"{harness.name} declares {_OUTPUTS} but its sandbox is not a ResourceLockSandbox"
    )
    return sandbox


async def exported(sandbox: SessionOutputSandbox) -> dict[str, bytes]:
    """The regular files of one export, by output path (the publisher's reading)."""
    files: dict[str, bytes] = {}
    async with sandbox.open_session_outputs() as chunks:
        async for item in read_outputs(chunks):
            files[item.path] = b"".join([piece async for piece in item.body])
    return files


async def _types(sandbox: SessionOutputSandbox) -> dict[str, EntryType]:
    found: dict[str, EntryType] = {}
    async with sandbox.open_session_outputs() as chunks:
        reader = TarReader(chunks, "the export")
        while (entry := await reader.next()) is not None:
            found[entry.name.removeprefix("./")] = entry.type
    return found


async def _twice_under_the_lock(sandbox: SessionOutputSandbox) -> tuple[dict[str, bytes], ...]:
    assert isinstance(sandbox, ResourceLockSandbox)
    async with sandbox.resource_lock():
        return await exported(sandbox), await exported(sandbox)


async def _chunk_sizes(sandbox: SessionOutputSandbox) -> list[int]:
    async with sandbox.open_session_outputs() as chunks:
        return [len(chunk) async for chunk in chunks]


class OutputChecks:
    """The ``session-outputs`` checks; they run where the capability is declared."""

    @pytest.mark.mango_capability(_OUTPUTS)
    def test_session_outputs_tools_and_shell_see_one_root(self, conformance: Harness) -> None:
        """O-1, O-2: a tool's write is what the shell reads, a shell's write what a tool reads."""
        sandbox = conformance.create()
        _exporter(conformance, sandbox)
        conformance.run(sandbox.write_file(f"{OUTPUTS_ROOT}/nested/tool.txt", b"tool"))
        shell = conformance.sh(
            sandbox, 'cat "$1/nested/tool.txt" && printf shell > "$1/shell.txt"', OUTPUTS_ROOT
        )
        assert (shell.exit_code, shell.stdout) == (0, b"tool"), (
            f"the shell does not see the tool's {OUTPUTS_ROOT}/nested/tool.txt: {shell}"
        )
        read = conformance.run(sandbox.read_file(f"{OUTPUTS_ROOT}/shell.txt"))
        assert read == b"shell", f"a tool does not see the shell's file: read {read!r}"

    @pytest.mark.mango_capability(_OUTPUTS)
    def test_session_outputs_export_is_repeatable_under_the_lock(
        self, conformance: Harness
    ) -> None:
        """O-3, O-4: two exports under the shared lock give the same files, and only them."""
        sandbox = conformance.create()
        exporter = _exporter(conformance, sandbox)
        conformance.run(sandbox.write_file(f"{OUTPUTS_ROOT}/nested/tool.txt", b"tool"))
        conformance.sh(sandbox, 'printf shell > "$1/shell.txt"', OUTPUTS_ROOT)
        expected = {"nested/tool.txt": b"tool", "shell.txt": b"shell"}
        first, second = conformance.run(_twice_under_the_lock(exporter))
        assert first == expected, f"the first export holds {sorted(first)}"
        assert second == expected, f"the second export holds {sorted(second)}: not repeatable"
        again = conformance.run(exported(exporter))
        assert again == expected

    @pytest.mark.mango_capability(_OUTPUTS)
    def test_session_outputs_export_streams(self, conformance: Harness) -> None:
        """A 32 MiB output arrives in bounded chunks, never gathered into one buffer."""
        sandbox = conformance.create()
        exporter = _exporter(conformance, sandbox)
        made = conformance.sh(
            sandbox,
            'dd if=/dev/zero of="$1/large.bin" bs=1048576 count=32 2>/dev/null',
            OUTPUTS_ROOT,
        )
        assert made.exit_code == 0, f"could not write a large output: {made.stderr[:200]!r}"
        sizes = conformance.run(_chunk_sizes(exporter))
        assert sum(sizes) >= LARGE_BYTES, f"the export has {sum(sizes)} bytes"
        assert max(sizes) <= MAX_CHUNK_BYTES, (
            f"the export handed on a chunk of {max(sizes)} bytes: it is buffered, not streamed"
        )

    @pytest.mark.mango_capability(_OUTPUTS)
    def test_session_outputs_hostile_entries_are_rejected(self, conformance: Harness) -> None:
        """A symlink to /etc/passwd, a hardlink, a FIFO: kept as such, refused by name."""
        sandbox = conformance.create()
        exporter = _exporter(conformance, sandbox)
        for what, (script, kind, names) in HOSTILE.items():
            made = conformance.sh(sandbox, f'cd "$1" && rm -rf ./* && {script}', OUTPUTS_ROOT)
            assert made.exit_code == 0, f"could not make a {what}: {made.stderr[:200]!r}"
            types = conformance.run(_types(exporter))
            linked = [name for name in sorted(names) if types.get(name) is kind]
            assert linked, (
                f"the export shows the {what} as {[types.get(n) for n in sorted(names)]}, "
                f"not as a {kind.value}: entries must keep their types"
            )
            with pytest.raises(OutputRejected) as refused:
                conformance.run(exported(exporter))
            assert refused.value.path == linked[0], f"the refusal names {refused.value.path!r}"


mark_checks(OutputChecks, pytest.mark.mango_capability_group)

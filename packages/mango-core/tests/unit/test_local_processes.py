"""Background processes of the local provider: what the conformance group cannot see from outside.

The log cap (oldest bytes dropped and counted), an exit recorded after the
starting worker has gone, a destroy or purge from a fresh provider killing
the host processes, and a recorded pid that the kernel gave to a newer
process left alone.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mango.domain.errors import InvalidInput, ProcessNotFound, SandboxNotFound
from mango.domain.sandbox_ports import ProcessState
from mango.domain.values import Command, SandboxSpec
from mango.local import LocalProvider
from mango.local.processes import kill_recorded_processes, processes_dir

SPEC = SandboxSpec()
KEY = "session-procs"
BOUND = 10.0


def alive(pid: int) -> bool:
    """True while ``pid`` is a live (not zombie) host process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


async def until(condition: object, bound: float = BOUND) -> bool:
    """Poll ``condition()`` until it is true or ``bound`` seconds pass."""
    deadline = time.monotonic() + bound
    while not condition():  # type: ignore[operator]
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def sh(script: str, **options: object) -> Command:
    return Command(("sh", "-c", script, "sh"), **options)  # type: ignore[arg-type]


async def test_log_cap_drops_the_oldest_bytes_and_counts_them(tmp_path: Path) -> None:
    """Past the cap the oldest segments go; ``dropped`` says how many bytes, offsets stay."""
    provider = LocalProvider(tmp_path, max_process_log_bytes=800)
    sandbox = await provider.create(KEY, SPEC)
    lines = b"".join(b"%04d\n" % index for index in range(1000))
    handle = await sandbox.start(
        sh("i=0; while [ $i -lt 1000 ]; do printf '%04d\\n' $i; i=$((i+1)); done")
    )
    info = await sandbox.wait(handle.id, timeout=BOUND)
    assert (info.state, info.exit_code) == (ProcessState.EXITED, 0)
    output = await sandbox.logs(handle.id, max_bytes=1 << 20)
    assert output.complete
    assert 0 < output.dropped == output.offset
    assert output.next_offset == len(lines)
    assert output.data == lines[output.dropped :]
    assert 700 <= len(output.data) <= 800  # the cap, less at most one segment (cap / 8)
    later = await sandbox.logs(handle.id, since=len(lines) - 5)
    assert (later.data, later.offset, later.dropped) == (b"0999\n", len(lines) - 5, output.dropped)
    past = await sandbox.logs(handle.id, since=len(lines) + 10)
    assert (past.data, past.offset, past.next_offset, past.complete) == (
        b"",
        len(lines) + 10,
        len(lines) + 10,
        True,
    )
    with pytest.raises(InvalidInput):
        await sandbox.logs(handle.id, since=-1)
    with pytest.raises(InvalidInput):
        await sandbox.logs(handle.id, max_bytes=0)
    await sandbox.destroy()


async def test_exit_is_recorded_after_the_starting_worker_has_gone(tmp_path: Path) -> None:
    """A worker starts a process and exits; a fresh provider later reads its exit status."""
    provider = LocalProvider(tmp_path)
    sandbox = await provider.create(KEY, SPEC)
    script = (
        "import asyncio, sys\n"
        "from mango.local import LocalProvider\n"
        "from mango.domain.values import Command, SandboxSpec\n"
        "async def main():\n"
        "    p = LocalProvider(sys.argv[1])\n"
        "    s = await p.create(sys.argv[2], SandboxSpec())\n"
        "    h = await s.start(Command(('sh', '-c', 'read -r x; echo got $x; exit 5')))\n"
        "    print(h.id)\n"
        "asyncio.run(main())\n"
    )
    started = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", script, str(tmp_path), KEY],
        capture_output=True,
        check=True,
        timeout=60,
    )
    process_id = started.stdout.decode().strip()
    fresh = await LocalProvider(tmp_path).attach(KEY, sandbox.ref, SPEC)
    assert [info.id for info in await fresh.processes()] == [process_id]
    await fresh.send_stdin(process_id, b"hello\n")
    info = await fresh.wait(process_id, timeout=BOUND)
    assert (info.state, info.exit_code) == (ProcessState.EXITED, 5)
    assert (await fresh.logs(process_id)).data == b"got hello\n"
    await fresh.destroy()


@pytest.mark.parametrize("how", ["destroy", "purge"])
async def test_destroy_and_purge_from_a_fresh_provider_kill_the_host_processes(
    tmp_path: Path, how: str
) -> None:
    """Every recorded process tree and its supervisor die; the records go with the sandbox."""
    sandbox = await LocalProvider(tmp_path).create(KEY, SPEC)
    handle = await sandbox.start(sh('sleep 600 & printf %s "$!" > child.pid; exec cat'))
    assert handle.pid is not None
    pid_file = Path(sandbox.root) / "child.pid"
    # Written, not only created: the shell's redirection makes the file before printf fills it.
    assert await until(lambda: pid_file.exists() and pid_file.read_text().isdigit())
    child = int(pid_file.read_text())
    directory = processes_dir(
        Path(sandbox.ref.external_id).parent, Path(sandbox.ref.external_id).name
    )
    supervisor = json.loads((directory / handle.id / "pid.json").read_text())["supervisor"]
    assert alive(handle.pid)
    assert alive(child)
    assert alive(supervisor)
    fresh = LocalProvider(tmp_path)
    if how == "destroy":
        await fresh.destroy(KEY, sandbox.ref)
    else:
        await fresh.purge(KEY)
    for pid in (handle.pid, child, supervisor):
        assert await until(lambda pid=pid: not alive(pid)), f"{pid} outlived the {how}"
    assert not directory.exists()
    with pytest.raises(SandboxNotFound):
        await sandbox.processes()


def test_a_reused_pid_is_never_killed(tmp_path: Path) -> None:
    """A record whose pid now names a process started after it is left alone."""
    bystander = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        records = tmp_path / ".procs" / "mango-x" / "p-1-00000000"
        records.mkdir(parents=True)
        # Recorded "before" the bystander started (boot time 1 ns): its pid was reused since.
        (records / "pid.json").write_text(
            json.dumps(
                {
                    "pid": bystander.pid,
                    "pgid": bystander.pid,
                    "supervisor": bystander.pid,
                    "boot_ns": 1,
                }
            )
        )
        kill_recorded_processes(tmp_path, "mango-x")
        assert bystander.poll() is None
        assert alive(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()


async def test_unknown_and_malformed_ids_are_not_found(tmp_path: Path) -> None:
    """Ids that were never handed out, or that try to name a path, are ProcessNotFound."""
    sandbox = await LocalProvider(tmp_path).create(KEY, SPEC)
    for process_id in ("p-1-00000000", "../../etc", "", "p-x-y"):
        with pytest.raises(ProcessNotFound):
            await sandbox.logs(process_id)
    assert (await sandbox.processes()) == []  # the sandbox is still there, untouched
    await sandbox.destroy()

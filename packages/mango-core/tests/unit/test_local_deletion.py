"""Deleting local Sessions: whatever the sandbox did to its directory, and while commands run.

The owner record lives outside the session directory, so nothing a command
reaches through ``..`` can make a Session undeletable; a forced deletion
removes what the Session's names own without trusting any record; a deletion
a crash interrupted is finished by the next one, also for a Session that
never got a binding; and a deletion from any process stops the commands
running in the sandbox, whose results say so.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mango.app import InMemoryBindingStore, SessionManager
from mango.domain.errors import OwnershipError
from mango.domain.hashing import spec_hash
from mango.domain.values import (
    Binding,
    Command,
    ProvisioningIntent,
    SandboxRef,
    SandboxSpec,
)
from mango.local import LocalProvider
from mango.local.runs import COMPACT_BYTES, kill_logged_runs, log_run, run_log

SPEC = SandboxSpec(timeout=60.0)
NAMESPACE = "deletion-test"


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return tmp_path / "sandboxes"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside every sandbox, with a file that must survive every deletion."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "precious.txt").write_text("keep me")
    return path


def manager(base: Path, store: InMemoryBindingStore) -> SessionManager:
    """A fresh SessionManager (a fresh provider: another worker or a CLI process)."""
    return SessionManager(LocalProvider(base, namespace=NAMESPACE), store)


def remnants(base: Path) -> list[str]:
    """Everything under the base directory, as relative paths, mango's empty trees left out."""
    found = []
    for path in sorted(base.rglob("*")):
        if path.name in (".owners", ".runs") and path.is_dir() and not any(path.iterdir()):
            continue
        found.append(str(path.relative_to(base)))
    return found


def retire(ref: SandboxRef, token: str) -> None:
    """Rename a session directory as a removal's first step does (a crash right after it)."""
    session_dir = Path(ref.external_id)
    session_dir.rename(session_dir.with_name(f"{session_dir.name}.deleting-{token}"))


def exists(*parts: str | Path) -> bool:
    """Whether the path exists (not following a last link)."""
    return os.path.lexists(Path(*parts))


def make_legacy(base: Path, provider: LocalProvider, key: str) -> Path:
    """A session directory in format 2: the owner record inside it."""
    base.mkdir(parents=True)
    session_dir = base.resolve() / provider.ownership.name(key)
    (session_dir / "workspace").mkdir(parents=True)
    legacy = {"format": 2, "provider": "local", "labels": provider.ownership.labels(key)}
    (session_dir / "owner.json").write_text(json.dumps(legacy))
    return session_dir


def unlock_moved(base: Path) -> list[str]:
    """Give back access to directories a test's command moved away; return what else is left."""
    left = remnants(base)
    for name in left:
        if name.startswith("elsewhere"):
            (base / name).chmod(0o700)
    return [name for name in left if not name.startswith("elsewhere")]


def pid_in(path: Path) -> int | None:
    """The pid a command wrote to ``path``, once it has."""
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text else None


async def bound(base: Path, store: InMemoryBindingStore, session_id: str) -> SessionManager:
    """A manager with ``session_id`` bound to a sandbox holding a few files."""
    sessions = manager(base, store)
    await sessions.ensure_session(session_id)
    sandbox = await sessions.acquire(session_id, SPEC)
    made = await sandbox.exec(Command(("sh", "-c", "mkdir -p d && touch d/a d/b f")))
    assert made.exit_code == 0
    return sessions


async def in_sandbox(sessions: SessionManager, session_id: str, script: str) -> None:
    """Run ``script`` in the Session's workspace, as a command could; it must succeed.

    It runs beside the sandbox rather than through ``exec``: the local sandbox is
    no isolation boundary, so this is what a command can do, and a script that
    moves the session directory would race the provider's own check for a
    destroy (a slow event loop sees the directory gone while the command runs
    and stops it as destroyed).
    """
    sandbox = await sessions.acquire(session_id, SPEC)
    result = await asyncio.to_thread(
        subprocess.run, ("sh", "-c", script), cwd=sandbox.root, capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr


def move_away_and_link(session_dir: Path, outside: Path) -> None:
    """What ``cd .. && mv ../$(basename $PWD) ../elsewhere && ln -s OUTSIDE ...`` does.

    Done here, as the user commands run as: run by a command, it races the
    provider's check after the start, to which a session directory renamed
    away is a destroy from another process, so the command may be killed
    between the ``mv`` and the ``ln`` (on a loaded machine it was).
    """
    session_dir.rename(session_dir.with_name("elsewhere"))
    session_dir.symlink_to(outside)


# ---------------------------------------------------------------- what the sandbox does


@pytest.mark.parametrize(
    "script",
    [
        "rm -f ../owner.json && echo '{{}}' > ../owner.json",
        "mv ../workspace ../gone && ln -s {outside} ../workspace",
        None,  # the session directory moved away and a link in its place: move_away_and_link
        "chmod 000 d && chmod 500 ..",
    ],
    ids=["owner-json", "workspace-symlink", "session-dir-symlink", "no-permissions"],
)
async def test_nothing_in_reach_of_a_command_makes_a_session_undeletable(
    base: Path, outside: Path, script: str | None
) -> None:
    """Tampering from inside the sandbox cannot block deletion, nor redirect it outside."""
    store = InMemoryBindingStore()
    sessions = await bound(base, store, "tamper")
    if script is None:
        ref = (await sessions.acquire("tamper", SPEC)).ref
        move_away_and_link(Path(ref.external_id), outside)
    else:
        await in_sandbox(sessions, "tamper", script.format(outside=outside))
    assert await manager(base, store).delete_session("tamper") is True
    assert unlock_moved(base) == []
    assert exists(outside, "precious.txt")
    assert await store.get_session("tamper") is None


async def test_a_format_2_layout_is_read_and_its_record_moved_out(base: Path) -> None:
    """A sandbox made before (record in the session directory) attaches; then the record is safe."""
    provider = LocalProvider(base, namespace=NAMESPACE)
    session_dir = make_legacy(base, provider, "old")
    ref = SandboxRef("local", str(session_dir))
    sandbox = await provider.attach("old", ref, SPEC)
    assert exists(base, ".owners", f"{session_dir.name}.json")
    await sandbox.exec(Command(("rm", "../owner.json")))
    assert await provider.find("old") == ref
    await provider.destroy("old", ref)
    assert remnants(base) == []


# ---------------------------------------------------------------- forced deletion


async def test_forced_delete_removes_what_the_names_own(base: Path) -> None:
    """A record removed on purpose blocks a normal deletion; --force removes everything."""
    store = InMemoryBindingStore()
    sessions = await bound(base, store, "forced")
    await in_sandbox(sessions, "forced", "rm -f ../../.owners/* && mkdir -p ../x/y")
    with pytest.raises(OwnershipError, match="unmanaged"):
        await manager(base, store).delete_session("forced")
    report = await manager(base, store).finish_deletions()
    assert (report.attempted, report.completed) == (1, 0)
    assert await manager(base, store).delete_session("forced", force=True) is True
    assert remnants(base) == []
    assert await store.get_session("forced") is None


async def test_forced_delete_leaves_another_sessions_resource_alone(base: Path) -> None:
    """A binding pointing at another Session's directory is dropped, that directory kept."""
    store = InMemoryBindingStore()
    victim = await LocalProvider(base, namespace=NAMESPACE).create("victim", SPEC)
    await victim.write_file("f", b"kept")
    await bound(base, store, "corrupt")
    corrupt = await store.get_binding("corrupt")
    assert corrupt is not None
    await store.fence_session("corrupt")
    await store.delete_binding(corrupt)
    await store.put_binding(Binding("corrupt", victim.ref, corrupt.spec_hash))  # a damaged row
    with pytest.raises(OwnershipError):
        await manager(base, store).delete_session("corrupt")
    assert await manager(base, store).delete_session("corrupt", force=True) is True
    assert await victim.read_file("f") == b"kept"
    assert not exists(corrupt.ref.external_id)
    assert await store.get_binding("corrupt") is None


# ---------------------------------------------------------------- interrupted deletions


async def test_an_interrupted_removal_of_an_intent_only_session_is_finished(base: Path) -> None:
    """A crash after the rename, with no binding yet: the next deletion removes the leftovers."""
    store = InMemoryBindingStore()
    provider = LocalProvider(base, namespace=NAMESPACE)
    await store.ensure_session("half")
    await store.put_intent(ProvisioningIntent("half", "local", SPEC, spec_hash(SPEC)))
    sandbox = await provider.create("half", SPEC)
    await sandbox.exec(Command(("sh", "-c", "for i in $(seq 50); do touch f$i; done")))
    await store.fence_session("half")
    retire(sandbox.ref, "0123abcd")
    assert await provider.find("half") is None  # nothing live: find alone would miss it
    report = await manager(base, store).finish_deletions()
    assert (report.attempted, report.completed, report.failures) == (1, 1, ())
    assert remnants(base) == []
    assert await store.get_session("half") is None


async def test_an_intent_only_session_whose_directory_became_a_link_is_deleted(
    base: Path, outside: Path
) -> None:
    """find reports the key's entry whatever it became; the deletion removes the link only."""
    store = InMemoryBindingStore()
    provider = LocalProvider(base, namespace=NAMESPACE)
    await store.ensure_session("linked")
    await store.put_intent(ProvisioningIntent("linked", "local", SPEC, spec_hash(SPEC)))
    sandbox = await provider.create("linked", SPEC)
    move_away_and_link(Path(sandbox.ref.external_id), outside)
    assert await provider.find("linked") == sandbox.ref
    assert await manager(base, store).delete_session("linked") is True
    assert unlock_moved(base) == []
    assert exists(outside, "precious.txt")


async def test_leftovers_without_any_row_are_purged_by_name(base: Path) -> None:
    """purge(key) removes a key's leftovers and records even with no directory left."""
    provider = LocalProvider(base, namespace=NAMESPACE)
    sandbox = await provider.create("orphan", SPEC)
    retire(sandbox.ref, "feedf00d")
    assert remnants(base) != []
    await provider.purge("orphan")
    await provider.purge("orphan")
    assert remnants(base) == []


# ---------------------------------------------------------------- commands still running


async def test_a_deletion_from_another_process_stops_running_commands(base: Path) -> None:
    """A provider instance that did not start the command (another process) still stops it."""
    store = InMemoryBindingStore()
    worker = await bound(base, store, "busy")
    sandbox = await worker.acquire("busy", SPEC)
    pid_file = Path(sandbox.root) / "pid"
    running = asyncio.ensure_future(
        sandbox.exec(Command(("sh", "-c", f"echo $$ > {pid_file}; exec sleep 300")))
    )
    deadline = time.monotonic() + 10
    while (pid := pid_in(pid_file)) is None:
        assert time.monotonic() < deadline, "the command did not start"
        await asyncio.sleep(0.01)
    started = time.monotonic()
    assert await manager(base, store).delete_session("busy") is True
    result = await asyncio.wait_for(running, 10)
    assert (result.cancelled, result.exit_code) == (True, -1)
    assert time.monotonic() - started < 10
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert remnants(base) == []


def test_only_the_logged_process_group_is_killed(base: Path) -> None:
    """A line older than the process now using the number is not killed; a true one is."""
    (base / ".runs").mkdir(parents=True)
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        log = run_log(base, "mango-x")
        log.write_bytes(b"%d 1\n" % stranger.pid)  # logged long before it started: reused
        assert kill_logged_runs(base, "mango-x") == 0
        assert stranger.poll() is None
        assert log_run(str(log), stranger.pid)
        assert kill_logged_runs(base, "mango-x") == 1
        assert stranger.wait(10) == -signal.SIGKILL
    finally:
        stranger.kill()
        stranger.wait()


def test_the_run_log_is_compacted_to_live_groups(base: Path) -> None:
    """Past COMPACT_BYTES an append rewrites the log with the groups that still exist."""
    log = str(run_log(base, "mango-y"))
    assert not log_run(log, 12345)  # no log: the caller decides
    (base / ".runs").mkdir(parents=True)
    assert log_run(log, os.getpgrp(), create=True)
    never = 4_194_305  # above any pid_max: never a live group, whatever else runs
    sizes = []
    for _ in range(COMPACT_BYTES // 10):  # lines are about 20 bytes: at least one compaction
        log_run(log, never)
        sizes.append(Path(log).stat().st_size)
        if len(sizes) > 1 and sizes[-1] < sizes[-2]:
            break
    assert sizes[-1] < sizes[-2], "the log was never compacted"
    assert max(sizes) > COMPACT_BYTES - 100
    lines = run_log(base, "mango-y").read_bytes().splitlines()
    assert len(lines) == 1
    assert any(line.startswith(b"%d " % os.getpgrp()) for line in lines)
    assert kill_logged_runs(base, "mango-y") == 0  # never our own group

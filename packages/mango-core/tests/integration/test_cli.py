"""The ``mango`` command line end to end: real processes, real PostgreSQL, local provider."""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

import pytest

pytestmark = pytest.mark.postgres

MANGO = str(Path(sys.executable).with_name("mango"))


@pytest.fixture
def run(database_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Run ``mango ARGS`` with its own state dir and the test's database."""
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("MANGO_", "DOCKER_"))
    }
    env.update(
        MANGO_DATABASE_URL=database_url,
        MANGO_STATE_DIR=str(tmp_path / "state"),
        MANGO_DISABLE_PLUGINS="1",
    )

    def invoke(  # type: ignore[no-untyped-def]
        *args: str, stdin: bytes = b"", extra: dict[str, str] | None = None, cwd: Path | None = None
    ):
        return subprocess.run(
            [MANGO, *args],
            input=stdin,
            capture_output=True,
            env={**env, **(extra or {})},
            cwd=cwd,
            timeout=120,
            check=False,
        )

    def popen(*args: str, stdin: int | IO[bytes] = subprocess.DEVNULL):  # type: ignore[no-untyped-def]
        return subprocess.Popen(
            [MANGO, *args],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )

    invoke.popen = popen  # type: ignore[attr-defined]
    return invoke


def test_exec_persists_files_between_calls(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A second exec in the same Session sees what the first wrote; exit codes pass through."""
    first = run("exec", "--session", "demo", "--", "sh", "-c", "echo hello > note.txt; echo ok")
    assert (first.returncode, first.stdout, first.stderr) == (0, b"ok\n", b"")
    second = run("exec", "--session", "demo", "--", "cat", "note.txt")
    assert (second.returncode, second.stdout) == (0, b"hello\n")
    failing = run("exec", "--session", "demo", "--", "sh", "-c", "echo err >&2; exit 7")
    assert (failing.returncode, failing.stderr) == (7, b"err\n")
    piped = run("exec", "--session", "demo", "--stdin", "--", "cat", stdin=b"\x00\xffbin")
    assert piped.stdout == b"\x00\xffbin"


def test_a_refused_environment_exits_2_and_leaves_nothing(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Packages and a bad host on local: every reason, exit 2, no Session; --via-temporal too."""
    args = ("--package", "pip:requests==2.32.3", "--package", "apt:jq", "--allow-host", "a b")
    for path in ("--direct", "--via-temporal"):
        # No Temporal server runs: admission must refuse before anything is contacted.
        refused = run("exec", path, "--session", "refused", *args, "--", "true")
        assert refused.returncode == 2, refused.stderr
        lines = refused.stderr.decode().splitlines()
        assert lines[0] == (
            "error: provider 'local' cannot run this sandbox: network_allowed_hosts: allowlist "
            "host 'a b' is not a host name: labels are 1-63 letters, digits or '-', not starting "
            "or ending with '-'; network allowlists need network 'limited', not 'none'; local "
            "does not support package installation"
        )
        assert lines[1].startswith("hint: choose a provider that declares it")
    listed = run("sessions", "list", "--json")
    assert json.loads(listed.stdout) == []
    profiles = tmp_path / "profiles.toml"
    profiles.write_text('[profiles.tools]\npackages = { apt = ["jq"] }\n')
    extra = {"MANGO_PROFILES_FILE": str(profiles)}
    by_profile = run("exec", "--session", "p", "--profile", "tools", "--", "true", extra=extra)
    assert by_profile.returncode == 2
    assert b"local does not support package installation" in by_profile.stderr
    unknown = run("exec", "--session", "p", "--profile", "gpu", "--", "true", extra=extra)
    assert unknown.stderr.startswith(b"error: no environment profile 'gpu' in ")
    cloud = run("exec", "--session", "c", "--profile", "cloud", "--", "echo", "ok")
    assert (cloud.returncode, cloud.stdout) == (0, b"ok\n"), cloud.stderr


def test_exec_timeout_exits_124(run) -> None:  # type: ignore[no-untyped-def]
    """A command past its timeout is terminated and the CLI exits 124."""
    result = run("exec", "--session", "t", "--timeout", "0.3", "--", "sleep", "60")
    assert result.returncode == 124
    assert b"timed out" in result.stderr


def test_files_round_trip_and_escape(run) -> None:  # type: ignore[no-untyped-def]
    """files write/read round-trip binary data; an escaping path is one clear error."""
    written = run("files", "write", "--session", "f", "deep/dir/a.bin", stdin=b"\x01\x02")
    assert written.returncode == 0, written.stderr
    read = run("files", "read", "--session", "f", "deep/dir/a.bin")
    assert read.stdout == b"\x01\x02"
    escape = run("files", "read", "--session", "f", "../etc/passwd")
    assert escape.returncode == 2
    assert escape.stderr.startswith(b"error: path '../etc/passwd' contains '..'")
    assert b"Traceback" not in escape.stderr
    missing = run("files", "read", "--session", "f", "absent.txt")
    assert (missing.returncode, missing.stderr.decode().splitlines()) == (
        2,
        [
            "error: no file 'absent.txt' in session 'f'",
            "hint: see what the workspace holds with 'mango exec --session f -- ls -la'",
        ],
    )


def test_files_ls_rm_mv_mkdir(run) -> None:  # type: ignore[no-untyped-def]
    """The file API from the command line: sorted listings, moves, removals, clear errors."""
    made = run("files", "mkdir", "--session", "fa", "docs/old")
    assert made.returncode == 0, made.stderr
    assert run("files", "write", "--session", "fa", "docs/old/a.txt", stdin=b"abc").returncode == 0
    moved = run("files", "mv", "--session", "fa", "docs/old", "docs/new")
    assert moved.returncode == 0, moved.stderr
    listed = run("files", "ls", "--session", "fa", "--json", "--recursive", "docs")
    assert listed.returncode == 0, listed.stderr
    answer = json.loads(listed.stdout)
    assert [(e["path"], e["kind"], e["size"]) for e in answer["entries"]] == [
        ("docs/new", "directory", answer["entries"][0]["size"]),
        ("docs/new/a.txt", "file", 3),
    ]
    assert answer["truncated"] is False
    short = run("files", "ls", "--session", "fa", "--limit", "1", "-r", "docs")
    assert short.stdout.decode().split("\n")[0].split() == [
        "KIND",
        "SIZE",
        "MODE",
        "MODIFIED",
        "PATH",
    ]
    assert short.stdout.decode().split("\n")[1].endswith("  docs/new")
    assert short.stderr == b"mango: the listing stopped at 1 entry; raise --limit to see more\n"
    kept = run("files", "rm", "--session", "fa", "docs")
    assert (kept.returncode, kept.stderr.decode().splitlines()) == (
        2,
        [
            "error: directory 'docs' is not empty; remove it recursively",
            (
                "hint: remove it with everything below it ('mango files rm --recursive'), "
                "or empty it first"
            ),
        ],
    )
    assert run("files", "rm", "--session", "fa", "--recursive", "docs").returncode == 0
    gone = run("files", "ls", "--session", "fa", "docs")
    assert (gone.returncode, gone.stderr.decode().splitlines()) == (
        2,
        [
            "error: no such path 'docs' in session 'fa' (or a parent of it is missing)",
            "hint: list what is there with 'mango files ls --session fa'",
        ],
    )
    never = run("files", "ls", "--session", "nobody")
    assert never.returncode == 2
    assert never.stderr.startswith(b"error: no session 'nobody' with a sandbox to list")


def test_sessions_list_and_delete(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Listing shows the binding; deleting removes sandbox and record; twice is fine."""
    assert run("exec", "--session", "s1", "--", "true").returncode == 0
    listed = json.loads(run("sessions", "list", "--json").stdout)
    assert [(row["session_id"], row["state"]) for row in listed] == [("s1", "bound")]
    assert listed[0]["sandbox"].startswith("local:")
    deleted = json.loads(run("sessions", "delete", "s1", "--json").stdout)
    assert deleted == [{"session_id": "s1", "deleted": True}]
    assert not list((tmp_path / "state" / "sandboxes").glob("mango-*"))
    again = json.loads(run("sessions", "delete", "s1", "--json").stdout)
    assert again == [{"session_id": "s1", "deleted": False}]
    assert json.loads(run("sessions", "list", "--json").stdout) == []


def test_sessions_list_shows_a_lost_sandbox(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A workspace removed behind mango's back is listed as lost once a command met it."""
    import shutil

    assert run("exec", "--session", "s1", "--", "true").returncode == 0
    (session_dir,) = (tmp_path / "state" / "sandboxes").glob("mango-*")
    shutil.rmtree(session_dir)
    failed = run("exec", "--session", "s1", "--", "true")
    assert failed.returncode != 0
    assert b"lost" in failed.stderr
    listed = json.loads(run("sessions", "list", "--json").stdout)
    assert [(row["session_id"], row["state"]) for row in listed] == [("s1", "lost")]
    assert not list((tmp_path / "state" / "sandboxes").glob("mango-*"))
    deleted = json.loads(run("sessions", "delete", "s1", "--json").stdout)
    assert deleted == [{"session_id": "s1", "deleted": True}]


def test_bad_input_gives_one_line_not_a_traceback(run) -> None:  # type: ignore[no-untyped-def]
    """Unknown provider, empty session id and bad settings are clear errors."""
    unknown = run("exec", "--session", "x", "--", "true", extra={"MANGO_SANDBOX": "nosuch"})
    assert unknown.returncode == 2
    assert unknown.stderr.splitlines() == [
        b"error: unknown sandbox provider 'nosuch' (installed: local)",
        b"hint: set MANGO_SANDBOX to one of the installed names, or install the plugin",
    ]
    empty = run("exec", "--session", "", "--", "true")
    assert empty.returncode == 2
    assert b"session id is empty" in empty.stderr
    bad_cap = run("exec", "--session", "x", "--", "true", extra={"MANGO_MAX_OUTPUT_BYTES": "-1"})
    assert bad_cap.returncode == 2
    assert b"MANGO_MAX_OUTPUT_BYTES" in bad_cap.stderr
    for result in (unknown, empty, bad_cap):
        assert b"Traceback" not in result.stderr


def test_a_session_id_not_in_nfc_is_refused(run) -> None:  # type: ignore[no-untyped-def]
    """NFD ``café`` prints like NFC ``café``: every command refuses it and names the NFC one."""
    nfd = "cafe\u0301"
    for args in (
        ("exec", "--session", nfd, "--", "true"),
        ("files", "write", "--session", nfd, "x"),
        ("files", "read", "--session", nfd, "x"),
        ("sessions", "delete", nfd),
    ):
        refused = run(*args)
        assert refused.returncode == 2, args
        assert b"not in Unicode normal form NFC" in refused.stderr, refused.stderr
        assert b"'caf\\xe9'" in refused.stderr, refused.stderr
        assert b"Traceback" not in refused.stderr
    listed = run("sessions", "list", "--json")
    assert json.loads(listed.stdout) == []
    accepted = run("exec", "--session", "caf\u00e9", "--", "true")
    assert accepted.returncode == 0, accepted.stderr


def test_non_utf8_paths_are_invalid_input(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Non-UTF-8 bytes in a files path or --cwd: one clear error, exit 2, nothing written."""
    bad = os.fsdecode(b"caf\xe9.txt")
    written = run("files", "write", "--session", "u", bad, stdin=b"x")
    read = run("files", "read", "--session", "u", bad)
    cwd = run("exec", "--session", "u", "--cwd", os.fsdecode(b"d\xff"), "--", "pwd")
    for result in (written, read, cwd):
        assert result.returncode == 2, result.stderr
        assert b"Traceback" not in result.stderr
        assert b"is not valid UTF-8" in result.stderr, result.stderr
        assert result.stdout == b""
    workspaces = list((tmp_path / "state" / "sandboxes").glob("session-*/workspace"))
    assert [sorted(p.name for p in w.iterdir()) for w in workspaces] in ([], [[]])


def test_providers_reconcile_and_doctor(run) -> None:  # type: ignore[no-untyped-def]
    """providers, reconcile and doctor answer in JSON; doctor finds every part healthy."""
    providers = json.loads(run("providers", "--json").stdout)
    assert providers == [
        {
            "capabilities": ["background-processes", "file-api"],
            "description": providers[0]["description"],
            "name": "local",
            "quirks": [],
            "selected": True,
            "settings": providers[0]["settings"],
            "support_level": "development",
        }
    ]
    report = json.loads(run("reconcile", "--json").stdout)
    assert report["provisioning"] == {"attempted": 0, "completed": 0, "failures": []}
    doctor = run("doctor", "--json")
    checks = {check["name"]: check["ok"] for check in json.loads(doctor.stdout)}
    assert checks["configuration"]
    assert checks["database"]
    assert checks["provider local"]


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://mango:secret@127.0.0.1:1/mango",
        "postgresql://mango@127.0.0.1:1/mango?password=secret",
        "postgresql://mango@127.0.0.1:1/mango?sslpassword=secret&password=secret",
    ],
)
def test_doctor_reports_an_unreachable_database(run, url: str) -> None:  # type: ignore[no-untyped-def]
    """A database that refuses connections is a failed check with a hint, exit 2, no password."""
    result = run("doctor", "--json", extra={"MANGO_DATABASE_URL": url})
    assert result.returncode == 2
    checks = {check["name"]: check for check in json.loads(result.stdout)}
    assert checks["database"]["ok"] is False
    assert b"secret" not in result.stdout + result.stderr


def test_files_read_never_provisions(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Reading from an unknown Session is a clear error and creates no Session or sandbox."""
    result = run("files", "read", "--session", "typo", "f.txt")
    assert result.returncode == 2
    assert b"no session 'typo'" in result.stderr
    listing = run("sessions", "list", "--json")
    assert json.loads(listing.stdout) == []
    sandboxes = tmp_path / "state" / "sandboxes"
    assert not sandboxes.exists() or list(sandboxes.iterdir()) == []


def _read_until(stream, marker: bytes, limit: float = 60.0) -> bytes:  # type: ignore[no-untyped-def]
    """Read from a pipe until ``marker`` has arrived (bounded); return everything read."""
    seen = b""
    deadline = time.monotonic() + limit
    while marker not in seen:
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([stream], [], [], max(remaining, 0))
        assert ready, f"{marker!r} did not arrive; got {seen!r}"
        data = os.read(stream.fileno(), 4096)
        assert data, f"end of output before {marker!r}; got {seen!r}"
        seen += data
    return seen


def test_exec_streams_output_before_the_command_ends(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """stdout and stderr chunks reach the terminal while the command still waits for us."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    script = 'printf early; printf warn >&2; read -r _ < "$1"; printf late; exit 3'
    process = run.popen("exec", "--session", "stream", "--", "sh", "-c", script, "sh", str(gate))
    try:
        assert _read_until(process.stdout, b"early") == b"early"
        assert _read_until(process.stderr, b"warn") == b"warn"
        # The command is still blocked on the gate: only now may it finish.
        with gate.open("w") as writer:
            writer.write("go\n")
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert (process.returncode, out, err) == (3, b"late", b"")


def test_exec_interrupt_kills_the_streaming_command(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """SIGINT while output streams ends mango with 130 and kills the command."""
    pidfile = tmp_path / "pid"
    script = 'printf %s "$$" > "$1"; printf ready; exec sleep 300'
    process = run.popen("exec", "--session", "intr", "--", "sh", "-c", script, "sh", str(pidfile))
    try:
        _read_until(process.stdout, b"ready")
        pid = int(pidfile.read_text())
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130
    deadline = time.monotonic() + 30
    while _alive(pid):
        assert time.monotonic() < deadline, f"command {pid} survived the interrupt"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.mark.parametrize(
    ("signum", "code", "line"),
    [(signal.SIGTERM, 143, b"error: terminated\n"), (signal.SIGHUP, 129, b"error: hung up\n")],
    ids=["SIGTERM", "SIGHUP"],
)
def test_exec_sigterm_kills_the_command_tree_before_exiting(  # type: ignore[no-untyped-def]
    run, tmp_path: Path, signum: signal.Signals, code: int, line: bytes
) -> None:
    """SIGTERM (143) or SIGHUP (129, the terminal closed) ends mango, the command tree first."""
    pids = tmp_path / "pids"
    script = 'sleep 300 & printf "%s %s" "$$" "$!" > "$1"; printf ready; wait'
    session = f"term-{signum.name.lower()}"
    process = run.popen("exec", "--session", session, "--", "sh", "-c", script, "sh", str(pids))
    try:
        _read_until(process.stdout, b"ready")
        shell, child = (int(pid) for pid in pids.read_text().split())
        assert _alive(shell)
        assert _alive(child)
        process.send_signal(signum)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == code
    assert err.endswith(line)
    # Checked right after mango exited, without waiting: nothing may outlive it.
    assert not _alive(shell)
    assert not _alive(child)


def test_cli_imports_only_what_the_command_needs(database_url: str, tmp_path: Path) -> None:
    """Local exec loads neither temporalio nor aiodocker; --help not even psycopg."""
    probe = """
import sys
from mango.cli import cli
try:
    cli(sys.argv[1:], prog_name="mango")
except SystemExit as exit:
    code = exit.code
heavy = {"temporalio", "aiodocker", "aiohttp", "psycopg"}
heavy = sorted({m.split(".")[0] for m in sys.modules} & heavy)
print(" ".join(heavy), file=sys.stderr)
"""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MANGO_")}
    env.update(MANGO_DATABASE_URL=database_url, MANGO_STATE_DIR=str(tmp_path / "state"))

    def loaded(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", probe, *args],
            capture_output=True,
            env=env,
            timeout=120,
            check=False,
        )
        return done.stderr.decode().splitlines()[-1]

    assert loaded("--help") == ""
    assert loaded("providers") == ""
    assert loaded("exec", "--session", "imports", "--", "true") == "psycopg"


async def test_reconcile_failures_exit_2(run, store) -> None:  # type: ignore[no-untyped-def]
    """A deletion reconcile cannot finish is reported, and the command exits 2 as README says."""
    from mango.domain import ProvisioningIntent, SandboxSpec, spec_hash

    await store.ensure_session("elsewhere")
    spec = SandboxSpec()
    await store.put_intent(ProvisioningIntent("elsewhere", "other", spec, spec_hash(spec)))
    await store.fence_session("elsewhere")
    result = run("reconcile", "--json")
    assert result.returncode == 2
    report = json.loads(result.stdout)
    [(session, reason)] = report["deletions"]["failures"]
    assert session == "elsewhere"
    assert "belongs to provider 'other'" in reason


@pytest.mark.skipif(os.geteuid() != 0, reason="the run-as-root path")
def test_root_from_a_private_temporary_directory(run, embedded_data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """As root in a 0700 directory: a reachable state dir works; one inside it fails with the
    README's hint."""
    private = Path(tempfile.mkdtemp())  # 0700, like mktemp -d
    try:
        usable = embedded_data_dir.parent / "state"  # in a directory others may pass
        env = {"MANGO_DATABASE_URL": "", "MANGO_EMBEDDED_IDLE_SECONDS": "0"}
        ok = run(
            "exec",
            "--session",
            "root",
            "--",
            "pwd",
            extra={**env, "MANGO_STATE_DIR": str(usable)},
            cwd=private,
        )
        assert ok.returncode == 0, ok.stderr
        inside = private / "state"
        failed = run(
            "exec",
            "--session",
            "root",
            "--",
            "true",
            extra={**env, "MANGO_STATE_DIR": str(inside)},
            cwd=private,
        )
        assert failed.returncode == 2
        error, hint = failed.stderr.decode().splitlines()
        assert error.startswith("error: PostgreSQL refuses to run as root, so mango runs it as ")
        assert f"but {private} is not searchable by that account" in error
        assert hint.startswith("hint: run mango as a non-root user, allow traversal with")
        readme = (Path(__file__).parents[4] / "README.md").read_text()
        assert "is not searchable by that account" in readme
        assert "MANGO_POSTGRES_USER" in readme
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_files_read_streams_a_file_past_the_read_cap(run) -> None:  # type: ignore[no-untyped-def]
    """files read streams: a 1 GiB sparse file costs the CLI far less memory than its size."""
    made = run("exec", "--session", "big", "--", "sh", "-c", "truncate -s 1G huge.bin")
    assert made.returncode == 0, made.stderr
    small = run("exec", "--session", "big", "--", "sh", "-c", "seq 1 200000 > seq.txt")
    assert small.returncode == 0, small.stderr
    capped = {"MANGO_MAX_READ_BYTES": "4096"}
    read = run("files", "read", "--session", "big", "seq.txt", extra=capped)
    assert read.returncode == 0, read.stderr
    assert read.stdout == b"".join(b"%d\n" % n for n in range(1, 200001))

    # A child's ru_maxrss can start at its parent's resident size (a forked copy
    # of pytest, however large the run made it): measure against a bare python
    # started the same way, so only what mango itself adds counts.
    baseline = subprocess.Popen([sys.executable, "-c", "pass"])
    _, _, bare = os.wait4(baseline.pid, 0)
    baseline.returncode = 0
    process = run.popen("files", "read", "--session", "big", "huge.bin", "-o", os.devnull)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    stderr = process.stderr.read()
    process.stdout.close()
    process.stderr.close()
    assert process.returncode == 0, stderr
    grown = (usage.ru_maxrss - bare.ru_maxrss) * 1024
    assert grown < 256 * 1024 * 1024, f"peak RSS {usage.ru_maxrss} KiB, bare {bare.ru_maxrss} KiB"


STREAMED_SIZE = 512 * 1024 * 1024
GENERATOR = """
import hashlib, sys
out = sys.stdout.buffer
for index in range(int(sys.argv[1])):
    out.write(hashlib.shake_128(index.to_bytes(8, "big")).digest(1 << 20))
"""
"""Writes argv[1] MiB of deterministic bytes to stdout, one MiB at a time (never held whole)."""


def _generated_sha256(mebibytes: int) -> str:
    digest = hashlib.sha256()
    for index in range(mebibytes):
        digest.update(hashlib.shake_128(index.to_bytes(8, "big")).digest(1 << 20))
    return digest.hexdigest()


def test_files_write_streams_stdin_with_bounded_memory(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """files write streams: 512 MiB piped from a generator cost far less RSS and arrive exactly."""
    assert run("files", "write", "--session", "w", "old.bin", stdin=b"old").returncode == 0
    mebibytes = STREAMED_SIZE >> 20
    # As for files read: measure against a bare python started the same way.
    baseline = subprocess.Popen([sys.executable, "-c", "pass"])
    _, _, bare = os.wait4(baseline.pid, 0)
    baseline.returncode = 0
    generator = subprocess.Popen(
        [sys.executable, "-c", GENERATOR, str(mebibytes)], stdout=subprocess.PIPE
    )
    assert generator.stdout is not None
    process = run.popen("files", "write", "--session", "w", "old.bin", stdin=generator.stdout)
    generator.stdout.close()  # mango holds the pipe's only read end
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert generator.wait(timeout=60) == 0
    stderr = process.stderr.read()
    process.stdout.close()
    process.stderr.close()
    assert process.returncode == 0, stderr
    grown = (usage.ru_maxrss - bare.ru_maxrss) * 1024
    assert grown < STREAMED_SIZE // 4, (
        f"peak RSS {usage.ru_maxrss} KiB, bare {bare.ru_maxrss} KiB, for {STREAMED_SIZE} bytes"
    )
    summed = run("exec", "--session", "w", "--", "sh", "-c", "sha256sum old.bin; ls -A")
    assert summed.returncode == 0, summed.stderr
    digest, listing = summed.stdout.decode().split("\n", 1)
    assert digest.split()[0] == _generated_sha256(mebibytes)
    assert listing.split() == ["old.bin"], "the write's temporary was left behind"


def test_files_write_into_a_directory_as_cp_does(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A PATH ending in '/' takes --from FILE's name; from stdin it is refused, nothing made."""
    refused = run("files", "write", "--session", "cp", "notes.d/", stdin=b"text")
    assert (refused.returncode, refused.stderr.decode().splitlines()) == (
        2,
        [
            "error: path 'notes.d/' ends in '/', so it names a directory, not a file",
            (
                "hint: give the file's name after it (for example 'notes.d/NAME'), or pass "
                "--from FILE to write FILE's name into that directory"
            ),
        ],
    )
    assert json.loads(run("sessions", "list", "--json").stdout) == [], "refused, yet provisioned"
    source = tmp_path / "report.txt"
    source.write_bytes(b"quarterly")
    written = run("files", "write", "--session", "cp", "--from", str(source), "notes.d/")
    assert written.returncode == 0, written.stderr
    read = run("files", "read", "--session", "cp", "notes.d/report.txt")
    assert (read.returncode, read.stdout) == (0, b"quarterly")
    kinds = run("exec", "--session", "cp", "--", "sh", "-c", "test -d notes.d && echo dir")
    assert kinds.stdout == b"dir\n", "notes.d must be a directory, not a regular file"


def test_deleting_a_session_stops_its_running_command(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A command running in another mango process is stopped and told its Session was deleted."""
    assert run("exec", "--session", "busy", "--", "true").returncode == 0
    running = run.popen("exec", "--session", "busy", "--", "sh", "-c", "echo up; exec sleep 300")
    ready, _, _ = select.select([running.stdout], [], [], 60)
    assert ready
    assert running.stdout.readline() == b"up\n"
    started = time.monotonic()
    deleted = run("sessions", "delete", "busy")
    assert deleted.returncode == 0, deleted.stderr
    _, stderr = running.communicate(timeout=30)
    assert time.monotonic() - started < 30
    assert running.returncode == 130
    assert b"sandbox was deleted while it ran" in stderr
    assert not list((tmp_path / "state" / "sandboxes").glob("mango-*"))


@pytest.mark.skipif(os.geteuid() != 0, reason="a command bind-mounts only as root")
def test_a_delete_meeting_a_bind_mount_names_it_and_ends_after_umount(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The host's files under a mount survive; exit 2 names the mount; after umount it deletes."""
    host = tmp_path / "host-data"
    host.mkdir()
    (host / "precious.txt").write_text("keep me")
    script = f"mkdir mnt && mount --bind {host} mnt"
    made = run("exec", "--session", "mounted", "--", "sh", "-c", script)
    if made.returncode != 0:
        pytest.skip(f"mount --bind was refused here: {made.stderr.decode().strip()}")
    sandboxes = (tmp_path / "state" / "sandboxes").resolve()
    try:
        refused = run("sessions", "delete", "mounted")
        assert refused.returncode == 2, refused.stderr
        error, hint = refused.stderr.decode().splitlines()[-2:]
        (leftover,) = sandboxes.glob("mango-*.deleting-*")
        mount_point = leftover / "workspace" / "mnt"
        assert error.startswith(f"error: cannot remove the sandbox: {mount_point} is a mount point")
        assert hint.startswith(f"hint: detach it with 'umount {mount_point}'")
        assert (host / "precious.txt").read_text() == "keep me"
        listed = json.loads(run("sessions", "list", "--json").stdout)
        assert [(row["session_id"], row["state"]) for row in listed] == [("mounted", "deleting")]
        subprocess.run(["umount", str(mount_point)], check=True)
        deleted = json.loads(run("sessions", "delete", "mounted", "--json").stdout)
        assert deleted == [{"session_id": "mounted", "deleted": True}]
        assert not list(sandboxes.glob("mango-*"))
        assert (host / "precious.txt").read_text() == "keep me"
    finally:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split(" ")[4]
            if point.startswith(str(sandboxes)):
                subprocess.run(["umount", "-l", point], check=False)


def test_forced_delete_of_a_session_whose_record_a_command_removed(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A deliberately removed owner record blocks delete and reconcile; --force removes it all."""
    made = run("exec", "--session", "wrecked", "--", "sh", "-c", "rm -f ../../.owners/*")
    assert made.returncode == 0, made.stderr
    refused = run("sessions", "delete", "wrecked")
    assert refused.returncode == 2
    assert b"unmanaged" in refused.stderr
    assert run("reconcile").returncode == 2
    both = run("sessions", "delete", "--force", "--via-temporal", "wrecked")
    assert both.returncode == 2
    assert b"--force runs here" in both.stderr
    forced = json.loads(run("sessions", "delete", "--force", "--json", "wrecked").stdout)
    assert forced == [{"session_id": "wrecked", "deleted": True}]
    base = tmp_path / "state" / "sandboxes"
    assert not list(base.glob("mango-*"))
    assert not list(base.glob(".owners/*"))
    assert run("reconcile").returncode == 0


def test_providers_list_their_settings_without_values(run) -> None:  # type: ignore[no-untyped-def]
    """providers shows a provider's settings (name, default, required, set) when asked for,
    never a value."""
    marker = "s3cret-value-never-shown"
    result = run("providers", "--json", extra={"MANGO_LOCAL_SANDBOX_DIR": f"/tmp/{marker}"})
    assert result.returncode == 0, result.stderr
    [local] = [row for row in json.loads(result.stdout) if row["name"] == "local"]
    settings = {spec["env"]: spec for spec in local["settings"]}
    assert settings["MANGO_LOCAL_SANDBOX_DIR"]["set"] is True
    assert settings["MANGO_MAX_OUTPUT_BYTES"]["default"] == "1048576"
    assert marker.encode() not in result.stdout
    # By default only the table and where the settings are; NAME or -v shows them.
    short = run("providers")
    assert short.returncode == 0, short.stderr
    assert b"local settings:" not in short.stdout
    assert b"MANGO_LOCAL_SANDBOX_DIR" not in short.stdout
    assert short.stdout.endswith(b"\nsettings: 'mango providers NAME' (or -v for every provider)\n")
    for args in (("providers", "local"), ("providers", "-v")):
        text = run(*args, extra={"MANGO_LOCAL_SANDBOX_DIR": f"/tmp/{marker}"})
        assert b"local settings:" in text.stdout, args
        assert b"MANGO_LOCAL_SANDBOX_DIR (set)" in text.stdout, args
        assert marker.encode() not in text.stdout
    unknown = run("providers", "nosuch")
    assert (unknown.returncode, unknown.stderr.decode().splitlines()) == (
        2,
        [
            "error: no provider 'nosuch' is installed (installed: local)",
            "hint: 'mango providers' lists the installed providers",
        ],
    )

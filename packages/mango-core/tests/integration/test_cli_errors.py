"""Errors a person can act on: every failure of ``mango`` is mango's two lines, or quiet.

Real processes, real PostgreSQL, the local provider. Usage errors, a missing
file, a directory given as a file, Ctrl-C while the commands load, and a
reader that goes away (``| head``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

MANGO = str(Path(sys.executable).with_name("mango"))
BIG = 8 * 1024 * 1024
"""More than any pipe holds: a reader that stops early leaves mango writing."""


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a ``mango`` process on the test's database and its own state dir."""
    environ = {
        key: value for key, value in os.environ.items() if not key.startswith(("MANGO_", "DOCKER_"))
    }
    environ.update(
        MANGO_DATABASE_URL=database_url,
        MANGO_STATE_DIR=str(tmp_path / "state"),
        MANGO_DISABLE_PLUGINS="1",
    )
    return environ


def mango(
    env: dict[str, str], *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [MANGO, *args], input=stdin, capture_output=True, env=env, timeout=120, check=False
    )


def two_lines(done: subprocess.CompletedProcess[bytes]) -> list[str]:
    """An expected failure's stderr: exit 2, exactly an ``error:`` and a ``hint:`` line."""
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 2, (done.returncode, lines)
    assert len(lines) == 2, lines
    assert lines[0].startswith("error: "), lines
    assert lines[1].startswith("hint: "), lines
    return lines


@pytest.mark.parametrize(
    ("args", "error", "hint"),
    [
        (
            ("exec", "--session", "u", "--timeout", "abc", "--", "true"),
            "error: invalid value for '--timeout': 'abc' is not a number of seconds",
            "hint: see 'mango exec --help'",
        ),
        (
            ("exec", "--session", "u", "--timeout", "nan", "--", "true"),
            (
                "error: invalid value for '--timeout': 'nan' is not a finite number of seconds "
                "(more than 0)"
            ),
            "hint: see 'mango exec --help'",
        ),
        (
            ("exec", "--session", "u", "--max-wait", "inf", "--via-temporal", "--", "true"),
            (
                "error: invalid value for '--max-wait': 'inf' is not a finite number of seconds "
                "(more than 0)"
            ),
            "hint: see 'mango exec --help'",
        ),
        (
            ("store", "reconcile", "--stale-after", "nan"),
            (
                "error: invalid value for '--stale-after': 'nan' is not a finite number of seconds "
                "(0 or more)"
            ),
            "hint: see 'mango store reconcile --help'",
        ),
        (
            ("exec", "--session", "u"),
            "error: missing argument 'ARGV...'",
            "hint: see 'mango exec --help'",
        ),
        (("nosuch",), "error: no such command 'nosuch'", "hint: see 'mango --help'"),
    ],
)
def test_usage_errors_are_two_mango_lines(
    env: dict[str, str], args: tuple[str, ...], error: str, hint: str
) -> None:
    """click's usage errors read like mango's own: error and hint, no 'Usage:' block."""
    assert two_lines(mango(env, *args)) == [error, hint]


def test_a_missing_file_and_an_escape_have_hints(env: dict[str, str]) -> None:
    """Failures whose error carries no hint of its own still get one for their kind."""
    assert mango(env, "exec", "--session", "h", "--", "true").returncode == 0
    missing = two_lines(mango(env, "files", "read", "--session", "h", "absent.txt"))
    assert (
        missing[1] == "hint: see what the workspace holds with 'mango exec --session h -- ls -la'"
    )
    escape = two_lines(mango(env, "files", "read", "--session", "h", "../up"))
    assert escape[1] == "hint: give a path relative to the workspace, without '..' or a leading '/'"
    no_source = two_lines(
        mango(env, "files", "write", "--session", "h", "x", "--from", "/nonexistent")
    )
    assert no_source[1] == "hint: see 'mango files write --help'"


def test_a_trailing_slash_names_a_directory(env: dict[str, str], tmp_path: Path) -> None:
    """files write to 'notes.d/' is refused (nothing written), read too; 'notes.d/a' works."""
    refused = two_lines(mango(env, "files", "write", "--session", "d", "notes.d/", stdin=b"x"))
    assert refused == [
        "error: path 'notes.d/' ends in '/', so it names a directory, not a file",
        (
            "hint: give the file's name after it (for example 'notes.d/NAME'), or pass "
            "--from FILE to write FILE's name into that directory"
        ),
    ]
    listing = mango(env, "exec", "--session", "d", "--", "ls", "-A")
    assert (listing.returncode, listing.stdout) == (0, b"")
    written = mango(env, "files", "write", "--session", "d", "notes.d/a", stdin=b"x")
    assert written.returncode == 0, written.stderr
    assert two_lines(mango(env, "files", "read", "--session", "d", "notes.d/."))[0].endswith(
        "names a directory, not a file"
    )
    assert mango(env, "files", "read", "--session", "d", "notes.d/a").stdout == b"x"


def _read_a_little_then_close(env: dict[str, str], *args: str) -> tuple[int, bytes, bytes]:
    """Run ``mango ARGS``, read 10 bytes of its output, close the pipe (``| head -c 10``)."""
    with subprocess.Popen(
        [MANGO, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            head = process.stdout.read(10)
            process.stdout.close()
            err = process.stderr.read()
            process.wait(timeout=120)
        finally:
            process.kill()
    return process.returncode, head, err


def test_a_reader_that_goes_away_ends_the_command_quietly(
    env: dict[str, str], tmp_path: Path
) -> None:
    """files read, store get, exec -- cat, each '| head': exit 141, nothing on stderr."""
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(BIG))
    assert mango(env, "files", "write", "--session", "p", "big", "--from", str(big)).returncode == 0
    stored = mango(env, "store", "put", str(big))
    assert stored.returncode == 0, stored.stderr
    file_id = stored.stdout.decode().strip()
    for args in (
        ("files", "read", "--session", "p", "big"),
        ("store", "get", file_id),
        ("exec", "--session", "p", "--", "cat", "big"),
    ):
        code, head, err = _read_a_little_then_close(env, *args)
        assert (code, err) == (141, b""), args
        assert head == big.read_bytes()[:10]


_INTERRUPT_WHILE_IMPORTING = """
import os, signal, sys

def ctrl_c(event, args):
    # Ctrl-C arrives while the module {module!r} loads, as it would from a person's terminal.
    if event == "import" and args[0] == {module!r}:
        os.kill(os.getpid(), signal.SIGINT)

sys.addaudithook(ctrl_c)
sys.argv = ["mango", *sys.argv[1:]]
from mango.cli import main
main()
"""


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("mango.cli.common", ("exec", "--session", "i", "--", "true")),  # the commands load
        ("mango.plugins", ("providers",)),  # in a command, before its event loop runs
    ],
)
def test_ctrl_c_while_starting_is_one_line(
    env: dict[str, str], module: str, args: tuple[str, ...]
) -> None:
    """Ctrl-C in mango's first second: 'error: interrupted' and 130, no traceback, no 'Aborted!'."""
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPT_WHILE_IMPORTING.format(module=module), *args],
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr) == (130, b"error: interrupted\n")


def test_pause_and_ports_are_refused_where_undeclared(env: dict[str, str]) -> None:
    """The local provider declares neither pause nor exposed ports: two lines each, exit 2.

    The capability is checked before the Session is even looked up.
    """
    paused = two_lines(mango(env, "sessions", "pause", "p"))
    assert "local does not support pause and resume" in paused[0]
    exposed = two_lines(mango(env, "ports", "expose", "--session", "p", "8080"))
    assert "local does not support exposed ports" in exposed[0]

"""The remote command-line rule, proven by running its lines through a real /bin/sh."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mango.domain import InvalidInput
from mango.provider.shell import (
    MAX_INLINE_LINE_BYTES,
    CommandPlan,
    command_line,
    plan_command,
    quote,
)

PROBE = (
    "import hashlib, json, os, sys; "
    "print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(), "
    "'env': {k: v for k, v in os.environ.items() if k.startswith('MANGO_T_')}, "
    "'stdin': hashlib.sha256(sys.stdin.buffer.read()).hexdigest()}))"
)
ARGV_PREFIX = (sys.executable, "-c", PROBE)
MAX_ARG_STRLEN = 128 * 1024

texts = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)


def run_line(plan: CommandPlan) -> dict[str, object]:
    """Run the planned line as a remote provider would: ``/bin/sh -c LINE``."""
    if plan.stdin.staged:
        assert plan.stdin.path is not None
        Path(plan.stdin.path).write_bytes(plan.stdin.data)
    completed = subprocess.run(
        ["/bin/sh", "-c", plan.line],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        env={"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8", "PYTHONUTF8": "1"},
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result: dict[str, object] = json.loads(completed.stdout)
    return result


def test_quote_examples() -> None:
    """Single quotes, the '"'"' escape and the empty word, as the reference writes them."""
    assert quote("") == "''"
    assert quote("it's") == "'it'\"'\"'s'"
    line = command_line(["/bin/sh", "-c", "exit 7"])
    assert line.startswith("{ mango_p='/bin/sh'; ")
    assert line.endswith("exec '/bin/sh' '-c' 'exit 7'; }")


@pytest.mark.parametrize(
    ("program", "code", "message"),
    [
        ("mango-no-such-program", 127, "mango: mango-no-such-program: command not found"),
        ("/nonexistent/tool", 127, "mango: /nonexistent/tool: No such file or directory"),
        ("/etc", 126, "mango: /etc: Permission denied"),
    ],
)
@pytest.mark.parametrize("new_session", [False, True])
def test_a_program_that_cannot_run_is_reported_as_local_reports_it(
    program: str, code: int, message: str, new_session: bool
) -> None:
    """127/126 with the local provider's words, never the shell's or setsid's."""
    for line in (
        command_line([program, "arg"], new_session=new_session),
        plan_command([program], stdin=b"in", staging_dir="/tmp", new_session=new_session).line,
    ):
        completed = subprocess.run(
            ["/bin/sh", "-c", line], capture_output=True, check=False, stdin=subprocess.DEVNULL
        )
        assert completed.returncode == code
        assert completed.stderr.decode() == message + "\n"


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(args=st.lists(texts, max_size=6), stdin=st.binary(max_size=2048))
def test_argv_and_stdin_survive_a_real_shell(tmp_path: Path, args: list[str], stdin: bytes) -> None:
    """Arbitrary text args and stdin bytes reach the program exactly (inline stdin)."""
    plan = plan_command([*ARGV_PREFIX, *args], stdin=stdin, staging_dir=str(tmp_path))
    assert plan.stdin.kind == ("inline" if stdin else "none")
    result = run_line(plan)
    assert result["argv"] == args
    assert result["stdin"] == hashlib.sha256(stdin).hexdigest()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    args=st.lists(texts, max_size=4),
    env=st.dictionaries(st.from_regex(r"MANGO_T_[A-Za-z0-9_]{0,8}", fullmatch=True), texts),
    stdin=st.binary(min_size=1, max_size=4096),
)
def test_env_cwd_and_staged_stdin_survive_a_real_shell(
    tmp_path: Path, args: list[str], env: dict[str, str], stdin: bytes
) -> None:
    """Env, cwd and staged stdin (forced by a tiny inline limit) reach the program."""
    root = tmp_path / "root it's"
    (root / "sub dir").mkdir(parents=True, exist_ok=True)
    staging = tmp_path / "staging"
    staging.mkdir(exist_ok=True)
    plan = plan_command(
        [*ARGV_PREFIX, *args],
        stdin=stdin,
        root=str(root),
        cwd="sub dir",
        env=env,
        staging_dir=str(staging),
        max_inline_line_bytes=len(
            command_line([*ARGV_PREFIX, *args], root=str(root), cwd="sub dir", env=env).encode()
        ),
    )
    assert plan.stdin.staged
    result = run_line(plan)
    assert result["argv"] == args
    assert result["cwd"] == str(root / "sub dir")
    assert result["env"] == env
    assert result["stdin"] == hashlib.sha256(stdin).hexdigest()
    assert list(staging.iterdir()) == []


def test_large_stdin_is_staged_and_removed(tmp_path: Path) -> None:
    """Stdin of more than 1 MiB of every byte value is staged, delivered and unlinked."""
    data = bytes(range(256)) * 4200 + b"\x00tail"
    plan = plan_command(ARGV_PREFIX, stdin=data, staging_dir=str(tmp_path))
    assert plan.stdin.staged
    assert plan.stdin.path is not None
    assert plan.stdin.path.startswith(str(tmp_path) + "/")
    assert len(plan.line.encode()) < 2048  # the program check, not the stdin
    result = run_line(plan)
    assert result["stdin"] == hashlib.sha256(data).hexdigest()
    assert not Path(plan.stdin.path).exists()


def test_inline_limit_keeps_the_line_under_max_arg_strlen(tmp_path: Path) -> None:
    """The largest inline stdin still runs, and inlining 1 MiB would have broken sh -c."""
    budget = MAX_INLINE_LINE_BYTES - len(plan_command(ARGV_PREFIX, staging_dir="/x").line) - 64
    data = os.urandom(budget * 3 // 4 - 16)
    plan = plan_command(ARGV_PREFIX, stdin=data, staging_dir=str(tmp_path))
    assert plan.stdin.kind == "inline"
    assert len(plan.line.encode()) < MAX_ARG_STRLEN
    assert run_line(plan)["stdin"] == hashlib.sha256(data).hexdigest()

    too_big = plan_command(
        ARGV_PREFIX,
        stdin=os.urandom(1 << 20),
        staging_dir=str(tmp_path),
        max_inline_line_bytes=4 << 20,
    )
    assert too_big.stdin.kind == "inline"
    with pytest.raises(OSError, match="too long"):
        subprocess.run(["/bin/sh", "-c", too_big.line], capture_output=True, check=False)


def test_a_failing_cd_leaves_no_staged_file(tmp_path: Path) -> None:
    """The staged file is unlinked before anything else runs, even if cd fails."""
    root = str(tmp_path / "missing")
    plan = plan_command(
        ["true"],
        stdin=b"x" * 10,
        root=root,
        staging_dir=str(tmp_path),
        max_inline_line_bytes=len(command_line(["true"], root=root)),
    )
    assert plan.stdin.staged
    assert plan.stdin.path is not None
    Path(plan.stdin.path).write_bytes(plan.stdin.data)
    completed = subprocess.run(["/bin/sh", "-c", plan.line], capture_output=True, check=False)
    assert completed.returncode != 0
    assert not Path(plan.stdin.path).exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"argv": []}, "non-empty"),
        ({"argv": ["a\x00b"]}, "NUL"),
        ({"argv": [""]}, "empty"),
        ({"argv": ["true"], "env": {"1BAD": "x"}}, "not valid"),
        ({"argv": ["true"], "env": {"A B": "x"}}, "not valid"),
        ({"argv": ["true"], "cwd": "/etc"}, "relative"),
        ({"argv": ["x" * 200_000]}, "at most"),
    ],
)
def test_invalid_commands_are_refused(kwargs: dict[str, object], message: str) -> None:
    """Malformed argv, env names, cwd and oversized lines raise InvalidInput."""
    with pytest.raises(InvalidInput, match=message):
        plan_command(staging_dir="/var/lib/mango/stdin", **kwargs)  # type: ignore[arg-type]


def test_relative_staging_dir_is_refused() -> None:
    """The staging directory must be absolute (it is opened from any cwd)."""
    with pytest.raises(InvalidInput, match="absolute"):
        plan_command(["true"], stdin=b"x" * 1000, staging_dir="rel", max_inline_line_bytes=700)


def test_tree_killer_spare_kills_descendants_and_continues_the_root(tmp_path: Path) -> None:
    """``spare``: every descendant dies, the root shell goes on and reports."""
    from mango.provider.shell import TREE_KILLER

    done = tmp_path / "done"
    script = '( sleep 300 & sleep 300 & echo ready; wait ) ; echo "after $?" > "$1"'
    root = subprocess.Popen(
        ["/bin/sh", "-c", script, "root", str(done)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert root.stdout is not None
        assert root.stdout.readline() == "ready\n"  # the descendants are running
        subprocess.run(
            ["/bin/sh", "-c", TREE_KILLER, "mango-kill", str(root.pid), "spare"], check=True
        )
        assert root.wait(30) == 0
        assert done.read_text().startswith("after ")
    finally:
        root.kill()
        root.communicate()

"""Gap checks: contract clauses the reference suite promised but never checked.

Bounded output, timeouts, mid-flight cancellation, stdin, typed errors for
empty keys and malformed refs, truncating writes, symlink escapes, and the
rest of the exec contract (exit 127, env and cwd).
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import asyncio
import posixpath
import time

import attrs
import pytest

from mango.provider import (
    Command,
    ExecResult,
    InvalidInput,
    MangoError,
    PathEscapeError,
    PermanentError,
    Quirk,
    SandboxNotFound,
    SandboxRef,
    is_permanent,
)
from mango_conformance.checks import assert_same_bytes, mark_checks
from mango_conformance.harness import Harness
from mango_conformance.keys import run_id
from mango_conformance.scripts import (
    CAT_ARG,
    ENV_AND_CWD,
    FLOOD,
    FLOOD_CHUNK,
    PATH_STATE,
    PROCESS_TREE,
    describe_pid,
    flood_expected,
    wait_for_file,
    wait_until_gone,
)

__all__ = ["TIMEOUT_SECONDS", "GapChecks"]

TIMEOUT_SECONDS = 1.5
"""The exec timeout the timeout check sets on a command that would sleep for minutes."""


@attrs.frozen
class _CancelOutcome:
    started: bool
    finished: bool
    cancelled: bool
    elapsed: float
    outcome: str


def _must_die(leader_only: bool) -> tuple[str, ...]:
    """The processes of the process-tree script that a timeout or cancel must end.

    Under the ``timeout-kills-leader-only`` quirk the child may outlive its leader.
    """
    return ("leader",) if leader_only else ("leader", "child")


def _check_destroy_while_running(conformance: Harness, *, elsewhere: bool) -> None:
    """Destroy a sandbox (here, or through a fresh provider) while ``sleep 300`` runs in it."""
    options = conformance.options
    key = conformance.new_key("destroy-running")
    sandbox = conformance.create(key)
    other = conformance.open_provider() if elsewhere else None
    command = conformance.command("echo started > destroy.ready; exec sleep 300")

    async def scenario() -> tuple[bool, bool, asyncio.Task[ExecResult]]:
        task = asyncio.ensure_future(sandbox.exec(command))
        started = await wait_for_file(sandbox, "destroy.ready", options.operation_timeout)
        if started:
            if other is None:
                await sandbox.destroy()
            else:
                await other.destroy(key, sandbox.ref)
        done, _ = await asyncio.wait({task}, timeout=options.prompt_seconds)
        if task not in done:
            task.cancel()
            await asyncio.wait({task})
        return started, task in done, task

    started, finished, task = conformance.run(scenario(), "destroy while a command runs")
    assert started, "the command never wrote destroy.ready"
    who = "another provider's destroy" if elsewhere else "destroy"
    assert finished, f"exec still ran {options.prompt_seconds}s after {who}"
    assert not task.cancelled(), f"after {who}, exec raised CancelledError"
    error = task.exception()
    assert error is None, f"after {who}, exec raised {error!r} instead of returning cancelled=True"
    result = task.result()
    assert (result.cancelled, result.exit_code) == (True, -1), (
        f"after {who}, exec returned {result!r}, not cancelled=True with exit -1"
    )


class GapChecks:
    """Checks beyond the reference core suite, each a clause of the port contract."""

    def test_output_is_bounded_and_flagged(self, conformance: Harness) -> None:
        """A command printing far past the cap returns promptly with an exact, flagged prefix."""
        options = conformance.options
        sandbox = conformance.create()
        conformance.run(sandbox.write_file("flood.bin", FLOOD_CHUNK))
        block = 9 + len(FLOOD_CHUNK)
        blocks = -(-options.flood_size // block)
        expected = flood_expected(blocks)
        started = time.monotonic()
        result = conformance.run(
            sandbox.exec(
                conformance.command(FLOOD, str(blocks), timeout=max(60.0, options.prompt_seconds))
            ),
            "flood exec",
        )
        elapsed = time.monotonic() - started
        assert not result.timed_out, (
            f"printing {len(expected)} bytes timed out after {elapsed:.1f}s"
        )
        assert result.exit_code == 0, result.stderr[:200]
        streams = [
            ("stdout", result.stdout, result.stdout_truncated),
            ("stderr", result.stderr, result.stderr_truncated),
        ]
        if options.has_quirk(Quirk.STDERR_MERGED):
            # Both streams arrive interleaved on stdout: it is capped and
            # flagged, but no longer an exact prefix of either stream.
            assert (result.stderr, result.stderr_truncated) == (b"", False), (
                "stderr-merged is declared, but stderr carried output"
            )
            assert result.stdout_truncated, "stdout: the merged flood was not flagged"
            assert len(result.stdout) < 2 * len(expected), "stdout kept the whole merged flood"
            if options.output_cap is not None:
                assert len(result.stdout) == options.output_cap
            return
        for stream, data, truncated in streams:
            assert truncated, f"{stream}: {len(expected)} bytes were printed but not flagged"
            assert len(data) < len(expected), f"{stream}: kept all {len(data)} bytes"
            if options.output_cap is not None:
                assert len(data) == options.output_cap, f"{stream}: kept {len(data)} bytes"
            assert_same_bytes(
                data, expected[: len(data)], f"{stream} (an exact prefix of the output)"
            )

    @pytest.mark.mango_destructive
    def test_timeout_sets_timed_out_and_kills_tree(self, conformance: Harness) -> None:
        """A timed-out command returns promptly, flagged with exit -1, and its processes die."""
        options = conformance.options
        sandbox = conformance.create()
        started = time.monotonic()
        result = conformance.run(
            sandbox.exec(conformance.command(PROCESS_TREE, "timeout", timeout=TIMEOUT_SECONDS)),
            "timed-out exec",
        )
        elapsed = time.monotonic() - started
        assert result.timed_out, f"a {TIMEOUT_SECONDS}s timeout on sleep 300 was not reported"
        assert result.exit_code == -1
        assert elapsed < TIMEOUT_SECONDS + options.prompt_seconds, f"returned after {elapsed:.1f}s"
        if options.has_quirk(Quirk.TIMEOUT_ENDS_SANDBOX):
            return  # the sandbox and everything in it are gone; nothing left to check
        assert conformance.run(wait_for_file(sandbox, "timeout.ready", 0)), (
            "the command had not started within the timeout; nothing to check"
        )
        for role in _must_die(options.has_quirk(Quirk.TIMEOUT_KILLS_LEADER_ONLY)):
            gone = conformance.run(
                wait_until_gone(sandbox, options.shell, f"timeout.{role}", options.prompt_seconds)
            )
            assert gone, (
                f"the {role} process outlived the timeout by {options.prompt_seconds}s: "
                + conformance.run(describe_pid(sandbox, options.shell, f"timeout.{role}"))
            )
        after = conformance.sh(sandbox, "printf usable")
        assert after.stdout == b"usable", "the sandbox is not usable after a timeout"

    def test_cancel_mid_flight_kills_process_tree(self, conformance: Harness) -> None:
        """Cancelling a running exec re-raises CancelledError promptly and kills its processes."""
        options = conformance.options
        sandbox = conformance.create()
        command = conformance.command(PROCESS_TREE, "cancel")

        async def scenario() -> _CancelOutcome:
            task = asyncio.ensure_future(sandbox.exec(command))
            started = await wait_for_file(sandbox, "cancel.ready", options.operation_timeout)
            begun = time.monotonic()
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=options.prompt_seconds)
            elapsed = time.monotonic() - begun
            outcome = "pending"
            if task in done:
                outcome = "cancelled" if task.cancelled() else _describe(task)
            return _CancelOutcome(started, task in done, task.cancelled(), elapsed, outcome)

        outcome = conformance.run(scenario(), "mid-flight cancel")
        assert outcome.started, "the command never wrote cancel.ready"
        assert outcome.finished, f"exec did not return within {options.prompt_seconds}s of cancel"
        assert outcome.cancelled, f"exec swallowed the cancellation and {outcome.outcome}"
        for role in _must_die(options.has_quirk(Quirk.TIMEOUT_KILLS_LEADER_ONLY)):
            gone = conformance.run(
                wait_until_gone(sandbox, options.shell, f"cancel.{role}", options.prompt_seconds)
            )
            assert gone, (
                f"the {role} process outlived the cancellation by {options.prompt_seconds}s: "
                + conformance.run(describe_pid(sandbox, options.shell, f"cancel.{role}"))
            )

    def test_cancel_at_first_suspension_raises_cancelled(self, conformance: Harness) -> None:
        """Cancelling an exec at its first suspension point re-raises CancelledError."""
        sandbox = conformance.create()
        command = conformance.command("sleep 300")

        async def scenario() -> tuple[bool, asyncio.Task[ExecResult]]:
            task = asyncio.ensure_future(sandbox.exec(command))
            await asyncio.sleep(0)
            finished_early = task.done()
            task.cancel()
            await asyncio.wait({task}, timeout=conformance.options.prompt_seconds)
            return finished_early, task

        finished_early, task = conformance.run(scenario(), "early cancel")
        assert not finished_early, f"exec of sleep 300 finished at once: {_describe(task)}"
        assert task.done(), "exec did not return promptly after an early cancel"
        assert task.cancelled(), f"exec swallowed an early cancellation and {_describe(task)}"

    def test_destroy_stops_a_running_command(self, conformance: Harness) -> None:
        """Destroying the sandbox while a command runs returns that exec: cancelled, exit -1."""
        _check_destroy_while_running(conformance, elsewhere=False)

    def test_destroy_elsewhere_stops_a_running_command(self, conformance: Harness) -> None:
        """A destroy by another provider (another worker, ``mango sessions delete``) does too.

        The running exec's client did not destroy anything itself: it learns
        from the backend that the sandbox is gone, and still answers with
        ``cancelled=True`` and exit -1 rather than a bare exit code or an error.
        """
        _check_destroy_while_running(conformance, elsewhere=True)

    def test_stdin_round_trip_is_binary_exact(self, conformance: Harness) -> None:
        """Bytes given as stdin reach the command unchanged, NUL and high bytes included."""
        sandbox = conformance.create()
        payload = bytes(range(256)) * 64 + b"\x00tail\n"
        result = conformance.run(sandbox.exec(Command(argv=("cat",), stdin=payload)))
        assert result.exit_code == 0
        assert result.stdout == payload

    def test_env_and_cwd_are_applied(self, conformance: Harness) -> None:
        """``Command.env`` reaches the command and ``Command.cwd`` is workspace-relative."""
        sandbox = conformance.create()
        conformance.run(sandbox.write_file("sub/dir/probe.txt", b"from-cwd"))
        command = Command(
            argv=(conformance.options.shell, "-c", ENV_AND_CWD),
            env={"MANGO_CONFORMANCE_PROBE": "from-env"},
            cwd="sub/dir",
        )
        result = conformance.run(sandbox.exec(command))
        assert result.exit_code == 0, result.stderr[:200]
        assert result.stdout == b"from-env|from-cwd"

    def test_shell_sees_tool_writes_under_root(self, conformance: Harness) -> None:
        """A file written with write_file is visible to the shell at ``root/path``."""
        sandbox = conformance.create()
        conformance.run(sandbox.write_file("a/b/seen.bin", STATE))
        result = conformance.sh(sandbox, CAT_ARG, posixpath.join(sandbox.root, "a/b/seen.bin"))
        assert result.exit_code == 0, result.stderr[:200]
        assert result.stdout == STATE

    def test_overwrite_truncates(self, conformance: Harness) -> None:
        """Writing shorter content over a file leaves exactly the new content."""
        sandbox = conformance.create()
        conformance.run(sandbox.write_file("over.bin", b"0123456789" * 100))
        conformance.run(sandbox.write_file("over.bin", b"abc"))
        assert conformance.run(sandbox.read_file("over.bin")) == b"abc"
        assert conformance.sh(sandbox, CAT_ARG, "over.bin").stdout == b"abc"

    def test_empty_file_round_trip(self, conformance: Harness) -> None:
        """An empty file can be written, read back empty, and then overwritten."""
        sandbox = conformance.create()
        conformance.run(sandbox.write_file("empty.bin", b"full"))
        conformance.run(sandbox.write_file("empty.bin", b""))
        assert conformance.run(sandbox.read_file("empty.bin")) == b""

    def test_read_missing_file_is_file_not_found(self, conformance: Harness) -> None:
        """Reading a file that does not exist raises FileNotFoundError."""
        sandbox = conformance.create()
        with pytest.raises(FileNotFoundError):
            conformance.run(sandbox.read_file("missing.bin"))
        with pytest.raises(FileNotFoundError):
            conformance.run(sandbox.read_file("no/such/dir/missing.bin"))

    def test_read_directory_is_permanent(self, conformance: Harness) -> None:
        """Reading a directory raises a PermanentError (not a regular file)."""
        sandbox = conformance.create()
        conformance.run(sandbox.write_file("d/f.bin", b"x"))
        with pytest.raises(PermanentError):
            conformance.run(sandbox.read_file("d"))

    def test_absolute_and_dotdot_paths_are_rejected(self, conformance: Harness) -> None:
        """Absolute paths and ``..`` components raise PathEscapeError; nothing lands outside."""
        sandbox = conformance.create()
        token = f"mango-escape-{run_id()}"
        for path in (f"/{token}", f"a/../../{token}", f"a/b/../../../{token}", "/etc/passwd"):
            with pytest.raises(PathEscapeError):
                conformance.run(sandbox.read_file(path))
            if path != "/etc/passwd":
                with pytest.raises(PathEscapeError):
                    conformance.run(sandbox.write_file(path, b"escaped"))
        for outside in (f"/{token}", posixpath.join(posixpath.dirname(sandbox.root), token)):
            check = conformance.sh(sandbox, PATH_STATE, outside)
            assert check.stdout == b"absent", f"a rejected write still created {outside}"

    def test_symlinks_are_not_followed(self, conformance: Harness) -> None:
        """Paths through symlinks planted by a command raise PathEscapeError."""
        sandbox = conformance.create()
        token = f"mango-link-{run_id()}"
        made = conformance.sh(
            sandbox,
            'ln -s .. up && ln -s /etc/passwd pw && ln -s "../$1" out',
            token,
        )
        assert made.exit_code == 0, f"could not plant symlinks: {made.stderr[:200]!r}"
        for path in ("pw", "up/workspace-escape"):
            with pytest.raises(PathEscapeError):
                conformance.run(sandbox.read_file(path))
        for path in ("out", f"up/{token}"):
            with pytest.raises(PathEscapeError):
                conformance.run(sandbox.write_file(path, b"escaped"))
        outside = posixpath.join(posixpath.dirname(sandbox.root), token)
        check = conformance.sh(sandbox, PATH_STATE, outside)
        assert check.stdout == b"absent", f"a write through a symlink created {outside}"

    def test_empty_session_key_is_invalid_input(self, conformance: Harness) -> None:
        """Create and attach with an empty Session key raise permanent InvalidInput-style errors."""
        with pytest.raises(InvalidInput):
            conformance.create("")
        sandbox = conformance.create()
        with pytest.raises(PermanentError) as caught:
            conformance.attach("", sandbox.ref)
        assert is_permanent(caught.value)

    def test_malformed_refs_give_typed_errors(self, conformance: Harness) -> None:
        """Attach with refs the provider never issued raises SandboxNotFound or a PermanentError."""
        key = conformance.new_key("badref")
        for external_id in ("mango-conformance-no-such-resource", "../../escape", "x" * 1000):
            ref = SandboxRef(provider=conformance.name, external_id=external_id)
            with pytest.raises(MangoError) as caught:
                conformance.attach(key, ref)
            assert isinstance(caught.value, SandboxNotFound) or is_permanent(caught.value), (
                f"attach({external_id[:40]!r}) raised {caught.value!r}"
            )


STATE = b"tool-\x00-write\n"


def _describe(task: asyncio.Future[ExecResult]) -> str:
    error = task.exception()
    if error is not None:
        return f"raised {error!r}"
    return f"returned {task.result()!r}"[:300]


mark_checks(GapChecks, pytest.mark.mango_gap)

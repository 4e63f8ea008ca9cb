"""The ``background-processes`` group: processes that outlive the call that started them.

What an agent relies on (:class:`~mango.provider.ProcessSandbox`):

* start, leave, reconnect: a process started through one provider instance is
  listed, read, fed stdin and killed through a *fresh* provider instance (a
  restarted worker) by its id; its log is stdout and stderr as written,
  readable from any byte offset, bounded by ``max_bytes``, and ``complete``
  once it has ended;
* wait: a timeout that expires answers :attr:`ProcessState.RUNNING` (never an
  error); an exit is :attr:`ProcessState.EXITED` with its status, a missing
  program exits 127, ``command.timeout`` ends the process as
  :attr:`ProcessState.KILLED`; an unknown id is
  :class:`~mango.provider.ProcessNotFound` for every call;
* kill ends the whole tree: a grandchild dies with its leader; killing again
  is harmless, stdin to an ended process is a permanent error;
* nothing outlives its sandbox: after a destroy by another provider instance,
  a wait in flight returns, and a probe process that answered through the
  workspace before the destroy no longer answers in the re-created one.

Every wait is a bounded poll of a condition; no check sleeps for timing.
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import asyncio
import time
from typing import Protocol, cast

import pytest

from mango.provider import (
    Capability,
    PermanentError,
    ProcessInfo,
    ProcessNotFound,
    ProcessOutput,
    ProcessSandbox,
    ProcessState,
    Sandbox,
    SandboxNotFound,
    is_permanent,
)
from mango_conformance.checks import mark_checks
from mango_conformance.harness import Harness
from mango_conformance.scripts import POLL_INTERVAL, describe_pid, wait_for_file, wait_until_gone

__all__ = [
    "ECHO",
    "PROBE",
    "TREE",
    "ProcessChecks",
    "logs_until",
    "processes_of",
]

_PROCESSES = Capability.BACKGROUND_PROCESSES.value

ECHO = 'printf "ready\\n"; printf "err\\n" >&2; exec cat'
"""Say ``ready`` on stdout and ``err`` on stderr, then echo stdin to stdout until killed."""

TREE = 'sleep 600 & printf %s "$!" > tree.child; printf %s "$$" > tree.leader; exec cat'
"""A leader (then ``cat``) with a background grandchild; their pids in ``tree.*``."""

PROBE = (
    'd=$(pwd); printf %s "$$" > probe.pid; '
    'while :; do if [ -e "$d/probe.ask" ]; then rm -f "$d/probe.ask"; : > "$d/probe.said"; fi; '
    "sleep 0.05; done"
)
"""Answer every ``probe.ask`` in the workspace (by its absolute path) with ``probe.said``.

A probe that outlives a destroy would answer in the re-created workspace at
the same path (the local provider reuses it); one that died cannot.
"""


class _ProcessesSandbox(Sandbox, ProcessSandbox, Protocol):
    """A sandbox with background processes (what a declaring provider hands out)."""


def processes_of(harness: Harness, sandbox: Sandbox) -> _ProcessesSandbox:
    """``sandbox`` as a :class:`ProcessSandbox`, or a failure naming the provider."""
    assert isinstance(sandbox, ProcessSandbox), (
        f"{harness.name} declares {_PROCESSES} but its sandbox is not a ProcessSandbox"
    )
    return cast(_ProcessesSandbox, sandbox)


async def logs_until(
    sandbox: ProcessSandbox, process_id: str, expected: bytes, bound: float
) -> ProcessOutput:
    """Poll the log from byte 0 until it holds ``expected`` or the process ends (``bound`` s)."""
    deadline = time.monotonic() + bound
    while True:
        output = await sandbox.logs(process_id)
        if expected in output.data or output.complete or time.monotonic() >= deadline:
            return output
        await asyncio.sleep(POLL_INTERVAL)


def _listed(harness: Harness, sandbox: ProcessSandbox, process_id: str) -> ProcessInfo:
    infos = harness.run(sandbox.processes())
    found = [info for info in infos if info.id == process_id]
    assert found, (
        f"process {process_id!r} is not listed by this sandbox client: "
        f"{[info.id for info in infos]}"
    )
    return found[0]


def _ended(harness: Harness, sandbox: ProcessSandbox, process_id: str) -> ProcessInfo:
    """Wait (bounded) for the process to end; fail if it is still running."""
    info = harness.run(sandbox.wait(process_id, timeout=harness.options.prompt_seconds))
    assert info.state is not ProcessState.RUNNING, (
        f"process {process_id!r} still runs {harness.options.prompt_seconds}s later"
    )
    return info


class ProcessChecks:
    """The ``background-processes`` checks; they run where the capability is declared."""

    @pytest.mark.mango_capability(_PROCESSES)
    def test_background_processes_reconnect_from_a_fresh_provider(
        self, conformance: Harness
    ) -> None:
        """Start, leave; a fresh provider lists it, reads from an offset, writes stdin, kills."""
        bound = conformance.options.prompt_seconds
        key = conformance.new_key("procs")
        created = conformance.create(key)
        first = processes_of(conformance, created)
        command = conformance.command(ECHO, stdin=b"first\n")
        handle = conformance.run(first.start(command))
        assert handle.id, "start returned an empty process id"
        # The first client is left here: everything below goes through a restarted worker.
        attached = processes_of(
            conformance, conformance.attach(key, created.ref, conformance.open_provider())
        )
        info = _listed(conformance, attached, handle.id)
        assert info.argv == command.argv, f"listed argv {info.argv!r}, started {command.argv!r}"
        assert info.state is ProcessState.RUNNING, f"a running cat is listed as {info.state}"
        greeting = b"ready\nerr\nfirst\n"
        output = conformance.run(logs_until(attached, handle.id, greeting, bound))
        assert output.data == greeting, (
            f"the log is {output.data!r}, not {greeting!r} (stdout and stderr in one log "
            "as written, then the initial stdin echoed by cat)"
        )
        assert (output.offset, output.next_offset, output.complete) == (0, len(output.data), False)
        end = output.next_offset
        conformance.run(attached.send_stdin(handle.id, b"second\n"))
        after = conformance.run(logs_until(attached, handle.id, b"second\n", bound))
        assert after.data.endswith(b"second\n"), f"stdin sent later never echoed: {after.data!r}"
        tail = conformance.run(attached.logs(handle.id, since=end))
        assert (tail.data, tail.offset, tail.next_offset) == (
            b"second\n",
            end,
            end + len(b"second\n"),
        ), f"logs(since={end}) gave {tail!r}"
        part = conformance.run(attached.logs(handle.id, since=2, max_bytes=5))
        assert (part.data, part.offset, part.next_offset) == (after.data[2:7], 2, 7), (
            f"logs(since=2, max_bytes=5) gave {part!r}, the log is {after.data!r}"
        )
        killed = conformance.run(attached.kill(handle.id))
        assert killed.state is ProcessState.KILLED, f"kill answered {killed!r}"
        assert _listed(conformance, first, handle.id).state is ProcessState.KILLED, (
            "the first client does not see the kill made through the fresh provider"
        )
        final = conformance.run(first.logs(handle.id, since=tail.next_offset))
        assert (final.complete, final.data) == (True, b""), f"after a kill the log ends: {final!r}"
        again = conformance.run(attached.kill(handle.id))
        assert again.state is ProcessState.KILLED, f"a second kill answered {again!r}"
        with pytest.raises(PermanentError):
            conformance.run(attached.send_stdin(handle.id, b"too late\n"))

    @pytest.mark.mango_capability(_PROCESSES)
    def test_background_processes_wait_exit_and_unknown_ids(self, conformance: Harness) -> None:
        """A wait that times out answers RUNNING; exits, 127 and timeouts; unknown ids."""
        options = conformance.options
        sandbox = processes_of(conformance, conformance.create())
        waiting = conformance.run(sandbox.start(conformance.command('read -r x; exit "$x"')))
        begun = time.monotonic()
        info = conformance.run(sandbox.wait(waiting.id, timeout=0.2))
        elapsed = time.monotonic() - begun
        assert info.state is ProcessState.RUNNING, f"wait(timeout=0.2) of a reader gave {info!r}"
        assert elapsed < 0.2 + options.prompt_seconds, f"wait(timeout=0.2) took {elapsed:.1f}s"
        conformance.run(sandbox.send_stdin(waiting.id, b"7\n"))
        exited = _ended(conformance, sandbox, waiting.id)
        assert (exited.state, exited.exit_code) == (ProcessState.EXITED, 7), f"got {exited!r}"
        output = conformance.run(sandbox.logs(waiting.id))
        assert (output.complete, output.data) == (True, b""), f"a silent exit's log is {output!r}"
        missing = conformance.run(sandbox.start(conformance.command("mango-no-such-program")))
        gone = _ended(conformance, sandbox, missing.id)
        assert (gone.state, gone.exit_code) == (ProcessState.EXITED, 127), f"got {gone!r}"
        bounded = conformance.run(sandbox.start(conformance.command("exec cat", timeout=0.5)))
        timed_out = _ended(conformance, sandbox, bounded.id)
        assert timed_out.state is ProcessState.KILLED, f"command.timeout=0.5 gave {timed_out!r}"
        listed = [info.id for info in conformance.run(sandbox.processes())]
        assert listed == [waiting.id, missing.id, bounded.id], f"processes() gave {listed}"
        unknown = "mango-no-such-process"
        for call in (
            sandbox.logs(unknown),
            sandbox.wait(unknown, timeout=0.1),
            sandbox.send_stdin(unknown, b"x"),
            sandbox.kill(unknown),
        ):
            with pytest.raises(ProcessNotFound) as caught:
                conformance.run(call)
            assert is_permanent(caught.value)

    @pytest.mark.mango_capability(_PROCESSES)
    def test_background_processes_kill_ends_the_whole_tree(self, conformance: Harness) -> None:
        """Killing a process kills its children too, not just the leader."""
        options = conformance.options
        created = conformance.create()
        sandbox = processes_of(conformance, created)
        handle = conformance.run(sandbox.start(conformance.command(TREE)))
        assert conformance.run(wait_for_file(created, "tree.leader", options.prompt_seconds)), (
            "the process never wrote tree.leader"
        )
        killed = conformance.run(sandbox.kill(handle.id))
        assert killed.state is ProcessState.KILLED, f"kill answered {killed!r}"
        for role in ("leader", "child"):
            gone = conformance.run(
                wait_until_gone(created, options.shell, f"tree.{role}", options.prompt_seconds)
            )
            assert gone, (
                f"the {role} of a killed background process is still alive: "
                + conformance.run(describe_pid(created, options.shell, f"tree.{role}"))
            )

    @pytest.mark.mango_capability(_PROCESSES)
    def test_background_processes_die_with_their_sandbox(self, conformance: Harness) -> None:
        """A destroy by another provider ends every process: a wait returns, no probe answers."""
        options = conformance.options
        key = conformance.new_key("procs")
        created = conformance.create(key)
        sandbox = processes_of(conformance, created)
        for _ in range(2):
            conformance.run(sandbox.start(conformance.command(PROBE)))
        reader = conformance.run(sandbox.start(conformance.command("exec cat")))
        assert conformance.run(wait_for_file(created, "probe.pid", options.prompt_seconds))
        begun = time.monotonic()
        conformance.run(created.write_file("probe.ask", b""))
        assert conformance.run(wait_for_file(created, "probe.said", options.prompt_seconds)), (
            "the probe never answered before the destroy"
        )
        # How long a live probe takes to answer, here: the window after the destroy is 5x that.
        window = max(5 * (time.monotonic() - begun), 1.0)
        other = conformance.open_provider()

        async def scenario() -> tuple[bool, BaseException | ProcessInfo | None]:
            waiting = asyncio.ensure_future(sandbox.wait(reader.id))
            await asyncio.sleep(0)
            await other.destroy(key, created.ref)
            done, _ = await asyncio.wait({waiting}, timeout=options.prompt_seconds)
            if waiting not in done:
                waiting.cancel()
                await asyncio.wait({waiting})
                return False, None
            return True, waiting.exception() or waiting.result()

        returned, answer = conformance.run(scenario(), "destroy while a wait runs")
        assert returned, f"a wait still ran {options.prompt_seconds}s after the destroy"
        if isinstance(answer, BaseException):
            assert isinstance(answer, SandboxNotFound), (
                f"a wait in flight during the destroy raised {answer!r}, not SandboxNotFound"
            )
        else:
            assert isinstance(answer, ProcessInfo), "the wait returned nothing"
            assert answer.state is not ProcessState.RUNNING, (
                f"a wait in flight during the destroy answered {answer!r}"
            )
        recreated = conformance.create(key, other)
        conformance.run(recreated.write_file("probe.ask", b""))
        said = conformance.run(wait_for_file(recreated, "probe.said", window))
        assert not said, "a probe process started before the destroy answered afterwards"


mark_checks(ProcessChecks, pytest.mark.mango_capability_group)

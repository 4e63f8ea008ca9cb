"""One command in a Daytona sandbox: the wrapped line, its timeout, cancellation and kill.

A command is one ``POST /process/execute`` of the wrapper line
(:func:`~mango_provider_daytona.scripts.exec_line`); the toolbox answers when
the wrapper has finished, with the framed result. Output therefore arrives at
the end (the registration declares ``output-at-end``): the toolbox's
streaming alternative, session commands with a WebSocket log, frames output
line by line through a shell ``read`` loop (NUL bytes lost, a newline added
to a last partial line, a whole copy of the output on the sandbox's disk) and
costs three round trips and a WebSocket per command.

Termination keeps the sandbox usable and kills only the command's tree:

* **timeout** (``Command.timeout``, else the spec's): at the deadline a second
  request runs the kill line, which ends every descendant of the wrapper and
  lets the wrapper report what the command had printed; the result has
  ``timed_out=True`` and ``exit_code=-1``. The daemon also gets the timeout
  plus :data:`DAEMON_GRACE_SECONDS`, so a command outlives a crashed worker
  by at most that grace.
* **cancellation** of the awaiting task: the same kill (shielded from a
  second cancellation, bounded by :data:`KILL_SECONDS`), then
  :class:`asyncio.CancelledError` is re-raised. A command whose request has
  not reached the daemon yet never starts: the kill leaves a mark it checks.
* **destroy** of the sandbox while the command runs, by this provider or by
  another one (another worker, ``mango sessions delete``): ``cancelled=True``,
  ``exit_code=-1``. A destroy elsewhere kills the daemon with its sandbox, so
  the request ends without the wrapper's report: a bare 502 from the runner's
  reverse proxy, or a dropped connection. Only such an ending (and never a
  normal completion, which costs no extra request) is followed by a question
  to the API: the provider view's :meth:`~mango.provider.remote.ProviderView.torn_down`,
  which asks whether the sandbox is gone or being deleted. A 404 means
  the toolbox found no sandbox when the request arrived, so the command never
  started: that stays :class:`~mango.provider.SandboxNotFound`.
* **cut** request, the sandbox still there (a connection reset, a proxy's
  502 in front of a live daemon): the daemon runs the command detached from
  the request (``exec.Command``, not bound to the request's context), so it
  goes on unseen. Before the error is raised the command's tree is killed by
  the same second request as for a timeout: a retry of the step can never
  run the command a second time beside the first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from mango.provider import (
    Command,
    ExecResult,
    MangoError,
    OutputStream,
    ProviderUnavailable,
)
from mango.provider.execution import ExecHandle
from mango.provider.http import MAX_ANSWER_BYTES, RemoteRejected, RemoteUnavailable
from mango.provider.output import ExecChannel
from mango_provider_daytona.api import Toolbox
from mango_provider_daytona.scripts import (
    STDIN_STAGING_DIR,
    ExecPlan,
    exec_line,
    kill_line,
    parse_result,
)

__all__ = [
    "DAEMON_GRACE_SECONDS",
    "DRAIN_SECONDS",
    "KILL_SECONDS",
    "TEARDOWN_SETTLE_SECONDS",
    "run_command",
]

log = logging.getLogger(__name__)

DAEMON_GRACE_SECONDS = 30.0
"""How much longer than mango's timeout the daemon lets a command run (its own kill)."""
KILL_SECONDS = 30.0
"""Bound on the kill request (it waits up to 3 s for a command that has not started)."""
DRAIN_SECONDS = 10.0
"""After a timeout kill, how long to wait for the wrapper's report of the partial output."""
TEARDOWN_SETTLE_SECONDS = 1.0
"""How long a sandbox that still looks alive is asked again after a command was cut short.

Daytona records a delete (``desiredState`` destroyed) before its runner removes
the container, so the first answer normally decides; the rest covers a read
that races the API's own write.
"""

Diagnose = Callable[[MangoError], Awaitable[MangoError]]
"""Turns a failed toolbox call into the error to raise (the sandbox may be gone or stopped)."""
Probe = Callable[[], Awaitable[bool]]
"""Asks the Daytona API whether the sandbox was deleted (settling for up to
:data:`TEARDOWN_SETTLE_SECONDS` while it still looks alive)."""


async def _kill(toolbox: Toolbox, plan: ExecPlan) -> None:
    try:
        async with asyncio.timeout(KILL_SECONDS):
            await toolbox.execute(kill_line(plan.control), timeout=KILL_SECONDS)
    except (MangoError, TimeoutError) as exc:
        # The sandbox may be gone or unreachable; the daemon's own timeout remains.
        log.warning("could not kill command %s: %s", plan.control, exc)


def _deliver(channel: ExecChannel, text: str, plan: ExecPlan) -> int:
    result = parse_result(text, plan.marker)
    # The wrapper keeps one byte past the cap: the channel keeps the cap and flags the rest.
    channel.feed(OutputStream.STDOUT, result.stdout)
    channel.feed(OutputStream.STDERR, result.stderr)
    return result.exit_code


def _answer_bound(cap: int) -> int:
    """The largest framed result the wrapper can answer: both streams' ``cap + 1`` bytes in
    base64 (4/3, wrapped lines), escaped as a JSON string, plus room for the frame."""
    return 4 * (cap + 1) + MAX_ANSWER_BYTES


def _cut_short(error: MangoError) -> bool:
    """True if the execute request ended the way a teardown ends it.

    The daemon died with its sandbox: a 5xx from the proxies in front of it,
    a dropped connection, or an answer without the wrapper's report. A 404
    is the toolbox finding no sandbox when the request arrived: the command
    never started.
    """
    if isinstance(error, RemoteUnavailable) and error.status == 404:
        return False
    return isinstance(error, ProviderUnavailable)


async def run_command(
    toolbox: Toolbox,
    command: Command,
    *,
    root: str,
    timeout: float | None,
    channel: ExecChannel,
    handle: ExecHandle,
    diagnose: Diagnose,
    torn_down: Probe,
) -> ExecResult:
    """Run ``command`` in the sandbox behind ``toolbox``; feed ``channel``; return the result.

    ``diagnose`` decides what a failed call means (gone, stopped, or transient);
    ``torn_down`` asks whether the sandbox was deleted, after a command was cut short.
    """
    plan = exec_line(command, root=root, cap=channel.cap)
    try:
        if plan.stdin_path is not None:
            await toolbox.make_dir(STDIN_STAGING_DIR, "0700")
            await toolbox.upload(plan.stdin_path, plan.stdin_data)
        daemon_timeout = None if timeout is None else timeout + DAEMON_GRACE_SECONDS
        request = asyncio.ensure_future(
            toolbox.execute(plan.line, timeout=daemon_timeout, max_bytes=_answer_bound(channel.cap))
        )
    except MangoError as exc:
        if handle.destroyed:
            return channel.result(exit_code=-1, cancelled=True)
        raise await diagnose(exc) from exc
    destroyed = asyncio.ensure_future(handle.kill_requested.wait())
    try:
        try:
            done, _ = await asyncio.wait(
                {request, destroyed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            await asyncio.shield(_kill(toolbox, plan))
            raise
        if request in done:
            return await _finish(
                request,
                toolbox,
                plan,
                channel,
                handle,
                diagnose=diagnose,
                torn_down=torn_down,
                timed_out=False,
            )
        if handle.destroyed:
            return channel.result(exit_code=-1, cancelled=True)
        # The deadline: kill the tree, then let the wrapper report what was printed.
        await asyncio.shield(_kill(toolbox, plan))
        await asyncio.wait({request}, timeout=DRAIN_SECONDS)
        if not request.done():
            return channel.result(exit_code=-1, timed_out=True)
        return await _finish(
            request,
            toolbox,
            plan,
            channel,
            handle,
            diagnose=diagnose,
            torn_down=torn_down,
            timed_out=True,
        )
    finally:
        destroyed.cancel()
        if not request.done():
            request.cancel()
        with contextlib.suppress(BaseException):
            await request


async def _finish(
    request: asyncio.Future[tuple[int, str]],
    toolbox: Toolbox,
    plan: ExecPlan,
    channel: ExecChannel,
    handle: ExecHandle,
    *,
    diagnose: Diagnose,
    torn_down: Probe,
    timed_out: bool,
) -> ExecResult:
    exit_code = -1
    try:
        _code, text = request.result()
        exit_code = _deliver(channel, text, plan)
    except RemoteRejected as exc:
        if exc.status != 408:
            raise await diagnose(exc) from exc
        # The daemon's own deadline fired first: it killed the whole group.
        timed_out = True
    except MangoError as exc:
        # A failed call or a missing frame: the wrapper did not report. After a
        # destroy or our own kill that is expected; after a destroy elsewhere
        # too (the API tells); otherwise the sandbox says why.
        if not (handle.destroyed or (timed_out and isinstance(exc, ProviderUnavailable))):
            if _cut_short(exc):
                if await torn_down():
                    return channel.result(exit_code=-1, cancelled=True)
                # The daemon may still run it, unseen: it must not run beside a retry.
                await asyncio.shield(_kill(toolbox, plan))
            raise await diagnose(exc) from exc
    if handle.destroyed:
        return channel.result(exit_code=-1, cancelled=True)
    if timed_out:
        return channel.result(exit_code=-1, timed_out=True)
    return channel.result(exit_code=exit_code)

"""What every ``mango`` command shares: exit codes, error lines, the event loop, the runtime.

Expected failures print one ``error:`` line and, where there is one, a
``hint:`` line; never a traceback. Only click, attrs and mango's light
modules are imported here: the runtime (database driver, plugins) is
imported by :func:`with_runtime` when a command needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

import attrs
import click

from mango.cli.hints import OS_ERROR_HINT, hint_for
from mango.config import Settings
from mango.domain.errors import InvalidInput, MangoError
from mango.domain.values import validate_session_id

if TYPE_CHECKING:
    from mango.runtime import PortsWrapper, Runtime

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_ERROR",
    "EXIT_HANGUP",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "EXIT_TIMEOUT",
    "VIA_TEMPORAL_HELP",
    "Wiring",
    "fail",
    "load_settings",
    "ports_wrapper",
    "reader_gone",
    "run_async",
    "session_id_arg",
    "stdout_reader_gone",
    "use_temporal",
    "with_runtime",
]

T = TypeVar("T")

EXIT_ERROR = 2
"""Every expected failure: bad input or settings, an unreachable part, a failed check."""
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
"""SIGINT (128 + 2)."""
EXIT_TERMINATED = 143
"""SIGTERM (128 + 15)."""
EXIT_HANGUP = 129
"""SIGHUP (128 + 1): the terminal mango ran in went away."""

STOP_SIGNALS: dict[signal.Signals, tuple[str, int]] = {
    signal.SIGTERM: ("terminated", EXIT_TERMINATED),
    signal.SIGHUP: ("hung up", EXIT_HANGUP),
}
"""The signals besides SIGINT that cancel a command, with its ``error:`` line and exit status."""
EXIT_BROKEN_PIPE = 141
"""The reader of our output went away (``mango files read ... | head``): 128 + SIGPIPE, as
the shell reports for ``cat`` in the same place."""


@attrs.frozen
class Wiring:
    """What the caller of :func:`mango.cli.main.main` hands every command (click's ``obj``)."""

    wrap_ports: PortsWrapper | None = None
    """Wraps each SessionManager's provider and store (tests only: crash injection)."""


def ports_wrapper() -> PortsWrapper | None:
    """The running command's :attr:`Wiring.wrap_ports`; None outside :func:`main` or unset."""
    context = click.get_current_context(silent=True)
    wiring = None if context is None else context.find_object(Wiring)
    return None if wiring is None else wiring.wrap_ports


def fail(message: str, hint: str | None = None, code: int = EXIT_ERROR) -> NoReturn:
    """Print ``error: message`` (and ``hint: hint``) to stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(code)


def stdout_reader_gone() -> bool:
    """Whether our standard output is a pipe (or socket) whose reader has closed it.

    A ``BrokenPipeError`` is ours to swallow only then: one from a
    connection to a provider is a failure to report.
    """
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        events = poller.poll(0)
    except (OSError, ValueError, AttributeError):  # no descriptor, or no poll on this platform
        return False
    return any(mask & select.POLLERR for _, mask in events)


def reader_gone() -> NoReturn:
    """Our standard output's reader went away: stop quietly, as a Unix tool does (exit 141).

    Nothing more is written to it (what Python would still flush at exit goes
    to ``/dev/null``) and nothing is printed: the reader chose to stop.
    """
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    sys.exit(EXIT_BROKEN_PIPE)


def run_async(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine, turning mango errors into one clear line.

    SIGINT, SIGTERM and SIGHUP (the terminal closed) all cancel it, and a
    cancelled command is killed (its process tree, wherever it runs) before
    we exit, so no work outlives ``mango``. Further signals during that
    clean-up are ignored: SIGKILL is the way to leave without it.
    """
    stopped_by: list[signal.Signals] = []

    async def main() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # noqa: S101 - asyncio.run runs us in a task

        def on_signal(signum: signal.Signals) -> None:
            if not stopped_by:
                stopped_by.append(signum)
                task.cancel()

        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, on_signal, signum)
        try:
            return await factory()
        finally:
            for signum in STOP_SIGNALS:
                loop.remove_signal_handler(signum)

    try:
        return asyncio.run(main())
    except MangoError as exc:
        fail(str(exc), hint_for(exc))
    except KeyboardInterrupt:
        fail("interrupted", code=EXIT_INTERRUPTED)
    except asyncio.CancelledError:
        if stopped_by:
            message, code = STOP_SIGNALS[stopped_by[0]]
            fail(message, code=code)
        raise
    except BrokenPipeError as exc:
        if stdout_reader_gone():
            reader_gone()
        fail(f"{exc.strerror or exc} ({exc.filename or 'no file'})", OS_ERROR_HINT)
    except OSError as exc:
        fail(f"{exc.strerror or exc} ({exc.filename or 'no file'})", OS_ERROR_HINT)


def load_settings() -> Settings:
    """The settings from the environment, or one ``error:`` line and exit 2."""
    try:
        return Settings.from_env()
    except MangoError as exc:
        fail(str(exc), hint_for(exc))


def use_temporal(flag: bool | None) -> bool:
    """``--via-temporal`` as given, else on exactly when MANGO_TEMPORAL_ADDRESS is set."""
    if flag is not None:
        return flag
    return bool(os.environ.get("MANGO_TEMPORAL_ADDRESS", "").strip())


VIA_TEMPORAL_HELP = (
    "Go through the Session's Temporal workflow and a worker (the durable path) instead "
    "of calling the provider here. Default: on when MANGO_TEMPORAL_ADDRESS is set."
)


def session_id_arg(value: str) -> str:
    """A valid Session id, or click's usage error naming what is wrong with it."""
    try:
        return validate_session_id(value)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc)) from None


def with_runtime(body: Callable[[Runtime], Awaitable[T]]) -> T:
    """Open the runtime (the embedded PostgreSQL lingers), run ``body`` in it, close it."""
    settings = load_settings()
    wrap = ports_wrapper()

    async def go() -> T:
        from mango.runtime import open_runtime

        async with open_runtime(settings, linger=True, wrap_ports=wrap) as rt:
            return await body(rt)

    return run_async(go)

"""Progress of long maintenance steps, carried to whoever waits for them in a context variable.

A step that can take a while before a tool sees its sandbox (package setup)
says what it does with :func:`report_progress`. Whoever waits for the
operation opens a :func:`progress_scope` around it with a callback: the
command line prints each line, a Temporal activity sends the latest one in its
heartbeat so a client watching the step can print it too. With no scope open
a report goes nowhere; a callback that fails never fails the step.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["ProgressReport", "progress_scope", "report_progress"]

ProgressReport = Callable[[str], None]
"""Receives one line of progress (no trailing newline)."""

_log = logging.getLogger("mango.progress")
_REPORT: contextvars.ContextVar[ProgressReport | None] = contextvars.ContextVar(
    "mango_progress", default=None
)


@contextmanager
def progress_scope(report: ProgressReport | None) -> Iterator[None]:
    """Send the progress of work inside the block to ``report`` (``None``: to nobody).

    Tasks created inside the block inherit the scope (asyncio copies the
    context when a task is made).
    """
    token = _REPORT.set(report)
    try:
        yield
    finally:
        _REPORT.reset(token)


def report_progress(line: str) -> None:
    """Tell the innermost scope's callback ``line``, and log it at INFO."""
    _log.info("%s", line)
    report = _REPORT.get()
    if report is None:
        return
    try:
        report(line)
    except Exception:  # noqa: BLE001 - a broken terminal must not fail the step it watches
        _log.debug("progress callback failed for %r", line, exc_info=True)

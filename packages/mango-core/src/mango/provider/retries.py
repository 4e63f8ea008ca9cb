"""Retries for remote provider adapters: bounded, with backoff and ``Retry-After``.

Retries go through stamina (bounded attempts and total time, exponential
backoff with jitter) and honour ``Retry-After`` (seconds or an HTTP date,
capped by :attr:`RetryPolicy.retry_after_max` and by the time left in the
budget). Only :class:`ProviderUnavailable` is retried, and only for
idempotent calls unless the caller says otherwise (the choice is
:class:`~mango.provider.http.ApiClient`'s); a :class:`ProtocolError` is not
retried within the call (the same server gives the same answer a moment
later), though it stays retryable for the caller.

Each retry is announced as one line on the logger ``mango.provider.retries``
(at WARNING): what failed and why (the error's own message, which names the
operation), and the attempt that comes next, ``attempt n of m``. stamina's
own log line (logger ``stamina``) says only that a retry was scheduled; the
command line shows mango's line instead (see ``mango -v``).

This module imports stamina (the ``remote`` extra of mango-core);
:mod:`mango.provider.http` re-exports its names.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import attrs
import stamina

from mango.domain.errors import ProtocolError, ProviderUnavailable
from mango.domain.validators import non_negative_number, positive_int, positive_number

__all__ = ["DEFAULT_RETRY_POLICY", "RetryPolicy", "parse_retry_after", "retrying"]

T = TypeVar("T")
_LOG = logging.getLogger(__name__)


@attrs.frozen
class RetryPolicy:
    """Budgets for retrying one idempotent call.

    ``attempts`` counts the first try; ``timeout`` bounds the whole call in
    seconds (no retry is started past it); backoff grows from
    ``wait_initial`` by ``wait_exp_base`` up to ``wait_max`` with up to
    ``wait_jitter`` random seconds added. A ``Retry-After`` replaces the
    backoff, capped by ``retry_after_max``; if it asks for more than the time
    left in ``timeout``, the call fails now instead of sleeping past its budget.
    """

    attempts: int = attrs.field(default=5, validator=positive_int)
    timeout: float = attrs.field(default=30.0, validator=positive_number)
    wait_initial: float = attrs.field(default=0.1, validator=non_negative_number)
    wait_max: float = attrs.field(default=5.0, validator=non_negative_number)
    wait_jitter: float = attrs.field(default=0.5, validator=non_negative_number)
    wait_exp_base: float = attrs.field(default=2.0, validator=positive_number)
    retry_after_max: float = attrs.field(default=20.0, validator=non_negative_number)


DEFAULT_RETRY_POLICY = RetryPolicy()
"""Five attempts within 30 seconds, 0.1 s doubling to 5 s, Retry-After capped at 20 s."""


def parse_retry_after(value: str | None, *, now: dt.datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value, or ``None`` if absent or invalid.

    Accepts delay-seconds (``"3"``) and an HTTP date; a date in the past gives ``0.0``.
    """
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        # RFC 9110 dates are GMT; a zone-less parse result means GMT as well.
        when = when.replace(tzinfo=dt.UTC)
    current = now if now is not None else dt.datetime.now(dt.UTC)
    return max(0.0, (when - current).total_seconds())


def _backoff_hook(policy: RetryPolicy, deadline: float) -> Callable[[Exception], bool | float]:
    failures = 0

    def announce(exc: Exception, wait: float | None) -> None:
        when = "" if wait is None else f" in {wait:.1f}s"
        _LOG.warning("%s; retrying%s (attempt %d of %d)", exc, when, failures + 1, policy.attempts)

    def hook(exc: Exception) -> bool | float:
        nonlocal failures
        failures += 1
        if not isinstance(exc, ProviderUnavailable) or isinstance(exc, ProtocolError):
            return False
        if failures >= policy.attempts:
            return True  # stamina stops here; nothing is announced
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is None:
            announce(exc, None)
            return True
        wait = min(float(retry_after), policy.retry_after_max)
        if time.monotonic() + wait >= deadline:
            # Sleeping past the budget only to give up would waste the caller's time.
            return False
        announce(exc, wait)
        return wait

    return hook


async def retrying(
    call: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    retry: bool = True,
) -> T:
    """Await ``call()``; retry it on :class:`ProviderUnavailable` within ``policy``.

    With ``retry=False`` the call runs once (non-idempotent requests). The
    last error is raised when the budget is spent. Any other exception is
    raised at once.
    """
    if not retry:
        return await call()
    deadline = time.monotonic() + policy.timeout
    async for attempt in stamina.retry_context(
        on=_backoff_hook(policy, deadline),
        attempts=policy.attempts,
        timeout=policy.timeout,
        wait_initial=policy.wait_initial,
        wait_max=policy.wait_max,
        wait_jitter=policy.wait_jitter,
        wait_exp_base=policy.wait_exp_base,
    ):
        with attempt:
            return await call()
    raise AssertionError("stamina ended the retry loop without an outcome")  # pragma: no cover

"""A vendor fake served from its own thread and event loop, as a remote service would be.

The crash matrix drives ``mango worker`` subprocesses against a remote
provider's fake. The fake must outlive every worker (it is the vendor's
service, not part of mango) and keep answering while the test's own loop is
blocked, for instance while a fixture stops a worker with a blocking wait.
So it runs on a loop of its own in a daemon thread; the test talks to it over
HTTP like any client, and reads its state through :meth:`ServedFake.call`,
which runs a function on the fake's loop, where that state lives.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

START_BOUND = 60.0
"""Seconds the fake may take to start or to stop (it kills its sandboxes' processes)."""


class ServedFake(Generic[T]):
    """``with ServedFake(lambda: open_the_fake(...)) as fake:`` serves it until the block ends."""

    def __init__(self, opener: Callable[[], AbstractAsyncContextManager[T]]) -> None:
        self._opener = opener
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._context: AbstractAsyncContextManager[T] | None = None

    def __enter__(self) -> T:
        self._thread.start()

        async def enter() -> T:
            self._context = self._opener()
            return await self._context.__aenter__()

        try:
            return asyncio.run_coroutine_threadsafe(enter(), self._loop).result(START_BOUND)
        except BaseException:
            self._shutdown()
            raise

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self._context is not None:
                context = self._context
                stopped = asyncio.run_coroutine_threadsafe(
                    context.__aexit__(None, None, None), self._loop
                )
                stopped.result(START_BOUND)
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(START_BOUND)
        if not self._thread.is_alive():
            self._loop.close()

    async def call(self, function: Callable[[], Awaitable[R]]) -> R:
        """Run ``function`` on the fake's loop (where its state lives); await its result."""

        async def run() -> R:
            return await function()

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), self._loop))

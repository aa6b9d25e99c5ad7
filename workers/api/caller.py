"""A thread of its own for the blocking calls of the worker's consumer loop (:class:`Caller`).

The loop polls Kafka twenty times a second even when idle, and commits the done marks between
polls: each of those calls blocks, so it runs off the event loop. ``asyncio.to_thread`` does that
through the default executor (a context copied, a work item queued under two locks, a
``concurrent.futures`` future chained to an asyncio one): a sixth of a busy worker's CPU in a
profile of ``tests.bench.floors``, more than its fetches. Here the calls go to one thread over a
``queue.SimpleQueue`` and come back with one ``call_soon_threadsafe``: the same order (one call at
a time, in the order asked), the same result or exception, for a fraction of the work.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Call = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.Future[Any]"]


class Caller:
    """Runs blocking calls one at a time on a daemon thread (started at the first call); the
    awaiting side gets the result or the exception. :meth:`close` ends the thread once the calls
    asked before it are done."""

    def __init__(self, name: str = "consumer-calls") -> None:
        self.name = name
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the thread; its result (or exception) here."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        self._calls.put((fn, args, fut))
        return await fut

    def close(self) -> None:
        """End the thread after the calls already asked (no wait here)."""
        if self._thread is not None:
            self._calls.put(None)
            self._thread = None

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            fn, args, fut = call
            try:
                result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting side, as to_thread does
                _settle_soon(fut, None, exc)
            else:
                _settle_soon(fut, result, None)


def _settle_soon(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    try:
        fut.get_loop().call_soon_threadsafe(_settle, fut, result, exc)
    except RuntimeError:  # the loop is closed: nobody waits any more
        pass


def _settle(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if fut.done():  # the awaiting side was cancelled
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)

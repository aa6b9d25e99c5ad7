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
import time
from collections.abc import Callable
from functools import partial
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


class Abandoned(TimeoutError):
    """A bounded call did not return in time (it goes on in its daemon thread, unwaited for)."""


class Serial:
    """Calls into a client that may not answer, run one at a time in the order asked on a daemon
    thread of their own (a commit asked later never lands before one asked earlier); each caller
    waits for its call up to a bound (:meth:`within`), then gives up on it: the call still runs in
    its turn, unwaited for."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Callable[[Any, BaseException | None], None]]] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._started: float | None = None  # (monotonic) when the call under way began

    def within(self, seconds: float, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in its turn, waited for (blocking) up to ``seconds``: its result, or its
        exception raised here; :class:`Abandoned` when it has not returned by then."""
        ended = threading.Event()
        box: list[tuple[Any, BaseException | None]] = []

        def done(result: Any, exc: BaseException | None) -> None:
            box.append((result, exc))
            ended.set()

        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
        self._calls.put((partial(fn, *args), done))
        if not ended.wait(seconds):
            raise Abandoned(f"{self.name}: no answer within {seconds:g} s")
        result, exc = box[0]
        if exc is not None:
            raise exc
        return result  # type: ignore[no-any-return]

    def busy_for(self) -> float:
        """Seconds the call under way has run (0: none is)."""
        started = self._started
        return 0.0 if started is None else time.monotonic() - started

    def _run(self) -> None:
        while True:
            call, done = self._calls.get()
            self._started = time.monotonic()
            try:
                result = call()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting side
                done(None, exc)
            else:
                done(result, None)
            finally:
                self._started = None


async def awaited_within(seconds: float, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a daemon thread of its own, awaited (the event loop goes on meanwhile) up
    to ``seconds``: its result, or its exception raised here; :class:`Abandoned` when it has not
    returned by then (it goes on, unwaited for)."""
    fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def run() -> None:
        try:
            result = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting side
            _settle_soon(fut, None, exc)
        else:
            _settle_soon(fut, result, None)

    threading.Thread(target=run, name=f"bounded-{getattr(fn, '__name__', 'call')}", daemon=True).start()
    try:
        return await asyncio.wait_for(asyncio.shield(fut), seconds)
    except TimeoutError:
        raise Abandoned(f"{getattr(fn, '__name__', 'call')}: no answer within {seconds:g} s") from None

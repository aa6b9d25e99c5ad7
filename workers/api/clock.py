"""The worker API's clocks, injected as the frontier service's ``clock`` is: wall time for what goes
on the wire (``now``: send times, expiries, windows), monotonic time for intervals, and every wait
the API does (``sleep`` on the event loop, ``pause`` on the consumer's thread, ``wait_for`` a
timeout, ``call_at`` a wall time), so that a test clock can jump them instead of sleeping.

:data:`SYSTEM`, the real clocks, is the default everywhere; nothing else in :mod:`workers.api`
reads the time or waits for it to pass, but the bounds on calls into a Kafka client that may never
return (:mod:`workers.api.caller`): those wait on a thread stuck in real I/O, in real seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Timer(Protocol):
    """A callback scheduled by :meth:`Clock.call_at`."""

    def cancel(self) -> None: ...


class Clock:
    """The real clocks (a test clock subclasses it)."""

    def now(self) -> float:
        """Wall time, epoch seconds: what goes on the wire."""
        return time.time()

    def monotonic(self) -> float:
        """For intervals and deadlines inside this process."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def pause(self, seconds: float) -> None:
        """Block the calling thread (the consumer's: its callbacks wait so)."""
        time.sleep(seconds)

    async def wait_for(self, aw: Awaitable[T], timeout: float) -> T:
        """``aw``'s result, or :class:`TimeoutError` after ``timeout`` seconds (``aw`` cancelled)."""
        return await asyncio.wait_for(aw, timeout)

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Call ``callback`` on the running event loop at wall time ``when`` (at once if it is past)."""
        return asyncio.get_running_loop().call_later(max(0.0, when - self.now()), callback)


SYSTEM = Clock()

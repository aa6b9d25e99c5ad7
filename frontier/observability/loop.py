"""How long the frontier's event loop is held: every ``LOOP_TICK`` a timer asks to run, and the
probe notes how late it ran (*late*: dispatch, input and answers all waited that long) and how
much CPU time the loop's thread spent meanwhile (*busy*: the part of a stall the process's own
code on the loop caused; being descheduled by the machine or waiting for another thread's GIL
is not in it). Each look goes to two histograms, and the largest of the last ``LOOP_WINDOW`` to
two gauges (``docs/METRICS.md``). Time and CPU clocks are injected; the sampling is pure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

LOOP_TICK = 0.01  # seconds between two looks at the loop
LOOP_WINDOW = 10.0  # the largest figures are kept over the last one to two windows of this length


class RollingMax:
    """The largest value seen in the current window and the one before it."""

    def __init__(self, window: float = LOOP_WINDOW) -> None:
        self.window = window
        self._start = 0.0
        self._now = 0.0
        self._previous = 0.0

    def add(self, value: float, now: float) -> None:
        if now - self._start >= self.window:
            # the window before this one: the current one if it just ended, else nothing
            self._previous = self._now if now - self._start < 2 * self.window else 0.0
            self._start, self._now = now, 0.0
        self._now = max(self._now, value)

    def value(self) -> float:
        return max(self._now, self._previous)


class LoopProbe:
    """Samples of the loop's lateness and its thread's CPU time (see the module)."""

    def __init__(
        self,
        observe: Callable[[float, float], None] | None = None,
        tick: float = LOOP_TICK,
        clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.thread_time,
    ) -> None:
        self.tick = tick
        self._observe = observe
        self._clock = clock
        self._cpu = cpu
        self.late = RollingMax()
        self.busy = RollingMax()

    def sample(self, late: float, busy: float, now: float) -> None:
        late = max(0.0, late)
        self.late.add(late, now)
        self.busy.add(busy, now)
        if self._observe is not None:
            self._observe(late, busy)

    async def run(self) -> None:
        """Look at the loop every tick until cancelled. Each look is a plain timer callback that
        schedules the next one (no task, coroutine step or future a tick: the probe runs 100
        times a second, idle or not)."""
        loop = asyncio.get_running_loop()
        clock, cpu, tick = self._clock, self._cpu, self.tick
        handle: asyncio.TimerHandle | None = None

        def look(started: float, cpu_then: float) -> None:
            nonlocal handle
            now, cpu_now = clock(), cpu()
            try:
                self.sample(now - started - tick, cpu_now - cpu_then, now)
            finally:  # (a failing observer never stops the looks)
                handle = loop.call_later(tick, look, clock(), cpu())

        handle = loop.call_later(tick, look, clock(), cpu())
        try:
            await loop.create_future()  # (until cancelled)
        finally:
            handle.cancel()

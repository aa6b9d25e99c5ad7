"""Heap pages handed back to the system after bursts of work: :class:`Trimmer`.

glibc keeps the pages freed in the middle of its heaps: an ingest burst (the router's batches, the
partitions' writes held until their transaction commits, the producers' and consumers' buffers,
RocksDB's flushes) leaves the process tens to hundreds of MiB larger than what it still holds
(50,000 hosts x 10 URLs, 2026-11-28: 295 MiB after the ingest, 215 MiB after one
``malloc_trim``). The service ticks a :class:`Trimmer` every few seconds with a count of its
work (its transactions); when that count moved since the last trim and ``interval`` passed, it
calls ``malloc_trim`` in a thread of its own (the call lets go of the GIL and only walks the free
lists: the event loop is not held). An idle process is not trimmed again and again. A trim holds
each heap's lock while it walks it (a thread allocating there waits: 0.07-0.14 s for a 600 MiB
heap, measured at load), so the next waits at least ``DUTY`` times as long as the last took: trims
take at most about 1 % of the time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from frontier.service.restore import release_free_memory

log = logging.getLogger(__name__)

TRIM_INTERVAL = 10.0  # seconds at least between two trims
SLOW_TRIM = 0.1  # a trim that took this long (seconds) is logged at info
DUTY = 100.0  # the next trim waits at least this many times as long as the last one took


class Trimmer:
    def __init__(
        self,
        release: Callable[[], bool] = release_free_memory,
        interval: float = TRIM_INTERVAL,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._release = release
        self.interval = interval
        self._timer = timer  # times a trim (tests pass their own)
        self._gap = interval  # seconds from the last trim's start to the next (longer after a slow one)
        self._work: int | None = None  # the work count at the last trim (None: none yet)
        self._last = -float("inf")  # when the last trim began (monotonic seconds)
        self._thread: threading.Thread | None = None
        self.trims = 0  # trims done (a figure for tests and logs)
        self.seconds = 0.0  # their total time

    def tick(self, work: int, now: float) -> bool:
        """Start a trim when ``work`` (a count that grows with the work done) moved since the last
        one, ``interval`` seconds (or ``DUTY`` times the last trim's time) passed since it began
        (``now``: monotonic seconds) and none is under way; True if one was started."""
        if work == self._work or now - self._last < self._gap:
            return False
        if self._thread is not None and self._thread.is_alive():
            return False
        self._work, self._last = work, now
        self._thread = threading.Thread(target=self._trim, name="malloc-trim", daemon=True)
        self._thread.start()
        return True

    def _trim(self) -> None:
        began = self._timer()
        try:
            self._release()
        except Exception:  # a trim must never stop the frontier
            log.warning("malloc_trim failed", exc_info=True)
            return
        took = self._timer() - began
        self._gap = max(self.interval, DUTY * took)
        self.trims += 1
        self.seconds += took
        (log.info if took >= SLOW_TRIM else log.debug)("heap trimmed in %.3fs", took)

    def join(self, timeout: float | None = None) -> None:
        """Wait for a trim under way (tests)."""
        if self._thread is not None:
            self._thread.join(timeout)

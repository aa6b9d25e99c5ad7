"""Whether this worker still owns the ``crawl.jobs`` partitions whose jobs it holds.

A job is sent only while its worker owns its partition: once the group gives the partition to
another worker, that worker re-reads the uncommitted jobs and sends them itself. A worker learns
of a planned revoke in time (its consumer's callback, served before the partition moves), but not
of a lost membership: a process frozen past its session (a GC pause, SIGSTOP, a VM migration)
carries on with timers that fired during the freeze and would send its held jobs before its
consumer hears that they are someone else's.

So this watches for stalls of the whole process: a thread ticks every ``TICK`` seconds; a gap of
more than ``STALL`` seconds between ticks (seen by the thread, or first by the event loop asking
:meth:`Membership.owns`) means every thread was stopped, and the group may have moved on. From
then on ownership is *unknown* (``owns`` returns None) until the consumer confirms it with a
synchronous offset commit, which the group coordinator refuses from a member it expired
(:meth:`Membership.confirmed`), or learns it lost the partitions (:meth:`Membership.revoked`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from workers.api.clock import SYSTEM

log = logging.getLogger("worker")

# seconds between the watch thread's ticks. The event loop ticks too, each time it asks whether a
# partition is owned (before any send), so this only notes that an idle process runs: half a
# second keeps a stall of STALL seconds told apart, with five wake-ups a second fewer than 0.1 did
TICK = 0.5
STALL = 2.0  # a gap longer than this between ticks: the whole process was stopped (session: 10 s)

TopicPartition = tuple[str, int]


class Membership:
    def __init__(self, stall: float = STALL, clock: Callable[[], float] = SYSTEM.monotonic) -> None:
        self._clock = clock
        self._stall = stall
        self._lock = threading.Lock()
        self._owned: set[TopicPartition] = set()
        self._last = clock()
        self._suspect_since: float | None = None  # monotonic time a stall was seen, while unconfirmed
        self.stalls = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="stall-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(TICK):
            self.tick()

    def tick(self) -> None:
        """Note that the process runs; a gap since the last note longer than ``STALL`` is a stall."""
        with self._lock:
            now = self._clock()
            gap = now - self._last
            self._last = now
            if gap > self._stall and self._owned:
                if self._suspect_since is None:
                    log.warning("the process was stopped for %.1f s: its jobs wait until the group confirms that "
                                "it still owns their partitions", gap)  # fmt: skip
                self._suspect_since = now
                self.stalls += 1

    # -- what the consumer learns ----------------------------------------------------------------
    def assigned(self, tps: Iterable[TopicPartition]) -> None:
        with self._lock:
            self._last = self._clock()  # the group just answered: the process runs
            self._owned.update(tps)

    def revoked(self, tps: Iterable[TopicPartition]) -> None:
        with self._lock:
            self._owned.difference_update(tps)
            if not self._owned:
                self._suspect_since = None

    def confirmed(self, since: float) -> None:
        """The group accepted a commit asked at monotonic time ``since``: no stall before it matters."""
        with self._lock:
            if self._suspect_since is not None and self._suspect_since <= since:
                self._suspect_since = None

    @property
    def suspect(self) -> bool:
        self.tick()
        return self._suspect_since is not None

    def now(self) -> float:
        return self._clock()

    def owned(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._owned)

    def owns(self, tp: TopicPartition) -> bool | None:
        """True: the partition is this worker's and no stall is unconfirmed; False: it is not
        (revoked or lost); None: unknown until the group confirms it after a stall."""
        self.tick()  # a stall seen here first, before the watch thread wakes up
        with self._lock:
            if tp not in self._owned:
                return False
            return None if self._suspect_since is not None else True

"""The largest queues of a partition, kept as they change: :class:`Largest`, for the status
snapshots' busiest scopes (issue 39: ranking every queue at every snapshot was a seventh of the
frontier's CPU with 50 crawls and a snapshot every 0.2 s).

It keeps a set of candidate queues and a floor: every queue outside the set holds at most
``floor`` URLs. A queue that grows past the floor joins the set (the one check on the hot path);
when the set doubles, its smaller half leaves and the floor rises to the largest of them. A
ranking sorts the candidates only, and is right when the ``n``-th of them holds at least the
floor (no queue outside can hold more); else, and while the partition has few queues, it ranks
every queue as before (``heapq.nlargest``: among equal counts, the queues counted first).
Depends on nothing but the counts it is given (read only).
"""

from __future__ import annotations

import heapq
from collections import Counter
from operator import itemgetter

from frontier.partition.keys import QueueId

LARGEST_KEPT = 1024  # candidates kept after a full ranking (up to twice as many as queues grow)

_count = itemgetter(1)


class Largest:
    """The ``n`` largest of ``counts`` (queue → URLs queued), told of every queue that grows."""

    __slots__ = ("_counts", "_top", "floor", "keep", "rescans")

    def __init__(self, counts: Counter[QueueId], keep: int = LARGEST_KEPT) -> None:
        self._counts = counts
        self.keep = keep
        self._top: set[QueueId] = set()
        self.floor: int | None = None  # None: not ranked yet (or counts loaded): the next ranking is full
        self.rescans = 0  # full rankings done (a figure for tests and profiles)

    def grew(self, qid: QueueId, count: int) -> None:
        """``qid`` holds ``count`` URLs now, more than before."""
        floor = self.floor
        if floor is not None and count > floor and qid not in self._top:
            self._top.add(qid)
            if len(self._top) > 2 * self.keep:
                self._halve()

    def reset(self) -> None:
        """The counts changed wholesale (loaded): the next ranking is a full one."""
        self.floor = None
        self._top.clear()

    def largest(self, n: int) -> list[tuple[QueueId, int]]:
        """The ``n`` largest queues and their counts, largest first."""
        counts = self._counts
        if n <= self.keep and self.floor is not None and len(counts) > 2 * self.keep:
            # the candidates still counted (C calls only); one gone from the counts leaves the set.
            # Kept, the gone ones were looked up through ``Counter.__missing__`` (a Python call each)
            # and sorted again at every snapshot: with 50 crawls most queues hold one URL and go with it
            top = self._top
            alive = list(filter(counts.__contains__, top))
            if len(alive) < len(top):
                self._top = set(alive)
            # sorted by the Counter's own lookup, and pairs made for the n kept
            ranked = sorted(alive, key=counts.__getitem__, reverse=True)[:n]
            if len(ranked) >= n and counts[ranked[-1]] >= max(1, self.floor):
                return [(q, counts[q]) for q in ranked]
        return self._rank(n)

    def _rank(self, n: int) -> list[tuple[QueueId, int]]:
        """Every queue ranked (a C-level scan); the candidates start again from the ``keep`` largest."""
        self.rescans += 1
        counts = self._counts
        top = heapq.nlargest(max(n, self.keep), counts.items(), key=_count)
        if len(counts) > 2 * self.keep:
            self._top = {q for q, _ in top}
            self.floor = top[-1][1] if len(top) >= self.keep else 0
        else:
            self.reset()  # few queues: every ranking is a full one
        return top[:n]

    def _halve(self) -> None:
        counts = self._counts
        ranked = sorted(((q, counts.get(q, 0)) for q in self._top), key=_count, reverse=True)
        self._top = {q for q, _ in ranked[: self.keep]}
        self.floor = max(self.floor or 0, ranked[self.keep][1])

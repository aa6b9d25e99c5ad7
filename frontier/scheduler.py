"""The scheduler heap: hosts with due work, keyed by the time they may next send.

A host appears at most once (re-scheduling replaces its entry lazily: stale heap entries are
skipped on pop). Hosts that have no queued work, or that wait for a free concurrency slot,
are not in the heap at all, so its size tracks *due* work, not the number of hosts.
"""

from __future__ import annotations

import heapq


class Scheduler:
    def __init__(self) -> None:
        self._heap: list[tuple[float, str]] = []
        self._at: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._at)

    def __contains__(self, host: str) -> bool:
        return host in self._at

    def schedule(self, host: str, at: float) -> None:
        """(Re)schedule ``host`` for ``at``; an earlier existing entry is replaced too."""
        if self._at.get(host) == at:
            return
        self._at[host] = at
        heapq.heappush(self._heap, (at, host))

    def discard(self, host: str) -> None:
        self._at.pop(host, None)

    def next_time(self) -> float | None:
        """The earliest scheduled time, or None when nothing is scheduled."""
        while self._heap:
            at, host = self._heap[0]
            if self._at.get(host) == at:
                return at
            heapq.heappop(self._heap)
        return None

    def pop_due(self, now: float) -> str | None:
        """Remove and return a host whose time has come, or None."""
        while self._heap and self._heap[0][0] <= now:
            at, host = heapq.heappop(self._heap)
            if self._at.get(host) == at:
                del self._at[host]
                return host
        return None

    def scheduled_at(self, host: str) -> float | None:
        return self._at.get(host)

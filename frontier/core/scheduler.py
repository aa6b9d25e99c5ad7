"""The scheduler heap: hosts with due work, keyed by the time they may next send.

A host appears at most once (re-scheduling replaces its entry lazily: stale entries are skipped
on pop). Hosts that have no queued work, or that wait for a free concurrency slot, are not in the
heap at all, so its size tracks *due* work, not the number of hosts.

Hosts come out in (time, host) order, earliest time first and, among equal times, the smallest
host name first. Memory: many hosts share one scheduled time (every queue created by one batch
of URLs, every queue after a restart), so the heap holds each distinct *time* once, with a bucket
of the hosts scheduled at it (a single host name, or a heap of names), instead of one
``(time, host)`` tuple per host: a million queued domains cost a few bytes each, not ~70.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable


class Scheduler:
    def __init__(self) -> None:
        self._at: dict[str, float] = {}  # host → its current time (the truth; bucket entries may be stale)
        self._times: list[float] = []  # heap of the distinct times that have a bucket
        self._buckets: dict[float, str | list[str]] = {}  # time → the host, or a heap of hosts, pushed at it

    def __len__(self) -> int:
        return len(self._at)

    def __contains__(self, host: str) -> bool:
        return host in self._at

    def schedule(self, host: str, at: float) -> None:
        """(Re)schedule ``host`` for ``at``; an earlier existing entry is replaced too."""
        if self._at.get(host) == at:
            return
        self._at[host] = at
        bucket = self._buckets.get(at)
        if bucket is None:
            self._buckets[at] = host
            heapq.heappush(self._times, at)
        elif isinstance(bucket, str):
            self._buckets[at] = [bucket, host] if bucket <= host else [host, bucket]  # sorted: a heap
        else:
            heapq.heappush(bucket, host)

    def schedule_many(self, hosts: Iterable[str], at: float) -> None:
        """:meth:`schedule` each of ``hosts`` for ``at`` (a load: every queue due at once), with
        one sort instead of a heap push per host."""
        new = [host for host in hosts if self._at.get(host) != at]
        if not new:
            return
        self._at.update(dict.fromkeys(new, at))
        bucket = self._buckets.get(at)
        if bucket is None:
            heapq.heappush(self._times, at)
        else:
            new.extend([bucket] if isinstance(bucket, str) else bucket)  # (stale names included: skipped on pop)
        new.sort()  # a sorted list is a heap
        self._buckets[at] = new[0] if len(new) == 1 else new

    def discard(self, host: str) -> None:
        self._at.pop(host, None)

    def _take(self, at: float) -> str:
        """Remove and return the smallest host of the earliest bucket (``at``), valid or stale."""
        bucket = self._buckets[at]
        if isinstance(bucket, str):
            host = bucket
        else:
            host = heapq.heappop(bucket)
            if len(bucket) > 1:
                return host
            if bucket:
                self._buckets[at] = bucket[0]
                return host
        del self._buckets[at]
        heapq.heappop(self._times)
        return host

    def next_time(self) -> float | None:
        """The earliest scheduled time, or None when nothing is scheduled."""
        while self._times:
            at = self._times[0]
            bucket = self._buckets[at]
            if self._at.get(bucket if isinstance(bucket, str) else bucket[0]) == at:
                return at
            self._take(at)
        return None

    def pop_due(self, now: float) -> str | None:
        """Remove and return a host whose time has come, or None."""
        while self._times and self._times[0] <= now:
            at = self._times[0]
            host = self._take(at)
            if self._at.get(host) == at:
                del self._at[host]
                return host
        return None

    def scheduled_at(self, host: str) -> float | None:
        return self._at.get(host)

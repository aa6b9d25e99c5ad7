"""Which consumed job offsets a worker may commit: per partition, the lowest offset still being
worked on (a job is committed only after everything it produced is acknowledged), so a worker
killed mid-job has that job delivered again."""

from __future__ import annotations

import threading
from collections import defaultdict

from confluent_kafka import TopicPartition


class OffsetTracker:
    """Per partition: which consumed offsets are still being worked on; what is safe to commit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[str, int], set[int]] = defaultdict(set)
        self._next: dict[tuple[str, int], int] = {}

    def started(self, topic: str, partition: int, offset: int) -> None:
        with self._lock:
            self._open[(topic, partition)].add(offset)
            self._next[(topic, partition)] = max(self._next.get((topic, partition), 0), offset + 1)

    def finished(self, topic: str, partition: int, offset: int) -> None:
        with self._lock:
            self._open[(topic, partition)].discard(offset)

    def open_count(self, tps: set[tuple[str, int]] | None = None) -> int:
        with self._lock:
            return sum(len(v) for k, v in self._open.items() if tps is None or k in tps)

    def commit_points(self, tps: set[tuple[str, int]] | None = None) -> list[TopicPartition]:
        with self._lock:
            out = []
            for key, nxt in self._next.items():
                if tps is not None and key not in tps:
                    continue
                pending = self._open.get(key)
                out.append(TopicPartition(key[0], key[1], min(pending) if pending else nxt))
            return out

    def forget(self, tps: set[tuple[str, int]]) -> None:
        with self._lock:
            for key in tps:
                self._open.pop(key, None)
                self._next.pop(key, None)

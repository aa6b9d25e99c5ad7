"""Which consumed job offsets a worker may commit: per partition, the lowest offset still being
worked on (a job is committed only after everything it produced is acknowledged), so a worker
killed mid-job has that job delivered again.

Jobs finish out of order: above that commit point some are already done. Those offsets travel
with the commit as its metadata (``done:`` and ranges relative to the point), so the worker that
takes the partition over skips them instead of fetching them again (:meth:`OffsetTracker.skip`).
A job is marked done, and the mark committed, *before* its report is published: a report that
landed always has its mark committed. (A mark whose report never went out leaves the job to its
lease at the frontier, which re-queues it: at least once.)
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict

from confluent_kafka import TopicPartition

log = logging.getLogger("worker")

METADATA_CHARS = 3000  # Kafka keeps up to 4096 characters of metadata per committed offset by default
PREFIX = "done:"

Tp = tuple[str, int]


class OffsetTracker:
    """Per partition: which consumed offsets are still being worked on, which are finished above
    the commit point, and which a previous owner reported (to skip)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[Tp, set[int]] = defaultdict(set)
        self._finished: dict[Tp, set[int]] = defaultdict(set)
        self._next: dict[Tp, int] = {}
        self._skip: dict[Tp, set[int]] = {}

    def started(self, topic: str, partition: int, offset: int) -> None:
        with self._lock:
            self._open[(topic, partition)].add(offset)
            self._next[(topic, partition)] = max(self._next.get((topic, partition), 0), offset + 1)

    def finished(self, topic: str, partition: int, offset: int) -> bool:
        """The job at ``offset`` is over here; False: it is not this incarnation's (its partition
        was forgotten meanwhile: revoked or lost), and nothing is noted."""
        with self._lock:
            key = (topic, partition)
            opened = self._open.get(key)
            if opened is None or offset not in opened:
                return False
            opened.discard(offset)
            self._finished[key].add(offset)
            return True

    def tracks(self, topic: str, partition: int) -> bool:
        """Whether the partition is this incarnation's (consumed from, and not forgotten since)."""
        with self._lock:
            return (topic, partition) in self._next

    def open_count(self, tps: set[Tp] | None = None) -> int:
        with self._lock:
            return sum(len(v) for k, v in self._open.items() if tps is None or k in tps)

    def commit_points(self, tps: set[Tp] | None = None) -> list[TopicPartition]:
        """Per partition: the lowest open offset (or the next one), with the offsets finished above it."""
        with self._lock:
            out = []
            for key, nxt in self._next.items():
                if tps is not None and key not in tps:
                    continue
                pending = self._open.get(key)
                point = min(pending) if pending else nxt
                done = self._finished.get(key, set())
                done.difference_update([o for o in done if o < point])
                metadata = encode_done(point, done)
                if metadata is None:
                    out.append(TopicPartition(key[0], key[1], point))
                else:
                    out.append(TopicPartition(key[0], key[1], point, metadata))
            return out

    def forget(self, tps: set[Tp]) -> None:
        with self._lock:
            for key in tps:
                self._open.pop(key, None)
                self._finished.pop(key, None)
                self._next.pop(key, None)
                self._skip.pop(key, None)

    def skip(self, committed: list[TopicPartition]) -> int:
        """Take the finished offsets a previous owner committed with these partitions' offsets."""
        count = 0
        with self._lock:
            for tp in committed:
                done = decode_done(tp.offset, getattr(tp, "metadata", None))
                if done:
                    self._skip[(tp.topic, tp.partition)] = done
                    count += len(done)
        return count

    def reported_before(self, topic: str, partition: int, offset: int) -> bool:
        """Whether the job at ``offset`` was reported by the partition's previous owner: it counts
        as finished here (its offset is committed in turn), and must not be fetched again."""
        with self._lock:
            skip = self._skip.get((topic, partition))
            if not skip or offset not in skip:
                return False
            skip.discard(offset)
        self.started(topic, partition, offset)
        self.finished(topic, partition, offset)
        return True


def encode_done(point: int, done: set[int]) -> str | None:
    """``done:`` and the offsets as ranges relative to ``point`` ("done:1-4,7"); None when none.
    Past METADATA_CHARS the highest ranges are left out (those jobs may be fetched again)."""
    if not done:
        return None
    ranges: list[str] = []
    size = len(PREFIX)
    first = prev = None
    for offset in sorted(done):
        if prev is not None and offset == prev + 1:
            prev = offset
            continue
        if first is not None and prev is not None:
            text = _range(first - point, prev - point)
            if size + len(text) + 1 > METADATA_CHARS:
                log.info("%d finished offsets above the commit point: not all recorded", len(done))
                return PREFIX + ",".join(ranges)
            ranges.append(text)
            size += len(text) + 1
        first = prev = offset
    if first is not None and prev is not None:
        text = _range(first - point, prev - point)
        if size + len(text) + 1 <= METADATA_CHARS:
            ranges.append(text)
    return PREFIX + ",".join(ranges)


def _range(a: int, b: int) -> str:
    return str(a) if a == b else f"{a}-{b}"


def decode_done(point: int, metadata: str | None) -> set[int]:
    """The offsets :func:`encode_done` recorded (an unreadable one: none, so nothing is skipped)."""
    if not metadata or not metadata.startswith(PREFIX) or point < 0:
        return set()
    done: set[int] = set()
    try:
        for part in metadata[len(PREFIX) :].split(","):
            if not part:
                continue
            a, _, b = part.partition("-")
            lo, hi = int(a), int(b or a)
            if lo < 0 or hi < lo or hi - lo > 1_000_000:
                return set()
            done.update(range(point + lo, point + hi + 1))
    except ValueError:
        return set()
    return done

"""The frontier's status snapshots read as they come, for a benchmark that polls them while it
measures: :class:`StatusTail` keeps one consumer and its place on the status topic, so each poll
decodes only the snapshots published since the last one. ``tests.bench.common.snapshot`` reads the
topic from its start at every poll (a new consumer each time): over a run of minutes with a
snapshot every 0.2 s, and 50 crawls' rows in each, that was the larger part of the benchmark's own
CPU, on the cores the frontier measured shares (issue 39).

``rate`` and ``wait`` measure as ``tests.bench.common.measure_rate`` and ``wait_total`` do.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaError, TopicPartition

from frontier.client.status import overview
from tests.bench.common import rate_of
from topics.kafka import Connection, Kafka, watermarks
from topics.schemas import SchemaError, Status, decode

MAX_AGE = 10.0  # seconds: an instance whose last snapshot is older is not live (as common.snapshot)


class StatusTail:
    """The latest snapshot of each frontier instance, read from where the last poll stopped."""

    def __init__(self, client: Connection, topic: str) -> None:
        self._consumer = Kafka.of(client).reader("status", {"enable.auto.commit": False, "enable.partition.eof": True})
        self._topic = topic
        self._latest: dict[bytes, Status] = {}
        self._next = 0  # the offset the consumer reads next
        self._assigned = False

    def close(self) -> None:
        self._consumer.close()

    def _read(self, timeout: float = 10.0) -> None:
        _, high = watermarks(self._consumer, self._topic, 0, timeout=10)
        if high <= self._next:
            return
        if not self._assigned:
            self._consumer.assign([TopicPartition(self._topic, 0, self._next)])
            self._assigned = True
        deadline = time.monotonic() + timeout
        while self._next < high and time.monotonic() < deadline:
            for msg in self._consumer.consume(1000, timeout=0.05):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    continue
                key, value = msg.key() or b"", msg.value()
                if value is None:
                    self._latest.pop(key, None)
                else:
                    try:
                        self._latest[key] = decode(value, Status)
                    except SchemaError:
                        pass
                self._next = (msg.offset() or 0) + 1

    def snapshot(self) -> tuple[float, dict[str, int]]:
        """(time of the newest live instance's snapshot, totals summed over the live instances)."""
        self._read()
        now = time.time()
        ov = overview([s for s in self._latest.values() if now - s.at <= MAX_AGE])
        return ov.at, ov.totals

    def rate(self, key: str, n: int, timeout: float, alive: Callable[[], None] | None = None,
             before: tuple[float, int] | None = None) -> float:  # fmt: skip
        """Per second of ``key`` over the middle of a run of ``n``, timed by the frontier's own
        snapshots: from the last snapshot below 5 % (or ``before``) to the first at or above 95 %."""
        return rate_of(self.snapshot, key, 0, n, timeout, alive, before)

    def wait(self, key: str, target: int, timeout: float, alive: Callable[[], None] | None = None) -> None:
        """Poll the totals until ``key`` reaches ``target``."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if alive is not None:
                alive()
            if self.snapshot()[1].get(key, 0) >= target:
                return
            time.sleep(0.2)
        raise TimeoutError(f"{key} did not reach {target} within {timeout:.0f}s")

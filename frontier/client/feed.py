"""Tailing the compacted status topic into a :class:`~frontier.client.history.StatusHistory`
(:class:`StatusFeed`), reading it once (:func:`read_status`: the CLI, the client), and this
instance's consumer lag (:class:`LagProbe`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, TopicPartition

from frontier.client.history import StatusHistory
from frontier.client.status import LIVE_SECONDS
from topics.kafka import Connection, Kafka, watermarks
from topics.schemas import SchemaError, Status, decode

log = logging.getLogger(__name__)

READ_TIMEOUT = 10.0  # give up reading the status topic after this long


def read_status(kafka: Connection, topic: str, max_age: float | None = LIVE_SECONDS) -> list[Status]:
    """The latest snapshot of each instance (tombstones remove an instance)."""
    consumer = Kafka.of(kafka).reader("status", {"enable.auto.commit": False, "enable.partition.eof": True})
    latest: dict[bytes, Status] = {}
    try:
        _, high = watermarks(consumer, topic, 0, timeout=10)
        if high <= 0:
            return []
        consumer.assign([TopicPartition(topic, 0, 0)])
        done = False
        deadline = time.monotonic() + READ_TIMEOUT
        while not done and time.monotonic() < deadline:
            # short waits: consume() holds a partial batch for its whole timeout, and the tail of
            # the topic is always a partial batch (a 2 s timeout made every read take 2 s)
            msgs = consumer.consume(1000, timeout=0.05)
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    done = done or err.code() == KafkaError._PARTITION_EOF
                    continue
                key, value = msg.key() or b"", msg.value()
                if value is None:
                    latest.pop(key, None)
                else:
                    try:
                        latest[key] = decode(value, Status)
                    except SchemaError:
                        continue
                if (msg.offset() or 0) >= high - 1:
                    done = True
    finally:
        consumer.close()
    now = time.time()
    return [s for s in latest.values() if max_age is None or now - s.at <= max_age]


class StatusFeed(StatusHistory):
    """Tails the status topic in a background thread into a :class:`StatusHistory`."""

    def __init__(self, kafka: Connection, topic: str, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock)
        self._consumer = Kafka.of(kafka).reader("web", {"enable.auto.commit": False})
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-feed", daemon=True)

    def start(self) -> None:
        self._consumer.assign([TopicPartition(self._topic, 0, 0)])
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    msgs = self._consumer.consume(500, timeout=0.5)
                except Exception as exc:  # noqa: BLE001 - the page shows stale data, the frontier goes on
                    log.warning("status feed: %s", exc)
                    self._stop.wait(1.0)
                    continue
                for msg in msgs:
                    if msg.error() is None:
                        self.apply(msg.key() or b"", msg.value())
                if not msgs:
                    self.prune()  # ages out even when nothing arrives
        finally:
            self._consumer.close()


class LagProbe:
    """Consumer lag of this instance's input partitions, read from its group's committed offsets."""

    def __init__(self, kafka: Connection, group: str) -> None:
        self._consumer = Kafka.of(kafka).reader("lag", {"enable.auto.commit": False}, group=group)

    def measure(self, topic: str, partitions: list[int]) -> int:
        if not partitions:
            return 0
        committed = self._consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=5)
        total = 0
        for tp in committed:
            low, high = self._consumer.get_watermark_offsets(tp, timeout=5, cached=False)
            position = tp.offset if tp.offset >= 0 else low
            total += max(0, high - position)
        return total

    def close(self) -> None:
        self._consumer.close()


def caught_up(kafka: Connection, group: str, topic: str, partitions: int, deadline: float) -> bool:
    """Wait until ``group`` has committed every record ``topic`` held when asked (its end offsets
    then); False when the monotonic ``deadline`` came first. Records written later are not waited
    for. Reads the group's committed offsets without joining it."""
    consumer = Kafka.of(kafka).reader("transit", {"enable.auto.commit": False}, group=group)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        marks = {tp.partition: consumer.get_watermark_offsets(tp, timeout=5, cached=False) for tp in tps}
        while True:
            committed = consumer.committed(tps, timeout=5)
            behind = [tp for tp in committed if max(tp.offset, marks[tp.partition][0]) < marks[tp.partition][1]]
            if not behind:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
    finally:
        consumer.close()

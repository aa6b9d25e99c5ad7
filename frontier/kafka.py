"""Thin Kafka adapters shared by the frontier and the workers.

- :func:`producer_conf` / :func:`consumer_conf`: client settings every component agrees on
  (murmur2 partitioner so that every client maps a key to the same partition, idempotence).
- :class:`AsyncProducer`: a confluent-kafka producer served by a poll thread; ``send`` returns
  an asyncio future resolved on delivery, ``flush`` waits for everything sent so far.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

log = logging.getLogger(__name__)


def producer_conf(base: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        **base,
        "partitioner": "murmur2_random",
        "enable.idempotence": True,
        "linger.ms": 2,
        "compression.type": "lz4",
        "message.max.bytes": 16 * 1024 * 1024,
        # bounded buffering (librdkafka allows 1 GB by default); a full queue is backpressure. Twice
        # the largest record, so that one always fits (a record larger than the queue never would).
        "queue.buffering.max.kbytes": 32 * 1024,
    }
    conf.update(extra)
    return conf


def consumer_conf(base: Mapping[str, str], group: str, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        **base,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.message.max.bytes": 16 * 1024 * 1024,
        # bounded prefetch (librdkafka's default is 64 MB per partition)
        "queued.max.messages.kbytes": 8 * 1024,
    }
    conf.update(extra)
    return conf


def produce(
    producer: Producer,
    topic: str,
    value: bytes | None,
    key: bytes | None = None,
    partition: int | None = None,
    on_delivery: Any = None,
) -> None:
    """``producer.produce`` with backpressure: a full local queue waits for deliveries, then retries."""
    kwargs: dict[str, Any] = {}
    if key is not None:
        kwargs["key"] = key
    if partition is not None:
        kwargs["partition"] = partition
    if on_delivery is not None:
        kwargs["on_delivery"] = on_delivery
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)


def coordinates(msg: Message) -> tuple[str, int, int]:
    """(topic, partition, offset) of a consumed or delivered message."""
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    if topic is None or partition is None or offset is None:
        raise ValueError("message without topic/partition/offset")
    return topic, partition, offset


def watermarks(consumer: Consumer, topic: str, partition: int, timeout: float = 30.0) -> tuple[int, int]:
    """(low, high) offsets of a partition, retrying while its leader is not known yet (new topics,
    broker restarts) until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)
            return int(low), int(high)
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise
            log.info("watermarks of %s[%d] not available yet: %s", topic, partition, exc)
            time.sleep(0.2)


class DeliveryError(RuntimeError):
    pass


class AsyncProducer:
    """A confluent-kafka producer usable from asyncio code."""

    def __init__(self, conf: Mapping[str, Any], loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._producer = Producer(dict(conf))
        self._loop = loop or asyncio.get_running_loop()
        self._closed = threading.Event()
        self._errors: list[str] = []
        self._thread = threading.Thread(target=self._poll_loop, name="producer-poll", daemon=True)
        self._thread.start()

    def _poll_loop(self) -> None:
        while not self._closed.is_set():
            self._producer.poll(0.05)

    def _produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int | None, cb: Any) -> None:
        produce(self._producer, topic, value, key, partition, cb)

    def send(
        self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None
    ) -> asyncio.Future[Message]:
        """Produce one record; the future resolves with the delivered message or fails."""
        fut: asyncio.Future[Message] = self._loop.create_future()

        def done(err: KafkaError | None, msg: Message) -> None:
            self._loop.call_soon_threadsafe(_resolve, fut, err, msg)

        self._produce(topic, value, key, partition, done)
        return fut

    def send_nowait(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        on_delivery: Callable[[Message], None] | None = None,
    ) -> None:
        """Produce without a future; errors are collected and raised by :meth:`flush`."""

        def done(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                self._errors.append(f"{topic}: {err}")
            elif on_delivery is not None:
                on_delivery(msg)

        self._produce(topic, value, key, partition, done)

    def send_bare(
        self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None
    ) -> None:
        """Produce with no delivery callback at all (cheapest; see FrontierService._mark)."""
        produce(self._producer, topic, value, key, partition)

    def raise_errors(self) -> None:
        """Raise if any record produced with ``send_nowait`` failed."""
        if self._errors:
            errors, self._errors = self._errors, []
            raise DeliveryError("; ".join(errors[:5]))

    async def flush(self, timeout: float = 60.0) -> None:
        """Wait until every record produced so far is delivered; raise if any failed."""
        remaining = await asyncio.to_thread(self._producer.flush, timeout)
        if remaining:
            raise DeliveryError(f"{remaining} records not delivered within {timeout}s")
        if self._errors:
            errors, self._errors = self._errors, []
            raise DeliveryError("; ".join(errors[:5]))

    def close(self, timeout: float = 30.0) -> None:
        self._producer.flush(timeout)
        self._closed.set()
        self._thread.join(timeout=5)


def _resolve(fut: asyncio.Future[Message], err: KafkaError | None, msg: Message) -> None:
    if fut.done():
        return
    if err is not None:
        fut.set_exception(KafkaException(err))
    else:
        fut.set_result(msg)

"""What a worker puts on Kafka, and how it learns that it landed: records published one by one
with their acknowledgement awaited (:meth:`Publisher.deliver`), feedback batched per partition of
``crawl.feedback`` (one record per ~20 ms and partition, at most ~4 MiB each), and rejections of
jobs that do not decode.

Every call returns (or raises) only once the broker has acknowledged the record, so the caller
can keep the protocol's order: page and follow-ups acknowledged, then the feedback, then the
job's offset committed (docs/PROTOCOL.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterator

import msgspec
from confluent_kafka import KafkaError, KafkaException, Message

from topics.catalog import Topics
from topics.kafka import AsyncProducer
from topics.partitioning import partition_of
from topics.schemas import Feedback, FeedbackBatch, Rejected, encode
from workers.api.clock import SYSTEM, Clock

log = logging.getLogger("worker")

FEEDBACK_LINGER = 0.02  # seconds a feedback batch may wait for company
FEEDBACK_RECORD_BYTES = 4 * 1024 * 1024  # per FeedbackBatch record (crawl.feedback takes 16 MiB)

Waiting = tuple[Feedback, "asyncio.Future[None]"]


class Publisher:
    """Records out through ``producer``; a feedback batch lingers ``FEEDBACK_LINGER`` on ``clock``."""

    def __init__(self, producer: AsyncProducer, topics: Topics, clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.producer = producer
        self.topics = topics
        self._feedback: dict[int, list[Waiting]] = defaultdict(list)
        self._flushing: asyncio.Task[None] | None = None

    async def deliver(self, topic: str, record: msgspec.Struct, key: bytes | None = None) -> str:
        """Publish ``record``; "" once acknowledged, else why not."""
        try:
            await self.producer.send(topic, encode(record), key=key)
        except Exception as exc:  # noqa: BLE001 - refused (size, authorization, timeout): the caller decides
            log.warning("record for %s not published: %s", topic, reason(exc))
            return reason(exc)
        return ""

    async def reject(self, rejected: Rejected) -> None:
        """Publish a rejection; without its original when the whole one is refused; raise if
        not even that goes out."""
        if problem := await self.deliver(self.topics.rejected, rejected):
            minimal = rejected.minimal(f"{rejected.reason} (original not kept: {problem})"[:1000])
            if again := await self.deliver(self.topics.rejected, minimal):
                raise RuntimeError(f"rejection not published: {again}")

    async def report(self, fb: Feedback) -> bool:
        """Send ``fb``; False (logged) if it cannot be delivered: the lease expires and the job
        comes back."""
        try:
            await self.feedback(fb)
        except Exception as exc:  # noqa: BLE001
            log.error("feedback for %s not delivered (%s); its lease will expire", fb.url, reason(exc))
            return False
        return True

    async def feedback(self, fb: Feedback) -> None:
        """Queue ``fb`` into its partition's batch; return once the batch is acknowledged."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._feedback[partition_of(fb, self.topics.partitions)].append((fb, fut))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.ensure_future(self._flush())
        await fut

    async def settled(self, timeout: float = 5.0) -> None:
        """Wait for a feedback batch still lingering (tests, shutdown)."""
        if self._flushing is not None:
            await self.clock.wait_for(asyncio.shield(self._flushing), timeout)

    async def _flush(self) -> None:
        await self.clock.sleep(FEEDBACK_LINGER)
        batches, self._feedback = self._feedback, defaultdict(list)
        for partition, queued in batches.items():
            for entries in by_size(queued):
                try:
                    self._publish(partition, entries)
                except Exception as exc:  # noqa: BLE001 - refused at once: every sender learns it, none waits forever
                    for _, f in entries:
                        if not f.done():
                            f.set_exception(exc)

    def _publish(self, partition: int, entries: list[Waiting]) -> None:
        """One FeedbackBatch record; each waiting sender learns of its delivery."""
        items = [fb for fb, _ in entries]
        version = 2 if any(fb.outcome == "skipped" for fb in items) else 1  # v1 readers keep working
        delivery = self.producer.send(self.topics.feedback, encode(FeedbackBatch(v=version, items=items)),
                                      partition=partition)  # fmt: skip

        def settle(d: asyncio.Future[Message]) -> None:
            for _, f in entries:
                if f.done():
                    continue
                if d.exception() is not None:
                    f.set_exception(d.exception())  # type: ignore[arg-type]
                else:
                    f.set_result(None)

        delivery.add_done_callback(settle)


def by_size(entries: list[Waiting]) -> Iterator[list[Waiting]]:
    """Cut a partition's feedback into records of at most ~4 MiB (robots.txt bodies are up to
    500 KiB each: a burst of them must not make one record the broker refuses)."""
    chunk: list[Waiting] = []
    size = 0
    for entry in entries:
        cost = len(entry[0].body) + 2048  # the body, base64-encoded, plus the rest of the result
        cost = cost * 4 // 3
        if chunk and size + cost > FEEDBACK_RECORD_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(entry)
        size += cost
    if chunk:
        yield chunk


def reason(exc: BaseException) -> str:
    """A short reason for a failed publish: the Kafka error's name and text, else the exception."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    text = f"{err.name()}: {err.str()}" if isinstance(err, KafkaError) else f"{type(exc).__name__}: {exc}"
    return text[:300]

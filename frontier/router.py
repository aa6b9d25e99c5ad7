"""The router: re-keys user input by registrable domain.

Consumes ``crawl.urls`` (any key, any partition) in large batches with confluent-kafka, parses
and canonicalises each record, and produces

- accepted URLs to ``crawl.urls.bydomain``, one :class:`UrlBatch` record per target partition
  (partition = murmur2(registrable domain) mod N, as every client computes it), and
- everything else to ``crawl.rejected`` with the original bytes and the reason.

Input offsets are committed only after both are acknowledged (at least once; the frontier's
seen-set removes the duplicates a crash may cause). By default it runs as a thread inside each
frontier process; with ``frontier.embedded_router = false`` it runs as processes of its own
(``crawl-frontier router``, :func:`run_router`), which takes URL parsing off the frontier's GIL.
Either way the router group spreads ``crawl.urls`` partitions over every router.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from frontier.kafka_io import consumer_conf, coordinates, produce, producer_conf
from frontier.urls import Rejection, parse_input
from topics.catalog import Topics
from topics.partitioning import partition_for
from topics.schemas import Rejected, UrlBatch, UrlItem, encode

log = logging.getLogger(__name__)

BATCH_ITEMS = 2000  # URLs per UrlBatch record


def route(msgs: list[Message], partitions: int, topic: str) -> tuple[dict[int, list[UrlItem]], list[Rejected]]:
    """Split consumed records into per-partition URL lists and rejections (pure)."""
    routed: dict[int, list[UrlItem]] = defaultdict(list)
    rejected: list[Rejected] = []
    for msg in msgs:
        raw = msg.value()
        try:
            item = parse_input(raw)
        except Rejection as exc:
            _, partition, offset = coordinates(msg)
            rejected.append(
                Rejected(reason=str(exc), original=raw or b"", topic=topic, partition=partition, offset=offset)
            )
            continue
        routed[partition_for(item.domain, partitions)].append(item)
    return routed, rejected


class Router:
    def __init__(self, client: Mapping[str, str], topics: Topics, group: str) -> None:
        self.topics = topics
        self._consumer = Consumer(consumer_conf(client, group, **{"max.poll.interval.ms": 300000}))
        self._producer = Producer(producer_conf(client, **{"linger.ms": 5}))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="router", daemon=True)
        self.routed = 0
        self.rejected = 0
        self.error: BaseException | None = None

    def start(self) -> None:
        self._consumer.subscribe([self.topics.urls])
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                msgs = self._consumer.consume(10000, timeout=0.2)
                if not msgs:
                    continue
                good = [m for m in msgs if m.error() is None]
                for m in msgs:
                    if m.error() is not None:
                        log.warning("router consume error: %s", m.error())
                self._forward(good)
                # commit only now that the output is acknowledged
                next_offsets: dict[tuple[str, int], int] = {}
                for m in good:
                    t, p, o = coordinates(m)
                    next_offsets[(t, p)] = o + 1
                if next_offsets:
                    tps = [TopicPartition(t, p, o) for (t, p), o in next_offsets.items()]
                    self._consumer.commit(offsets=tps, asynchronous=False)
        except BaseException as exc:
            log.exception("router failed")
            self.error = exc
        finally:
            self._producer.flush(30)
            self._consumer.close()

    def _forward(self, msgs: list[Message]) -> None:
        routed, rejected = route(msgs, self.topics.partitions, self.topics.urls)
        failures: list[str] = []

        def on_delivery(err: Any, _msg: Message) -> None:
            if err is not None:
                failures.append(str(err))

        for partition, items in routed.items():
            for i in range(0, len(items), BATCH_ITEMS):
                batch = UrlBatch(items=items[i : i + BATCH_ITEMS])
                self._produce(self.topics.bydomain, encode(batch), partition, on_delivery)
        for rej in rejected:
            self._produce(self.topics.rejected, encode(rej), None, on_delivery)
        if self._producer.flush(60) or failures:
            raise RuntimeError(f"router could not deliver: {failures[:3]}")
        self.routed += sum(len(v) for v in routed.values())
        self.rejected += len(rejected)

    def _produce(self, topic: str, value: bytes, partition: int | None, cb: Any) -> None:
        produce(self._producer, topic, value, None, partition, cb)


def run_router(client: Mapping[str, str], topics: Topics, group: str, stop: threading.Event) -> int:
    """Run a router until ``stop`` is set; 1 if it failed."""
    router = Router(client, topics, group)
    router.start()
    log.info("router started: %s -> %s", topics.urls, topics.bydomain)
    while not stop.wait(0.5):
        if router.error is not None:
            return 1
    router.stop()
    log.info("router stopped: %d routed, %d rejected", router.routed, router.rejected)
    return 0 if router.error is None else 1

"""The router: re-keys user input by registrable domain (or, with ``frontier.ip_scope``, by address).

Consumes ``crawl.urls`` (any key, any partition) in large batches with confluent-kafka, parses
and canonicalises each record, and produces

- accepted URLs to ``crawl.urls.bydomain`` as :class:`UrlBatch` records, per target partition
  (partition = murmur2(registrable domain) mod N, as every client computes it), each at most
  :data:`~topics.catalog.URL_BATCH_BYTES` encoded (and :data:`BATCH_ITEMS` URLs), and
- everything else to ``crawl.rejected`` with the reason and the original (a bounded prefix, its
  length and digest: :class:`~topics.schemas.Rejected`).

No single record can stop intake: a URL whose item alone is too large for a batch record (or
that the broker refuses even alone) is rejected ("submission too large after parsing"), and a
rejection the broker refuses is logged and published again without its original (reason,
length and digest only). Only failures that are not about one record (the broker unreachable,
no authorisation, a missing topic) stop the router, uncommitted, to be retried.

With ``frontier.ip_scope = true`` the router also resolves each batch's hosts
(:class:`~frontier.intake.addresses.Resolver`: cached, concurrent, bounded in time) and keys a URL by
its host's address (``UrlItem.ip``, partition = murmur2(address) mod N), so hosts on one server
share a partition and the scope ``ip:<address>`` there; a host that does not resolve in time is
keyed by its domain as without the option. With ``ip_scope = false`` it never resolves anything.

Input offsets are committed only after everything is acknowledged (at least once; the
frontier's seen-set removes the duplicates a crash may cause). By default it runs as a thread
inside each frontier process; with ``frontier.embedded_router = false`` it runs as processes of
its own (``crawl-frontier router``, :func:`run_router`), which takes URL parsing off the
frontier's GIL. Either way the router group spreads ``crawl.urls`` partitions over every router.

A little over ~300 lines: the batching (``pack``), the record-by-record rejection and the
consume-produce-commit loop are one protocol (nothing committed before everything it produced is
acknowledged); URL parsing and address resolution are already in ``urls.py`` and ``addresses.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from frontier.core.urls import Rejection, parse_input
from frontier.intake.addresses import Resolver
from topics.catalog import URL_BATCH_BYTES, Topics
from topics.kafka import Connection, Kafka, coordinates, produce
from topics.partitioning import partition_of
from topics.schemas import CRAWLS_VERSION, Rejected, UrlBatch, UrlItem, encode

log = logging.getLogger(__name__)

BATCH_ITEMS = 2000  # URLs per UrlBatch record, at most
COMMIT_TRIES = 4  # a failed commit of routed input is tried this often (0.2, 0.4, 0.8 s apart), then left
TOO_LARGE = "submission too large after parsing"

# A UrlBatch record is these bytes around its items' encodings joined by commas: the router
# encodes each item once, measures it, and builds the records without encoding them again.
_EMPTY = encode(UrlBatch(items=[]))
assert _EMPTY.endswith(b"[]}"), _EMPTY
_HEAD, _TAIL = _EMPTY[:-2], _EMPTY[-2:]
# a batch holding an item of a crawl other than the default one is version 3 (an older frontier
# refuses it instead of queueing its URLs in the default crawl); the default crawl's items leave
# the field out, so the bytes tell (a "crawl" key inside an item's meta only costs a version-3 mark)
_HEAD_CRAWLS = encode(UrlBatch(v=CRAWLS_VERSION, items=[]))[:-2]
_CRAWL_FIELD = b'"crawl":'

# Errors that mean the broker (or the producer) refuses this record itself, whatever is retried:
# a batch is split, a single URL is rejected, a rejection is published without its original.
_REFUSED = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_MSG_SIZE,
    KafkaError.INVALID_RECORD, KafkaError.INVALID_MSG,
})  # fmt: skip


class Origin(NamedTuple):
    """Where a routed URL came from: the record as consumed and its coordinates."""

    raw: bytes
    topic: str
    partition: int
    offset: int

    def reject(self, reason: str) -> Rejected:
        return Rejected(reason=reason, original=self.raw, topic=self.topic, partition=self.partition,
                        offset=self.offset)  # fmt: skip


def route(
    msgs: Sequence[Message], partitions: int, topic: str, resolver: Resolver | None = None
) -> tuple[dict[int, list[tuple[UrlItem, Origin]]], list[Rejected]]:
    """Split consumed records into per-partition URLs (with their origins) and rejections (pure
    but for the ``resolver``, given only with ``frontier.ip_scope``: then each URL carries its
    host's address and is keyed by it)."""
    accepted: list[tuple[UrlItem, Origin]] = []
    rejected: list[Rejected] = []
    for msg in msgs:
        raw = msg.value() or b""
        _, partition, offset = coordinates(msg)
        origin = Origin(raw, topic, partition, offset)
        try:
            item = parse_input(raw)
        except Rejection as exc:
            rejected.append(origin.reject(str(exc)))
            continue
        except Exception as exc:  # a parser bug must not stop intake on this record forever
            log.exception("unexpected error parsing %s[%d]@%d", topic, partition, offset)
            rejected.append(origin.reject(f"unparseable: {type(exc).__name__}: {exc}"))
            continue
        accepted.append((item, origin))
    if resolver is not None and accepted:
        addresses = resolver.addresses({item.host for item, _ in accepted})
        for item, _ in accepted:
            item.ip = addresses.get(item.host, "")
    routed: dict[int, list[tuple[UrlItem, Origin]]] = defaultdict(list)
    for item, origin in accepted:
        routed[partition_of(item, partitions)].append((item, origin))
    return routed, rejected


T = TypeVar("T")


def batch_record(encoded: Sequence[bytes]) -> bytes:
    """The UrlBatch record of these encoded items (what ``encode(UrlBatch(items=...))`` gives)."""
    head = _HEAD_CRAWLS if any(_CRAWL_FIELD in item for item in encoded) else _HEAD
    return head + b",".join(encoded) + _TAIL


def pack(
    entries: Sequence[tuple[bytes, T]], max_bytes: int = URL_BATCH_BYTES, max_items: int = BATCH_ITEMS
) -> tuple[list[tuple[bytes, list[T]]], list[T]]:
    """Pack encoded items, in order, into UrlBatch records of at most ``max_bytes`` and
    ``max_items`` each (pure). Returns the records, each with the tags of the items it carries,
    and the tags of items too large for a record on their own."""
    records: list[tuple[bytes, list[T]]] = []
    too_big: list[T] = []
    encoded: list[bytes] = []
    tags: list[T] = []
    size = len(_EMPTY)

    def close() -> None:
        nonlocal encoded, tags, size
        if encoded:
            records.append((batch_record(encoded), tags))
        encoded, tags, size = [], [], len(_EMPTY)

    for item, tag in entries:
        if len(_EMPTY) + len(item) > max_bytes:
            too_big.append(tag)
            continue
        if encoded and (size + 1 + len(item) > max_bytes or len(encoded) >= max_items):
            close()
        size += len(item) + (1 if encoded else 0)
        encoded.append(item)
        tags.append(tag)
    close()
    return records, too_big


@dataclass
class Outgoing:
    """One record to publish: a UrlBatch (``entries``: its items and where they came from) or a
    rejection. ``error`` is set by the delivery when the record was not published."""

    topic: str
    value: bytes
    partition: int | None = None
    entries: list[tuple[bytes, Origin]] = field(default_factory=list)
    rejected: Rejected | None = None
    minimal: bool = False  # a rejection already without its original: nothing left to cut
    error: KafkaError | None = None


Deliver = Callable[[list[Outgoing]], None]  # publish each, wait for all, set .error on failures


def refused(err: KafkaError) -> bool:
    """True when ``err`` refuses the record itself (too large, invalid): retrying it cannot help."""
    return err.code() in _REFUSED


def forward(
    msgs: Sequence[Message],
    topics: Topics,
    deliver: Deliver,
    max_bytes: int = URL_BATCH_BYTES,
    resolver: Resolver | None = None,
) -> tuple[int, int]:
    """Route ``msgs`` and publish the result with ``deliver`` until every URL is on
    ``crawl.urls.bydomain`` (in records of at most ``max_bytes``) or rejected; return (URLs
    routed, records rejected).

    Raises only when a failure is not about one record (then nothing may be committed)."""
    routed, rejected = route(msgs, topics.partitions, topics.urls, resolver)
    pending: list[Outgoing] = []
    for partition, items in routed.items():
        entries = [(encode(item), origin) for item, origin in items]
        records, too_big = pack([(entry[0], entry) for entry in entries], max_bytes)
        pending.extend(Outgoing(topics.bydomain, value, partition, carried) for value, carried in records)
        for encoded, origin in too_big:
            size = len(_EMPTY) + len(encoded)
            rejected.append(origin.reject(f"{TOO_LARGE} ({size} bytes as a UrlBatch record > {max_bytes})"))
    pending.extend(_rejection(topics, r) for r in rejected)
    n_routed = n_rejected = 0
    while pending:
        deliver(pending)
        retry: list[Outgoing] = []
        for out in pending:
            if out.error is None:
                if out.rejected is not None:
                    n_rejected += 1
                else:
                    n_routed += len(out.entries)
            else:
                retry.extend(_after_failure(topics, out, out.error))
        pending = retry
    return n_routed, n_rejected


def _rejection(topics: Topics, rejected: Rejected, minimal: bool = False) -> Outgoing:
    return Outgoing(topics.rejected, encode(rejected), rejected=rejected, minimal=minimal)


def _after_failure(topics: Topics, out: Outgoing, err: KafkaError) -> list[Outgoing]:
    """What to publish instead of a record that failed; raise when it is not the record's fault."""
    why = f"{err.name()}: {err.str()}"
    rej = out.rejected
    if rej is not None:
        if out.minimal:
            raise RuntimeError(f"router could not publish even a minimal rejection to {out.topic}: {why}")
        log.error("rejection of %s[%d]@%d (%d bytes, sha256 %s) not published (%s); publishing it without the "
                  "original", rej.topic, rej.partition, rej.offset, rej.original_length, rej.original_sha256,
                  why)  # fmt: skip
        return [_rejection(topics, rej.minimal(f"{rej.reason} (original not kept: {why})"[:500]), minimal=True)]
    if not refused(err):
        raise RuntimeError(f"router could not deliver to {out.topic}: {why}")
    if len(out.entries) > 1:  # the broker's limit is below ours: halve the record and try again
        log.warning("a %d-byte UrlBatch of %d URLs was refused (%s); splitting it", len(out.value),
                    len(out.entries), why)  # fmt: skip
        mid = len(out.entries) // 2
        return [
            Outgoing(out.topic, batch_record([e for e, _ in half]), out.partition, half)
            for half in (out.entries[:mid], out.entries[mid:])
        ]
    [(_, origin)] = out.entries
    log.error("URL from %s[%d]@%d refused even alone (%s); rejecting it", origin.topic, origin.partition,
              origin.offset, why)  # fmt: skip
    return [_rejection(topics, origin.reject(f"{TOO_LARGE} (refused by the broker: {why})"))]


class Router:
    def __init__(self, kafka: Connection, topics: Topics, group: str, *, ip_scope: bool = False) -> None:
        self.topics = topics
        self.resolver = Resolver() if ip_scope else None  # frontier.ip_scope: key URLs by their host's address
        kafka = Kafka.of(kafka)
        self._consumer = kafka.consumer(group, **{"max.poll.interval.ms": 300000})
        self._producer = kafka.producer(**{"linger.ms": 5})
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
                    self._commit([TopicPartition(t, p, o) for (t, p), o in next_offsets.items()])
        except BaseException as exc:
            log.exception("router failed")
            self.error = exc
        finally:
            self._producer.flush(30)
            self._consumer.close()
            if self.resolver is not None:
                self.resolver.close()

    def _commit(self, tps: list[TopicPartition]) -> None:
        """Commit what was routed, retried a few times; a commit that still fails is not fatal: the
        next one covers these offsets too, and what a rebalance delivers again is routed again (the
        frontier applies a URL once: its seen set and its record of the batches it applied)."""
        for attempt in range(COMMIT_TRIES):
            try:
                self._consumer.commit(offsets=tps, asynchronous=False)
                return
            except KafkaException as exc:
                if attempt == COMMIT_TRIES - 1 or self._stop.is_set():
                    log.warning("router commit failed (%s): left to the next commit", exc)
                    return
                time.sleep(0.2 * 2**attempt)

    def _forward(self, msgs: list[Message]) -> None:
        routed, rejected = forward(msgs, self.topics, self._deliver, resolver=self.resolver)
        self.routed += routed
        self.rejected += rejected

    def _deliver(self, outs: list[Outgoing]) -> None:
        """Produce every record, wait until each is acknowledged or failed (``error`` set)."""
        for out in outs:
            out.error = None

            def done(err: KafkaError | None, _msg: Message, out: Outgoing = out) -> None:
                out.error = err

            try:
                produce(self._producer, out.topic, out.value, None, out.partition, done)
            except KafkaException as exc:  # refused before sending (e.g. over message.max.bytes)
                out.error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else KafkaError(
                    KafkaError._FAIL, str(exc))  # fmt: skip
        left = self._producer.flush(60)
        if left:
            raise RuntimeError(f"router could not deliver: {left} records not acknowledged within 60 s")


def run_router(kafka: Connection, topics: Topics, group: str, stop: threading.Event, *, ip_scope: bool = False) -> int:
    """Run a router until ``stop`` is set; 1 if it failed. ``ip_scope``: ``frontier.ip_scope``."""
    router = Router(kafka, topics, group, ip_scope=ip_scope)
    router.start()
    log.info("router started: %s -> %s", topics.urls, topics.bydomain)
    while not stop.wait(0.5):
        if router.error is not None:
            return 1
    router.stop()
    log.info("router stopped: %d routed, %d rejected", router.routed, router.rejected)
    if router.resolver is not None:
        log.info("ip_scope: %d host lookups, %d hosts routed without an address (by domain)",
                 router.resolver.lookups, router.resolver.unresolved)  # fmt: skip
    return 0 if router.error is None else 1

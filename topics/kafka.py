"""The one place Kafka clients are made (deploy/kafka.py runs a broker; this reaches one).

- :class:`Kafka`: one cluster as this process reaches it, built from the configuration's client
  settings (``Kafka(cfg.kafka.client_conf())``); every producer, consumer and admin client of the
  frontier, the router, the workers, the client and the CLI comes from its factory methods
  (:meth:`~Kafka.producer`, :meth:`~Kafka.consumer`, :meth:`~Kafka.reader`, :meth:`~Kafka.admin`).
  Components take one as an argument (default: built from the config), so a test can inject
  another. Every client logs through :data:`LIBRDKAFKA_LOG` (a Python logger, levels mapped by
  confluent-kafka), never straight to the terminal; the CLI keeps it quiet unless ``--verbose``.
- :meth:`Kafka.reachable` / :meth:`Kafka.check`: one metadata request with a short timeout;
  :class:`KafkaUnreachable` is one line, "cannot reach Kafka at <bootstrap>: is `crawl-frontier
  kafka up` running? (<reason>)".
- :func:`producer_conf` / :func:`consumer_conf`: client settings every component agrees on
  (murmur2 partitioner so that every client maps a key to the same partition, idempotence).
- :class:`AsyncProducer`: a confluent-kafka producer served by a poll thread; ``send`` returns
  an asyncio future resolved on delivery, ``flush`` waits for everything sent so far.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)
LIBRDKAFKA_LOG = logging.getLogger("topics.kafka.librdkafka")  # every client's own log lines
# shown where logging is configured (the services: WARNING and up), silent where it is not (the CLI,
# a script using FrontierClient) instead of Python's last-resort handler printing them to stderr
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
# the reachability check's own client: its connection errors are what the check says, in one line (a
# worker started before its broker logged ten librdkafka lines every 1.5 s while it waited)
CHECK_LOG = logging.getLogger("topics.kafka.librdkafka.check")
CHECK_LOG.propagate = False
CHECK_LOG.addHandler(logging.NullHandler())
HINT = "is `crawl-frontier kafka up` running?"


class KafkaUnreachable(ConnectionError):
    """No answer from the brokers; the message is the one line the CLI prints."""

    def __init__(self, bootstrap: str, reason: str = "") -> None:
        super().__init__(f"cannot reach Kafka at {bootstrap}: {HINT}" + (f" ({reason})" if reason else ""))
        self.bootstrap = bootstrap
        self.reason = reason


class Kafka:
    """The client settings of one Kafka cluster, and every client made from them."""

    def __init__(self, client: Mapping[str, Any], *, logger: logging.Logger = LIBRDKAFKA_LOG) -> None:
        self.client: dict[str, Any] = dict(client)
        self.logger = logger

    @classmethod
    def of(cls, conn: Connection) -> Kafka:
        """``conn`` itself, or a :class:`Kafka` on those client settings."""
        return conn if isinstance(conn, Kafka) else cls(conn)

    @property
    def bootstrap(self) -> str:
        return str(self.client.get("bootstrap.servers", ""))

    def conf(self, **extra: Any) -> dict[str, Any]:
        """The client settings plus ``extra``, logging to the Python logger."""
        return {**self.client, "logger": self.logger, **extra}

    def producer(self, **extra: Any) -> Producer:
        """A producer with the settings every producer of the crawl shares (:func:`producer_conf`)."""
        return Producer(producer_conf(self.conf(), **extra))

    def async_producer(self, loop: asyncio.AbstractEventLoop | None = None, **extra: Any) -> AsyncProducer:
        return AsyncProducer(self.producer(**extra), loop)

    def consumer(self, group: str, **extra: Any) -> Consumer:
        """A member of consumer group ``group`` with the crawl's consumer settings (:func:`consumer_conf`)."""
        return Consumer(consumer_conf(self.conf(), group, **extra))

    def reader(self, purpose: str, settings: Mapping[str, Any] | None = None, *, group: str | None = None) -> Consumer:
        """A consumer with only ``settings`` on top of the client settings, in ``group`` or else in a
        group of its own, ``<purpose>-<random hex>`` (reads the topic for itself)."""
        return Consumer(self.conf(**{"group.id": group or f"{purpose}-{uuid.uuid4().hex}", **(settings or {})}))

    def admin(self, **extra: Any) -> AdminClient:
        return AdminClient(self.conf(**extra))

    def reachable(self, timeout: float = 3.0) -> bool:
        try:
            self.check(timeout)
        except KafkaUnreachable:
            return False
        return True

    def check(self, timeout: float = 3.0, wait: float = 0.0) -> None:
        """Raise :class:`KafkaUnreachable` unless a broker answers a metadata request within
        ``timeout`` seconds (sooner once every bootstrap broker refused or did not resolve);
        ``wait``: keep asking for up to this long first (a broker starting)."""
        deadline, waited = time.monotonic() + wait, False
        while True:
            reason = self._ask(timeout)
            if reason is None:
                return
            if time.monotonic() >= deadline:
                raise KafkaUnreachable(self.bootstrap, reason)
            if not waited:
                log.warning("Kafka at %s not reachable yet (%s): waiting up to %.0f s", self.bootstrap, reason, wait)
                waited = True
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def _ask(self, timeout: float) -> str | None:
        """One metadata request, asked again in short slices: None if answered, else why not."""
        errors: list[KafkaError] = []
        admin = AdminClient(self.conf(error_cb=errors.append, logger=CHECK_LOG))
        end = time.monotonic() + timeout
        while True:
            try:
                admin.list_topics(timeout=max(0.05, min(0.5, end - time.monotonic())))
                return None
            except KafkaException:
                admin.poll(0)  # serves the error callbacks: the reason
            if time.monotonic() >= end or any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in errors):
                return _reason(errors, timeout)


Connection: TypeAlias = Kafka | Mapping[str, Any]  # a Kafka, or the client settings to build one from


def _reason(errors: list[KafkaError], timeout: float) -> str:
    """The first broker error's gist ("Connection refused"), else that nothing answered."""
    for error in errors:
        if error.code() != KafkaError._ALL_BROKERS_DOWN:
            text = re.sub(r"\s*\(after \d+ms in state \w+\)", "", error.str())
            text = re.sub(r"^\S+/(bootstrap|\d+): ", "", text)  # "127.0.0.1:1/bootstrap: "
            if "Invalid response size" in text:
                return "something other than a Kafka broker answered"
            return text.partition("failed: ")[2] or text  # "Connect to ipv4#... failed: Connection refused"
    return f"no answer within {timeout:g} s"


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
    """A confluent-kafka producer (from :meth:`Kafka.producer`) usable from asyncio code.
    ``poll_wait``: seconds its thread's poll waits when no delivery comes (a delivery ends it at
    once; :meth:`close` may wait as long for the thread). ``batched``: the deliveries one poll
    served resolve their futures in one call on the loop (one wake-up of the loop per poll, not
    one per record; the same order), instead of one call each."""

    def __init__(
        self,
        producer: Producer,
        loop: asyncio.AbstractEventLoop | None = None,
        poll_wait: float = 0.05,
        batched: bool = False,
    ) -> None:
        self._producer = producer
        self._loop = loop or asyncio.get_running_loop()
        self._poll_wait = poll_wait
        self._closed = threading.Event()
        self._abandoned = False  # abandon(): sends fail at once
        self._answered = time.monotonic()  # (monotonic) last heard from the broker, or nothing waited
        self._errors: list[str] = []
        # batched: deliveries waiting to be resolved on the loop (appended on any thread that polls)
        self._delivered: collections.deque[tuple[asyncio.Future[Message], KafkaError | None, Message]] | None = (
            collections.deque() if batched else None
        )
        self._thread = threading.Thread(target=self._poll_loop, name="producer-poll", daemon=True)
        self._thread.start()

    def _poll_loop(self) -> None:
        producer = self._producer
        while not self._closed.is_set():
            if producer.poll(self._poll_wait) or not len(producer):
                self._answered = time.monotonic()  # a delivery report came, or nothing waits for one
            self._hand_over()
        self._hand_over()

    def unanswered_for(self) -> float:
        """Seconds records have waited with no delivery report (0: none waits, or one just came)."""
        return time.monotonic() - self._answered if len(self._producer) else 0.0

    def _hand_over(self) -> None:
        """Batched: the deliveries collected so far resolve on the loop, in one call."""
        if self._delivered:
            try:
                self._loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

    def _drain(self) -> None:
        delivered = self._delivered
        while delivered:
            _resolve(*delivered.popleft())

    def _produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int | None, cb: Any) -> None:
        produce(self._producer, topic, value, key, partition, cb)

    def abandon(self) -> int:
        """Give up on the broker (a stopping worker's, when it does not answer): every record still
        waiting fails (librdkafka's purge: the delivery reports say so), and so does every send
        from now on, at once. How many records were waiting."""
        self._abandoned = True
        waiting = len(self._producer)
        self._producer.purge(in_queue=True, in_flight=True, blocking=False)
        return waiting

    def send(
        self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None
    ) -> asyncio.Future[Message]:
        """Produce one record; the future resolves with the delivered message or fails."""
        fut: asyncio.Future[Message] = self._loop.create_future()
        if self._abandoned:
            fut.set_exception(DeliveryError("not sent: the broker was given up on (the worker is stopping)"))
            return fut

        delivered = self._delivered
        if delivered is not None:

            def done(err: KafkaError | None, msg: Message) -> None:
                delivered.append((fut, err, msg))  # resolved by the poll thread's hand-over

        else:

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
        """Produce with no delivery callback at all (cheapest; see _Owned.commit (frontier/service/owned.py))."""
        produce(self._producer, topic, value, key, partition)

    def raise_errors(self) -> None:
        """Raise if any record produced with ``send_nowait`` failed."""
        if self._errors:
            errors, self._errors = self._errors, []
            raise DeliveryError("; ".join(errors[:5]))

    async def flush(self, timeout: float = 60.0) -> None:
        """Wait until every record produced so far is delivered; raise if any failed."""
        remaining = await asyncio.to_thread(self._producer.flush, timeout)
        self._hand_over()  # (batched: what the flush delivered resolves without waiting for the thread's poll)
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

"""The gateway's questions to the frontier's partitions, and their answers.

A question is a :class:`~topics.schemas.Query` in a ``query`` command on ``crawl.control``, sent
to each partition asked; the instance that owns a partition answers from its state with a
:class:`~topics.schemas.Reply` on ``crawl.replies``, keyed by this gateway and on the partition
its id hashes to (read here, from its end at start-up, by a consumer of no group). Commands and
questions a gateway sends reach each partition in the order it sent them, so a question after a
deletion sees it done.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterable

import msgspec
from confluent_kafka import KafkaError, TopicPartition

from frontier.config import Config
from frontier.core.control import control_records
from topics.kafka import AsyncProducer, Kafka
from topics.partitioning import partition_for
from topics.schemas import CRAWLS_VERSION, ControlCommand, Query, Reply, SchemaError, decode, encode

log = logging.getLogger("urlfrontier")


class Unanswered(TimeoutError):
    """Some partitions did not answer in time (no instance owns them now, or it is restoring)."""


class Asker:
    def __init__(self, cfg: Config, kafka: Kafka, producer: AsyncProducer) -> None:
        self.topics = cfg.topics
        self.partitions = cfg.topics.partitions
        self.timeout = cfg.urlfrontier.query_timeout
        self.kafka = kafka
        self.producer = producer
        self.id = f"gateway-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: dict[str, tuple[asyncio.Future[None], dict[int, Reply], set[int]]] = {}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str = ""

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._read, name="gateway-replies", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"crawl.replies could not be read: {self.error or 'no assignment in 30 s'}")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _read(self) -> None:
        consumer = self.kafka.reader("gateway-replies", {"enable.auto.commit": False})
        try:
            mine = partition_for(self.id, self.partitions)
            _, end = consumer.get_watermark_offsets(TopicPartition(self.topics.replies, mine), timeout=10)
            consumer.assign([TopicPartition(self.topics.replies, mine, end)])  # replies to this run only
            self._ready.set()
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        log.warning("crawl.replies: %s", err)
                    continue
                if msg.key() != self.id.encode():
                    continue
                try:
                    reply = decode(msg.value() or b"", Reply)
                except SchemaError as exc:
                    log.warning("undecodable reply: %s", exc)
                    continue
                assert self._loop is not None
                self._loop.call_soon_threadsafe(self._answered, reply)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("reading crawl.replies failed")
        finally:
            consumer.close()

    def _answered(self, reply: Reply) -> None:
        pending = self._pending.get(reply.id)
        if pending is None:
            return  # a question given up, or one sent before a restart of this gateway
        done, replies, waiting = pending
        if reply.partition in waiting:
            replies[reply.partition] = reply
            waiting.discard(reply.partition)
        if not waiting and not done.done():
            done.set_result(None)

    async def ask(self, query: Query, partitions: Iterable[int] | None = None) -> dict[int, Reply]:
        """Ask ``partitions`` (default: all) and wait for each one's reply; Unanswered after the
        configured time. A reply with an error raises RuntimeError with it."""
        if self.error:
            raise Unanswered(f"the gateway cannot read replies: {self.error}")
        asked = set(range(self.partitions) if partitions is None else partitions)
        query = msgspec.structs.replace(query, id=uuid.uuid4().hex, reply_to=self.id)
        cmd = ControlCommand(action="query", query=query, v=CRAWLS_VERSION)
        cmd.validate()
        key, value = b"query", encode(cmd)
        assert self._loop is not None
        done: asyncio.Future[None] = self._loop.create_future()
        replies: dict[int, Reply] = {}
        self._pending[query.id] = (done, replies, set(asked))
        try:
            await asyncio.gather(*(self.producer.send(self.topics.control, value, key=key, partition=p)
                                   for p in sorted(asked)))  # fmt: skip
            if asked:
                await asyncio.wait_for(done, self.timeout)
        except TimeoutError:
            missing = sorted(asked - set(replies))
            raise Unanswered(f"no answer from partition(s) {missing[:20]} within {self.timeout:.0f} s (no "
                             "frontier instance serves them now)") from None  # fmt: skip
        finally:
            self._pending.pop(query.id, None)
        for reply in replies.values():
            if reply.error:
                raise RuntimeError(f"partition {reply.partition}: {reply.error}")
        return replies

    async def command(self, cmd: ControlCommand) -> None:
        """Send an operator's command (block, set, crawl limit) to every partition it goes to."""
        await asyncio.gather(*(self.producer.send(self.topics.control, value, key=key, partition=p)
                               for key, value, p in control_records(cmd, self.partitions)))  # fmt: skip


def new_query(kind: str, crawl: str = "default", **fields: object) -> Query:
    """A query of ``kind`` (its id and reply_to are set by :meth:`Asker.ask`)."""
    return Query(id="-", reply_to="-", kind=kind, crawl=crawl, **fields)  # type: ignore[arg-type]

"""A URLFrontier gateway's questions on ``crawl.control``, answered on ``crawl.replies`` (keyed by
the gateway). A change (a deletion, a hold) is applied once and answered once it committed; a
reading question (counts, stats, pages of URLs or queue keys) is a walk
(:class:`~frontier.partition.recorded.Walk`) answered a slice at a time: the first slice when the
question comes, the others one per turn of the event loop, so dispatch and input go on between
them and no question holds the loop longer than a slice (``SLICE_SECONDS``). :class:`Questions`
is a part of :class:`~frontier.service.service.FrontierService`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from frontier.core.kv import CursorClosed
from frontier.partition.recorded import Budget, Walk
from frontier.service.inputs import CONTROL, Ackable
from frontier.service.owned import Partitions, _Owned
from topics.catalog import Topics
from topics.kafka import AsyncProducer
from topics.partitioning import partition_for
from topics.schemas import CHANGING_KINDS, Query, Reply, encode

log = logging.getLogger("frontier")

MAX_WALKS = 256  # reading questions being answered at once at most (each holds its cursors); past it: refused


@dataclass
class _Walking:
    """A reading question being answered, a slice at a time."""

    p: int
    owned: _Owned  # the partition as it was when the question came (another one: the walk is given up)
    query: Query
    walk: Walk


class Questions:
    """Answers the URLFrontier gateways' questions. Interface: :meth:`answer` (a question that
    came on crawl.control for a partition), :meth:`close`. Owns the reading questions being
    walked (and the task walking them), the replies on their way, and ``slice_clock`` (times a
    walk's slices). Given the clock, the topics, the shared :class:`Partitions` (read only), and
    callables: ``producer`` (the process's producer) and ``wake`` (the dispatch loop: a change
    committed goes out with its next round)."""

    def __init__(
        self,
        clock: Callable[[], float],
        topics: Topics,
        partitions: Partitions,
        producer: Callable[[], AsyncProducer],
        wake: Callable[[], None],
    ) -> None:
        self.clock = clock
        self.topics = topics
        self.partitions = partitions
        self._producer = producer
        self._wake = wake
        self._replies: set[asyncio.Task[None]] = set()  # answers to URLFrontier gateways on their way
        self._walks: deque[_Walking] = deque()  # reading questions being answered, in turn
        self._walker: asyncio.Task[None] | None = None  # answers them while there are any
        self.slice_clock: Callable[[], float] = time.perf_counter  # times a walk's slices

    def close(self) -> None:
        """Stop answering: the questions being walked are given up (their askers time out)."""
        if self._walker is not None:
            self._walker.cancel()
        while self._walks:
            self._walks.popleft().walk.close()

    async def answer(self, p: int, query: Query, event: Ackable) -> None:
        """A URLFrontier gateway's question, answered from this partition on crawl.replies (keyed
        by the gateway). A change (a deletion, a hold) is applied once and answered once it committed; a record
        delivered again after it was applied gets no second answer (its asker has given up)."""
        owned = await self.partitions.serving(p)
        if owned is None:
            return
        if query.kind not in CHANGING_KINDS:
            self._walk(p, owned, query)
            event.ack()
            return
        await owned.writer.room()
        if owned.applied_before(CONTROL, event):
            return
        reply = owned.frontier.change(query, self.clock())
        if query.kind != "hold":  # a deletion or a purge
            log.info("query %s crawl %r key %r: %d removed (partition %d)", query.kind, query.crawl, query.key[:100],
                     reply.counts.get("removed", 0), p)  # fmt: skip
        owned.note(CONTROL, event)
        owned.commit((event,), then=lambda: self._reply(encode(reply), query), urgent=True)  # (the asker waits)
        self._wake()

    def _walk(self, p: int, owned: _Owned, query: Query) -> None:
        """A reading question: its first slice now, the others one per turn of the loop (answered
        in turn with the other questions), its answer sent once complete."""
        walk = owned.frontier.walk(query, self.clock())
        if walk.step(Budget(self.slice_clock)):
            self._reply(walk.encoded(), query)
            return
        if len(self._walks) >= MAX_WALKS:
            walk.close()
            busy = f"busy: {MAX_WALKS} questions are being answered, ask again later"
            self._reply(encode(Reply(id=query.id, partition=p, error=busy)), query)
            return
        self._walks.append(_Walking(p, owned, query, walk))
        if self._walker is None:
            self._walker = asyncio.ensure_future(self._walk_on())

    async def _walk_on(self) -> None:
        """One slice of each question in turn, a turn of the event loop between two slices."""
        try:
            while self._walks:
                await asyncio.sleep(0)  # dispatch, input and the other callbacks ready go first
                if not self._walks:
                    break
                walking = self._walks.popleft()
                if (
                    self.partitions.owned.get(walking.p) is not walking.owned
                ):  # the partition moved: its asker times out
                    walking.walk.close()
                    continue
                try:
                    done = walking.walk.step(Budget(self.slice_clock))
                except CursorClosed:  # its store closed (the partition moved)
                    continue
                except Exception as exc:  # one question failing must not stop the others
                    log.exception("query %s of partition %d failed", walking.query.kind, walking.p)
                    error = f"{type(exc).__name__}: {exc}"[:500]
                    self._reply(encode(Reply(id=walking.query.id, partition=walking.p, error=error)), walking.query)
                    continue
                if done:
                    self._reply(walking.walk.encoded(), walking.query)
                else:
                    self._walks.append(walking)
        finally:
            self._walker = None

    def _reply(self, reply: bytes, query: Query) -> None:
        """Send an encoded :class:`Reply` to the gateway that asked."""
        task = asyncio.ensure_future(self._send_reply(reply, query))
        self._replies.add(task)  # kept until sent
        task.add_done_callback(self._replies.discard)

    async def _send_reply(self, reply: bytes, query: Query) -> None:
        """A reply that cannot be sent is logged, never fatal: its asker times out and says so."""
        try:
            await self._producer().send(self.topics.replies, reply, key=query.reply_to.encode(),
                                     partition=partition_for(query.reply_to, self.topics.partitions))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - an answer lost must not stop the frontier
            log.warning("reply to %s (%s) not sent: %s", query.reply_to[:100], query.kind, exc)

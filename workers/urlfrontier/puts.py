"""PutURLs and PutDiscovered: each URL a submission on ``crawl.urls`` (acknowledged once Kafka has
it; refused items go to ``crawl.rejected``), a known URL's update also reported as its fetch, and
a stream complete once the frontier applied what it carried (a client reads what it wrote).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from frontier.client.feed import caught_up
from frontier.core.urls import Rejection, item_from_submission
from topics.partitioning import partition_of
from topics.schemas import Feedback, FeedbackBatch, Rejected, UrlItem, encode
from workers.urlfrontier.mapping import (
    BadItem,
    Signal,
    fetch_signal,
    frontier_crawl,
    metadata_dict,
    queue_key,
    submission,
)
from workers.urlfrontier.pool import TooManyCrawls
from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.shared import Shared

log = logging.getLogger("urlfrontier")
OK, SKIPPED, FAIL = pb.AckMessage.Status.OK, pb.AckMessage.Status.SKIPPED, pb.AckMessage.Status.FAIL
In = TypeVar("In")
Out = TypeVar("Out")


class Puts:
    """The gateway's writes: :meth:`PutURLs` and :meth:`PutDiscovered` (the servicer's, handed
    here). Given the configuration (``urlfrontier.put_window``, ``put_wait``, the topics), the
    Kafka clients and the crawls' pools (of the gateway's :class:`~workers.urlfrontier.shared.Shared`);
    owns nothing that outlives a call."""

    def __init__(self, shared: Shared) -> None:
        self.cfg = shared.cfg
        self.kafka = shared.kafka
        self.producer = shared.producer
        self.pools = shared.pools

    async def _reject(self, reason: str, original: bytes) -> None:
        log.warning("URL skipped: %s", reason)
        try:
            await self.producer.send(self.cfg.topics.rejected, encode(Rejected(reason=reason, original=original,
                                                                              topic="urlfrontier")))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - logged above in any case
            log.warning("rejection not published: %s", exc)

    async def _put(self, item: pb.URLItem) -> tuple[str, pb.AckMessage.Status]:
        """One URLItem: its ack ID and status."""
        known = item.WhichOneof("item") == "known"
        info = item.known.info if known else item.discovered.info
        ack_id = item.ID or info.url
        try:
            crawl = frontier_crawl(info.crawlID)
            key = queue_key(info.url, info.key)
            meta = metadata_dict({k: list(v.values) for k, v in info.metadata.items()})
            refetch = float(item.known.refetchable_from_date) if known else None
            sub = submission(info.url, key, crawl, meta, refetch)
            parsed = item_from_submission(sub)  # refused here with the router's reason, not later
        except (BadItem, Rejection, ValueError) as exc:
            await self._reject(f"URLFrontier item not queued: {exc}", item.SerializeToString())
            return ack_id, SKIPPED
        try:
            if known:
                self.pools.check_room(crawl)  # a crawl this gateway cannot serve is not made through it
            else:
                await self.pools.of(crawl)  # the crawl has a worker (the frontier dispatches only to served crawls)
        except TooManyCrawls as exc:
            await self._reject(f"URLFrontier item not queued: {exc}", item.SerializeToString())
            return ack_id, SKIPPED
        if known:
            signal = fetch_signal(meta)
            pool = self.pools.pools.get(crawl)
            reported = pool is not None and await pool.updated(parsed.url, signal)
            if not reported and signal.status:
                await self._signal(parsed, signal)
        try:
            await self.producer.send(self.cfg.topics.urls, encode(sub))
        except Exception as exc:  # noqa: BLE001 - FAIL: the client may send it again
            log.warning("URL not published: %s", exc)
            return ack_id, FAIL
        return ack_id, OK

    async def _signal(self, item: UrlItem, signal: Signal) -> None:
        """What a client's update says of a fetch whose job this gateway does not hold (another
        gateway handed it out, or this one before a restart): the server's answer still reaches
        the host's throttling, as a late result does (its lease, if any, ends on its own)."""
        fb = Feedback(lease="urlfrontier", host=item.host, domain=item.domain, ip=item.ip, url=item.url,
                      outcome="fetched", status=signal.status, headers=signal.headers or {},
                      sent_at=time.time())  # fmt: skip
        try:
            await self.producer.send(self.cfg.topics.feedback, encode(FeedbackBatch(items=[fb])),
                                     partition=partition_of(item, self.cfg.topics.partitions))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the URL's update still goes
            log.warning("the server's answer for %s not passed on: %s", item.url[:200], exc)

    async def _applied(self) -> None:
        """Wait (bounded) until the frontier applied what was published before: the router routed
        crawl.urls, and the partitions applied crawl.urls.bydomain."""
        deadline = time.monotonic() + self.cfg.urlfrontier.put_wait
        topics, app_id = self.cfg.topics, self.cfg.frontier.app_id
        for group, topic in ((f"{app_id}-router", topics.urls), (app_id, topics.bydomain)):
            if not await asyncio.to_thread(caught_up, self.kafka, group, topic, topics.partitions, deadline):
                log.warning("the frontier has not applied %s within %.0f s", topic, self.cfg.urlfrontier.put_wait)
                return

    async def PutURLs(self, request_iterator: AsyncIterator[pb.URLItem],
                      context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[pb.AckMessage]:  # fmt: skip
        async def one(item: pb.URLItem, _width: int) -> pb.AckMessage:
            ack_id, status = await self._put(item)
            return pb.AckMessage(ID=ack_id, status=status)

        async for ack in self._acked(request_iterator, one, lambda _: 1):
            yield ack

    async def PutDiscovered(self, request_iterator: AsyncIterator[pb.DiscoveredBatch],
                            context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[pb.BatchAck]:  # fmt: skip
        async def one(batch: pb.DiscoveredBatch, width: int) -> pb.BatchAck:
            """The batch's items, ``width`` at a time (its share of the stream's window)."""
            infos = list(batch.items)
            statuses = [FAIL] * len(infos)
            turns = iter(range(len(infos)))

            async def lane() -> None:
                for i in turns:  # (one iterator shared by the lanes: each item once)
                    statuses[i] = (await self._put(pb.URLItem(discovered=pb.DiscoveredURLItem(info=infos[i]))))[1]

            await asyncio.gather(*(lane() for _ in range(min(width, len(infos)))))
            return pb.BatchAck(ID=batch.ID, statuses=statuses)

        async for ack in self._acked(request_iterator, one, lambda batch: len(batch.items)):
            yield ack

    async def _acked(self, requests: AsyncIterator[In], handle: Callable[[In, int], Awaitable[Out]],
                     items: Callable[[In], int]) -> AsyncIterator[Out]:  # fmt: skip
        """Each request handled as it comes, each answer sent as soon as it is ready, whatever the
        order (clients match acknowledgements by ID): a long-lived stream (StormCrawler's) gets each
        ack without waiting for its next item. At most ``urlfrontier.put_window`` URLs of the stream
        are handled at once: a request of n URLs takes n places (a batch larger than the window
        takes all of it), and ``handle`` gets how many it took, to run that many at a time. Once
        the client ends the stream and every answer is out, it completes when the frontier applied
        what it carried."""
        answers: asyncio.Queue[asyncio.Future[Out] | None] = asyncio.Queue()
        size = self.cfg.urlfrontier.put_window
        window = asyncio.Semaphore(size)

        def answered(task: asyncio.Future[Out], width: int) -> None:
            for _ in range(width):
                window.release()
            answers.put_nowait(task)

        async def read() -> int:
            n = 0
            async for request in requests:
                width = max(1, min(items(request), size))
                for _ in range(width):  # (the only taker: no two requests share out the window)
                    await window.acquire()
                task = asyncio.ensure_future(handle(request, width))
                task.add_done_callback(lambda t, w=width: answered(t, w))  # type: ignore[misc]
                n += 1
            return n

        reader = asyncio.ensure_future(read())
        reader.add_done_callback(lambda _: answers.put_nowait(None))  # after every answer of what it read
        received, expected = 0, None
        while expected is None or received < expected:
            answer = await answers.get()
            if answer is None:
                expected = reader.result()  # the client's error ends the call here
                continue
            received += 1
            yield answer.result()
        if expected:
            await self._applied()

"""The URLFrontier API (crawler-commons URLFrontier 2.6) served over the Kafka frontier.

Every RPC maps onto what the frontier already does (see docs/URLFRONTIER.md for the table):
PutURLs and PutDiscovered are submissions on ``crawl.urls`` (acknowledged once Kafka has them;
a stream completes once the frontier applied them, so a client reads what it wrote); GetURLs
hands out the crawl's jobs (:mod:`workers.urlfrontier.pool`); the questions and deletions go to
every partition (:mod:`workers.urlfrontier.queries`); BlockQueueUntil, SetDelay and SetCrawlLimit
are operators' commands on ``crawl.control`` (kept in the partitions' changelogged state).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from frontier.client.feed import caught_up
from frontier.config import Config
from frontier.core.urls import Rejection, item_from_submission
from topics.kafka import AsyncProducer
from topics.partitioning import partition_of
from topics.schemas import (
    DEFAULT_CRAWL,
    MAX_QUERY_LIMIT,
    ControlCommand,
    Feedback,
    FeedbackBatch,
    Rejected,
    Reply,
    UrlItem,
    UrlRecord,
    encode,
)
from workers.api import LeasedJob
from workers.urlfrontier.mapping import (
    API_DEFAULT_CRAWL,
    BadItem,
    Signal,
    api_crawl,
    fetch_signal,
    frontier_crawl,
    metadata_dict,
    queue_key,
    submission,
)
from workers.urlfrontier.pool import CrawlPool, Pools, TooManyCrawls, job_key
from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.proto import urlfrontier_pb2_grpc as pbg
from workers.urlfrontier.queries import Asker, Unanswered, new_query
from workers.urlfrontier.security import OWN_LOGGERS, own_logger

log = logging.getLogger("urlfrontier")
OK, SKIPPED, FAIL = pb.AckMessage.Status.OK, pb.AckMessage.Status.SKIPPED, pb.AckMessage.Status.FAIL
GET_BUDGET = 10_000  # URLs one GetURLs returns at most
MAX_HOLD = 3600.0  # seconds a GetURLs' delay_requestable holds a URL at most
In = TypeVar("In")
Out = TypeVar("Out")
LIST_PAGE = MAX_QUERY_LIMIT  # URL records or queue keys asked of a partition at a time
LIST_ENDS = 256  # where the latest ListURLs calls ended: a call starting there resumes (the next page)
_ListAt = tuple[int, str, int]  # a listing's place: partition, the cursor of its page, records of the page read
_Sent = tuple[LeasedJob, pb.URLInfo]  # a job handed to the client, as it was sent


class Gateway(pbg.URLFrontierServicer):
    def __init__(self, cfg: Config, kafka: Any, producer: AsyncProducer, asker: Asker, pools: Pools,
                 address: str) -> None:  # fmt: skip
        self.cfg = cfg
        self.kafka = kafka
        self.producer = producer
        self.asker = asker
        self.pools = pools
        self.address = address
        self.active = True
        self._background: set[asyncio.Future[None]] = set()  # hand-backs on their way
        # where the latest ListURLs calls ended: (crawl, key, filter, ignore case, position) → its place;
        # and ListQueues calls: (crawl, include inactive, position) → the last key (LIST_ENDS of each)
        self._list_ends: OrderedDict[tuple[str, str, str, bool, int], _ListAt] = OrderedDict()
        self._queue_ends: OrderedDict[tuple[str, bool, int], str] = OrderedDict()

    # -- helpers ------------------------------------------------------------------------------------
    @staticmethod
    async def _abort(context: grpc.aio.ServicerContext[Any, Any], code: grpc.StatusCode, why: str) -> None:
        await context.abort(code, why)

    async def _crawl(self, crawl_id: str, context: grpc.aio.ServicerContext[Any, Any]) -> str:
        try:
            return frontier_crawl(crawl_id)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise  # not reached: abort raises

    async def _ask(self, context: grpc.aio.ServicerContext[Any, Any], kind: str, crawl: str = DEFAULT_CRAWL,
                   partitions: list[int] | None = None, **fields: Any) -> dict[int, Reply]:  # fmt: skip
        try:
            return await self.asker.ask(new_query(kind, crawl=crawl, **fields), partitions)
        except Unanswered as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            raise
        except (RuntimeError, ValueError) as exc:
            await context.abort(grpc.StatusCode.INTERNAL, str(exc))
            raise

    async def _reject(self, reason: str, original: bytes) -> None:
        log.warning("URL skipped: %s", reason)
        try:
            await self.producer.send(self.cfg.topics.rejected, encode(Rejected(reason=reason, original=original,
                                                                              topic="urlfrontier")))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - logged above in any case
            log.warning("rejection not published: %s", exc)

    # -- writes -------------------------------------------------------------------------------------
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

    # -- GetURLs ------------------------------------------------------------------------------------
    async def GetURLs(self, request: pb.GetParams,
                      context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[pb.URLInfo]:  # fmt: skip
        if not self.active:
            return
        if request.WhichOneof("item") == "anyCrawlID":
            pools = self.pools.known()
        else:
            crawl = await self._crawl(request.crawlID, context)
            try:
                pools = [await self.pools.of(crawl)]
            except TooManyCrawls as exc:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
                raise
        # a client's hold: never longer than MAX_HOLD (its host's slot goes at the hand-out deadline,
        # frontier.fetch_timeout after the hold, or with the URL's update if it comes first)
        delay = min(float(request.delay_requestable or self.cfg.urlfrontier.delay_requestable), MAX_HOLD)
        key = request.key or None
        per_queue, queues = request.max_urls_per_queue, request.max_queues
        budget = GET_BUDGET
        if per_queue and (queues or key):
            budget = min(budget, per_queue * (1 if key else queues))
        with contextlib.ExitStack() as asking:  # while the call lasts, its crawls' jobs wait here for it
            for pool in pools:
                asking.enter_context(pool.asking_for())
            async for info in self._stream(pools, key, per_queue, queues, budget, delay, context):
                yield info

    async def _stream(
        self,
        pools: list[CrawlPool],
        key: str | None,
        per_queue: int,
        queues: int,
        budget: int,
        delay: float,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.URLInfo]:
        """GetURLs' answer: the jobs of ``pools`` within the call's limits, as they come."""
        counts: dict[str, int] = {}
        sent = 0
        # nothing to send: wait up to urlfrontier.get_wait for a first URL. Once URLs went out, the
        # stream stays open (up to get_stream) and each further URL goes out when its host may be
        # sent to: a client that fetches while the stream is open (StormCrawler) gets a host's
        # next URL as soon as the frontier allows it, not one per query cycle
        started = time.monotonic()
        deadline = started + self.cfg.urlfrontier.get_wait
        while sent < budget and pools:
            for pool in pools:
                if pool.failure is not None:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, f"crawl {pool.crawl!r}: {pool.failure}")
            taken: list[tuple[CrawlPool, LeasedJob]] = []
            trial = dict(counts)  # what the call sends counts; a job not held goes back, uncounted
            for pool in pools:  # the call's budget over every crawl it serves
                taken += [(pool, job) for job in pool.take(key, per_queue, queues, budget - sent - len(taken), trial)]
            if taken:
                async for job, info in self._hand_out(taken, delay, context):
                    sent += 1
                    counts[job_key(job)] = counts.get(job_key(job), 0) + 1
                    yield info
                deadline = max(deadline, started + self.cfg.urlfrontier.get_stream)
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                break
            waits = [asyncio.ensure_future(p.arrived.wait()) for p in pools]
            _, pending = await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            for w in pending:
                w.cancel()
            for p in pools:
                p.arrived.clear()

    async def _hand_out(self, taken: list[tuple[CrawlPool, LeasedJob]], delay: float,
                        context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[_Sent]:  # fmt: skip
        until = time.time() + delay
        held: set[str] = set()
        out: set[str] = set()  # leases sent to the client
        try:
            held = await self._hold([job for _, job in taken], until, context)
            for pool, job in taken:
                if job.job.lease not in held:
                    continue  # its lease closed meanwhile (a deletion), or the hold failed: handed back below
                try:
                    await pool.hand_out(job, until)
                except Exception as exc:  # noqa: BLE001 - not handed out: the frontier's lease brings it back
                    log.warning("%s not handed out: %s", job.url[:200], exc)
                    continue
                item = job.item
                info = pb.URLInfo(url=item.url, key=item.key or queue_key(item.url, ""), crawlID=api_crawl(item.crawl),
                                  metadata=_metadata(item.meta))  # fmt: skip
                out.add(job.job.lease)
                yield job, info
        finally:
            # taken but not sent (the client went away, a failure): back to the frontier unless held
            # (a held lease comes back when its hold ends, at most MAX_HOLD later)
            stranded = [(pool, job) for pool, job in taken if job.job.lease not in out]
            if stranded:
                task = asyncio.ensure_future(_give_back(stranded, held))
                self._background.add(task)
                task.add_done_callback(self._background.discard)

    async def _hold(self, jobs: list[LeasedJob], until: float, context: grpc.aio.ServicerContext[Any, Any]) -> set[str]:
        """Tell each job's partition that it is in a client's hands until ``until``, on
        crawl.control (so a question sent after GetURLs sees it held); the leases held. A lease the
        partition did not hold was closed meanwhile, or a URL of its queue now comes first (the
        partition queued the job again): it is not handed out, and the queue's first URL comes next."""
        by_partition: dict[int, list[str]] = {}
        for job in jobs:
            by_partition.setdefault(partition_of(job.item, self.cfg.topics.partitions), []).append(job.job.lease)

        async def hold(p: int, leases: list[str]) -> list[str]:
            try:
                replies = await self.asker.ask(new_query("hold", leases=leases, until=until), [p])
            except Exception as exc:  # noqa: BLE001 - not held: not handed out
                log.warning("hold of %d URL(s) not confirmed by partition %d: %s", len(leases), p, exc)
                return []
            reply = replies.get(p)
            if reply is None:
                return []
            if reply.counts.get("held", 0) != len(reply.leases):  # a frontier that does not name them
                return leases
            return [lease for lease in leases if lease in set(reply.leases)]

        done = await asyncio.gather(*(hold(p, leases) for p, leases in by_partition.items()))
        return {lease for leases in done for lease in leases}

    async def serve_known_crawls(self) -> None:
        """At start: join the worker group of every crawl the frontier knows, so that each is
        served (the frontier holds a crawl without workers) before its clients come back."""
        try:
            replies = await self.asker.ask(new_query("crawls", crawl=""))
        except (Unanswered, RuntimeError) as exc:
            log.info("crawls not known at start (%s): each is served when a client names it", exc)
            return
        crawls = sorted({c for r in replies.values() for c in r.crawls})
        for crawl in crawls:
            try:
                await self.pools.of(crawl)
            except TooManyCrawls:
                log.warning("the frontier knows %d crawls of this API; this gateway serves %d "
                            "(urlfrontier.max_crawls): the others' URLs are not handed out here",
                            len(crawls), self.cfg.urlfrontier.max_crawls)  # fmt: skip
                return

    # -- questions ----------------------------------------------------------------------------------
    async def GetStats(self, request: pb.QueueWithinCrawlParams,
                       context: grpc.aio.ServicerContext[Any, Any]) -> pb.Stats:  # fmt: skip
        crawl = await self._crawl(request.crawlID, context)
        replies = await self._ask(context, "stats", crawl, key=request.key)
        total: dict[str, int] = {}
        for reply in replies.values():
            for name, value in reply.counts.items():
                total[name] = total.get(name, 0) + value
        return pb.Stats(size=total.get("size", 0), inProcess=total.get("in_process", 0),
                        numberOfQueues=total.get("queues", 0), crawlID=request.crawlID or API_DEFAULT_CRAWL,
                        counts={"completed": total.get("completed", 0),
                                "active_queues": total.get("queues", 0)})  # fmt: skip

    async def ListCrawls(self, request: pb.Local, context: grpc.aio.ServicerContext[Any, Any]) -> pb.StringList:
        replies = await self._ask(context, "crawls", "")
        names = sorted({api_crawl(c) for r in replies.values() for c in r.crawls})
        return pb.StringList(values=names)

    async def CountURLs(self, request: pb.CountUrlParams, context: grpc.aio.ServicerContext[Any, Any]) -> pb.Long:
        crawl = await self._crawl(request.crawlID, context)
        if request.filter:
            n = 0
            async for _ in self._records(context, crawl, request.key, request.filter, request.ignoreCase):
                n += 1
            return pb.Long(value=n)
        replies = await self._ask(context, "count", crawl, key=request.key)
        return pb.Long(value=sum(r.counts.get("count", 0) for r in replies.values()))

    async def _records(self, context: grpc.aio.ServicerContext[Any, Any], crawl: str, key: str, filter: str = "",
                       ignore_case: bool = False, at: _ListAt | None = None, want: int = 0,
                       ) -> AsyncIterator[tuple[UrlRecord, _ListAt]]:  # fmt: skip
        """Every record of the crawl (of ``key``), partition by partition, a page at a time (each
        page resumed from the previous one's cursor), each with the listing's place after it; from
        ``at`` when given. ``want``: the records the caller will take at most (0: all; pages are
        asked no larger)."""
        needle = filter.lower() if ignore_case else filter
        p, after, skip = at if at is not None else (0, "", 0)
        while p < self.cfg.topics.partitions:
            limit = LIST_PAGE if needle or want <= 0 else min(LIST_PAGE, skip + want)
            reply = (await self._ask(context, "urls", crawl, [p], key=key, after=after, limit=limit))[p]
            following = (p, reply.more, 0) if reply.more else (p + 1, "", 0)
            for i in range(skip, len(reply.urls)):
                record = reply.urls[i]
                url = record.url.lower() if ignore_case else record.url
                if not needle or needle in url:
                    want -= 1
                    yield record, following if i + 1 == len(reply.urls) else (p, after, i + 1)
            skip = 0
            p, after = following[:2]

    async def ListURLs(self, request: pb.ListUrlParams,
                       context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[pb.URLItem]:  # fmt: skip
        """``size`` records from ``start``. A call that starts where a recent one of the same
        listing ended (the next page) resumes there instead of reading the ``start`` records before."""
        crawl = await self._crawl(request.crawlID, context)
        size = request.size or 100
        listing = (crawl, request.key, request.filter, request.ignoreCase)
        at = self._list_ends.pop((*listing, request.start), None) if request.start else None
        n = request.start if at is not None else 0
        async for record, place in self._records(context, crawl, request.key, request.filter, request.ignoreCase,
                                                 at, want=request.start + size - n):  # fmt: skip
            n += 1
            if n <= request.start:
                continue
            yield _known(record)
            if n >= request.start + size:
                self._list_ends[(*listing, n)] = place
                while len(self._list_ends) > LIST_ENDS:
                    self._list_ends.popitem(last=False)
                return

    async def GetURLStatus(self, request: pb.URLStatusRequest,
                           context: grpc.aio.ServicerContext[Any, Any]) -> pb.URLItem:  # fmt: skip
        crawl = await self._crawl(request.crawlID, context)
        try:
            key = queue_key(request.url, request.key)
            url = item_from_submission(submission(request.url, key, crawl, {}, None)).url
        except (BadItem, Rejection, ValueError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        replies = await self._ask(context, "status", crawl, key=key, url=url)
        for reply in replies.values():
            if reply.urls:
                return _known(reply.urls[0])
        await context.abort(grpc.StatusCode.NOT_FOUND, f"{request.url[:200]} is not known in crawl {crawl!r}")
        raise AssertionError  # not reached

    async def ListQueues(self, request: pb.Pagination, context: grpc.aio.ServicerContext[Any, Any]) -> pb.QueueList:
        """``size`` keys from ``start`` in order: the partitions' pages merged as they come (a key
        in several partitions once), a page of each partition in memory at a time. A call that
        starts where a recent one ended resumes after its last key."""
        crawl = await self._crawl(request.crawlID, context)
        size = request.size or 100
        inactive = request.include_inactive
        last = self._queue_ends.pop((crawl, inactive, request.start), None) if request.start else None
        n = request.start if last is not None else 0
        after = last or ""
        first = await self._ask(context, "queues", crawl, after=after, limit=LIST_PAGE, inactive=inactive)
        pages = {p: (reply.queues, reply.more) for p, reply in first.items()}
        heads = [(names[0], p, 0) for p, (names, _) in pages.items() if names]
        heapq.heapify(heads)
        values: list[str] = []
        while heads and len(values) < size:
            name, p, i = heapq.heappop(heads)
            names, more = pages[p]
            if i + 1 == len(names) and more:  # this partition's next page
                reply = (await self._ask(context, "queues", crawl, [p], after=more, limit=LIST_PAGE,
                                         inactive=inactive))[p]  # fmt: skip
                pages[p] = names, more = reply.queues, reply.more
                i = -1
            if i + 1 < len(names):
                heapq.heappush(heads, (names[i + 1], p, i + 1))
            if name == after:
                continue  # the same key in another partition: once
            after = name
            n += 1
            if n > request.start:
                values.append(name)
        if values:  # every partition's keys up to the last one are read: the next call resumes after it
            self._queue_ends[(crawl, inactive, n)] = after
            while len(self._queue_ends) > LIST_ENDS:
                self._queue_ends.popitem(last=False)
        return pb.QueueList(values=values, start=request.start, size=len(values),
                            crawlID=request.crawlID or API_DEFAULT_CRAWL)  # fmt: skip

    # -- deletions ----------------------------------------------------------------------------------
    async def DeleteCrawl(self, request: pb.DeleteCrawlMessage,
                          context: grpc.aio.ServicerContext[Any, Any]) -> pb.Long:  # fmt: skip
        crawl = await self._crawl(request.value, context)
        replies = await self._ask(context, "delete_crawl", crawl)
        pool = self.pools.pools.get(crawl)
        if pool is not None:
            for job in pool.take(None, 0, 0, 1_000_000):  # ready jobs of the deleted crawl: back (dropped there)
                await job.release()
            pool.handed.clear()
        return pb.Long(value=sum(r.counts.get("removed", 0) for r in replies.values()))

    async def DeleteQueue(self, request: pb.QueueWithinCrawlParams,
                          context: grpc.aio.ServicerContext[Any, Any]) -> pb.Long:  # fmt: skip
        crawl = await self._crawl(request.crawlID, context)
        if not request.key:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "DeleteQueue needs a key")
        replies = await self._ask(context, "delete_queue", crawl, key=request.key)
        pool = self.pools.pools.get(crawl)
        if pool is not None:
            for job in pool.take(request.key, 0, 0, 1_000_000):
                await job.release()
        return pb.Long(value=sum(r.counts.get("removed", 0) for r in replies.values()))

    async def PurgeURLs(self, request: pb.PurgeUrlParams, context: grpc.aio.ServicerContext[Any, Any]) -> pb.Long:
        """Remove the URLs first recorded more than ``days`` days ago (of ``key``, or every queue)."""
        crawl = await self._crawl(request.crawlID, context)
        cutoff = time.time() - 86400.0 * request.days
        replies = await self._ask(context, "purge", crawl, key=request.key, until=cutoff)
        return pb.Long(value=sum(r.counts.get("removed", 0) for r in replies.values()))

    # -- operators' commands --------------------------------------------------------------------------
    async def _command(self, context: grpc.aio.ServicerContext[Any, Any], cmd: ControlCommand) -> pb.Empty:
        try:
            cmd.validate()
            await self.asker.command(cmd)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception as exc:  # noqa: BLE001 - Kafka refused it: the client may try again
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"command not sent: {exc}")
        return pb.Empty()

    async def BlockQueueUntil(self, request: pb.BlockQueueParams,
                              context: grpc.aio.ServicerContext[Any, Any]) -> pb.Empty:  # fmt: skip
        """Politeness is one per host across crawls: the block holds for every crawl."""
        if not request.key:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "BlockQueueUntil needs a key")
        return await self._command(context, ControlCommand(action="block", scope=request.key,
                                                           until=float(request.time)))  # fmt: skip

    async def SetDelay(self, request: pb.QueueDelayParams, context: grpc.aio.ServicerContext[Any, Any]) -> pb.Empty:
        if not request.key:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "SetDelay without a key (every queue) is the "
                                "frontier's configuration: throttle.delay; give a key")  # fmt: skip
        return await self._command(context, ControlCommand(action="set", scope=request.key,
                                                           delay=float(request.delay_requestable)))  # fmt: skip

    async def SetCrawlLimit(self, request: pb.CrawlLimitParams,
                            context: grpc.aio.ServicerContext[Any, Any]) -> pb.Empty:  # fmt: skip
        """The limit holds per host of the crawl (the frontier's crawl limit), whatever the key."""
        crawl = await self._crawl(request.crawlID, context)
        return await self._command(context, ControlCommand(action="limit", crawl=crawl, per_host=request.limit))

    async def SetActive(self, request: pb.Active, context: grpc.aio.ServicerContext[Any, Any]) -> pb.Empty:
        self.active = request.state  # this gateway's: an inactive one hands nothing out
        return pb.Empty()

    async def GetActive(self, request: pb.Local, context: grpc.aio.ServicerContext[Any, Any]) -> pb.Boolean:
        return pb.Boolean(state=self.active)

    async def ListNodes(self, request: pb.Empty, context: grpc.aio.ServicerContext[Any, Any]) -> pb.StringList:
        return pb.StringList(values=[self.address])

    async def SetLogLevel(self, request: pb.LogLevelParams, context: grpc.aio.ServicerContext[Any, Any]) -> pb.Empty:
        """Only this project's loggers (:func:`~workers.urlfrontier.security.own_logger`): a client
        may not silence the root logger, nor make gRPC or librdkafka log every call at DEBUG."""
        if not own_logger(request.package):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"SetLogLevel changes this project's loggers only ({', '.join(OWN_LOGGERS)} and "
                                f"their children), not {request.package[:100]!r}")  # fmt: skip
        level = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
        logging.getLogger(request.package).setLevel(level.get(request.level, logging.INFO))
        return pb.Empty()


async def _give_back(jobs: list[tuple[CrawlPool, LeasedJob]], held: set[str]) -> None:
    """Jobs a GetURLs took and did not send: handed back to the frontier (queued again at once), or,
    when their hold was recorded (the frontier ignores a hand-back of a held lease), let go here."""
    for pool, job in jobs:
        if job.reported:
            continue
        if (handed := pool.handed.get(job.url)) is not None and handed.job is job:  # (not another job of the URL)
            del pool.handed[job.url]
        if job.job.lease in held:
            pool.jobs.let_go(job)
            continue
        with contextlib.suppress(Exception):
            await job.release()


def _metadata(meta: dict[str, Any]) -> dict[str, pb.StringList]:
    out: dict[str, pb.StringList] = {}
    for k, v in meta.items():
        values = v if isinstance(v, list) else [v]
        out[str(k)] = pb.StringList(values=[str(x) for x in values])
    return out


def _known(record: UrlRecord) -> pb.URLItem:
    info = pb.URLInfo(url=record.url, key=record.key, crawlID=api_crawl(record.crawl), metadata=_metadata(record.meta))
    return pb.URLItem(known=pb.KnownURLItem(info=info, refetchable_from_date=int(record.refetch_at)),
                      creation_date=int(record.created))  # fmt: skip

"""GetURLs: the jobs of the crawls asked for (:mod:`workers.urlfrontier.pool`), within the call's
limits, each held at its partition for the client's ``delay_requestable`` before it is sent; what
a call took and did not send goes back to the frontier. SetActive and GetActive: whether this
gateway hands out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from topics.partitioning import partition_of
from workers.api import LeasedJob
from workers.urlfrontier.mapping import api_crawl, queue_key
from workers.urlfrontier.pool import CrawlPool, TooManyCrawls, job_key, release_all
from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.queries import Unanswered, new_query
from workers.urlfrontier.shared import Shared, api_metadata

log = logging.getLogger("urlfrontier")
GET_BUDGET = 10_000  # URLs one GetURLs returns at most
MAX_HOLD = 3600.0  # seconds a GetURLs' delay_requestable holds a URL at most
_Sent = tuple[LeasedJob, pb.URLInfo]  # a job handed to the client, as it was sent


class HandOut:
    """The gateway's hand-out: :meth:`GetURLs`, and whether this gateway hands out at all
    (:meth:`SetActive`, :meth:`GetActive`: an inactive one hands nothing out); the servicer's
    calls, handed here. :meth:`serve_known_crawls` makes, at start, a pool of each crawl the
    frontier knows. Owns ``active`` and the hand-backs on their way; given the configuration
    (``urlfrontier``'s waits, the topics), the asker (holds) and the crawls' pools (of the
    gateway's :class:`~workers.urlfrontier.shared.Shared`, kept for its crawl step)."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.cfg = shared.cfg
        self.asker = shared.asker
        self.pools = shared.pools
        self.active = True  # this gateway's SetActive: an inactive one hands nothing out
        self._background: set[asyncio.Future[None]] = set()  # hand-backs on their way

    async def SetActive(self, request: pb.Active, context: grpc.aio.ServicerContext[Any, Any]) -> pb.Empty:
        self.active = request.state
        return pb.Empty()

    async def GetActive(self, request: pb.Local, context: grpc.aio.ServicerContext[Any, Any]) -> pb.Boolean:
        return pb.Boolean(state=self.active)

    async def GetURLs(self, request: pb.GetParams,
                      context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[pb.URLInfo]:  # fmt: skip
        if not self.active:
            return
        if request.WhichOneof("item") == "anyCrawlID":
            pools = self.pools.known()
        else:
            crawl = await self.shared.crawl(request.crawlID, context)
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
                                  metadata=api_metadata(item.meta))  # fmt: skip
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


async def _give_back(jobs: list[tuple[CrawlPool, LeasedJob]], held: set[str]) -> None:
    """Jobs a GetURLs took and did not send: handed back to the frontier (queued again at once), or,
    when their hold was recorded (the frontier ignores a hand-back of a held lease), let go here."""
    back: list[LeasedJob] = []
    for pool, job in jobs:
        if job.reported:
            continue
        if (handed := pool.handed.peek(job.url)) is not None and handed.job is job:  # (not another job of the URL)
            del pool.handed[job.url]
        if job.job.lease in held:
            pool.jobs.endings.let_go(job)
            continue
        back.append(job)
    await release_all(back)  # (together: one at a time, each waited for a consumer turn)

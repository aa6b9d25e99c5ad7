"""The questions: GetStats, ListCrawls, CountURLs, ListURLs, GetURLStatus and ListQueues, asked of
every partition (:mod:`workers.urlfrontier.queries`) and their answers merged, a page of each
partition at a time; a listing's next page resumes where the previous call ended.
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterator
from typing import Any

import grpc

from frontier.core.lru import LRU
from frontier.core.urls import Rejection, item_from_submission
from topics.schemas import MAX_QUERY_LIMIT, UrlRecord
from workers.urlfrontier.mapping import API_DEFAULT_CRAWL, BadItem, api_crawl, queue_key, submission
from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.shared import Shared, known_item

LIST_PAGE = MAX_QUERY_LIMIT  # URL records or queue keys asked of a partition at a time
LIST_ENDS = 256  # where the latest ListURLs calls ended: a call starting there resumes (the next page)
ListAt = tuple[int, str, int]  # a listing's place: partition, the cursor of its page, records of the page read


class Questions:
    """The gateway's questions: :meth:`GetStats`, :meth:`ListCrawls`, :meth:`CountURLs`,
    :meth:`ListURLs`, :meth:`GetURLStatus`, :meth:`ListQueues` (the servicer's, handed here).
    Given the gateway's :class:`~workers.urlfrontier.shared.Shared` (its crawl and ask steps, the
    number of partitions). Owns where the latest ListURLs calls ended: (crawl, key, filter, ignore
    case, position) → its place; and ListQueues calls: (crawl, include inactive, position) → the
    last key (``LIST_ENDS`` of each, the oldest out first)."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self._list_ends: LRU[tuple[str, str, str, bool, int], ListAt] = LRU(LIST_ENDS)
        self._queue_ends: LRU[tuple[str, bool, int], str] = LRU(LIST_ENDS)

    async def GetStats(self, request: pb.QueueWithinCrawlParams,
                       context: grpc.aio.ServicerContext[Any, Any]) -> pb.Stats:  # fmt: skip
        crawl = await self.shared.crawl(request.crawlID, context)
        replies = await self.shared.ask(context, "stats", crawl, key=request.key)
        total: dict[str, int] = {}
        for reply in replies.values():
            for name, value in reply.counts.items():
                total[name] = total.get(name, 0) + value
        return pb.Stats(size=total.get("size", 0), inProcess=total.get("in_process", 0),
                        numberOfQueues=total.get("queues", 0), crawlID=request.crawlID or API_DEFAULT_CRAWL,
                        counts={"completed": total.get("completed", 0),
                                "active_queues": total.get("queues", 0)})  # fmt: skip

    async def ListCrawls(self, request: pb.Local, context: grpc.aio.ServicerContext[Any, Any]) -> pb.StringList:
        replies = await self.shared.ask(context, "crawls", "")
        names = sorted({api_crawl(c) for r in replies.values() for c in r.crawls})
        return pb.StringList(values=names)

    async def CountURLs(self, request: pb.CountUrlParams, context: grpc.aio.ServicerContext[Any, Any]) -> pb.Long:
        crawl = await self.shared.crawl(request.crawlID, context)
        if request.filter:
            n = 0
            async for _ in self._records(context, crawl, request.key, request.filter, request.ignoreCase):
                n += 1
            return pb.Long(value=n)
        replies = await self.shared.ask(context, "count", crawl, key=request.key)
        return pb.Long(value=sum(r.counts.get("count", 0) for r in replies.values()))

    async def _records(self, context: grpc.aio.ServicerContext[Any, Any], crawl: str, key: str, filter: str = "",
                       ignore_case: bool = False, at: ListAt | None = None, want: int = 0,
                       ) -> AsyncIterator[tuple[UrlRecord, ListAt]]:  # fmt: skip
        """Every record of the crawl (of ``key``), partition by partition, a page at a time (each
        page resumed from the previous one's cursor), each with the listing's place after it; from
        ``at`` when given. ``want``: the records the caller will take at most (0: all; pages are
        asked no larger)."""
        needle = filter.lower() if ignore_case else filter
        p, after, skip = at if at is not None else (0, "", 0)
        while p < self.shared.cfg.topics.partitions:
            limit = LIST_PAGE if needle or want <= 0 else min(LIST_PAGE, skip + want)
            reply = (await self.shared.ask(context, "urls", crawl, [p], key=key, after=after, limit=limit))[p]
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
        crawl = await self.shared.crawl(request.crawlID, context)
        size = request.size or 100
        listing = (crawl, request.key, request.filter, request.ignoreCase)
        at = self._list_ends.pop((*listing, request.start), None) if request.start else None
        n = request.start if at is not None else 0
        async for record, place in self._records(context, crawl, request.key, request.filter, request.ignoreCase,
                                                 at, want=request.start + size - n):  # fmt: skip
            n += 1
            if n <= request.start:
                continue
            yield known_item(record)
            if n >= request.start + size:
                self._list_ends.put((*listing, n), place)
                return

    async def GetURLStatus(self, request: pb.URLStatusRequest,
                           context: grpc.aio.ServicerContext[Any, Any]) -> pb.URLItem:  # fmt: skip
        crawl = await self.shared.crawl(request.crawlID, context)
        try:
            key = queue_key(request.url, request.key)
            url = item_from_submission(submission(request.url, key, crawl, {}, None)).url
        except (BadItem, Rejection, ValueError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        replies = await self.shared.ask(context, "status", crawl, key=key, url=url)
        for reply in replies.values():
            if reply.urls:
                return known_item(reply.urls[0])
        await context.abort(grpc.StatusCode.NOT_FOUND, f"{request.url[:200]} is not known in crawl {crawl!r}")
        raise AssertionError  # not reached

    async def ListQueues(self, request: pb.Pagination, context: grpc.aio.ServicerContext[Any, Any]) -> pb.QueueList:
        """``size`` keys from ``start`` in order: the partitions' pages merged as they come (a key
        in several partitions once), a page of each partition in memory at a time. A call that
        starts where a recent one ended resumes after its last key."""
        crawl = await self.shared.crawl(request.crawlID, context)
        size = request.size or 100
        inactive = request.include_inactive
        last = self._queue_ends.pop((crawl, inactive, request.start), None) if request.start else None
        n = request.start if last is not None else 0
        after = last or ""
        first = await self.shared.ask(context, "queues", crawl, after=after, limit=LIST_PAGE, inactive=inactive)
        pages = {p: (reply.queues, reply.more) for p, reply in first.items()}
        heads = [(names[0], p, 0) for p, (names, _) in pages.items() if names]
        heapq.heapify(heads)
        values: list[str] = []
        while heads and len(values) < size:
            name, p, i = heapq.heappop(heads)
            names, more = pages[p]
            if i + 1 == len(names) and more:  # this partition's next page
                reply = (await self.shared.ask(context, "queues", crawl, [p], after=more, limit=LIST_PAGE,
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
            self._queue_ends.put((crawl, inactive, n), after)
        return pb.QueueList(values=values, start=request.start, size=len(values),
                            crawlID=request.crawlID or API_DEFAULT_CRAWL)  # fmt: skip

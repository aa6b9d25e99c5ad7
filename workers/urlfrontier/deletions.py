"""The deletions: DeleteCrawl, DeleteQueue and PurgeURLs, asked of every partition
(:mod:`workers.urlfrontier.queries`: applied once and answered once committed); a deleted crawl's
or queue's jobs waiting in this gateway go back to the frontier (dropped there).
"""

from __future__ import annotations

import time
from typing import Any

import grpc

from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.shared import Shared


class Deletions:
    """The gateway's deletions: :meth:`DeleteCrawl`, :meth:`DeleteQueue`, :meth:`PurgeURLs` (the
    servicer's, handed here). Given the gateway's :class:`~workers.urlfrontier.shared.Shared`
    (its crawl and ask steps, the crawls' pools); owns nothing."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def DeleteCrawl(self, request: pb.DeleteCrawlMessage,
                          context: grpc.aio.ServicerContext[Any, Any]) -> pb.Long:  # fmt: skip
        crawl = await self.shared.crawl(request.value, context)
        replies = await self.shared.ask(context, "delete_crawl", crawl)
        pool = self.shared.pools.pools.get(crawl)
        if pool is not None:
            for job in pool.take(None, 0, 0, 1_000_000):  # ready jobs of the deleted crawl: back (dropped there)
                await job.release()
            pool.handed.clear()
        return pb.Long(value=sum(r.counts.get("removed", 0) for r in replies.values()))

    async def DeleteQueue(self, request: pb.QueueWithinCrawlParams,
                          context: grpc.aio.ServicerContext[Any, Any]) -> pb.Long:  # fmt: skip
        crawl = await self.shared.crawl(request.crawlID, context)
        if not request.key:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "DeleteQueue needs a key")
        replies = await self.shared.ask(context, "delete_queue", crawl, key=request.key)
        pool = self.shared.pools.pools.get(crawl)
        if pool is not None:
            for job in pool.take(request.key, 0, 0, 1_000_000):
                await job.release()
        return pb.Long(value=sum(r.counts.get("removed", 0) for r in replies.values()))

    async def PurgeURLs(self, request: pb.PurgeUrlParams, context: grpc.aio.ServicerContext[Any, Any]) -> pb.Long:
        """Remove the URLs first recorded more than ``days`` days ago (of ``key``, or every queue)."""
        crawl = await self.shared.crawl(request.crawlID, context)
        cutoff = time.time() - 86400.0 * request.days
        replies = await self.shared.ask(context, "purge", crawl, key=request.key, until=cutoff)
        return pb.Long(value=sum(r.counts.get("removed", 0) for r in replies.values()))

"""The URLFrontier API (crawler-commons URLFrontier 2.6) served over the Kafka frontier: the
servicer, :class:`Gateway`, made of its parts.

Every RPC maps onto what the frontier already does (see docs/URLFRONTIER.md for the table):
PutURLs and PutDiscovered are submissions on ``crawl.urls`` (acknowledged once Kafka has them;
a stream completes once the frontier applied them, so a client reads what it wrote:
:mod:`workers.urlfrontier.puts`); GetURLs hands out the crawl's jobs
(:mod:`workers.urlfrontier.handout`, :mod:`workers.urlfrontier.pool`); the questions
(:mod:`workers.urlfrontier.listing`) and the deletions (here) go to every partition
(:mod:`workers.urlfrontier.queries`); BlockQueueUntil, SetDelay and SetCrawlLimit are operators'
commands on ``crawl.control`` (kept in the partitions' changelogged state); SetActive, GetActive,
ListNodes and SetLogLevel are this gateway's own.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import grpc

from frontier.config import Config
from frontier.core.lru import LRU
from topics.kafka import AsyncProducer
from topics.schemas import ControlCommand
from workers.urlfrontier.handout import HandOut
from workers.urlfrontier.listing import LIST_ENDS, Questions
from workers.urlfrontier.pool import Pools
from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.puts import Puts
from workers.urlfrontier.queries import Asker
from workers.urlfrontier.security import OWN_LOGGERS, own_logger


class Gateway(Puts, HandOut, Questions):
    """The URLFrontier servicer: writes (:class:`~workers.urlfrontier.puts.Puts`), GetURLs
    (:class:`~workers.urlfrontier.handout.HandOut`), questions
    (:class:`~workers.urlfrontier.listing.Questions`), and here the deletions, the operators'
    commands and the gateway's own calls."""

    def __init__(self, cfg: Config, kafka: Any, producer: AsyncProducer, asker: Asker, pools: Pools,
                 address: str) -> None:  # fmt: skip
        self.cfg = cfg
        self.kafka = kafka
        self.producer = producer
        self.asker = asker
        self.pools = pools
        self.address = address
        self.active = True
        self._background = set()  # hand-backs on their way
        # where the latest ListURLs and ListQueues calls ended (a call starting there resumes)
        self._list_ends = LRU(LIST_ENDS)
        self._queue_ends = LRU(LIST_ENDS)

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

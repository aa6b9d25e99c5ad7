"""The URLFrontier API (crawler-commons URLFrontier 2.6) served over the Kafka frontier: the
servicer, :class:`Gateway`, each of whose RPCs is handed to the part that does it.

Every RPC maps onto what the frontier already does (see docs/URLFRONTIER.md for the table):
PutURLs and PutDiscovered are submissions on ``crawl.urls`` (acknowledged once Kafka has them;
a stream completes once the frontier applied them, so a client reads what it wrote:
:mod:`workers.urlfrontier.puts`); GetURLs hands out the crawl's jobs
(:mod:`workers.urlfrontier.handout`, :mod:`workers.urlfrontier.pool`); the questions
(:mod:`workers.urlfrontier.listing`) and the deletions (:mod:`workers.urlfrontier.deletions`) go
to every partition (:mod:`workers.urlfrontier.queries`); BlockQueueUntil, SetDelay and
SetCrawlLimit are operators' commands on ``crawl.control`` (kept in the partitions' changelogged
state: :mod:`workers.urlfrontier.commands`); SetActive and GetActive (the hand-out's), ListNodes
and SetLogLevel are this gateway's own.

The gateway owns its parts, each made with what it needs (the arrows go one way: no part knows
the servicer or another part)::

    Gateway ──> Puts ───────> Shared (cfg, kafka, producer, asker, pools; the crawl and ask steps)
       ├──────> HandOut ──────^
       ├──────> Questions ────^
       ├──────> Deletions ────^
       ├──────> Commands ─────^
       └──────> Local (the address)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc

from frontier.config import Config
from topics.kafka import AsyncProducer
from workers.urlfrontier.commands import Commands, Local
from workers.urlfrontier.deletions import Deletions
from workers.urlfrontier.handout import HandOut
from workers.urlfrontier.listing import Questions
from workers.urlfrontier.pool import Pools
from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.proto import urlfrontier_pb2_grpc as pbg
from workers.urlfrontier.puts import Puts
from workers.urlfrontier.queries import Asker
from workers.urlfrontier.shared import Shared

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


class Gateway(pbg.URLFrontierServicer):
    """The URLFrontier servicer: every RPC, each handed to its part. Owns ``shared``
    (:class:`~workers.urlfrontier.shared.Shared`: what the parts are given) and the parts:
    ``puts`` (:class:`~workers.urlfrontier.puts.Puts`: PutURLs, PutDiscovered), ``handout``
    (:class:`~workers.urlfrontier.handout.HandOut`: GetURLs, SetActive, GetActive), ``questions``
    (:class:`~workers.urlfrontier.listing.Questions`: GetStats, ListCrawls, CountURLs, ListURLs,
    GetURLStatus, ListQueues), ``deletions`` (:class:`~workers.urlfrontier.deletions.Deletions`:
    DeleteCrawl, DeleteQueue, PurgeURLs), ``commands``
    (:class:`~workers.urlfrontier.commands.Commands`: BlockQueueUntil, SetDelay, SetCrawlLimit)
    and ``local`` (:class:`~workers.urlfrontier.commands.Local`: ListNodes, SetLogLevel). The
    server calls :meth:`serve_known_crawls` once it serves."""

    def __init__(self, cfg: Config, kafka: Any, producer: AsyncProducer, asker: Asker, pools: Pools,
                 address: str) -> None:  # fmt: skip
        self.shared = Shared(cfg, kafka, producer, asker, pools)
        self.puts = Puts(self.shared)
        self.handout = HandOut(self.shared)
        self.questions = Questions(self.shared)
        self.deletions = Deletions(self.shared)
        self.commands = Commands(self.shared)
        self.local = Local(address)

    async def serve_known_crawls(self) -> None:
        await self.handout.serve_known_crawls()

    # -- writes (a stream's answers pass through as they come) ----------------------------------------
    async def PutURLs(self, request_iterator: AsyncIterator[pb.URLItem],
                      context: Context) -> AsyncIterator[pb.AckMessage]:  # fmt: skip
        async for ack in self.puts.PutURLs(request_iterator, context):
            yield ack

    async def PutDiscovered(self, request_iterator: AsyncIterator[pb.DiscoveredBatch],
                            context: Context) -> AsyncIterator[pb.BatchAck]:  # fmt: skip
        async for ack in self.puts.PutDiscovered(request_iterator, context):
            yield ack

    # -- the hand-out ------------------------------------------------------------------------------
    async def GetURLs(self, request: pb.GetParams, context: Context) -> AsyncIterator[pb.URLInfo]:
        async for info in self.handout.GetURLs(request, context):
            yield info

    async def SetActive(self, request: pb.Active, context: Context) -> pb.Empty:
        return await self.handout.SetActive(request, context)

    async def GetActive(self, request: pb.Local, context: Context) -> pb.Boolean:
        return await self.handout.GetActive(request, context)

    # -- questions -----------------------------------------------------------------------------------
    async def GetStats(self, request: pb.QueueWithinCrawlParams, context: Context) -> pb.Stats:
        return await self.questions.GetStats(request, context)

    async def ListCrawls(self, request: pb.Local, context: Context) -> pb.StringList:
        return await self.questions.ListCrawls(request, context)

    async def CountURLs(self, request: pb.CountUrlParams, context: Context) -> pb.Long:
        return await self.questions.CountURLs(request, context)

    async def ListURLs(self, request: pb.ListUrlParams, context: Context) -> AsyncIterator[pb.URLItem]:
        async for item in self.questions.ListURLs(request, context):
            yield item

    async def GetURLStatus(self, request: pb.URLStatusRequest, context: Context) -> pb.URLItem:
        return await self.questions.GetURLStatus(request, context)

    async def ListQueues(self, request: pb.Pagination, context: Context) -> pb.QueueList:
        return await self.questions.ListQueues(request, context)

    # -- deletions -----------------------------------------------------------------------------------
    async def DeleteCrawl(self, request: pb.DeleteCrawlMessage, context: Context) -> pb.Long:
        return await self.deletions.DeleteCrawl(request, context)

    async def DeleteQueue(self, request: pb.QueueWithinCrawlParams, context: Context) -> pb.Long:
        return await self.deletions.DeleteQueue(request, context)

    async def PurgeURLs(self, request: pb.PurgeUrlParams, context: Context) -> pb.Long:
        return await self.deletions.PurgeURLs(request, context)

    # -- operators' commands, the gateway's own --------------------------------------------------------
    async def BlockQueueUntil(self, request: pb.BlockQueueParams, context: Context) -> pb.Empty:
        return await self.commands.BlockQueueUntil(request, context)

    async def SetDelay(self, request: pb.QueueDelayParams, context: Context) -> pb.Empty:
        return await self.commands.SetDelay(request, context)

    async def SetCrawlLimit(self, request: pb.CrawlLimitParams, context: Context) -> pb.Empty:
        return await self.commands.SetCrawlLimit(request, context)

    async def ListNodes(self, request: pb.Empty, context: Context) -> pb.StringList:
        return await self.local.ListNodes(request, context)

    async def SetLogLevel(self, request: pb.LogLevelParams, context: Context) -> pb.Empty:
        return await self.local.SetLogLevel(request, context)

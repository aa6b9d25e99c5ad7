"""What operators tell through the API: the frontier's commands on ``crawl.control``
(BlockQueueUntil, SetDelay, SetCrawlLimit: kept in the partitions' changelogged state), and this
gateway's own calls, ListNodes and SetLogLevel (SetActive and GetActive are the hand-out's:
:mod:`workers.urlfrontier.handout`).
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from topics.schemas import ControlCommand
from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.security import OWN_LOGGERS, own_logger
from workers.urlfrontier.shared import Shared


class Commands:
    """The operators' commands: :meth:`BlockQueueUntil`, :meth:`SetDelay`, :meth:`SetCrawlLimit`
    (the servicer's, handed here), each a :class:`~topics.schemas.ControlCommand` sent by the
    asker. Given the gateway's :class:`~workers.urlfrontier.shared.Shared` (its crawl step, the
    asker); owns nothing."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def _command(self, context: grpc.aio.ServicerContext[Any, Any], cmd: ControlCommand) -> pb.Empty:
        try:
            cmd.validate()
            await self.shared.asker.command(cmd)
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
        crawl = await self.shared.crawl(request.crawlID, context)
        return await self._command(context, ControlCommand(action="limit", crawl=crawl, per_host=request.limit))


class Local:
    """This gateway's own calls: :meth:`ListNodes` (its address) and :meth:`SetLogLevel` (this
    process's loggers). Given the gateway's address; owns nothing."""

    def __init__(self, address: str) -> None:
        self.address = address

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

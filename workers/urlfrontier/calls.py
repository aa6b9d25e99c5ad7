"""The ground the URLFrontier servicer's parts stand on (:class:`Calls`): what the gateway holds
(configuration, producer, the partitions' asker, the crawls' pools) and the two steps every call
takes (its crawl ID read, its question asked of the partitions), and the API's messages made of
the frontier's records. ``puts``, ``handout``, ``listing`` and ``service`` add the RPCs.
"""

from __future__ import annotations

from typing import Any

import grpc

from frontier.config import Config
from topics.kafka import AsyncProducer
from topics.schemas import DEFAULT_CRAWL, Reply, UrlRecord
from workers.urlfrontier.mapping import api_crawl, frontier_crawl
from workers.urlfrontier.pool import Pools
from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.proto import urlfrontier_pb2_grpc as pbg
from workers.urlfrontier.queries import Asker, Unanswered, new_query


class Calls(pbg.URLFrontierServicer):
    """What every part of the gateway's servicer uses (the gateway, :class:`~workers.urlfrontier.service.Gateway`,
    sets these up)."""

    cfg: Config
    kafka: Any
    producer: AsyncProducer
    asker: Asker
    pools: Pools
    address: str
    active: bool  # this gateway's SetActive: an inactive one hands nothing out

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


def api_metadata(meta: dict[str, Any]) -> dict[str, pb.StringList]:
    """A URL's metadata as the API carries it: each key a list of strings."""
    out: dict[str, pb.StringList] = {}
    for k, v in meta.items():
        values = v if isinstance(v, list) else [v]
        out[str(k)] = pb.StringList(values=[str(x) for x in values])
    return out


def known_item(record: UrlRecord) -> pb.URLItem:
    """A recorded URL as the API's known URLItem (its refetch date, when it was first recorded)."""
    info = pb.URLInfo(
        url=record.url, key=record.key, crawlID=api_crawl(record.crawl), metadata=api_metadata(record.meta)
    )
    return pb.URLItem(known=pb.KnownURLItem(info=info, refetchable_from_date=int(record.refetch_at)),
                      creation_date=int(record.created))  # fmt: skip

"""What the URLFrontier servicer's parts share (:class:`Shared`), and the API's messages made of
the frontier's records (:func:`api_metadata`, :func:`known_item`)."""

from __future__ import annotations

from typing import Any

import grpc

from frontier.config import Config
from topics.kafka import AsyncProducer
from topics.schemas import DEFAULT_CRAWL, Reply, UrlRecord
from workers.urlfrontier.mapping import api_crawl, frontier_crawl
from workers.urlfrontier.pool import Pools
from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.queries import Asker, Unanswered, new_query


class Shared:
    """What the gateway's parts share, made by :class:`~workers.urlfrontier.service.Gateway` and
    given to each part when it is made: the configuration (``cfg``: its limits are
    ``cfg.urlfrontier``), the Kafka clients (``kafka``, ``producer``), the partitions' asker
    (``asker``) and the crawls' pools (``pools``); and the two steps a call takes, :meth:`crawl`
    (the API's crawl ID as the frontier's) and :meth:`ask` (a question asked of the partitions),
    each ending the call with its gRPC status when it fails. Holds no state of its own."""

    __slots__ = ("asker", "cfg", "kafka", "pools", "producer")

    def __init__(self, cfg: Config, kafka: Any, producer: AsyncProducer, asker: Asker, pools: Pools) -> None:
        self.cfg = cfg
        self.kafka = kafka
        self.producer = producer
        self.asker = asker
        self.pools = pools

    async def crawl(self, crawl_id: str, context: grpc.aio.ServicerContext[Any, Any]) -> str:
        """The frontier's crawl of the API's ``crawl_id`` (``INVALID_ARGUMENT``: not a crawl name)."""
        try:
            return frontier_crawl(crawl_id)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise  # not reached: abort raises

    async def ask(self, context: grpc.aio.ServicerContext[Any, Any], kind: str, crawl: str = DEFAULT_CRAWL,
                  partitions: list[int] | None = None, **fields: Any) -> dict[int, Reply]:  # fmt: skip
        """The replies of ``partitions`` (None: every one) to a question of ``kind``
        (``UNAVAILABLE``: some did not answer in time; ``INTERNAL``: the question failed)."""
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

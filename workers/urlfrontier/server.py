"""``crawl-frontier urlfrontier``: the URLFrontier gRPC gateway process.

It holds no state of its own (everything is in the frontier's partitions and on Kafka): any
number of gateways may run behind a load balancer, and one that dies loses nothing (the URLs it
handed out come back after their ``delay_requestable``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

import grpc

from frontier.config import Config
from frontier.kafka import Kafka
from workers.urlfrontier.pool import Pools
from workers.urlfrontier.proto import urlfrontier_pb2_grpc as pbg
from workers.urlfrontier.queries import Asker
from workers.urlfrontier.service import Gateway

log = logging.getLogger("urlfrontier")
MAX_MESSAGE = 16 * 1024 * 1024  # gRPC messages in and out (a ListURLs page, a large batch)


async def serve(cfg: Config, kafka: Kafka, stop: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set (or SIGINT/SIGTERM when none is given)."""
    stop = stop or _signals()
    producer = kafka.async_producer()
    asker = Asker(cfg, kafka, producer)
    asker.start()
    pools = Pools(cfg, kafka)
    address = f"{cfg.urlfrontier.bind}:{cfg.urlfrontier.port}"
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE),
                                      ("grpc.max_send_message_length", MAX_MESSAGE)])  # fmt: skip
    gateway = Gateway(cfg, kafka, producer, asker, pools, address)
    pbg.add_URLFrontierServicer_to_server(gateway, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"urlfrontier: cannot listen on {address}")
    await server.start()
    warm = asyncio.ensure_future(gateway.serve_known_crawls())
    log.info("URLFrontier API on %s (crawl.replies partition of %s)", address, asker.id)
    try:
        await stop.wait()
    finally:
        log.info("stopping")
        warm.cancel()
        await server.stop(grace=2)
        await pools.close()
        asker.stop()
        await asyncio.to_thread(producer.close)


def _signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    return stop


def run_gateway(cfg: Config, kafka: Kafka) -> None:
    asyncio.run(serve(cfg, kafka))

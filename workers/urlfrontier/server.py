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
from topics.kafka import Kafka
from workers.urlfrontier.pool import Pools
from workers.urlfrontier.proto import urlfrontier_pb2_grpc as pbg
from workers.urlfrontier.queries import Asker
from workers.urlfrontier.security import Guard, check_exposure, credentials, networks, read_token, server_options
from workers.urlfrontier.service import Gateway

log = logging.getLogger("urlfrontier")


async def serve(cfg: Config, kafka: Kafka, stop: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set (or SIGINT/SIGTERM when none is given)."""
    gw = cfg.urlfrontier
    check_exposure(gw)  # (the command checked it before connecting to Kafka; a caller of serve() too)
    guard = Guard(read_token(gw), networks(gw), gw.max_stream_age)
    tls = credentials(gw)
    stop = stop or _signals()
    producer = kafka.async_producer()
    asker = Asker(cfg, kafka, producer)
    asker.start()
    pools = Pools(cfg, kafka)
    address = f"{gw.bind}:{gw.port}"
    server = grpc.aio.server(options=server_options(gw), maximum_concurrent_rpcs=gw.max_calls,
                             interceptors=[guard] if guard.active else None)  # fmt: skip
    gateway = Gateway(cfg, kafka, producer, asker, pools, address)
    pbg.add_URLFrontierServicer_to_server(gateway, server)  # type: ignore[no-untyped-call]
    port = server.add_secure_port(address, tls) if tls is not None else server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"urlfrontier: cannot listen on {address}")
    await server.start()
    warm = asyncio.ensure_future(gateway.serve_known_crawls())
    checks = (("TLS", tls is not None), ("client certificates", bool(gw.tls_client_ca)),
              ("token", bool(guard.token)), ("client networks", bool(guard.allowed)))  # fmt: skip
    access = [name for name, on in checks if on]
    log.info("URLFrontier API on %s (%s; crawl.replies partition of %s)", address,
             ", ".join(access) or "plaintext, no token: loopback only", asker.id)  # fmt: skip
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

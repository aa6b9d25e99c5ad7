"""The faust-streaming application of the frontier.

faust provides group membership, co-partitioned assignment of ``crawl.urls.bydomain`` and
``crawl.feedback`` (the same partition numbers to the same instance), offset commits and the
process lifecycle. The work itself is done by :class:`~frontier.service.service.FrontierService`;
records are batches (many URLs or results per record), so faust's per-event cost is paid once
per batch, not once per URL.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import faust
from aiohttp import web

from frontier.client.feed import LagProbe, StatusFeed
from frontier.config import Config
from frontier.intake.router import Router
from frontier.observability.process import tune_collector
from frontier.observability.web import build_web, check_exposure
from frontier.service.crawls import CrawlDirectory
from frontier.service.lifecycle import GROUP_HEARTBEAT, GROUP_SESSION
from frontier.service.lock import lock_state_dir
from frontier.service.service import FrontierService
from topics.kafka import Kafka
from topics.schemas import ControlCommand, EncodedUrlBatch, FeedbackBatch, SchemaError, decode

log = logging.getLogger("frontier")
LAG_INTERVAL = 10.0  # seconds between consumer lag measurements
# allocations between two young collections (CPython's default: 700). With the defaults, collections
# took 4.3 s of the frontier's 55 CPU-seconds in tests.bench.dispatch (3,200 young and 26 full
# collections, thread CPU time measured with gc.callbacks, 2026-11-28); with these, 0.4 s.
GC_YOUNG = 50_000


def faust_credentials(extra: Mapping[str, str]) -> Any:
    """faust's credentials for the librdkafka-style settings in ``kafka.extra`` (SASL/SSL), or None.

    Secrets go straight into the credentials object; they are never logged.
    """
    protocol = extra.get("security.protocol", "PLAINTEXT").upper()
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=extra.get("ssl.ca.location"))
        if "ssl.certificate.location" in extra:
            context.load_cert_chain(extra["ssl.certificate.location"], extra.get("ssl.key.location"),
                                    extra.get("ssl.key.password"))  # fmt: skip
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = extra.get("sasl.mechanism", extra.get("sasl.mechanisms", "PLAIN"))
        return faust.SASLCredentials(username=extra.get("sasl.username"), password=extra.get("sasl.password"),
                                     mechanism=mechanism, ssl_context=context)  # fmt: skip
    if protocol == "SSL":
        return faust.SSLCredentials(context)
    if protocol != "PLAINTEXT":
        raise ValueError(f"kafka.extra.security.protocol: unsupported {protocol!r}")
    return None


def router_group(cfg: Config) -> str:
    """The consumer group every router of this frontier shares (embedded or standalone)."""
    return f"{cfg.frontier.app_id}-router"


def read_committed() -> None:
    """Make faust's consumer read committed records only (idempotent). faust reads uncommitted
    records unless its own exactly-once mode is on; the workers' reports (crawl.feedback) are
    written in transactions, and a report an expired worker could not commit must never count."""
    from faust.transport.drivers import aiokafka as driver

    thread = driver.AIOKafkaConsumerThread
    if getattr(thread, "_read_committed", False):
        return
    create = thread._create_worker_consumer

    def committed_only(self: Any, transport: Any) -> Any:
        consumer = create(self, transport)
        consumer._isolation_level = "read_committed"  # read by its fetcher, made in start()
        return consumer

    setattr(thread, "_create_worker_consumer", committed_only)  # noqa: B010 - a patch mypy would refuse
    setattr(thread, "_read_committed", True)  # noqa: B010


def build_app(cfg: Config, kafka: Kafka | None = None) -> tuple[faust.App, FrontierService]:
    """The faust app and its service; the service's own clients (changelog, jobs, restore,
    standby, router, live page) come from ``kafka`` (default: built from the configuration)."""
    t = cfg.topics
    read_committed()
    app = faust.App(
        cfg.frontier.app_id,
        broker=[f"kafka://{server.strip()}" for server in cfg.kafka.bootstrap.split(",")],
        broker_credentials=faust_credentials(cfg.kafka.extra),
        store="memory://",
        topic_partitions=t.partitions,
        topic_replication_factor=t.replication,
        datadir=f"{cfg.frontier.state_dir}/faust",
        web_enabled=False,  # the frontier serves its own page and metrics (frontier.observability.web)
        broker_session_timeout=GROUP_SESSION,
        broker_heartbeat_interval=GROUP_HEARTBEAT,
        broker_commit_every=1000,
        broker_commit_interval=1.0,
        stream_buffer_maxsize=8,  # records are batches of up to 2000 URLs: 8 per partition is plenty
        # A rebalance does not wait for unacknowledged events: an event is acked only once the
        # transaction holding its changes committed, and one not acked is delivered again to the
        # partition's owner (applied once: the partition records what it applied). Waiting stalled
        # the whole group on events of partitions this instance no longer serves (measured).
        stream_wait_empty=False,
        producer_linger_ms=2,
    )
    service = FrontierService(cfg, kafka=kafka)

    def consume(topic: str, name: str, schema: type[Any], handle: Any) -> None:
        """An agent on ``topic``: decode and validate each record, hand it to ``handle``; a record
        that does not decode goes to crawl.rejected (acked, never retried forever)."""
        channel = app.topic(topic, key_serializer="raw", value_serializer="raw", partitions=t.partitions)

        async def agent(stream: Any) -> None:
            async for event in stream.noack().events():
                try:
                    value = decode(event.value, schema)
                    if isinstance(value, ControlCommand):
                        value.validate()
                except (SchemaError, ValueError) as exc:
                    await service.dead_letter(topic, event.message.partition, event.message.offset, event.value, exc)
                    event.ack()
                    continue
                await handle(event.message.partition, value, event)

        app.agent(channel, name=name)(agent)

    consume(t.bydomain, "ingest", EncodedUrlBatch, service.handle_urls)
    consume(t.feedback, "feedback", FeedbackBatch, service.handle_feedback)
    consume(t.control, "control", ControlCommand, service.handle_control)

    async def assigned(sender: Any, *args: Any, signal: Any, **kwargs: Any) -> None:
        service.lifecycle.on_assigned({tp.partition for tp in args[0] if tp.topic == t.bydomain})

    async def revoked(sender: Any, *args: Any, signal: Any, **kwargs: Any) -> None:
        await service.lifecycle.on_revoked({tp.partition for tp in args[0] if tp.topic == t.bydomain})

    # cast: mode's SignalHandlerT alias is declared so that no coroutine function matches it
    app.on_partitions_assigned.connect(cast(Any, assigned))
    app.on_partitions_revoked.connect(cast(Any, revoked))

    router = (
        Router(service.kafka, t, group=router_group(cfg), ip_scope=cfg.frontier.ip_scope)
        if cfg.frontier.embedded_router
        else None
    )
    service.router = router

    async def run() -> None:
        if router is not None:
            router.start()
        service.directory = CrawlDirectory(service.kafka, t, cfg.frontier.app_id)
        service.directory.start()
        runner = await start_web(cfg, service) if cfg.frontier.web_port else None
        probe = LagProbe(service.kafka, cfg.frontier.app_id)
        loop_task = asyncio.ensure_future(service.dispatch_loop())
        last_lag = 0.0
        try:
            while not loop_task.done():
                if router is not None and router.error is not None:
                    raise RuntimeError(f"router failed: {router.error}")
                if time.monotonic() - last_lag > LAG_INTERVAL:
                    last_lag = time.monotonic()
                    owned = sorted(service.partitions.served())
                    for role, topic in (("bydomain", t.bydomain), ("feedback", t.feedback), ("control", t.control)):
                        try:
                            value = await asyncio.to_thread(probe.measure, topic, owned)
                        except Exception as exc:  # noqa: BLE001 - a metric must never stop the frontier
                            log.warning("consumer lag of %s not measured: %s", topic, exc)
                            continue
                        service.metrics.lag.labels(role).set(value)
                await asyncio.sleep(0.5)
            loop_task.result()
        finally:
            await asyncio.to_thread(probe.close)
            if runner is not None:
                await runner.cleanup()

    async def shutdown(sender: Any, *args: Any, signal: Any, **kwargs: Any) -> None:
        if router is not None:
            await asyncio.to_thread(router.stop)
        await service.close()

    app.task(run)
    app.on_before_shutdown.connect(cast(Any, shutdown))

    return app, service


async def start_web(cfg: Config, service: FrontierService) -> web.AppRunner:
    """The live page, JSON API and /metrics on ``frontier.web_bind:web_port`` (never off
    loopback without ``frontier.web_token``: ConfigError)."""
    check_exposure(cfg.frontier)
    feed = StatusFeed(service.kafka, cfg.topics.status)
    feed.start()
    app = build_web(feed, service.reporting, cfg.frontier.web_token)
    app.on_cleanup.append(lambda _app: asyncio.to_thread(feed.stop))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, cfg.frontier.web_bind, cfg.frontier.web_port).start()
    log.info("live page on http://%s:%d/ (metrics: /metrics)", cfg.frontier.web_bind, cfg.frontier.web_port)
    return runner


def run_frontier(cfg: Config, loglevel: str = "info", kafka: Kafka | None = None) -> None:
    """Run a frontier process until SIGINT/SIGTERM (its own clients from ``kafka``, see :func:`build_app`)."""
    lock_state_dir(cfg.frontier.state_dir, cfg.frontier.app_id)  # a second instance here: ConfigError, one line
    Path(cfg.frontier.state_dir, "faust").mkdir(parents=True, exist_ok=True)
    app, _ = build_app(cfg, kafka)
    tune_collector(GC_YOUNG)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()

"""A fetch worker process: a confluent-kafka consumer-group member on ``crawl.jobs``.

For each job: hand it back unfetched if it is already past ``expires_at``; otherwise wait for
``not_before`` and for the host's ``min_gap`` since this worker's last send to that host (jobs
are keyed by host, so one worker sees all jobs of a host at a time: a backlog can never turn
into a burst), fetch, then publish one :class:`Page` and one :class:`Feedback` (and, when asked,
same-site links and redirect targets as new submissions). The job's offset is committed only
after everything it produced is acknowledged. Any number of workers may run at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import aiohttp
from confluent_kafka import Consumer, Message, TopicPartition
from prometheus_client import start_http_server

from frontier.config import Config
from frontier.kafka_io import AsyncProducer, consumer_conf, coordinates, producer_conf
from frontier.metrics import WorkerMetrics, lag
from frontier.robots import MAX_ROBOTS_BYTES
from topics.partitioning import partition_for
from topics.schemas import (
    Feedback,
    FeedbackBatch,
    Job,
    Page,
    Rejected,
    SchemaError,
    Submission,
    decode,
    encode,
)
from workers.fetch import FetchResult, fetch, is_retryable, send_tracer, throttle_headers
from workers.links import same_site_links
from workers.safety import AddressPolicy, SafeConnector

log = logging.getLogger("worker")

FEEDBACK_LINGER = 0.02  # seconds a feedback batch may wait for company


class OffsetTracker:
    """Per partition: which consumed offsets are still being worked on; what is safe to commit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[str, int], set[int]] = defaultdict(set)
        self._next: dict[tuple[str, int], int] = {}

    def started(self, topic: str, partition: int, offset: int) -> None:
        with self._lock:
            self._open[(topic, partition)].add(offset)
            self._next[(topic, partition)] = max(self._next.get((topic, partition), 0), offset + 1)

    def finished(self, topic: str, partition: int, offset: int) -> None:
        with self._lock:
            self._open[(topic, partition)].discard(offset)

    def open_count(self, tps: set[tuple[str, int]] | None = None) -> int:
        with self._lock:
            return sum(len(v) for k, v in self._open.items() if tps is None or k in tps)

    def commit_points(self, tps: set[tuple[str, int]] | None = None) -> list[TopicPartition]:
        with self._lock:
            out = []
            for key, nxt in self._next.items():
                if tps is not None and key not in tps:
                    continue
                pending = self._open.get(key)
                out.append(TopicPartition(key[0], key[1], min(pending) if pending else nxt))
            return out

    def forget(self, tps: set[tuple[str, int]]) -> None:
        with self._lock:
            for key in tps:
                self._open.pop(key, None)
                self._next.pop(key, None)


def _set_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


@dataclass
class _HostGate:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_sent: float = 0.0
    idle: asyncio.Event = field(default_factory=_set_event)  # no request of this host is between slot and send


class FetchWorker:
    def __init__(self, cfg: Config, concurrency: int | None = None, name: str | None = None) -> None:
        self.cfg = cfg
        self.topics = cfg.topics
        self.concurrency = concurrency or cfg.worker.concurrency
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.client = cfg.kafka.client_conf()
        self.tracker = OffsetTracker()
        self._gates: dict[str, _HostGate] = defaultdict(_HostGate)
        self._feedback: dict[int, list[tuple[Feedback, asyncio.Future[None]]]] = defaultdict(list)
        self._feedback_task: asyncio.Task[None] | None = None
        self._partitions = cfg.topics.partitions
        self.fetched = 0
        self.returned = 0
        self.metrics = WorkerMetrics()
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.producer = AsyncProducer(producer_conf(self.client), loop)
        consumer = Consumer(
            consumer_conf(
                self.client,
                f"{self.cfg.frontier.app_id}-workers",
                **{
                    "partition.assignment.strategy": "cooperative-sticky",
                    "max.poll.interval.ms": 300000,
                    "session.timeout.ms": 10000,  # a dead worker's partitions move on after 10 s
                },
            )
        )
        if self.cfg.worker.metrics_port:
            start_http_server(self.cfg.worker.metrics_port, self.cfg.worker.metrics_bind, self.metrics.registry)
            log.info("metrics on http://%s:%d/metrics", self.cfg.worker.metrics_bind, self.cfg.worker.metrics_port)
        sem = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task[None]] = set()
        policy = AddressPolicy(self.cfg.worker.allow_networks, self.cfg.worker.block_private)
        connector = SafeConnector(policy, limit=self.concurrency * 2, limit_per_host=0, ttl_dns_cache=300)
        headers = {"User-Agent": self.cfg.worker.user_agent}

        def on_revoke(c: Consumer, parts: list[TopicPartition]) -> None:
            # Finish what we started on these partitions, commit it, then let them go.
            tps = {(tp.topic, tp.partition) for tp in parts}
            deadline = time.monotonic() + self.cfg.frontier.fetch_timeout + 30
            while self.tracker.open_count(tps) and time.monotonic() < deadline:
                time.sleep(0.05)
            points = self.tracker.commit_points(tps)
            if points:
                try:
                    c.commit(offsets=points, asynchronous=False)
                except Exception as exc:  # noqa: BLE001 - the new owner re-fetches: at least once
                    log.warning("commit on revoke failed: %s", exc)
            self.tracker.forget(tps)

        consumer.subscribe([self.topics.jobs], on_revoke=on_revoke, on_lost=on_revoke)
        last_commit = last_lag = time.monotonic()
        try:
            async with aiohttp.ClientSession(connector=connector, headers=headers,
                                             trace_configs=[send_tracer()]) as session:  # fmt: skip
                # aiohttp silently re-sends a request when a reused keep-alive connection was
                # closed: a second request the frontier never scheduled. Only the frontier may
                # decide to retry (no public switch; tests/integration/test_hostile.py guards it).
                session._retry_connection = False
                while not self._stop.is_set():
                    if len(tasks) >= self.concurrency * 4:
                        await asyncio.wait(tasks, timeout=0.1, return_when=asyncio.FIRST_COMPLETED)
                        msgs: list[Message] = []
                    else:
                        want = self.concurrency * 4 - len(tasks)
                        msgs = await asyncio.to_thread(_take, consumer, want)
                    for msg in msgs:
                        if msg.error() is not None:
                            log.warning("consume error: %s", msg.error())
                            continue
                        self.tracker.started(*coordinates(msg))
                        task = asyncio.ensure_future(self._handle(session, sem, msg))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
                    if time.monotonic() - last_commit > 1.0:
                        last_commit = time.monotonic()
                        self._commit(consumer)
                    if self.cfg.worker.metrics_port and time.monotonic() - last_lag > 2.0:
                        last_lag = time.monotonic()
                        try:
                            self.metrics.lag.set(await asyncio.to_thread(lag, consumer, consumer.assignment()))
                        except Exception as exc:  # noqa: BLE001 - a metric must never stop the worker
                            log.debug("consumer lag not measured: %s", exc)
                if tasks:
                    await asyncio.wait(tasks, timeout=self.cfg.frontier.fetch_timeout + 5)
        finally:
            self._commit(consumer)
            await asyncio.to_thread(self.producer.close)
            await asyncio.to_thread(consumer.close)

    def _commit(self, consumer: Consumer) -> None:
        points = self.tracker.commit_points()
        if points:
            try:
                consumer.commit(offsets=points, asynchronous=True)
            except Exception as exc:  # noqa: BLE001 - retried at the next commit
                log.debug("commit failed: %s", exc)

    async def _handle(self, session: aiohttp.ClientSession, sem: asyncio.Semaphore, msg: Message) -> None:
        try:
            try:
                job = decode(msg.value() or b"", Job)
            except SchemaError as exc:
                topic, partition, offset = coordinates(msg)
                log.error("undecodable job at %s[%d]@%d: %s", topic, partition, offset, exc)
                rejected = Rejected(reason=f"undecodable: {exc}", original=msg.value() or b"", topic=topic,
                                    partition=partition, offset=offset)  # fmt: skip
                await self.producer.send(self.topics.rejected, encode(rejected))
                return
            await self._process(session, sem, job)
        except Exception:
            log.exception("job at %s[%d]@%d failed; it will come back after its lease", msg.topic(),
                          msg.partition(), msg.offset())  # fmt: skip
        finally:
            self.tracker.finished(*coordinates(msg))

    async def _process(self, session: aiohttp.ClientSession, sem: asyncio.Semaphore, job: Job) -> None:
        item = job.item
        if time.time() > job.expires_at:
            self.returned += 1
            self.metrics.observe(job.kind, "expired", 0, 0.0)
            await self._send_feedback(Feedback(lease=job.lease, host=item.host, domain=item.domain, url=item.url,
                                               outcome="expired"))  # fmt: skip
            return
        m = self.metrics
        m.held.inc()
        async with sem:
            gate = self._gates[item.host]
            async with gate.lock:
                # The host's previous request must really have gone out (its headers sent, or it
                # failed) before the next one is timed from it: a stalled event loop or a slow
                # connect would otherwise shrink the gap the server sees.
                await gate.idle.wait()
                # asyncio may wake a timer up to a clock tick early: re-check until the slot has come
                while (wait := max(job.not_before, gate.last_sent + job.min_gap) - time.time()) > 0:
                    await asyncio.sleep(wait)
                gate.last_sent = time.time()
                gate.idle.clear()

            def sent(at: float) -> None:
                gate.last_sent = max(gate.last_sent, at)
                gate.idle.set()

            m.held.dec()
            m.inflight.inc()
            try:
                if job.kind == "robots":
                    result = await fetch(session, item.url, job.timeout, MAX_ROBOTS_BYTES, max_redirects=5,
                                         on_sent=sent)  # fmt: skip
                else:
                    result = await fetch(session, item.url, job.timeout, self.cfg.worker.max_body_bytes, on_sent=sent)
            finally:
                gate.idle.set()
                m.inflight.dec()
        self.fetched += 1
        m.observe(job.kind, "error" if result.error else "fetched", result.status, result.latency)
        if job.kind == "robots":
            await self._send_feedback(self._feedback_of(job, result, "error" if result.error else "fetched",
                                                        body=result.body))  # fmt: skip
            return
        retry = is_retryable(result) and job.retries_left > 0
        waits: list[asyncio.Future[Any]] = []
        if not retry:
            waits.append(self.producer.send(self.topics.pages, encode(self._page(job, result)), key=item.url.encode()))
            waits.extend(self._follow_ups(job, result))
        outcome = "retry" if retry else ("error" if result.error else "fetched")
        waits.append(asyncio.ensure_future(self._send_feedback(self._feedback_of(job, result, outcome))))
        await asyncio.gather(*waits)

    @staticmethod
    def _feedback_of(job: Job, r: FetchResult, outcome: str, body: bytes = b"") -> Feedback:
        item = job.item
        return Feedback(lease=job.lease, host=item.host, domain=item.domain, url=item.url, outcome=outcome,
                        status=r.status, latency=r.latency, sent_at=r.sent_at, error=r.error,
                        headers=throttle_headers(r.headers), body=body)  # fmt: skip

    def _page(self, job: Job, r: FetchResult) -> Page:
        return Page(
            url=job.item.url, status=r.status, outcome="error" if r.error else "fetched", error=r.error,
            headers=r.headers, body=r.body, truncated=r.truncated, content_type=r.content_type,
            fetched_at=r.sent_at, latency=r.latency, meta=job.item.meta, worker=self.name,
        )  # fmt: skip

    def _follow_ups(self, job: Job, r: FetchResult) -> list[asyncio.Future[Message]]:
        item = job.item
        subs: list[Submission] = []
        location = r.headers.get("location")
        if 300 <= r.status < 400 and location and item.redirects < self.cfg.worker.max_redirects:
            subs.append(Submission(url=urljoin(item.url, location), priority=item.priority, meta=item.meta,
                                   follow=item.follow, scopes=item.scopes, redirects=item.redirects + 1))  # fmt: skip
        if item.follow > 0 and r.status == 200 and "html" in r.content_type:
            text = r.body.decode("utf-8", errors="replace")
            for link in same_site_links(item.url, text):
                subs.append(Submission(url=link, priority=item.priority, meta=item.meta, follow=item.follow - 1,
                                       scopes=item.scopes))  # fmt: skip
        return [self.producer.send(self.topics.urls, encode(s)) for s in subs]

    async def _send_feedback(self, fb: Feedback) -> None:
        """Queue ``fb`` into its partition's batch; return once the batch is acknowledged."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._feedback[partition_for(fb.domain, self._partitions)].append((fb, fut))
        if self._feedback_task is None or self._feedback_task.done():
            self._feedback_task = asyncio.ensure_future(self._flush_feedback())
        await fut

    async def _flush_feedback(self) -> None:
        await asyncio.sleep(FEEDBACK_LINGER)
        batches, self._feedback = self._feedback, defaultdict(list)
        for partition, entries in batches.items():
            record = encode(FeedbackBatch(items=[fb for fb, _ in entries]))
            delivery = self.producer.send(self.topics.feedback, record, partition=partition)

            def settle(
                d: asyncio.Future[Message], entries: list[tuple[Feedback, asyncio.Future[None]]] = entries
            ) -> None:
                for _, f in entries:
                    if f.done():
                        continue
                    if d.exception() is not None:
                        f.set_exception(d.exception())  # type: ignore[arg-type]
                    else:
                        f.set_result(None)

            delivery.add_done_callback(settle)


def _take(consumer: Consumer, most: int) -> list[Message]:
    """Wait up to 0.1 s for the first job, then take whatever else is already there without waiting.

    (``consume(n, timeout)`` alone would hold a lone job until ``n`` arrive or the timeout ends.)
    """
    first = consumer.poll(0.1)
    if first is None:
        return []
    return [first, *consumer.consume(most - 1, timeout=0)] if most > 1 else [first]


def run_worker(cfg: Config, concurrency: int | None = None) -> None:
    """Run a worker until SIGINT/SIGTERM."""
    import signal

    worker = FetchWorker(cfg, concurrency)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, worker.stop)
        await worker.run()

    asyncio.run(main())

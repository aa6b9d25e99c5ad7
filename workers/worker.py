"""A fetch worker process: a confluent-kafka consumer-group member on ``crawl.jobs``.

For each job: wait for a worker slot, ``not_before`` and the host's ``min_gap`` since this
worker's last send to that host (jobs are keyed by host, so one worker sees all jobs of a host
at a time: a backlog can never turn into a burst), fetch, publish one :class:`Page` (and, when
asked, same-site links and redirect targets as new submissions), and once those are
acknowledged, one :class:`Feedback`. A job whose send time would fall after its ``expires_at``
(checked when it arrives and again right before the send) is handed back unfetched.

The feedback closes the lease, so it never claims more than what is on Kafka: a page that
cannot be published becomes a small error page and an "error" result; when not even that can
be published, no feedback is sent and the lease expires (the job comes back). Any exception
between the fetch and the feedback ends in an "error" result, never in silence. The job's
offset is committed only after everything it produced is acknowledged. Any number of workers
may run at once.

Over ~300 lines on purpose, for now: this is the one loop that the worker API of issue 14 takes
apart (taking leased jobs and holding them to their slot, the fetch, publishing and committing);
its per-host gate is :mod:`workers.gates` and its offset tracking :mod:`workers.offsets`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

import aiohttp
import msgspec
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from prometheus_client import start_http_server

from frontier.config import Config
from frontier.core.headers import gate_seconds
from frontier.core.policy import with_margin
from frontier.core.robots import MAX_ROBOTS_BYTES, agent_token
from frontier.kafka import AsyncProducer, Kafka, coordinates
from frontier.observability.metrics import WorkerMetrics, lag
from topics.partitioning import partition_of
from topics.schemas import (
    NETWORK_ERRORS,
    Feedback,
    FeedbackBatch,
    Job,
    Page,
    Rejected,
    SchemaError,
    UrlItem,
    decode,
    encode,
)
from workers.fetch import FetchResult, fetch, is_retryable, send_tracer, throttle_headers
from workers.followups import follow_ups, page_headers
from workers.gates import _HostGate
from workers.offsets import OffsetTracker
from workers.safety import AddressPolicy, SafeConnector

log = logging.getLogger("worker")

FEEDBACK_LINGER = 0.02  # seconds a feedback batch may wait for company
GATE_IDLE = 600.0  # a host's gate is forgotten after this long without a request (or twice the fetch timeout)
GATE_PRUNE_EVERY = 60.0  # seconds between two sweeps


class FetchWorker:
    def __init__(
        self, cfg: Config, concurrency: int | None = None, name: str | None = None, kafka: Kafka | None = None
    ) -> None:
        self.cfg = cfg
        self.topics = cfg.topics
        self.concurrency = concurrency or cfg.worker.concurrency
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.agent = agent_token(cfg.worker.user_agent)
        self.kafka = kafka if kafka is not None else Kafka(cfg.kafka.client_conf())  # every client comes from it
        self.tracker = OffsetTracker()
        self.producer: AsyncProducer  # set by run()
        # how long a revoke waits for the jobs of the partitions it takes away; then they are cancelled
        self.revoke_grace = cfg.frontier.fetch_timeout + 30
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: dict[tuple[str, int], set[asyncio.Task[None]]] = defaultdict(set)  # by (topic, partition)
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
        self._loop = loop = asyncio.get_running_loop()
        self.producer = self.kafka.async_producer(loop)
        consumer = self.kafka.consumer(
            f"{self.cfg.frontier.app_id}-workers",
            **{
                "partition.assignment.strategy": "cooperative-sticky",
                "max.poll.interval.ms": 300000,
                "session.timeout.ms": 10000,  # a dead worker's partitions move on after 10 s
            },
        )
        if self.cfg.worker.metrics_port:
            start_http_server(self.cfg.worker.metrics_port, self.cfg.worker.metrics_bind, self.metrics.registry)
            log.info("metrics on http://%s:%d/metrics", self.cfg.worker.metrics_bind, self.cfg.worker.metrics_port)
        sem = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task[None]] = set()
        policy = AddressPolicy(self.cfg.worker.allow_networks, self.cfg.worker.block_private)
        connector = SafeConnector(policy, limit=self.concurrency * 2, limit_per_host=0, ttl_dns_cache=300)
        headers = {"User-Agent": self.cfg.worker.user_agent}
        consumer.subscribe([self.topics.jobs], on_revoke=self._on_revoke, on_lost=self._on_revoke)
        last_commit = last_lag = last_prune = time.monotonic()
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
                        task = self._start(session, sem, msg)
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
                    if time.monotonic() - last_commit > 1.0:
                        last_commit = time.monotonic()
                        self._commit(consumer)
                    if time.monotonic() - last_prune > GATE_PRUNE_EVERY:
                        last_prune = time.monotonic()
                        self.prune_gates(time.time())
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

    def _start(self, session: aiohttp.ClientSession, sem: asyncio.Semaphore, msg: Message) -> asyncio.Task[None]:
        """Handle one consumed job in a task, tracked by its partition (a revoke may cancel it)."""
        topic, partition, offset = coordinates(msg)
        self.tracker.started(topic, partition, offset)
        task = asyncio.ensure_future(self._handle(session, sem, msg))
        running = self._running[(topic, partition)]
        running.add(task)
        task.add_done_callback(running.discard)
        return task

    def _on_revoke(self, c: Consumer, parts: list[TopicPartition]) -> None:
        """On the consumer's thread: finish what we started on these partitions (up to
        ``revoke_grace``), commit it, then let them go. Jobs still running then are cancelled:
        once the partition is given up, they must not send requests any more."""
        tps = {(tp.topic, tp.partition) for tp in parts}
        deadline = time.monotonic() + self.revoke_grace
        while self.tracker.open_count(tps) and time.monotonic() < deadline:
            time.sleep(0.05)
        points = self.tracker.commit_points(tps)  # before cancelling: the new owner gets those jobs again
        if self.tracker.open_count(tps):
            self._cancel(tps)
        if points:
            try:
                c.commit(offsets=points, asynchronous=False)
            except Exception as exc:  # noqa: BLE001 - the new owner re-fetches: at least once
                log.warning("commit on revoke failed: %s", exc)
        self.tracker.forget(tps)

    def _cancel(self, tps: set[tuple[str, int]]) -> None:
        """Cancel the running jobs of ``tps`` on the event loop; return once that is done."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        cancelled: list[int] = []
        requested = threading.Event()

        def cancel() -> None:
            for tp in tps:
                for task in self._running.pop(tp, set()):
                    cancelled.append(int(task.cancel()))
            requested.set()

        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            cancel()
        else:
            loop.call_soon_threadsafe(cancel)
            if not requested.wait(10):
                log.error("the event loop did not cancel the jobs of revoked partitions %s", sorted(tps))
                return
        log.warning("cancelled %d jobs of revoked partitions %s, still running after %.0f s", sum(cancelled),
                    sorted(tps), self.revoke_grace)  # fmt: skip

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
                if problem := await self._deliver(self.topics.rejected, rejected):
                    minimal = rejected.minimal(f"{rejected.reason} (original not kept: {problem})"[:1000])
                    if again := await self._deliver(self.topics.rejected, minimal):
                        raise RuntimeError(f"rejection not published: {again}") from exc
                return
            await self._process(session, sem, job)
        except Exception:
            log.exception("job at %s[%d]@%d failed; it will come back after its lease", msg.topic(),
                          msg.partition(), msg.offset())  # fmt: skip
        finally:
            self.tracker.finished(*coordinates(msg))

    async def _process(self, session: aiohttp.ClientSession, sem: asyncio.Semaphore, job: Job) -> None:
        if time.time() > job.expires_at:
            await self._hand_back(job)
            return
        result = await self._fetch_in_slot(session, sem, job)
        if result is None:  # its send time came after expires_at: the frontier has freed its slot
            await self._hand_back(job)
            return
        self.fetched += 1
        self.metrics.observe(job.kind, "error" if result.error else "fetched", result.status, result.latency)
        await self._conclude(job, result)

    async def _hand_back(self, job: Job) -> None:
        item = job.item
        self.returned += 1
        self.metrics.observe(job.kind, "expired", 0, 0.0)
        await self._send_feedback(Feedback(lease=job.lease, host=item.host, domain=item.domain, ip=item.ip,
                                           url=item.url, outcome="expired"))  # fmt: skip

    async def _fetch_in_slot(
        self, session: aiohttp.ClientSession, sem: asyncio.Semaphore, job: Job
    ) -> FetchResult | None:
        """Wait for a worker slot and the host's slot, then fetch; None (nothing sent) when the
        send would come after ``job.expires_at``."""
        item = job.item
        m = self.metrics
        m.held.inc()
        held = True
        try:
            async with sem:
                gate = self._gates[item.host]
                gate.enter()  # from here until it leaves, the gate is not forgotten (prune_gates)
                try:
                    async with gate.lock:
                        # The host's previous request must really have gone out (its headers sent, or it
                        # failed) before the next one is timed from it: a stalled event loop or a slow
                        # connect would otherwise shrink the gap the server sees.
                        await gate.idle.wait()
                        # asyncio may wake a timer up to a clock tick early: re-check until the slot has come
                        # (a window the host announces meanwhile moves it: the loop reads it again)
                        while (slot := self._slot(job, gate)) > (now := time.time()):
                            if slot > job.expires_at:
                                return None
                            await asyncio.sleep(slot - now)
                        if time.time() > job.expires_at:  # the waits for a worker slot and the host took too long
                            return None
                        gate.last_sent = time.time()
                        gate.idle.clear()

                    def sent(at: float) -> None:
                        gate.last_sent = max(gate.last_sent, at)
                        gate.idle.set()

                    m.held.dec()
                    held = False
                    m.inflight.inc()
                    try:
                        result = await self._fetch(session, job, sent, lambda r: self._closes(gate, job, r))
                        self._answered(gate, result)
                        return result
                    finally:
                        gate.idle.set()
                        m.inflight.dec()
                finally:
                    gate.leave()
        finally:
            if held:
                m.held.dec()

    def prune_gates(self, now: float) -> int:
        """Forget the hosts this worker has not sent to for a while (their gates are idle: nothing
        holds or waits for them, no window is open), so memory does not grow with every host ever
        seen. What the frontier schedules does not depend on them; a forgotten host's next job
        starts a fresh gate. Returns how many were forgotten."""
        idle_for = max(GATE_IDLE, 2 * self.cfg.frontier.fetch_timeout)
        stale = [host for host, g in self._gates.items()
                 if now - max(g.last_sent, g.last_end, g.closed_until) > idle_for
                 and not g.busy()]  # fmt: skip
        for host in stale:
            del self._gates[host]
        return len(stale)

    @staticmethod
    def _slot(job: Job, gate: _HostGate) -> float:
        """The earliest send time of ``job``: its ``not_before``, the host's gap since this worker's
        last send, any window the host announced to this worker, and a server-stated interval
        (Crawl-delay) counted from the end of the host's previous response (§9)."""
        floor = gate.last_end + job.floor if job.floor and gate.last_end else 0.0
        return max(job.not_before, gate.last_sent + job.min_gap, gate.closed_until, floor)

    @staticmethod
    def _answered(gate: _HostGate, result: FetchResult) -> None:
        """The host's answer has ended: server-stated floors count from now. (Any window it
        announced was closed when its headers came in, by :meth:`_closes`.)"""
        now = time.time()
        gate.last_end = max(gate.last_end, now)
        result.done_at = now

    def _closes(self, gate: _HostGate, job: Job, result: FetchResult) -> None:
        """A window the host announced closes it to this worker's held jobs, from the moment its
        headers are in (the body is not waited for: meanwhile another job could be sent)."""
        now = time.time()
        trigger = result.error in NETWORK_ERRORS or result.status in self._backoff_codes(job.item)
        closed = gate_seconds(result.status, result.headers, trigger, now)
        if closed is not None:
            until = now + with_margin(min(closed[0], self.cfg.throttle.for_scope(job.item.host).gate_max))
            if until > gate.closed_until:
                gate.closed_until = until
                log.info("%s: %s, holding its jobs until +%.1fs", job.item.host, closed[1], until - now)

    async def _fetch(
        self,
        session: aiohttp.ClientSession,
        job: Job,
        sent: Callable[[float], None],
        headers: Callable[[FetchResult], None] | None = None,
    ) -> FetchResult:
        sent_at = 0.0

        def on_sent(at: float) -> None:
            nonlocal sent_at
            sent_at = at
            sent(at)

        url = job.item.url
        try:
            if job.kind == "robots":
                # no redirects followed here: the frontier sends each hop as a job of its own, through
                # the host's throttling (RFC 9309 asks for at least five hops; see frontier.partition)
                return await fetch(session, url, job.timeout, MAX_ROBOTS_BYTES, on_sent=on_sent, on_headers=headers)
            return await fetch(session, url, job.timeout, self.cfg.worker.max_body_bytes, on_sent=on_sent,
                               on_headers=headers)  # fmt: skip
        except Exception as exc:  # reported as an error, never silence (a poison URL)
            log.exception("fetch of %s failed unexpectedly", url)
            return FetchResult(sent_at=sent_at or time.time(), error=f"worker:{type(exc).__name__}")

    async def _conclude(self, job: Job, result: FetchResult) -> None:
        """Publish what the fetch produced, then the feedback that closes the lease."""
        page_out = False
        try:
            if job.kind == "robots":
                fb = self._feedback_of(job, result, "error" if result.error else "fetched", body=result.body)
                if 300 <= result.status < 400 and "location" in result.headers:
                    fb.headers["location"] = result.headers["location"][:2048]  # the next hop, for the frontier
                await self._report(fb)
                return
            if is_retryable(result, self._backoff_codes(job.item)) and job.retries_left > 0:
                await self._report(self._feedback_of(job, result, "retry"))
                return
            item = job.item
            subs = follow_ups(item, result, self.cfg.worker.max_redirects, self.agent)
            page, *followed = await asyncio.gather(
                self._deliver(self.topics.pages, self._page(job, result), key=item.url.encode()),
                *(self._deliver(self.topics.urls, s) for s in subs),
            )
            if page:
                await self._fail(job, result, f"page_not_published: {page}")
                return
            page_out = True
            if problems := [p for p in followed if p]:
                log.error("%s: %d of %d follow-ups not published (%s); no feedback: the lease expires and the "
                          "job comes back", item.url, len(problems), len(subs), problems[0])  # fmt: skip
                return
            await self._report(self._feedback_of(job, result, "error" if result.error else "fetched"))
        except Exception as exc:  # any failure here ends in an "error" result, never in silence
            log.exception("job %s (%s) failed after its fetch", job.lease, job.item.url)
            reason = f"worker_error: {type(exc).__name__}"
            if page_out or job.kind == "robots":
                await self._report(self._feedback_of(job, result, "error", error=reason))
            else:
                await self._fail(job, result, reason)

    async def _fail(self, job: Job, r: FetchResult, reason: str) -> None:
        """The job's page could not be published: publish a small error page instead and report an
        error; when not even that goes out, report nothing (the lease expires, the job comes back)."""
        item = job.item
        error_page = Page(url=item.url, status=r.status, outcome="error", error=reason, content_type=r.content_type,
                          fetched_at=r.sent_at, latency=r.latency, meta=item.meta, worker=self.name)  # fmt: skip
        problem = await self._deliver(self.topics.pages, error_page, key=item.url.encode())
        if problem:
            log.error("%s: no page published (%s), not even an error page (%s); no feedback: the lease expires "
                      "and the job comes back", item.url, reason, problem)  # fmt: skip
            return
        await self._report(self._feedback_of(job, r, "error", error=reason))

    async def _deliver(self, topic: str, record: msgspec.Struct, key: bytes | None = None) -> str:
        """Publish ``record``; "" once acknowledged, else why not."""
        try:
            await self.producer.send(topic, encode(record), key=key)
        except Exception as exc:  # noqa: BLE001 - refused (size, authorization, timeout): the caller decides
            log.warning("record for %s not published: %s", topic, _reason(exc))
            return _reason(exc)
        return ""

    async def _report(self, fb: Feedback) -> None:
        """Send ``fb``; if it cannot be delivered, the lease expires and the job comes back."""
        try:
            await self._send_feedback(fb)
        except Exception as exc:  # noqa: BLE001
            log.error("feedback for %s not delivered (%s); its lease will expire", fb.url, _reason(exc))

    def _backoff_codes(self, item: UrlItem) -> frozenset[int]:
        """The statuses the frontier backs off on for this URL's scopes: only those are retried."""
        names = [item.host, item.domain, *item.scopes]
        return frozenset(code for name in names for code in self.cfg.throttle.for_scope(name).backoff.codes)

    @staticmethod
    def _feedback_of(job: Job, r: FetchResult, outcome: str, body: bytes = b"", error: str = "") -> Feedback:
        item = job.item
        return Feedback(lease=job.lease, host=item.host, domain=item.domain, ip=item.ip, url=item.url, outcome=outcome,
                        status=r.status, latency=r.latency, sent_at=r.sent_at, done_at=r.done_at,
                        error=error or r.error, headers=throttle_headers(r.headers), body=body)  # fmt: skip

    def _page(self, job: Job, r: FetchResult) -> Page:
        return Page(
            url=job.item.url, status=r.status, outcome="error" if r.error else "fetched", error=r.error,
            headers=page_headers(job.item.url, r.headers), body=r.body, truncated=r.truncated,
            content_type=r.content_type, fetched_at=r.sent_at, latency=r.latency, meta=job.item.meta,
            worker=self.name,
        )  # fmt: skip

    async def _send_feedback(self, fb: Feedback) -> None:
        """Queue ``fb`` into its partition's batch; return once the batch is acknowledged."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._feedback[partition_of(fb, self._partitions)].append((fb, fut))
        if self._feedback_task is None or self._feedback_task.done():
            self._feedback_task = asyncio.ensure_future(self._flush_feedback())
        await fut

    async def _flush_feedback(self) -> None:
        await asyncio.sleep(FEEDBACK_LINGER)
        batches, self._feedback = self._feedback, defaultdict(list)
        for partition, queued in batches.items():
            for entries in _by_size(queued):
                self._publish_feedback(partition, entries)

    def _publish_feedback(self, partition: int, entries: list[tuple[Feedback, asyncio.Future[None]]]) -> None:
        """One FeedbackBatch record; each waiting sender learns of its delivery."""
        record = encode(FeedbackBatch(items=[fb for fb, _ in entries]))
        delivery = self.producer.send(self.topics.feedback, record, partition=partition)

        def settle(d: asyncio.Future[Message]) -> None:
            for _, f in entries:
                if f.done():
                    continue
                if d.exception() is not None:
                    f.set_exception(d.exception())  # type: ignore[arg-type]
                else:
                    f.set_result(None)

        delivery.add_done_callback(settle)


FEEDBACK_RECORD_BYTES = 4 * 1024 * 1024  # per FeedbackBatch record (crawl.feedback takes 16 MiB)


def _by_size(
    entries: list[tuple[Feedback, asyncio.Future[None]]],
) -> Iterator[list[tuple[Feedback, asyncio.Future[None]]]]:
    """Cut a partition's feedback into records of at most ~4 MiB (robots.txt bodies are up to
    500 KiB each: a burst of them must not make one record the broker refuses)."""
    chunk: list[tuple[Feedback, asyncio.Future[None]]] = []
    size = 0
    for entry in entries:
        cost = len(entry[0].body) + 2048  # the body, base64-encoded, plus the rest of the result
        cost = cost * 4 // 3
        if chunk and size + cost > FEEDBACK_RECORD_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(entry)
        size += cost
    if chunk:
        yield chunk


def _reason(exc: BaseException) -> str:
    """A short reason for a failed publish: the Kafka error's name and text, else the exception."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    text = f"{err.name()}: {err.str()}" if isinstance(err, KafkaError) else f"{type(exc).__name__}: {exc}"
    return text[:300]


def _take(consumer: Consumer, most: int) -> list[Message]:
    """Wait up to 0.1 s for the first job, then take whatever else is already there without waiting.

    (``consume(n, timeout)`` alone would hold a lone job until ``n`` arrive or the timeout ends.)
    """
    first = consumer.poll(0.1)
    if first is None:
        return []
    return [first, *consumer.consume(most - 1, timeout=0)] if most > 1 else [first]


def run_worker(cfg: Config, concurrency: int | None = None, kafka: Kafka | None = None) -> None:
    """Run a worker until SIGINT/SIGTERM (its clients from ``kafka``, default: built from ``cfg``)."""
    import signal

    worker = FetchWorker(cfg, concurrency, kafka=kafka)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, worker.stop)
        await worker.run()

    asyncio.run(main())

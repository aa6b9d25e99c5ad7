"""The worker API: :class:`Jobs` owns everything between Kafka and a fetch, so that any code can
take directions from the frontier and stay polite (docs/WORKERS.md; the wire protocol it keeps is
docs/PROTOCOL.md).

It consumes leased jobs (``crawl.jobs``, one consumer group: start more processes to share the
work), holds each until it may be sent (``not_before``; this worker's gap since its previous send
to the host, ``min_gap``; a window the host announced; a server-stated floor from the end of the
host's previous response) and hands it over as a :class:`~workers.leased.LeasedJob`; what user
code reports becomes the page (and its follow-ups) on ``crawl.pages``, then the feedback on
``crawl.feedback``, and only once both are acknowledged is the job's offset committed. A job whose
slot would come after its ``expires_at`` is handed back unfetched. Jobs of kinds the user code
does not take (robots.txt, by default) are fetched here by the built-in fetcher.

Two shapes: ``async with Jobs(cfg) as jobs: async for job in jobs: ...`` (pull), and
``await Jobs(cfg).serve(handle)`` (each job to ``handle`` in a task of its own); the blocking
shapes for threads and task queues are :mod:`workers.blocking`.

Over ~300 lines on purpose: the hold, the report and the consume loop share the per-host gates,
the slots and the offsets, and the order between them is the protocol; split, each part would
need the others' internals.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition
from prometheus_client import start_http_server

from frontier.config import Config
from frontier.core.headers import gate_seconds
from frontier.core.policy import with_margin
from frontier.core.robots import MAX_ROBOTS_BYTES, agent_token
from frontier.kafka import Kafka, coordinates
from frontier.observability.metrics import WorkerMetrics, lag
from topics.schemas import NETWORK_ERRORS, SKIPPED_VERSION, Feedback, Job, Page, Rejected, SchemaError, decode
from workers.addresses import AddressCheck
from workers.fetch import FetchResult, is_retryable, throttle_headers
from workers.followups import follow_ups, page_headers
from workers.gates import _HostGate
from workers.leased import AlreadyReported, LeasedJob, Outcome
from workers.offsets import OffsetTracker
from workers.publishing import Publisher

log = logging.getLogger("worker")

GATE_IDLE = 600.0  # a host's gate is forgotten after this long without a request (or twice the fetch timeout)
GATE_PRUNE_EVERY = 60.0  # seconds between two sweeps
Handler = Callable[[LeasedJob], Awaitable[Outcome | None]]
InternalFetcher = Callable[[LeasedJob], Awaitable[Outcome]]


class Jobs:
    """Leased jobs from the frontier, each handed over when it may be sent.

    ``kinds``: the job kinds user code takes (others are fetched here with ``internal``, default
    the built-in fetcher); ``check_addresses``: resolve each job's host and decline it (error
    ``blocked_address``) when it resolves only to addresses the worker may not reach
    (``worker.allow_networks`` / ``block_private``); a fetcher that connects through
    :class:`~workers.safety.SafeConnector` checks at connect time and may turn this off.
    """

    def __init__(
        self,
        cfg: Config,
        *,
        concurrency: int | None = None,
        name: str | None = None,
        kafka: Kafka | None = None,
        kinds: Iterable[str] = ("page",),
        check_addresses: bool = True,
        internal: InternalFetcher | None = None,
    ) -> None:
        self.cfg = cfg
        self.topics = cfg.topics
        self.concurrency = concurrency or cfg.worker.concurrency
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.agent = agent_token(cfg.worker.user_agent)
        self.kafka = kafka if kafka is not None else Kafka(cfg.kafka.client_conf())  # every client comes from it
        self.kinds = frozenset(kinds)
        self.addresses = AddressCheck(cfg.worker.allow_networks, cfg.worker.block_private) if check_addresses else None
        self.internal = internal
        self.handler: Handler | None = None
        self.tracker = OffsetTracker()
        self.gates: dict[str, _HostGate] = defaultdict(_HostGate)
        self.metrics = WorkerMetrics()
        self.publisher: Publisher  # set by start() (tests set it directly)
        # how long a revoke waits for the jobs of the partitions it takes away; then they are cancelled
        self.revoke_grace = cfg.frontier.fetch_timeout + 30
        self.fetched = self.returned = self.skipped = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: asyncio.Semaphore | None = None
        self._ready: asyncio.Queue[LeasedJob] | None = None
        self._running: dict[tuple[str, int], set[asyncio.Task[None]]] = defaultdict(set)  # by (topic, partition)
        self._holding: set[asyncio.Task[None]] = set()  # tasks waiting for a job's slot
        self._entered: set[LeasedJob] = set()  # jobs holding a slot and their host's gate
        self._timers: dict[LeasedJob, asyncio.TimerHandle] = {}  # handed over: given up at expires_at + timeout
        self._stop = threading.Event()
        self._closing = False
        self._poller: asyncio.Task[None] | None = None
        self._consumer: Consumer | None = None
        self._builtin: Any = None  # the built-in fetcher, when internal kinds needed it

    # -- life ----------------------------------------------------------------------------------------
    async def __aenter__(self) -> Jobs:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def stop(self) -> None:
        """Stop taking jobs (thread-safe; also from a signal handler); ``close()`` finishes."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    async def start(self) -> None:
        self._bind()
        self.publisher = Publisher(self.kafka.async_producer(self._loop), self.topics)
        consumer = self._consumer = self.kafka.consumer(
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
        consumer.subscribe([self.topics.jobs], on_revoke=self._on_revoke, on_lost=self._on_revoke)
        self._poller = asyncio.ensure_future(self._consume(consumer))

    def _bind(self) -> None:
        """Take the running event loop (tests that call :meth:`handle` directly use this alone)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._slots = asyncio.Semaphore(self.concurrency)
            self._ready = asyncio.Queue()

    async def close(self) -> None:
        """Stop; hand back the jobs still waiting for their slot or to be taken; give those in user
        code's hands up to the fetch timeout; commit; close the clients."""
        self.stop()
        self._closing = True
        if self._poller is not None:
            with contextlib.suppress(Exception):
                await self._poller
        for task in list(self._holding):
            task.cancel()  # handed back (see handle): nothing was sent
        while self._ready is not None and not self._ready.empty():
            await self.release(self._ready.get_nowait())
        running = {t for ts in self._running.values() for t in ts}
        deadline = time.monotonic() + self.cfg.frontier.fetch_timeout + 5
        while (running or self._timers) and time.monotonic() < deadline:
            running = {t for t in running if not t.done()}
            await asyncio.sleep(0.05)
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            self._commit(consumer)
            await asyncio.to_thread(self.publisher.producer.close)
            await asyncio.to_thread(consumer.close)
        if self._builtin is not None:
            await self._builtin.close()

    async def serve(self, handler: Handler) -> None:
        """The callback shape, until :meth:`stop`: each job goes to ``handler`` in a task of its own
        (at most ``concurrency`` at once). A returned outcome is reported; an exception is reported
        as an error (``worker:<ExceptionName>``); a job left without a report is released."""
        self.handler = handler
        async with self:
            while not self._stop.is_set() and self._poller is not None and not self._poller.done():
                await asyncio.sleep(0.1)

    # -- the pull shape ------------------------------------------------------------------------------
    def __aiter__(self) -> Jobs:
        return self

    async def __anext__(self) -> LeasedJob:
        job = await self.get()
        if job is None:
            raise StopAsyncIteration
        return job

    async def get(self, timeout: float | None = None) -> LeasedJob | None:
        """The next job once it may be sent; None after ``timeout`` seconds without one (None:
        wait as long as it takes) or once the worker stops."""
        ready = self._ready
        assert ready is not None, "use `async with Jobs(...) as jobs`"
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if ready.empty():
                if self._poller is not None and self._poller.done() and self._poller.exception() is not None:
                    raise RuntimeError("the worker's consumer failed") from self._poller.exception()
                if self._stop.is_set():
                    return None
            wait = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
            if wait <= 0:
                return None
            try:
                job = await asyncio.wait_for(ready.get(), wait)
            except TimeoutError:
                continue
            if time.time() > job.expires_at:  # taken too late: the frontier has freed its slot
                await self.release(job)
                continue
            return job

    # -- one job, start to end -----------------------------------------------------------------------
    def _start(self, msg: Message) -> asyncio.Task[None]:
        """Handle one consumed job in a task, tracked by its partition (a revoke may cancel it)."""
        topic, partition, offset = coordinates(msg)
        self.tracker.started(topic, partition, offset)
        task = asyncio.ensure_future(self.handle(msg))
        running = self._running[(topic, partition)]
        running.add(task)
        task.add_done_callback(running.discard)
        return task

    async def handle(self, msg: Message) -> None:
        """One consumed job: decode it, hold it until its slot, hand it over (to the handler, the
        ``async for`` loop, or the internal fetcher for kinds user code does not take)."""
        self._bind()
        coords = coordinates(msg)
        try:
            job = decode(msg.value() or b"", Job)
        except SchemaError as exc:
            await self._reject(msg, exc)
            self.tracker.finished(*coords)
            return
        leased = LeasedJob(self, job, coords)
        task = asyncio.current_task()
        try:
            if task is not None:
                self._holding.add(task)
            try:
                handed = await self._hold(leased)
            finally:
                if task is not None:
                    self._holding.discard(task)
            if not handed:
                return
            if job.kind not in self.kinds:
                await self.finish(leased, await self._internal_fetch(leased))
            elif self.handler is not None:
                await self._run_handler(leased)
            else:
                assert self._ready is not None
                self._ready.put_nowait(leased)
        except asyncio.CancelledError:
            if not leased.reported and self._closing and leased not in self._timers:
                await self.release(leased)  # shutting down before it was handed over: back at once
                return
            self._done(leased)  # a revoke: the partition's new owner gets it again
            raise
        except Exception:
            log.exception("job %s (%s) failed; it will come back after its lease", job.lease, job.item.url)
            self._done(leased)

    async def _hold(self, leased: LeasedJob) -> bool:
        """Wait for a slot and the host's send time; True once it is handed over (this worker's
        clock says it may be sent), False when it was handed back or declined instead."""
        job = leased.job
        if time.time() > job.expires_at:
            await self._back(leased)
            return False
        if self.addresses is not None and job.kind in self.kinds:
            blocked = await self.addresses.blocked(job.item.url, leased)
            if blocked:
                await self._report(leased, Outcome(error="blocked_address"))
                return False
        assert self._slots is not None
        m = self.metrics
        m.held.inc()
        try:
            await self._slots.acquire()
            gate = self.gates[leased.gate_host]
            gate.enter()  # from here until it leaves, the gate is not forgotten (prune_gates)
            try:
                async with gate.lock:
                    # The host's previous request must really have gone out (its headers sent, or it
                    # failed) before the next one is timed from it: a stalled event loop or a slow
                    # connect would otherwise shrink the gap the server sees.
                    await gate.idle.wait()
                    # asyncio may wake a timer up to a clock tick early: re-check until the slot has come
                    # (a window the host announces meanwhile moves it: the loop reads it again)
                    while (slot := self.slot(job, gate)) > (now := time.time()) and slot <= job.expires_at:
                        await asyncio.sleep(slot - now)
                    on_time = time.time() <= job.expires_at and self.slot(job, gate) <= time.time()
                    if on_time:
                        leased._prev_sent = gate.last_sent
                        gate.last_sent = leased.handed_at = time.time()
                        gate.idle.clear()
            except BaseException:
                gate.leave()
                self._slots.release()
                raise
        finally:
            m.held.dec()
        if not on_time:  # its send time came after expires_at: the frontier has freed its slot
            gate.leave()
            self._slots.release()
            await self._back(leased)
            return False
        self._entered.add(leased)
        m.inflight.inc()
        assert self._loop is not None
        self._timers[leased] = self._loop.call_later(job.expires_at + job.timeout - time.time(), self._abandon, leased)
        return True

    @staticmethod
    def slot(job: Job, gate: _HostGate) -> float:
        """The earliest send time of ``job``: its ``not_before``, the host's gap since this worker's
        last send, any window the host announced to this worker, and a server-stated interval
        (Crawl-delay) counted from the end of the host's previous response (§9)."""
        floor = gate.last_end + job.floor if job.floor and gate.last_end else 0.0
        return max(job.not_before, gate.last_sent + job.min_gap, gate.closed_until, floor)

    async def _run_handler(self, leased: LeasedJob) -> None:
        assert self.handler is not None
        try:
            outcome = await self.handler(leased)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # reported as an error, never silence (a poison URL)
            log.exception("fetch of %s failed unexpectedly", leased.url)
            if not leased.reported:
                await self.finish(leased, Outcome(error=f"worker:{type(exc).__name__}"))
            return
        if not leased.reported:
            await (self.finish(leased, outcome) if outcome is not None else self.release(leased))

    async def _internal_fetch(self, leased: LeasedJob) -> Outcome:
        if self.internal is None:
            from workers.builtin import AiohttpFetcher  # the default engine, made when first needed

            self._builtin = AiohttpFetcher(self.cfg, self.concurrency)
            self.internal = self._builtin.fetch
        return await self.internal(leased)

    # -- along the way (LeasedJob.sent / .answered) --------------------------------------------------
    def sent(self, leased: LeasedJob, at: float) -> None:
        leased.sent_at = at
        gate = self.gates.get(leased.gate_host)
        if gate is not None and leased in self._entered:
            gate.last_sent = max(gate.last_sent, at)
            gate.idle.set()

    def answered(self, leased: LeasedJob, result: FetchResult) -> None:
        """A window the host announced closes it to this worker's held jobs, from the moment its
        headers are in (the body is not waited for: meanwhile another job could be sent)."""
        gate = self.gates.get(leased.gate_host)
        if gate is None or leased not in self._entered:
            return
        now = time.time()
        trigger = result.error in NETWORK_ERRORS or result.status in self.backoff_codes(leased.job)
        closed = gate_seconds(result.status, result.headers, trigger, now)
        if closed is not None:
            until = now + with_margin(min(closed[0], self.cfg.throttle.for_scope(leased.gate_host).gate_max))
            if until > gate.closed_until:
                gate.closed_until = until
                log.info("%s: %s, holding its jobs until +%.1fs", leased.gate_host, closed[1], until - now)

    # -- reports -------------------------------------------------------------------------------------
    async def finish(self, leased: LeasedJob, outcome: Outcome) -> None:
        """A request went out (or was attempted): time the host from it, then publish."""
        self._claim(leased)
        now = time.time()
        done = outcome.done_at = min(outcome.done_at or now, now)
        if any(not k.islower() for k in outcome.headers):
            outcome.headers = {k.lower(): str(v) for k, v in outcome.headers.items()}
        # The host's next request is timed from this one's send: a time it surely went out by. Not
        # told (no sent_at, no sent()), that is the report itself; the feedback then says the
        # latest send the latency allows (headers came ``latency`` after the send, before ``done``).
        told = min(outcome.sent_at or leased.sent_at, done)
        if outcome.status and not outcome.latency and told:
            outcome.latency = max(0.0, done - told)
        outcome.sent_at = told or max(0.0, done - outcome.latency)
        gate = self.gates.get(leased.gate_host)
        if gate is not None and leased in self._entered:
            self.answered(leased, outcome)
            gate.last_sent = max(gate.last_sent, told or done)
            gate.last_end = max(gate.last_end, outcome.done_at)  # server-stated floors count from here
        await self._report(leased, outcome)

    async def skip(self, leased: LeasedJob, reason: str) -> None:
        """Declined without a request: the URL ends with a ``skipped`` page."""
        self._claim(leased)
        self._unsend(leased)
        self._leave(leased)
        try:
            item = leased.item
            page = Page(v=SKIPPED_VERSION, url=item.url, outcome="skipped", error=reason[:500], meta=item.meta,
                        fetched_at=time.time(), worker=self.name)  # fmt: skip
            if problem := await self.publisher.deliver(self.topics.pages, page, key=item.url.encode()):
                log.error("%s: skipped page not published (%s); no feedback: the lease expires", item.url, problem)
                return
            self.skipped += 1
            self.metrics.observe(leased.kind, "skipped", 0, 0.0)
            await self.publisher.report(self._feedback(leased, Outcome(), "skipped"))
        finally:
            self._done(leased)

    async def release(self, leased: LeasedJob) -> None:
        """Handed back unfetched: the frontier queues it again."""
        self._claim(leased)
        self._unsend(leased)
        await self._back(leased)

    async def _back(self, leased: LeasedJob) -> None:
        leased.reported = True
        self._leave(leased)
        try:
            self.returned += 1
            self.metrics.observe(leased.kind, "expired", 0, 0.0)
            await self.publisher.report(self._feedback(leased, Outcome(), "expired"))
        finally:
            self._done(leased)

    def _claim(self, leased: LeasedJob) -> None:
        if leased.reported:
            raise AlreadyReported(f"{leased!r} was already reported (or given up after its lease)")
        leased.reported = True

    def _unsend(self, leased: LeasedJob) -> None:
        """No request went out after all: the host's last send is what it was before this job."""
        gate = self.gates.get(leased.gate_host)
        if gate is not None and leased in self._entered and gate.last_sent == leased.handed_at and not leased.sent_at:
            gate.last_sent = leased._prev_sent

    def _leave(self, leased: LeasedJob) -> None:
        """Give back the job's slot and its host's gate (once)."""
        if leased not in self._entered:
            return
        self._entered.discard(leased)
        gate = self.gates.get(leased.gate_host)
        if gate is not None:
            gate.idle.set()
            gate.leave()
        assert self._slots is not None
        self._slots.release()
        self.metrics.inflight.dec()

    def _done(self, leased: LeasedJob) -> None:
        """The job is over here: its slot freed, its offset may be committed."""
        self._leave(leased)
        timer = self._timers.pop(leased, None)
        if timer is not None:
            timer.cancel()
        self.tracker.finished(*leased._coords)

    def _abandon(self, leased: LeasedJob) -> None:
        """Not reported by ``expires_at + timeout``: given up here (no feedback; the frontier's
        lease expires a little later and the job comes back)."""
        self._timers.pop(leased, None)
        if leased.reported:
            return
        leased.reported = True
        log.warning("%r was not reported within its lease; given up (the frontier re-queues it)", leased)
        self._done(leased)

    async def _report(self, leased: LeasedJob, outcome: Outcome) -> None:
        leased.reported = True
        self._leave(leased)
        try:
            job = leased.job
            max_body = self.max_body(job)
            if len(outcome.body) > max_body:
                outcome.body, outcome.truncated = outcome.body[:max_body], True
            self.fetched += 1
            self.metrics.observe(job.kind, "error" if outcome.error else "fetched", outcome.status, outcome.latency)
            await self._conclude(leased, outcome)
        finally:
            self._done(leased)

    def max_body(self, job: Job) -> int:
        return MAX_ROBOTS_BYTES if job.kind == "robots" else self.cfg.worker.max_body_bytes

    async def _conclude(self, leased: LeasedJob, result: Outcome) -> None:
        """Publish what the fetch produced, then the feedback that closes the lease."""
        job, item = leased.job, leased.item
        page_out = False
        try:
            if job.kind == "robots":
                fb = self._feedback(leased, result, "error" if result.error else "fetched", body=result.body)
                if 300 <= result.status < 400 and "location" in result.headers:
                    fb.headers["location"] = result.headers["location"][:2048]  # the next hop, for the frontier
                await self.publisher.report(fb)
                return
            if is_retryable(result, self.backoff_codes(job)) and job.retries_left > 0:
                await self.publisher.report(self._feedback(leased, result, "retry"))
                return
            subs = follow_ups(item, result, self.cfg.worker.max_redirects, self.agent)
            page, *followed = await asyncio.gather(
                self.publisher.deliver(self.topics.pages, self._page(leased, result), key=item.url.encode()),
                *(self.publisher.deliver(self.topics.urls, s) for s in subs),
            )
            if page:
                await self._fail(leased, result, f"page_not_published: {page}")
                return
            page_out = True
            if problems := [p for p in followed if p]:
                log.error("%s: %d of %d follow-ups not published (%s); no feedback: the lease expires and the "
                          "job comes back", item.url, len(problems), len(subs), problems[0])  # fmt: skip
                return
            await self.publisher.report(self._feedback(leased, result, "error" if result.error else "fetched"))
        except Exception as exc:  # any failure here ends in an "error" result, never in silence
            log.exception("job %s (%s) failed after its fetch", job.lease, item.url)
            reason = f"worker_error: {type(exc).__name__}"
            if page_out or job.kind == "robots":
                await self.publisher.report(self._feedback(leased, result, "error", error=reason))
            else:
                await self._fail(leased, result, reason)

    async def _fail(self, leased: LeasedJob, r: Outcome, reason: str) -> None:
        """The job's page could not be published: publish a small error page instead and report an
        error; when not even that goes out, report nothing (the lease expires, the job comes back)."""
        item = leased.item
        error_page = Page(url=item.url, status=r.status, outcome="error", error=reason, content_type=r.content_type,
                          fetched_at=r.sent_at, latency=r.latency, meta=item.meta, worker=self.name)  # fmt: skip
        problem = await self.publisher.deliver(self.topics.pages, error_page, key=item.url.encode())
        if problem:
            log.error("%s: no page published (%s), not even an error page (%s); no feedback: the lease expires "
                      "and the job comes back", item.url, reason, problem)  # fmt: skip
            return
        await self.publisher.report(self._feedback(leased, r, "error", error=reason))

    def backoff_codes(self, job: Job) -> frozenset[int]:
        """The statuses the frontier backs off on for this URL's scopes: only those are retried."""
        item = job.item
        names = [item.host, item.domain, *item.scopes]
        return frozenset(code for name in names for code in self.cfg.throttle.for_scope(name).backoff.codes)

    @staticmethod
    def _feedback(leased: LeasedJob, r: Outcome, outcome: str, body: bytes = b"", error: str = "") -> Feedback:
        item, sent = leased.item, outcome not in ("expired", "skipped")
        return Feedback(lease=leased.job.lease, host=item.host, domain=item.domain, ip=item.ip, url=item.url,
                        outcome=outcome, status=r.status, latency=r.latency, sent_at=r.sent_at if sent else 0.0,
                        done_at=r.done_at if sent else 0.0, error=error or r.error,
                        headers=throttle_headers(r.headers), body=body)  # fmt: skip

    def _page(self, leased: LeasedJob, r: Outcome) -> Page:
        url = leased.url
        return Page(
            url=url, status=r.status, outcome="error" if r.error else "fetched", error=r.error,
            headers=page_headers(url, r.headers), body=r.body, truncated=r.truncated,
            content_type=r.content_type, fetched_at=r.sent_at, latency=r.latency, meta=leased.item.meta,
            worker=self.name,
        )  # fmt: skip

    async def _reject(self, msg: Message, exc: SchemaError) -> None:
        topic, partition, offset = coordinates(msg)
        log.error("undecodable job at %s[%d]@%d: %s", topic, partition, offset, exc)
        rejected = Rejected(reason=f"undecodable: {exc}", original=msg.value() or b"", topic=topic,
                            partition=partition, offset=offset)  # fmt: skip
        try:
            await self.publisher.reject(rejected)
        except RuntimeError:
            log.exception("job at %s[%d]@%d: rejection not published", topic, partition, offset)

    # -- the consumer --------------------------------------------------------------------------------
    async def _consume(self, consumer: Consumer) -> None:
        last_commit = last_lag = last_prune = time.monotonic()
        cap = self.concurrency * 4
        while not self._stop.is_set():
            want = cap - self.tracker.open_count()
            msgs: list[Message] = await asyncio.to_thread(_take, consumer, want) if want > 0 else []
            if want <= 0:
                await asyncio.sleep(0.02)
            for msg in msgs:
                if msg.error() is not None:
                    log.warning("consume error: %s", msg.error())
                    continue
                self._start(msg)
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

    def prune_gates(self, now: float) -> int:
        """Forget the hosts this worker has not sent to for a while (their gates are idle: nothing
        holds or waits for them, no window is open), so memory does not grow with every host ever
        seen. What the frontier schedules does not depend on them; a forgotten host's next job
        starts a fresh gate. Returns how many were forgotten."""
        idle_for = max(GATE_IDLE, 2 * self.cfg.frontier.fetch_timeout)
        stale = [host for host, g in self.gates.items()
                 if now - max(g.last_sent, g.last_end, g.closed_until) > idle_for
                 and not g.busy()]  # fmt: skip
        for host in stale:
            del self.gates[host]
        return len(stale)


def _take(consumer: Consumer, most: int) -> list[Message]:
    """Wait up to 0.1 s for the first job, then take whatever else is already there without waiting.

    (``consume(n, timeout)`` alone would hold a lone job until ``n`` arrive or the timeout ends.)
    """
    first = consumer.poll(0.1)
    if first is None:
        return []
    return [first, *consumer.consume(most - 1, timeout=0)] if most > 1 else [first]

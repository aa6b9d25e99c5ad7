"""The worker API: :class:`Jobs` owns everything between Kafka and a fetch, so that any code can
take directions from the frontier and stay polite (docs/WORKERS.md; the wire protocol it keeps is
docs/PROTOCOL.md).

It consumes leased jobs (``crawl.jobs``, one consumer group: start more processes to share the
work), holds each until it may be sent (``not_before``; this worker's gap since its previous send
to the host, ``min_gap``; a window the host announced; a server-stated floor from the end of the
host's previous response) and hands it over as a :class:`~workers.api.leased.LeasedJob`; what user
code reports becomes the page (and its follow-ups) on ``crawl.pages``, then the feedback on
``crawl.feedback``, and only once both are acknowledged is the job's offset committed. A job whose
slot would come after its ``expires_at`` is handed back unfetched. Jobs of kinds the user code
does not take (robots.txt, by default) are fetched here by the built-in fetcher.

Two shapes: ``async with Jobs(cfg) as jobs: async for job in jobs: ...`` (pull), and
``await Jobs(cfg).serve(handle)`` (each job to ``handle`` in a task of its own); the blocking
shapes for threads and task queues are :mod:`workers.api.blocking`.

:class:`Jobs` is a façade over three collaborators, each given only what it needs: a
:class:`~workers.api.holding.Holder` (the slots and the per-host gates: until a job may be sent), a
:class:`~workers.api.reporting.Reporter` (what is published, in the protocol's order) and a
:class:`~workers.api.consuming.JobConsumer` (the Kafka consumer, whose the partitions are, the
commits). Here: the life, the shapes, one job's way through, and the ways a job ends (reported,
dropped, given up), each freeing its slot and marking its offset in the same order.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable

from confluent_kafka import Message
from prometheus_client import start_http_server

from frontier.config import Config
from frontier.core.robots import MAX_ROBOTS_BYTES, agent_token
from topics.admin import create_crawl_jobs
from topics.catalog import workers_group
from topics.kafka import Kafka, coordinates
from topics.schemas import DEFAULT_CRAWL, Job, SchemaError, decode, valid_crawl
from workers.api.addresses import AddressCheck, say_blocked
from workers.api.builtin import AiohttpFetcher
from workers.api.consuming import CONFIRM_WAIT, JobConsumer
from workers.api.gates import _HostGate
from workers.api.holding import Held, Holder
from workers.api.leased import AlreadyReported, LeasedJob, Outcome
from workers.api.membership import Membership
from workers.api.metrics import WorkerMetrics
from workers.api.offsets import OffsetTracker
from workers.api.outcome import BackoffCodes, FetchResult, lower_headers
from workers.api.publishing import Publisher
from workers.api.reporting import Reporter

log = logging.getLogger("worker")

InternalFetcher = Callable[[LeasedJob], Awaitable[Outcome]]
Handler = Callable[[LeasedJob], Awaitable[Outcome | None]]


class Jobs:
    """Leased jobs from the frontier, each handed over when it may be sent.

    ``kinds``: the job kinds user code takes (others are fetched here with ``internal``, default
    the built-in fetcher); ``check_addresses``: resolve each job's host and decline it (error
    ``blocked_address``) when it resolves only to addresses the worker may not reach
    (``worker.allow_networks`` / ``block_private``); a fetcher that connects through
    :class:`~workers.api.safety.SafeConnector` checks at connect time and may turn this off.
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
        crawl: str = DEFAULT_CRAWL,
    ) -> None:
        self.cfg = cfg
        self.crawl = valid_crawl(crawl)  # this worker takes the jobs of this crawl only (its own topic and group)
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
        self.metrics = WorkerMetrics(self.crawl)
        self.backoff_codes = BackoffCodes(cfg)  # (job) -> the statuses the frontier backs off on: only those retried
        self._stop = threading.Event()
        self.holder = Holder(self.concurrency, cfg.throttle, cfg.frontier.fetch_timeout, self.backoff_codes,
                             self.metrics)  # fmt: skip
        self.reporter = Reporter(self.topics, self.name, self.agent, cfg.worker.max_redirects, self.max_body,
                                 self.backoff_codes, self.metrics)  # fmt: skip
        self.consuming = JobConsumer(self.tracker, self.handle, self.holder.prune_gates, self.metrics,
                                     concurrency=self.concurrency, stopping=self._stop,
                                     measure_lag=bool(cfg.worker.metrics_port),
                                     revoke_grace=cfg.frontier.fetch_timeout + 30)  # fmt: skip
        self.dropped = 0  # jobs whose partition moved on before they were sent (left to the new owner)
        self.failure: BaseException | None = None  # the consumer's, if it failed (raised by serve())
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready: asyncio.Queue[LeasedJob] | None = None
        self._timers: dict[LeasedJob, asyncio.TimerHandle] = {}  # handed over: given up at expires_at + timeout
        self._ends: dict[LeasedJob, asyncio.Future[None]] = {}  # pull shape: resolved once the job is over here
        self._closing = False
        self._poller: asyncio.Task[None] | None = None
        self._builtin: AiohttpFetcher | None = None  # the built-in fetcher, when internal kinds needed it

    # -- what the collaborators hold, as the API has always shown it ------------------------------
    @property
    def gates(self) -> dict[str, _HostGate]:
        return self.holder.gates

    @property
    def publisher(self) -> Publisher:
        """Set by :meth:`start` (tests set it directly)."""
        return self.reporter.publisher

    @publisher.setter
    def publisher(self, publisher: Publisher) -> None:
        self.reporter.publisher = publisher

    @property
    def membership(self) -> Membership | None:
        """Set by :meth:`start`: the consumer's partitions (None: all)."""
        return self.consuming.membership

    @membership.setter
    def membership(self, membership: Membership | None) -> None:
        self.consuming.membership = membership

    @property
    def revoke_grace(self) -> float:
        """How long a revoke waits for the jobs of the partitions it takes away; then they are cancelled."""
        return self.consuming.revoke_grace

    @revoke_grace.setter
    def revoke_grace(self, seconds: float) -> None:
        self.consuming.revoke_grace = seconds

    @property
    def fetched(self) -> int:
        return self.reporter.fetched

    @property
    def returned(self) -> int:
        return self.reporter.returned

    @property
    def skipped(self) -> int:
        return self.reporter.skipped

    @property
    def skipped_reported(self) -> int:
        """Re-delivered jobs a previous owner had reported (not fetched again)."""
        return self.consuming.skipped_reported

    # -- life --------------------------------------------------------------------------------------
    def _bind(self) -> None:
        """Take the running event loop (tests that call :meth:`handle` directly use this alone)."""
        if self._loop is None:
            self._loop = self.consuming.loop = asyncio.get_running_loop()
            self._ready = asyncio.Queue()

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
        topic = self.topics.jobs_of(self.crawl)
        if topic != self.topics.jobs:  # a crawl's jobs topic is made when the crawl first appears, by either side
            await asyncio.to_thread(create_crawl_jobs, self.kafka, self.topics, [self.crawl])
        self.publisher = Publisher(self.kafka.async_producer(self._loop), self.topics)
        consumer = self.kafka.consumer(
            workers_group(self.cfg.frontier.app_id, self.crawl),
            **{
                "partition.assignment.strategy": "cooperative-sticky",
                "max.poll.interval.ms": 300000,
                "session.timeout.ms": 10000,  # a dead worker's partitions move on after 10 s
            },
        )
        if self.cfg.worker.metrics_port:
            start_http_server(self.cfg.worker.metrics_port, self.cfg.worker.metrics_bind, self.metrics.registry)
            log.info("metrics on http://%s:%d/metrics", self.cfg.worker.metrics_bind, self.cfg.worker.metrics_port)
        self._poller = self.consuming.start(consumer, topic)

    async def close(self) -> None:
        """Stop; hand back the jobs still waiting for their slot or to be taken; give those in user
        code's hands up to the fetch timeout; commit; close the clients."""
        self.stop()
        self._closing = True
        self.consuming.finishing.set()  # the poller ends; the marks are committed below
        if self._poller is not None:
            try:
                await self._poller
            except Exception as exc:  # noqa: BLE001 - kept: serve() raises it once closed
                log.error("the worker's consumer failed: %s: %s", type(exc).__name__, exc)
                self.failure = exc
        running = {t for ts in self.consuming.running.values() for t in ts}
        backs: set[asyncio.Task[None]] = set()
        deadline = time.monotonic() + self.cfg.frontier.fetch_timeout + 5
        while True:
            # Every turn, not once: the consumer's last poll started job tasks that reach their
            # slot (or the ready list) only now, and nobody takes a job any more: handed back
            # (see handle), nothing was sent. Their reports' done marks are committed here, the
            # poller that commits them having stopped (else each waited for the deadline below)
            for task in list(self.consuming.held):
                task.cancel()
            while self._ready is not None and not self._ready.empty():
                job = self._ready.get_nowait()
                if not job.reported:
                    backs.add(asyncio.ensure_future(self.release(job)))
            if self.consuming.marks and self.consuming.consumer is not None:
                await asyncio.to_thread(self.consuming.commit_marks, self.consuming.consumer)
            running = {t for t in running if not t.done()}
            backs = {t for t in backs if not t.done()}
            if not (running or backs or self._timers) or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
        consumer, self.consuming.consumer = self.consuming.consumer, None
        if consumer is not None:
            await asyncio.to_thread(self.consuming.commit_marks, consumer)
            await asyncio.to_thread(self.publisher.producer.close)
            await asyncio.to_thread(consumer.close)
        if self._builtin is not None:
            await self._builtin.close()
        if self.membership is not None:
            self.membership.stop()

    # -- the shapes --------------------------------------------------------------------------------
    async def serve(self, handler: Handler) -> None:
        """The callback shape, until :meth:`stop`: each job goes to ``handler`` in a task of its own
        (at most ``concurrency`` at once). A returned outcome is reported; an exception is reported
        as an error (``worker:<ExceptionName>``); a job left without a report is released."""
        self.handler = handler
        async with self:
            while not self._stop.is_set() and self._poller is not None and not self._poller.done():
                await asyncio.sleep(0.1)
        if self.failure is not None:
            raise RuntimeError("the worker's consumer failed") from self.failure

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
            if not ready.empty():
                job = ready.get_nowait()  # get(0) takes a waiting job too
            else:
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
            if job.reported:
                continue  # given up while it waited to be taken (see _abandon)
            if not await self.still_owns(job):
                # its partition moved on while it waited: another worker sends it
                self._drop(job, finish=self.owns(job) is not False)
                continue
            now = time.time()
            if now > job.expires_at or self.holder.closed(job.gate_host, now):
                # taken too late (the frontier has freed its slot), or the host announced a window
                # since it was handed over (an earlier job's 429): back to the frontier, unsent
                await self.release(job)
                continue
            return job

    # -- one job's way through ---------------------------------------------------------------------
    async def handle(self, msg: Message) -> None:
        """One consumed job: decode it, hold it until its slot, hand it over (to the handler, the
        ``async for`` loop, or the internal fetcher for kinds user code does not take)."""
        self._bind()
        coords = coordinates(msg)
        try:
            job = decode(msg.value() or b"", Job)
        except SchemaError as exc:
            await self.reporter.reject(msg, exc)
            self.tracker.finished(*coords)
            return
        leased = LeasedJob(self, job, coords)
        task = asyncio.current_task()
        try:
            if task is not None:
                self.consuming.held.add(task)
            try:
                handed = await self._hold(leased)
            finally:
                if task is not None:
                    self.consuming.held.discard(task)
            if not handed:
                return
            if job.kind not in self.kinds:
                await self.finish(leased, await self._internal_fetch(leased))
            elif self.handler is not None:
                await self._run_handler(leased)
            else:
                assert self._ready is not None and self._loop is not None
                # the task lives until the job is reported (or dropped, given up): a revoke then
                # waits for a job in user code's hands as for a handler's, so its done mark is
                # committed before the partition moves and the new owner does not fetch it again
                end = self._ends[leased] = self._loop.create_future()
                self._ready.put_nowait(leased)
                await end
        except asyncio.CancelledError:
            if not leased.reported and self._closing and leased not in self._timers:
                await self.release(leased)  # shutting down before it was handed over: back at once
                return
            self._drop(leased)  # a revoke or a lost assignment: the partition's new owner gets it again
            raise
        except Exception:
            log.exception("job %s (%s) failed; it will come back after its lease", job.lease, job.item.url)
            self._done(leased)

    async def _hold(self, leased: LeasedJob) -> bool:
        """Wait for a slot and the host's send time (:class:`~workers.api.holding.Holder`); True once
        it is handed over (this worker's clock says it may be sent, and its partition is still this
        worker's), False when it was handed back, declined or dropped (its partition moved on:
        nothing sent, nothing reported)."""
        job = leased.job
        if not await self.still_owns(leased):
            self._drop(leased, finish=self.owns(leased) is not False)
            return False
        if time.time() > job.expires_at:
            await self._back(leased)
            return False
        if self.addresses is not None and job.kind in self.kinds:
            blocked = await self.addresses.blocked(job.item.url, leased)
            if blocked:
                say_blocked(log, job.item.host)
                await self._report(leased, Outcome(error="blocked_address"))
                return False
        held = await self.holder.hold(leased, self.consuming)
        if held is Held.LOST:
            self._drop(leased, finish=self.owns(leased) is not False)
            return False
        if held is Held.LATE:  # its send time came after expires_at: the frontier has freed its slot
            if await self.still_owns(leased):
                await self._back(leased)
            else:
                self._drop(leased, finish=self.owns(leased) is not False)
            return False
        assert self._loop is not None
        self._timers[leased] = self._loop.call_later(job.expires_at + job.timeout - time.time(), self._abandon, leased)
        return True

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
            self._builtin = AiohttpFetcher(self.cfg, self.concurrency)  # the default engine, made when first needed
            self.internal = self._builtin.fetch
        return await self.internal(leased)

    # -- what a job tells along the way (LeasedJob's calls) ------------------------------------------
    def max_body(self, job: Job) -> int:
        return MAX_ROBOTS_BYTES if job.kind == "robots" else self.cfg.worker.max_body_bytes

    def sent(self, leased: LeasedJob, at: float) -> None:
        self.holder.sent(leased, at)

    def answered(self, leased: LeasedJob, result: FetchResult) -> None:
        self.holder.answered(leased, result)

    def keep_gate_until(self, leased: LeasedJob, done: asyncio.Future[object]) -> None:
        self.holder.keep_gate_until(leased, done)

    def prune_gates(self, now: float) -> int:
        return self.holder.prune_gates(now)

    slot = staticmethod(Holder.slot)

    # -- the reports (LeasedJob's calls) ---------------------------------------------------------
    async def finish(self, leased: LeasedJob, outcome: Outcome) -> None:
        """A request went out (or was attempted): time the host from it, then publish."""
        self._claim(leased)
        now = time.time()
        done = outcome.done_at = min(outcome.done_at or now, now)
        outcome.headers = lower_headers(outcome.headers)
        # The host's next request is timed from this one's send: a time it surely went out by. Not
        # told (no sent_at, no sent()), that is the report itself; the feedback then says the
        # latest send the latency allows (headers came ``latency`` after the send, before ``done``).
        told = min(outcome.sent_at or leased.sent_at, done)
        if outcome.status and not outcome.latency and told:
            outcome.latency = max(0.0, done - told)
        outcome.sent_at = told or max(0.0, done - outcome.latency)
        self.holder.finished(leased, outcome, told)
        await self._report(leased, outcome)

    async def skip(self, leased: LeasedJob, reason: str) -> None:
        """Declined without a request: the URL ends with a ``skipped`` page."""
        self._claim(leased)
        self.holder.unsend(leased)
        await self._concluding(leased, lambda: self.reporter.report_skip(leased, reason))

    async def release(self, leased: LeasedJob) -> None:
        """Handed back unfetched: the frontier queues it again."""
        self._claim(leased)
        self.holder.unsend(leased)
        await self._back(leased)

    async def hold(self, leased: LeasedJob, until: float, tell: bool = True) -> None:
        """Kept until ``until``: given up here then (not before), and the frontier told to keep its
        lease as long (feedback ``held``)."""
        if leased.reported:
            raise AlreadyReported(f"{leased!r} was already reported (or given up after its lease)")
        assert self._loop is not None
        timer = self._timers.pop(leased, None)
        if timer is not None:
            timer.cancel()
        self._timers[leased] = self._loop.call_later(max(0.0, until - time.time()), self._abandon, leased)
        if tell:
            await self.reporter.report_hold(leased, until)

    def _claim(self, leased: LeasedJob) -> None:
        if leased.reported:
            raise AlreadyReported(f"{leased!r} was already reported (or given up after its lease)")
        leased.reported = True

    # -- the ways a job ends here ------------------------------------------------------------------
    async def _report(self, leased: LeasedJob, outcome: Outcome) -> None:
        """Publish a job's outcome (fetched, or an error). Not this worker's to report any more
        (its partition went to another worker meanwhile): the request still went out, so what the
        server said reaches the host's throttling as a late result (no page, no lease closed)."""
        leased.reported = True
        await self._concluding(leased, lambda: self.reporter.report(leased, outcome),
                               otherwise=lambda: self.reporter.report_late(leased, outcome))  # fmt: skip

    async def _back(self, leased: LeasedJob) -> None:
        """Hand the job back unfetched (feedback ``expired``): the frontier queues it again."""
        leased.reported = True
        await self._concluding(leased, lambda: self.reporter.report_back(leased))

    async def _concluding(
        self,
        leased: LeasedJob,
        publish: Callable[[], Awaitable[None]],
        otherwise: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """A report, in the protocol's order: the job's slot and gate given back, its offset
        committed as done (not: the group refused the mark, the partition is another worker's now,
        and nothing is reported here), then ``publish``; whatever happens, the job is over here."""
        self.holder.leave(leased)
        try:
            if await self.mark_done(leased):
                await publish()
            elif otherwise is not None:
                await otherwise()
        finally:
            self._done(leased)

    def owns(self, leased: LeasedJob) -> bool | None:
        """Whether the job's partition is still this worker's (None: unknown, after a stall)."""
        return self.consuming.owns(leased)

    async def still_owns(self, leased: LeasedJob, wait: float = CONFIRM_WAIT) -> bool:
        """Whether the job's partition is this worker's, waiting (up to ``wait``) for the group to
        confirm it after a stall; False: the job must go unsent and unreported (another worker has it)."""
        return await self.consuming.still_owns(leased, wait)

    async def mark_done(self, leased: LeasedJob) -> bool:
        """Before a job's report goes out: its offset committed as done (:meth:`JobConsumer.mark_done
        <workers.api.consuming.JobConsumer.mark_done>`); False: report nothing."""
        return await self.consuming.mark_done(leased)

    def _drop(self, leased: LeasedJob, finish: bool = False) -> None:
        """Over here, unsent and unreported. Its partition is another worker's: its offset is left
        uncommitted (the new owner gets the job again). ``finish``: the partition is not known to
        be another's (no confirmation came): its offset must not hold the commit point forever
        (the frontier's lease brings the job back)."""
        if not leased.reported:
            leased.reported = True
            self.dropped += 1
            log.info("%r dropped: its partition is another worker's", leased)
            if finish:
                self.tracker.finished(*leased._coords)
        self.holder.leave(leased)
        self._ended(leased)

    def _done(self, leased: LeasedJob) -> None:
        """The job is over here: its slot freed, its offset may be committed."""
        self.holder.leave(leased)
        self._ended(leased)
        self.tracker.finished(*leased._coords)

    def _ended(self, leased: LeasedJob) -> None:
        """No timer to give it up any more; its consumed task (pull shape) may end."""
        timer = self._timers.pop(leased, None)
        if timer is not None:
            timer.cancel()
        end = self._ends.pop(leased, None)
        if end is not None and not end.done():
            end.set_result(None)

    def let_go(self, leased: LeasedJob) -> None:
        """Over here without a report (a job held for a client when the process stops): the
        frontier's lease, kept until the hold's end, brings the URL back."""
        if not leased.reported:
            leased.reported = True
            self._done(leased)

    def _abandon(self, leased: LeasedJob) -> None:
        """Not reported by ``expires_at + timeout``: given up here (no feedback; the frontier's
        lease expires a little later and the job comes back)."""
        self._timers.pop(leased, None)
        if leased.reported:
            return
        leased.reported = True
        log.warning("%r was not reported within its lease; given up (the frontier re-queues it)", leased)
        self._done(leased)

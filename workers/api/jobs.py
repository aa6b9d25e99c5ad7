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

:class:`Jobs` makes four parts, each given only what it needs, and callers use the part that owns
the thing: ``holder``, a :class:`~workers.api.holding.Holder` (the slots and the per-host gates
``holder.gates``: until a job may be sent), ``reporter``, a :class:`~workers.api.reporting.Reporter`
(what is published, ``reporter.publisher``, in the protocol's order; the counts ``fetched``,
``skipped``, ``returned``), ``consuming``, a :class:`~workers.api.consuming.JobConsumer` (the Kafka
consumer, whose the partitions are: ``consuming.membership``, the commits, ``revoke_grace``), and
``endings``, :class:`~workers.api.endings.Endings` (the ways a job ends: reported, handed back,
dropped, given up; what a :class:`~workers.api.leased.LeasedJob` calls). Here: the life, the
shapes and one job's way through. Every time read and every wait is on ``clock``
(:mod:`workers.api.clock`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from collections.abc import Awaitable, Callable, Iterable
from functools import partial

from confluent_kafka import Consumer, Message
from prometheus_client import start_http_server

from frontier.config import Config
from frontier.core.robots import MAX_ROBOTS_BYTES, agent_token
from topics.admin import create_crawl_jobs
from topics.catalog import workers_group
from topics.kafka import AsyncProducer, Kafka, coordinates
from topics.schemas import DEFAULT_CRAWL, Job, SchemaError, decode, valid_crawl
from workers.api.addresses import AddressCheck, say_blocked
from workers.api.builtin import AiohttpFetcher
from workers.api.caller import Abandoned, awaited_within
from workers.api.clock import SYSTEM, Clock, Timer
from workers.api.consuming import JobConsumer
from workers.api.endings import Endings
from workers.api.holding import Held, Holder
from workers.api.leased import LeasedJob, Outcome
from workers.api.metrics import WorkerMetrics
from workers.api.offsets import OffsetTracker
from workers.api.outcome import BackoffCodes
from workers.api.publishing import Publisher
from workers.api.reporting import Reporter

log = logging.getLogger("worker")

# seconds a closing worker gives its Kafka clients, all told (the last commit, the flush, leaving
# the group): a broker that does not answer must not keep a stopped worker alive (CI: a worker not
# stopped 30 s after SIGTERM; by hand, 88 s with the broker frozen 80 s)
CLOSE_CLIENTS_WAIT = 15.0
# seconds without an answer from the broker (a record waiting with no delivery report, a commit not
# returned) after which a stopping worker gives up what waits for it (Jobs._give_up_reports)
UNANSWERED = 5.0
PRODUCER_POLL_WAIT = 0.25  # seconds the producer's thread waits for a delivery (one ends it at once)
InternalFetcher = Callable[[LeasedJob], Awaitable[Outcome]]
Handler = Callable[[LeasedJob], Awaitable[Outcome | None]]


class Jobs:
    """Leased jobs from the frontier, each handed over when it may be sent.

    ``kinds``: the job kinds user code takes (others are fetched here with ``internal``, default
    the built-in fetcher); ``check_addresses``: resolve each job's host and decline it (error
    ``blocked_address``) when it resolves only to addresses the worker may not reach
    (``worker.allow_networks`` / ``block_private``); a fetcher that connects through
    :class:`~workers.api.safety.SafeConnector` checks at connect time and may turn this off;
    ``clock``: the time and the waits (default the real clocks; tests pass one they can jump).
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
        clock: Clock = SYSTEM,
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        self.crawl = valid_crawl(crawl)  # this worker takes the jobs of this crawl only (its own topic and group)
        self.topics = cfg.topics
        self.concurrency = concurrency or cfg.worker.concurrency
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.agent = agent_token(cfg.worker.user_agent)
        self.kafka = kafka if kafka is not None else Kafka(cfg.kafka.client_conf())  # every client comes from it
        self.kinds = frozenset(kinds)
        self.addresses = (AddressCheck(cfg.worker.allow_networks, cfg.worker.block_private, clock.monotonic)
                          if check_addresses else None)  # fmt: skip
        self.internal = internal
        self.handler: Handler | None = None
        self.tracker = OffsetTracker()
        self.metrics = WorkerMetrics(self.crawl, clock.monotonic)
        self.backoff_codes = BackoffCodes(cfg)  # (job) -> the statuses the frontier backs off on: only those retried
        self._stop = threading.Event()
        self.holder = Holder(self.concurrency, cfg.throttle, cfg.frontier.fetch_timeout, self.backoff_codes,
                             self.metrics, clock)  # fmt: skip
        self.reporter = Reporter(self.topics, self.name, self.agent, cfg.worker.max_redirects, self.max_body,
                                 self.backoff_codes, self.metrics, clock)  # fmt: skip
        self.consuming = JobConsumer(self.tracker, self.handle, self.holder.prune_gates, self.metrics,
                                     concurrency=self.concurrency, stopping=self._stop,
                                     measure_lag=bool(cfg.worker.metrics_port),
                                     revoke_grace=cfg.frontier.fetch_timeout + 30, clock=clock)  # fmt: skip
        self.endings = Endings(self.holder, self.reporter, self.consuming, self.tracker, self.max_body, clock)
        self.failure: BaseException | None = None  # the consumer's, if it failed (raised by serve())
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready: asyncio.Queue[LeasedJob] | None = None
        self._woken: asyncio.Event | None = None  # set by stop(): what serve() waits for
        self._closing = False
        self._poller: asyncio.Task[None] | None = None
        self._builtin: AiohttpFetcher | None = None  # the built-in fetcher, when internal kinds needed it
        self._give_up: Timer | None = None  # armed by stop(): the reports still waiting are given up
        self._closed = False  # close() has ended
        self._armed = False  # the give-up was armed (once, at the first stop)

    # -- life --------------------------------------------------------------------------------------
    def _bind(self) -> None:
        """Take the running event loop (tests that call :meth:`handle` directly use this alone)."""
        if self._loop is None:
            self._loop = self.consuming.loop = asyncio.get_running_loop()
            self._ready = asyncio.Queue()
            self._woken = asyncio.Event()

    async def __aenter__(self) -> Jobs:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def stop(self) -> None:
        """Stop taking jobs (thread-safe; also from a signal handler); ``close()`` finishes. The
        reports of the jobs in hand then have the fetch timeout and 5 s to reach the broker: what
        still waits for it after that is given up (:meth:`_give_up_reports`)."""
        self._stop.set()
        loop, woken = self._loop, self._woken
        if loop is not None and woken is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._stopped, woken)  # serve() returns at once
            except RuntimeError:  # the loop closed meanwhile: nobody serves
                pass

    def _stopped(self, woken: asyncio.Event) -> None:
        woken.set()
        if not self._armed:  # (once: close() stops again)
            self._armed = True
            self._give_up = self.clock.call_at(self.clock.now() + self.cfg.frontier.fetch_timeout + 5,
                                               self._give_up_reports)  # fmt: skip

    def _give_up_reports(self) -> None:
        """Told to stop a fetch timeout and 5 s ago: if the broker does not answer (a record waits
        with no delivery report, or a commit has not returned, for ``UNANSWERED`` s), what still
        waits for it (the records' acknowledgements, the done marks' commits) is given up, so that
        every report in flight returns to its caller and the worker can close (a blocking shape's
        thread waited in a report for the 5 minutes of librdkafka's delivery timeout: measured,
        with the broker frozen). Their jobs are not reported: the frontier's leases bring them back.
        While the broker answers, nothing is given up (a report late after the stop still goes):
        looked at again every second until the close ends."""
        self._give_up = None
        if self._closed:
            return
        publisher: Publisher | None = getattr(self.reporter, "publisher", None)
        silent = max(publisher.producer.unanswered_for() if publisher is not None else 0.0,
                     self.consuming.committer.busy_for())  # fmt: skip
        if silent < UNANSWERED:
            self._give_up = self.clock.call_at(self.clock.now() + 1.0, self._give_up_reports)
            return
        records = publisher.producer.abandon() if publisher is not None else 0
        marks = self.consuming.give_up_marks()
        log.warning("stopping: the broker has not answered for %.0f s; %d records and %d done marks waiting for "
                    "it are given up (their leases bring the jobs back)", silent, records, marks)  # fmt: skip

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    async def start(self) -> None:
        self._bind()
        topic = self.topics.jobs_of(self.crawl)
        if topic != self.topics.jobs:  # a crawl's jobs topic is made when the crawl first appears, by either side
            await asyncio.to_thread(create_crawl_jobs, self.kafka, self.topics, [self.crawl])
        # (its poll thread wakes 4 times a second, not 20, when no delivery comes; the deliveries of
        # one poll wake the event loop once, not once each: issue 39)
        producer = AsyncProducer(self.kafka.producer(), self._loop, poll_wait=PRODUCER_POLL_WAIT, batched=True)
        self.reporter.publisher = Publisher(producer, self.topics, self.clock)
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
        # the jobs in hand get up to the fetch timeout (and a little more); then the clients get up to
        # CLOSE_CLIENTS_WAIT: a stopped worker ends within the two even when its broker does not answer
        deadline = self.clock.monotonic() + self.cfg.frontier.fetch_timeout + 5
        if self._poller is not None:
            wait = self._broker_wait(deadline)
            try:  # (its turn ends within a poll, unless a call to a broker that does not answer holds it)
                await self.clock.wait_for(asyncio.shield(self._poller), wait)
            except TimeoutError:
                log.warning("the consumer's loop did not end within %.0f s (the broker does not answer): "
                            "closing without it", wait)  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - kept: serve() raises it once closed
                log.error("the worker's consumer failed: %s: %s", type(exc).__name__, exc)
                self.failure = exc
        running = {t for ts in self.consuming.running.values() for t in ts}
        backs: set[asyncio.Task[None]] = set()
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
                    backs.add(asyncio.ensure_future(self.endings.release(job)))
            if self.consuming.gave_up:
                self.consuming.give_up_marks()  # (the broker does not answer: not waited for again)
            elif self.consuming.marks and self.consuming.consumer is not None:
                wait = self._broker_wait(deadline)
                try:
                    await awaited_within(wait, self.consuming.commit_marks, self.consuming.consumer)
                except Abandoned:
                    log.warning("done marks not committed within %.0f s (the broker does not answer)", wait)
            running = {t for t in running if not t.done()}
            backs = {t for t in backs if not t.done()}
            if not (running or backs or self.endings.timers) or self.clock.monotonic() >= deadline:
                break
            await self.clock.sleep(0.05)
        consumer, self.consuming.consumer = self.consuming.consumer, None
        if consumer is not None:
            await self._close_clients(consumer)
        if self._builtin is not None:
            await self._builtin.close()
        if self.consuming.membership is not None:
            self.consuming.membership.stop()
        self._closed = True
        if self._give_up is not None:
            self._give_up.cancel()

    def _broker_wait(self, deadline: float) -> float:
        """How long a closing worker waits for a call into a Kafka client now: until ``deadline``
        (at most CLOSE_CLIENTS_WAIT), half a second once the broker was given up on."""
        if self.consuming.gave_up:
            return 0.5
        return max(0.5, min(deadline - self.clock.monotonic(), CLOSE_CLIENTS_WAIT))

    async def _close_clients(self, consumer: Consumer) -> None:
        """The last done marks committed, the reports flushed, the group left: each call waited for
        within what is left of ``CLOSE_CLIENTS_WAIT`` all told, so that a worker told to stop ends
        even when its broker does not answer (then the group moves its partitions after the
        session timeout, as after a crash; a report not flushed is the frontier's lease to
        bring back)."""
        # (once given up on, the broker gets UNANSWERED: nothing waits to be flushed any more)
        budget = UNANSWERED if self.consuming.gave_up else CLOSE_CLIENTS_WAIT
        deadline = self.clock.monotonic() + budget
        producer = self.reporter.publisher.producer
        steps: list[tuple[str, Callable[[], object]]] = [
            ("commit the last done marks", partial(self.consuming.commit_marks, consumer)),
            ("flush the reports", partial(producer.close, max(1.0, CLOSE_CLIENTS_WAIT / 2))),
            ("leave the group", consumer.close),
        ]
        for what, call in steps:
            try:
                await awaited_within(max(0.5, deadline - self.clock.monotonic()), call)
            except Abandoned:
                log.warning("could not %s within %.0f s (the broker does not answer): the worker ends "
                            "without it", what, budget)  # fmt: skip
        self.consuming.give_up_marks()  # never committed: their jobs are not reported (their leases come back)

    # -- the shapes --------------------------------------------------------------------------------
    async def serve(self, handler: Handler) -> None:
        """The callback shape, until :meth:`stop`: each job goes to ``handler`` in a task of its own
        (at most ``concurrency`` at once). A returned outcome is reported; an exception is reported
        as an error (``worker:<ExceptionName>``); a job left without a report is released."""
        self.handler = handler
        async with self:
            while not self._stop.is_set() and self._poller is not None and not self._poller.done():
                await self._stopped_or(self._poller)
        if self.failure is not None:
            raise RuntimeError("the worker's consumer failed") from self.failure

    async def _stopped_or(self, poller: asyncio.Task[None]) -> None:
        """Until :meth:`stop` or the poller's end (a second at most: then looked at again). Not a
        sleep of a tenth of a second in a loop: ten wake-ups a second of an idle worker."""
        assert self._woken is not None
        woken = asyncio.ensure_future(self._woken.wait())
        try:
            await asyncio.wait((poller, woken), timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()

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
        deadline = None if timeout is None else self.clock.monotonic() + timeout
        while True:
            if not ready.empty():
                job = ready.get_nowait()  # get(0) takes a waiting job too
            else:
                if self._poller is not None and self._poller.done() and self._poller.exception() is not None:
                    raise RuntimeError("the worker's consumer failed") from self._poller.exception()
                if self._stop.is_set():
                    return None
                wait = 0.2 if deadline is None else min(0.2, deadline - self.clock.monotonic())
                if wait <= 0:
                    return None
                try:
                    job = await self.clock.wait_for(ready.get(), wait)
                except TimeoutError:
                    continue
            if job.reported:
                continue  # given up while it waited to be taken (see Endings._abandon)
            if not await self.consuming.still_owns(job):
                # its partition moved on while it waited: another worker sends it
                self.endings.drop(job, finish=self.consuming.owns(job) is not False)
                continue
            now = self.clock.now()
            if now > job.expires_at or self.holder.closed(job.gate_host, now):
                # taken too late (the frontier has freed its slot), or the host announced a window
                # since it was handed over (an earlier job's 429): back to the frontier, unsent
                await self.endings.release(job)
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
        leased = LeasedJob(self.endings, job, coords)
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
                await self.endings.finish(leased, await self._internal_fetch(leased))
            elif self.handler is not None:
                await self._run_handler(leased)
            else:
                assert self._ready is not None and self._loop is not None
                # the task lives until the job is reported (or dropped, given up): a revoke then
                # waits for a job in user code's hands as for a handler's, so its done mark is
                # committed before the partition moves and the new owner does not fetch it again
                end = self.endings.ends[leased] = self._loop.create_future()
                self._ready.put_nowait(leased)
                await end
        except asyncio.CancelledError:
            if not leased.reported and self._closing and leased not in self.endings.timers:
                await self.endings.release(leased)  # shutting down before it was handed over: back at once
                return
            self.endings.drop(leased)  # a revoke or a lost assignment: the partition's new owner gets it again
            raise
        except Exception:
            log.exception("job %s (%s) failed; it will come back after its lease", job.lease, job.item.url)
            self.endings.done(leased)

    async def _hold(self, leased: LeasedJob) -> bool:
        """Wait for a slot and the host's send time (:class:`~workers.api.holding.Holder`); True once
        it is handed over (this worker's clock says it may be sent, and its partition is still this
        worker's), False when it was handed back, declined or dropped (its partition moved on:
        nothing sent, nothing reported)."""
        job, ends, consuming = leased.job, self.endings, self.consuming
        if not await consuming.still_owns(leased):
            ends.drop(leased, finish=consuming.owns(leased) is not False)
            return False
        if self.clock.now() > job.expires_at:
            await ends.back(leased)
            return False
        if self.addresses is not None and job.kind in self.kinds:
            blocked = await self.addresses.blocked(job.item.url, leased)
            if blocked:
                say_blocked(log, job.item.host)
                await ends.report(leased, Outcome(error="blocked_address"))
                return False
        held = await self.holder.hold(leased, consuming)
        if held is Held.LOST:
            ends.drop(leased, finish=consuming.owns(leased) is not False)
            return False
        if held is Held.LATE:  # its send time came after expires_at: the frontier has freed its slot
            if await consuming.still_owns(leased):
                await ends.back(leased)
            else:
                ends.drop(leased, finish=consuming.owns(leased) is not False)
            return False
        ends.handed(leased)
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
                await self.endings.finish(leased, Outcome(error=f"worker:{type(exc).__name__}"))
            return
        if not leased.reported:
            await (self.endings.finish(leased, outcome) if outcome is not None else self.endings.release(leased))

    async def _internal_fetch(self, leased: LeasedJob) -> Outcome:
        if self.internal is None:
            # the default engine, made when first needed
            self._builtin = AiohttpFetcher(self.cfg, self.concurrency, self.clock)
            self.internal = self._builtin.fetch
        return await self.internal(leased)

    def max_body(self, job: Job) -> int:
        return MAX_ROBOTS_BYTES if job.kind == "robots" else self.cfg.worker.max_body_bytes

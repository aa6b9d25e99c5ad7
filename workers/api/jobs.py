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

The parts: ``base`` (the fields), ``holding``, ``reporting`` and ``consuming`` (mixins);
here the life, the shapes, one job's way through, and the reports' entry points.
"""

from __future__ import annotations

import asyncio
import logging
import time

from confluent_kafka import Message
from prometheus_client import start_http_server

from frontier.kafka import coordinates
from topics.admin import create_crawl_jobs
from topics.catalog import workers_group
from topics.schemas import Job, SchemaError, decode
from workers.api.base import Handler
from workers.api.consuming import Consuming
from workers.api.holding import Holding
from workers.api.leased import AlreadyReported, LeasedJob, Outcome, lower_headers
from workers.api.membership import Membership
from workers.api.publishing import Publisher
from workers.api.reporting import Reporting

log = logging.getLogger("worker")


class Jobs(Holding, Reporting, Consuming):
    """Leased jobs from the frontier, each handed over when it may be sent.

    ``kinds``: the job kinds user code takes (others are fetched here with ``internal``, default
    the built-in fetcher); ``check_addresses``: resolve each job's host and decline it (error
    ``blocked_address``) when it resolves only to addresses the worker may not reach
    (``worker.allow_networks`` / ``block_private``); a fetcher that connects through
    :class:`~workers.api.safety.SafeConnector` checks at connect time and may turn this off.
    """

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
        consumer = self._consumer = self.kafka.consumer(
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
        self.membership = Membership()
        self.membership.start()
        consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                           on_lost=self._on_lost)  # fmt: skip
        self._poller = asyncio.ensure_future(self._consume(consumer))

    async def close(self) -> None:
        """Stop; hand back the jobs still waiting for their slot or to be taken; give those in user
        code's hands up to the fetch timeout; commit; close the clients."""
        self.stop()
        self._closing = True
        if self._poller is not None:
            try:
                await self._poller
            except Exception as exc:  # noqa: BLE001 - kept: serve() raises it once closed
                log.error("the worker's consumer failed: %s: %s", type(exc).__name__, exc)
                self.failure = exc
        for task in list(self._holding):
            task.cancel()  # handed back (see handle): nothing was sent
        while self._ready is not None and not self._ready.empty():
            job = self._ready.get_nowait()
            if not job.reported:
                await self.release(job)
        running = {t for ts in self._running.values() for t in ts}
        deadline = time.monotonic() + self.cfg.frontier.fetch_timeout + 5
        while (running or self._timers) and time.monotonic() < deadline:
            running = {t for t in running if not t.done()}
            await asyncio.sleep(0.05)
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await asyncio.to_thread(self._commit_marks, consumer)
            await asyncio.to_thread(self.publisher.producer.close)
            await asyncio.to_thread(consumer.close)
        if self._builtin is not None:
            await self._builtin.close()
        if self.membership is not None:
            self.membership.stop()

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
            gate = self.gates.get(job.gate_host)
            if now > job.expires_at or (gate is not None and gate.closed_until > now):
                # taken too late (the frontier has freed its slot), or the host announced a window
                # since it was handed over (an earlier job's 429): back to the frontier, unsent
                await self.release(job)
                continue
            return job

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
            self._drop(leased)  # a revoke or a lost assignment: the partition's new owner gets it again
            raise
        except Exception:
            log.exception("job %s (%s) failed; it will come back after its lease", job.lease, job.item.url)
            self._done(leased)

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
            from workers.api.builtin import AiohttpFetcher  # the default engine, made when first needed

            self._builtin = AiohttpFetcher(self.cfg, self.concurrency)
            self.internal = self._builtin.fetch
        return await self.internal(leased)

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
        await self._skipped(leased, reason)

    async def release(self, leased: LeasedJob) -> None:
        """Handed back unfetched: the frontier queues it again."""
        self._claim(leased)
        self._unsend(leased)
        await self._back(leased)

    def _claim(self, leased: LeasedJob) -> None:
        if leased.reported:
            raise AlreadyReported(f"{leased!r} was already reported (or given up after its lease)")
        leased.reported = True

    def _abandon(self, leased: LeasedJob) -> None:
        """Not reported by ``expires_at + timeout``: given up here (no feedback; the frontier's
        lease expires a little later and the job comes back)."""
        self._timers.pop(leased, None)
        if leased.reported:
            return
        leased.reported = True
        log.warning("%r was not reported within its lease; given up (the frontier re-queues it)", leased)
        self._done(leased)

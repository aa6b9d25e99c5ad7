"""The ways a job ends in a worker (:class:`Endings`): reported (fetched, failed, skipped), handed
back unfetched, held for a client until a time, dropped (its partition is another worker's now),
or given up after its lease; each frees the job's slot and marks its offset in the same order.

It is what a :class:`~workers.api.leased.LeasedJob` calls of the worker API (its
:class:`~workers.api.leased.Lessor`): the reports, and what user code tells along the way (``sent``,
``answered``, ``keep_gate_until``: the host's gate, :class:`~workers.api.holding.Holder`'s). A
report goes in the protocol's order: the slot and gate given back, the done mark committed
(:meth:`JobConsumer.mark_done <workers.api.consuming.JobConsumer.mark_done>`), then the records
(:class:`~workers.api.reporting.Reporter`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from topics.schemas import Job
from workers.api.clock import Clock, Timer
from workers.api.consuming import JobConsumer
from workers.api.holding import Holder
from workers.api.leased import AlreadyReported, LeasedJob, Outcome
from workers.api.offsets import OffsetTracker
from workers.api.outcome import FetchResult, lower_headers
from workers.api.reporting import Reporter

log = logging.getLogger("worker")


class Endings:
    """How the jobs handed over end: ``timers`` (each job handed over is given up at its
    ``expires_at + timeout``, or the end of a hold), ``ends`` (pull shape: resolved once the job
    is over here) and ``dropped`` (jobs whose partition moved on before they were sent, left to
    the new owner)."""

    def __init__(
        self,
        holder: Holder,
        reporter: Reporter,
        consuming: JobConsumer,
        tracker: OffsetTracker,
        max_body: Callable[[Job], int],
        clock: Clock,
    ) -> None:
        self.holder = holder
        self.reporter = reporter
        self.consuming = consuming
        self.tracker = tracker
        self._max_body = max_body
        self.clock = clock
        self.timers: dict[LeasedJob, Timer] = {}
        self.ends: dict[LeasedJob, asyncio.Future[None]] = {}
        self.dropped = 0

    # -- what a job tells along the way ------------------------------------------------------------
    def max_body(self, job: Job) -> int:
        return self._max_body(job)

    def sent(self, leased: LeasedJob, at: float | None) -> None:
        self.holder.sent(leased, self.clock.now() if at is None else at)

    def answered(self, leased: LeasedJob, result: FetchResult) -> None:
        self.holder.answered(leased, result)

    def keep_gate_until(self, leased: LeasedJob, done: asyncio.Future[object]) -> None:
        self.holder.keep_gate_until(leased, done)

    # -- the reports -------------------------------------------------------------------------------
    async def finish(self, leased: LeasedJob, outcome: Outcome) -> None:
        """A request went out (or was attempted): time the host from it, then publish."""
        self._claim(leased)
        now = self.clock.now()
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
        await self.report(leased, outcome)

    async def skip(self, leased: LeasedJob, reason: str) -> None:
        """Declined without a request: the URL ends with a ``skipped`` page."""
        self._claim(leased)
        self.holder.unsend(leased)
        await self._concluding(leased, lambda: self.reporter.report_skip(leased, reason))

    async def release(self, leased: LeasedJob) -> None:
        """Handed back unfetched: the frontier queues it again."""
        self._claim(leased)
        self.holder.unsend(leased)
        await self.back(leased)

    async def hold(self, leased: LeasedJob, until: float, tell: bool = True) -> None:
        """Kept until ``until``: given up here then (not before), and the frontier told to keep its
        lease as long (feedback ``held``)."""
        if leased.reported:
            raise AlreadyReported(f"{leased!r} was already reported (or given up after its lease)")
        timer = self.timers.pop(leased, None)
        if timer is not None:
            timer.cancel()
        self.timers[leased] = self.clock.call_at(until, lambda: self._abandon(leased))
        if tell:
            await self.reporter.report_hold(leased, until)

    def _claim(self, leased: LeasedJob) -> None:
        if leased.reported:
            raise AlreadyReported(f"{leased!r} was already reported (or given up after its lease)")
        leased.reported = True

    # -- the ways a job ends here ------------------------------------------------------------------
    def handed(self, leased: LeasedJob) -> None:
        """The job is in user code's hands: given up at ``expires_at + timeout`` unless reported."""
        job = leased.job
        self.timers[leased] = self.clock.call_at(job.expires_at + job.timeout, lambda: self._abandon(leased))

    async def report(self, leased: LeasedJob, outcome: Outcome) -> None:
        """Publish a job's outcome (fetched, or an error). Not this worker's to report any more
        (its partition went to another worker meanwhile): the request still went out, so what the
        server said reaches the host's throttling as a late result (no page, no lease closed)."""
        leased.reported = True
        await self._concluding(leased, lambda: self.reporter.report(leased, outcome),
                               otherwise=lambda: self.reporter.report_late(leased, outcome))  # fmt: skip

    async def back(self, leased: LeasedJob) -> None:
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
            if await self.consuming.mark_done(leased):
                await publish()
            elif otherwise is not None:
                await otherwise()
        finally:
            self.done(leased)

    def drop(self, leased: LeasedJob, finish: bool = False) -> None:
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

    def done(self, leased: LeasedJob) -> None:
        """The job is over here: its slot freed, its offset may be committed."""
        self.holder.leave(leased)
        self._ended(leased)
        self.tracker.finished(*leased._coords)

    def _ended(self, leased: LeasedJob) -> None:
        """No timer to give it up any more; its consumed task (pull shape) may end."""
        timer = self.timers.pop(leased, None)
        if timer is not None:
            timer.cancel()
        end = self.ends.pop(leased, None)
        if end is not None and not end.done():
            end.set_result(None)

    def let_go(self, leased: LeasedJob) -> None:
        """Over here without a report (a job held for a client when the process stops): the
        frontier's lease, kept until the hold's end, brings the URL back."""
        if not leased.reported:
            leased.reported = True
            self.done(leased)

    def _abandon(self, leased: LeasedJob) -> None:
        """Not reported by ``expires_at + timeout``: given up here (no feedback; the frontier's
        lease expires a little later and the job comes back)."""
        self.timers.pop(leased, None)
        if leased.reported:
            return
        leased.reported = True
        log.warning("%r was not reported within its lease; given up (the frontier re-queues it)", leased)
        self.done(leased)

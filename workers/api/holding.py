"""Holding a job until it may be sent (:class:`Holder`): a slot among ``concurrency``, then the
host's gate (:mod:`workers.api.gates`): ``not_before``, this worker's last send to the host plus
``min_gap``, a window the host announced, a server-stated floor from the end of its previous
response (THROTTLING.md v2 §4, §9). Also what user code tells along the way (``sent``,
``answered``), a job's slot and gate given back (``leave``) and the pruning of idle gates.

It knows nothing of Kafka or of reports: whether a job's partition is still this worker's is
asked of an :class:`Ownership` (the consumer), and what becomes of a job it does not hand over
is its caller's to decide (:class:`Held`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import defaultdict
from typing import Protocol

from frontier.config import ThrottleConfig
from frontier.core.headers import gate_seconds
from frontier.core.policy import with_margin
from topics.schemas import NETWORK_ERRORS, Job
from workers.api.clock import Clock
from workers.api.gates import _HostGate
from workers.api.leased import LeasedJob
from workers.api.metrics import WorkerMetrics
from workers.api.outcome import BackoffCodes, FetchResult

log = logging.getLogger("worker")

GATE_IDLE = 600.0  # a host's gate is forgotten after this long without a request (or twice the fetch timeout)


class Ownership(Protocol):
    """Whether a job's partition is still this worker's (:class:`~workers.api.consuming.JobConsumer`)."""

    def owns(self, leased: LeasedJob) -> bool | None: ...

    async def still_owns(self, leased: LeasedJob) -> bool: ...


class Held(enum.Enum):
    """How holding a job ended."""

    HANDED = "handed"  # its send time has come: it holds a slot and its host's gate until it leaves
    LOST = "lost"  # its partition is another worker's now
    LATE = "late"  # its send time came after its expires_at


class Holder:
    """The slots (``concurrency``), the per-host gates (``gates``) and the jobs holding both
    (``entered``, from their hand-over until they leave); send times read on ``clock``."""

    def __init__(
        self,
        concurrency: int,
        throttle: ThrottleConfig,
        fetch_timeout: float,
        backoff_codes: BackoffCodes,
        metrics: WorkerMetrics,
        clock: Clock,
    ) -> None:
        self.clock = clock
        self.throttle = throttle
        self.fetch_timeout = fetch_timeout
        self.backoff_codes = backoff_codes
        self.metrics = metrics
        self.gates: dict[str, _HostGate] = defaultdict(_HostGate)
        self.entered: set[LeasedJob] = set()  # jobs holding a slot and their host's gate
        self._slots = asyncio.Semaphore(concurrency)

    async def hold(self, leased: LeasedJob, ownership: Ownership) -> Held:
        """Wait for a slot and the host's send time. ``HANDED``: this worker's clock says it may be
        sent and its partition is still this worker's; it holds the slot and the gate until
        :meth:`leave`. ``LOST`` (its partition moved on) or ``LATE`` (its send time came after
        ``expires_at``): slot and gate are given back, nothing was sent."""
        job = leased.job
        m = self.metrics
        m.held.inc()
        lost = False
        try:
            await self._slots.acquire()
            gate = self.gates[leased.gate_host]
            gate.enter()  # from here until it leaves, the gate is not forgotten (prune_gates)
            on_time = False
            try:
                async with gate.lock:
                    # The host's previous request must really have gone out (its headers sent, or it
                    # failed) before the next one is timed from it: a stalled event loop or a slow
                    # connect would otherwise shrink the gap the server sees.
                    await gate.idle.wait()
                    # asyncio may wake a timer up to a clock tick early: re-check until the slot has come
                    # (a window the host announces meanwhile moves it: the loop reads it again); a
                    # process stopped meanwhile waits for the group to confirm the partition is its own
                    while (slot := self.slot(job, gate)) <= job.expires_at:
                        if (now := self.clock.now()) < slot:
                            await self.clock.sleep(slot - now)
                            continue
                        owned = ownership.owns(leased)
                        if owned is None:
                            owned = await ownership.still_owns(leased)
                            if owned:
                                continue  # the send time is read again after the wait
                        lost = not owned
                        break
                    read = self.clock.now
                    on_time = not lost and read() <= job.expires_at and self.slot(job, gate) <= read()
                    if on_time:
                        leased._prev_sent = gate.last_sent
                        gate.last_sent = leased.handed_at = self.clock.now()
                        gate.idle.clear()
                        leased.holds_idle = True
            finally:
                if not on_time:  # not handed over (cancelled, too late, or lost): slot and gate go back
                    gate.leave()
                    self._slots.release()
        finally:
            m.held.dec()
        if lost:
            return Held.LOST
        if not on_time:
            return Held.LATE
        self.entered.add(leased)
        m.inflight.inc()
        return Held.HANDED

    @staticmethod
    def slot(job: Job, gate: _HostGate) -> float:
        """The earliest send time of ``job``: its ``not_before``, the host's gap since this worker's
        last send, any window the host announced to this worker, and a server-stated interval
        (Crawl-delay) counted from the end of the host's previous response (§9)."""
        floor = gate.last_end + job.floor if job.floor and gate.last_end else 0.0
        return max(job.not_before, gate.last_sent + job.min_gap, gate.closed_until, floor)

    def closed(self, host: str, now: float) -> bool:
        """The host announced a window this worker is inside of."""
        gate = self.gates.get(host)
        return gate is not None and gate.closed_until > now

    def leave(self, leased: LeasedJob) -> None:
        """Give back the job's slot and its host's gate (once)."""
        if leased not in self.entered:
            return
        self.entered.discard(leased)
        gate = self.gates.get(leased.gate_host)
        if gate is not None:
            if leased.holds_idle:  # its request never said it went out: the host's next may go now
                leased.holds_idle = False
                gate.idle.set()
            gate.leave()
        self._slots.release()
        self.metrics.inflight.dec()

    def sent(self, leased: LeasedJob, at: float) -> None:
        leased.sent_at = at
        gate = self.gates.get(leased.gate_host)
        if gate is not None and leased in self.entered:
            gate.last_sent = max(gate.last_sent, at)
            if leased.holds_idle:  # once: a second sent() must not open the gate under a later job
                leased.holds_idle = False
                gate.idle.set()

    def keep_gate_until(self, leased: LeasedJob, done: asyncio.Future[object]) -> None:
        """The job is being reported (a timeout) while its fetch may still send (a thread that
        cannot be stopped): the host's next job waits for ``done``, not for the report."""
        gate = self.gates.get(leased.gate_host)
        if gate is None or leased not in self.entered or not leased.holds_idle or done.done():
            return
        leased.holds_idle = False  # leaving will not open the gate: the fetch's end does
        gate.enter()  # and it is not forgotten meanwhile

        def opened(_: object) -> None:
            gate.idle.set()
            gate.leave()

        done.add_done_callback(opened)

    def answered(self, leased: LeasedJob, result: FetchResult) -> None:
        """A window the host announced closes it to this worker's held jobs, from the moment its
        headers are in (the body is not waited for: meanwhile another job could be sent)."""
        gate = self.gates.get(leased.gate_host)
        if gate is None or leased not in self.entered:
            return
        now = self.clock.now()
        trigger = result.error in NETWORK_ERRORS or result.status in self.backoff_codes(leased.job)
        closed = gate_seconds(result.status, result.headers, trigger, now)
        if closed is not None:
            until = now + with_margin(min(closed[0], self.throttle.for_scope(leased.gate_host).gate_max))
            if until > gate.closed_until:
                gate.closed_until = until
                log.info("%s: %s, holding its jobs until +%.1fs", leased.gate_host, closed[1], until - now)

    def finished(self, leased: LeasedJob, outcome: FetchResult, told: float) -> None:
        """The job's request went out (or was attempted), surely by ``told`` (0: not said): the
        host's next request is timed from it, a server-stated floor from the response's end."""
        gate = self.gates.get(leased.gate_host)
        if gate is not None and leased in self.entered:
            self.answered(leased, outcome)
            gate.last_sent = max(gate.last_sent, told or outcome.done_at)
            gate.last_end = max(gate.last_end, outcome.done_at)  # server-stated floors count from here

    def unsend(self, leased: LeasedJob) -> None:
        """No request went out after all: the host's last send is what it was before this job."""
        gate = self.gates.get(leased.gate_host)
        if gate is not None and leased in self.entered and gate.last_sent == leased.handed_at and not leased.sent_at:
            gate.last_sent = leased._prev_sent

    def prune_gates(self, now: float) -> int:
        """Forget the hosts this worker has not sent to for a while (their gates are idle: nothing
        holds or waits for them, no window is open), so memory does not grow with every host ever
        seen. What the frontier schedules does not depend on them; a forgotten host's next job
        starts a fresh gate. Returns how many were forgotten."""
        idle_for = max(GATE_IDLE, 2 * self.fetch_timeout)
        stale = [host for host, g in self.gates.items()
                 if now - max(g.last_sent, g.last_end, g.closed_until) > idle_for
                 and not g.busy()]  # fmt: skip
        for host in stale:
            del self.gates[host]
        return len(stale)

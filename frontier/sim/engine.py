"""The throttling simulator: the real policy (:mod:`frontier.core.policy`) against a model site, in
virtual time. Deterministic (seeded jitter), no clock, no I/O: a two-minute crawl of a site
takes milliseconds, so the required results of ``../shared/THROTTLING.md`` §3-4 can be asserted
in unit tests and printed as a table (``python -m frontier.sim``).

One scope, one site. Each step is the earlier of: the next response reaching the frontier
(``transit`` after the site answered), or the next send the policy allows. A send is recorded
by the site at once (its arrival time), and answered after the site's latency.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from dataclasses import dataclass

from frontier.config import ScopeSettings
from frontier.core.headers import gate_seconds
from frontier.core.policy import Done, Robots, ScopeState, Sent, apply, decide, delay, with_margin
from frontier.sim.sites import Answer, Outage, Site

T0 = 1_790_000_000.0  # virtual epoch start (2026-09-21): HTTP-dates make sense
MAX_EVENTS = 2_000_000


@dataclass(frozen=True)
class Result:
    site: str
    sent: int
    ok: int  # answered 2xx
    limited: int  # 429s
    limited_after: int  # 429s answered to requests sent after the warm-up
    sent_after: int  # requests sent after the warm-up
    troubled: int  # 5xx and network errors
    rate: float  # successful requests per second after the warm-up
    allowance: float  # what the site allowed, req/s, over the same period (capped by what the settings allow)
    inside_windows: int  # requests inside a window the site had announced
    under_floor: int  # gaps under the site's Crawl-delay
    recovery: float | None  # outages: seconds from its end until the pre-outage rate is back
    final_delay: float
    state: ScopeState  # the scope's state at the end

    @property
    def share(self) -> float:
        """Share of the allowance fetched (1.0 = all of it)."""
        return self.rate / self.allowance if self.allowance > 0 and math.isfinite(self.allowance) else 1.0

    @property
    def limit_share(self) -> float:
        """429s among the responses to requests sent after the warm-up."""
        return self.limited_after / self.sent_after if self.sent_after else 0.0


def simulate(
    site: Site,
    settings: ScopeSettings,
    duration: float = 120.0,
    warmup: float = 20.0,
    transit: float = 0.005,
    seed: int = 1,
    trace: list[str] | None = None,
) -> Result:
    """Crawl ``site`` for ``duration`` virtual seconds with ``settings`` and judge by its log."""
    rng = random.Random(seed)
    s = settings
    t, end = T0, T0 + duration
    state = ScopeState()
    if site.floor:
        state = apply(state, Robots(site.floor), t, s)
    # the event heap: (time, seq, kind, dispatched at, arrived at, answer); kinds: "arrive" at the
    # site, "answer" at the frontier
    events: list[tuple[float, int, str, float, float, Answer | None]] = []
    inflight = seq = ok_after = limited_after = sent_after = 0
    ok = 0
    # The worker that got a response reads its gate at once (§4: workers hold gates): a job it
    # holds waits for that gate even before the frontier has heard of it.
    worker_gates: list[tuple[float, float]] = []  # (known from, until)
    for _ in range(MAX_EVENTS):
        d = decide(state, t, s)
        next_send = d.at if d.at is not None else math.inf
        next_event = events[0][0] if events else math.inf
        if min(next_send, next_event) >= end:
            break
        if next_event <= next_send:
            t, _, kind, dispatched, sent, answer = heapq.heappop(events)
            if kind == "arrive":
                held = max((until for known, until in worker_gates if known <= t), default=t)
                seq += 1
                if held > t:  # the worker holds the job until the gate it already knows of has passed
                    heapq.heappush(events, (held, seq, "arrive", dispatched, 0.0, None))
                    continue
                if t >= T0 + warmup:
                    sent_after += 1
                answer = site.handle(t, inflight)
                inflight += 1
                gate = gate_seconds(answer.status, answer.headers, answer.status in s.backoff.codes, t + answer.latency)
                if gate is not None:
                    worker_gates.append((t + answer.latency, t + answer.latency + with_margin(gate[0])))
                heapq.heappush(events, (t + answer.latency + transit, seq, "answer", dispatched, t, answer))
                continue
            assert answer is not None
            status, error, latency = answer.status, answer.error, answer.latency
            inflight -= 1
            state = apply(state, Done(sent_at=sent, dispatched_at=dispatched, status=0 if error else status,
                                      latency=latency, error=error, headers=answer.headers), t, s)  # fmt: skip
            if 200 <= status < 300 and not error:
                ok += 1
                if sent >= T0 + warmup:
                    ok_after += 1
            elif status == 429 and sent >= T0 + warmup:
                limited_after += 1
            if trace is not None:
                trace.append(f"{t - T0:9.3f} answer {status or error} sent {sent - T0:.3f} delay {delay(state, s):.3f}"
                             f" limit {state.limit:.3f} {state.cause}")  # fmt: skip
            continue
        t = max(t, next_send)
        state = apply(state, Sent(t, u=rng.random()), t, s)
        seq += 1
        heapq.heappush(events, (t, seq, "arrive", t, 0.0, None))
    span = duration - warmup
    allowance = _mean_allowance(site, T0 + warmup, end, _achievable(s, site))
    return Result(
        site=site.name,
        sent=len(site.arrivals),
        ok=ok,
        limited=site.limited,
        limited_after=limited_after,
        sent_after=sent_after,
        troubled=site.troubled,
        rate=ok_after / span if span > 0 else 0.0,
        allowance=allowance,
        inside_windows=site.inside_windows(),
        under_floor=site.under_floor(),
        recovery=_recovery(site) if isinstance(site, Outage) else None,
        final_delay=delay(state, s),
        state=state,
    )


def _achievable(s: ScopeSettings, site: Site) -> float:
    """Requests per second the settings allow at all on this site (its latency, the floor)."""
    cap = s.concurrency / max(site.latency, 1e-6)
    floor = max(s.delay, site.floor)
    return min(cap, 1.0 / floor) if floor > 0 else cap


def _mean_allowance(site: Site, start: float, end: float, cap: float) -> float:
    steps = 200
    width = (end - start) / steps
    return sum(min(site.allowance_at(start + (i + 0.5) * width), cap) for i in range(steps)) / steps


def _recovery(site: Outage) -> float | None:
    """Seconds from the first success after the outage until three consecutive gaps are back
    within 20 % (+10 ms) of the median gap before the outage; None if that never happened.
    (Until that first success nobody can know the outage is over: the crawler probes at its
    trouble interval.)"""
    before = [a for a in site.arrivals if a < site.start]
    gaps = sorted(b - a for a, b in itertools.pairwise(before))
    if not gaps:
        return None
    usual = gaps[len(gaps) // 2] * 1.2 + 0.01
    after = [a for a in site.arrivals if a >= site.end]
    for i in range(len(after) - 3):
        if all(after[j + 1] - after[j] <= usual for j in range(i, i + 3)):
            return after[i] - after[0]
    return None

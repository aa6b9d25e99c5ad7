"""The throttling policy of one scope, as pure functions: ``(state, event, now) -> state``.

No clock reads, no randomness, no Kafka, no RocksDB: time comes in as ``now`` (epoch seconds),
the jitter draw comes in with the :class:`Sent` event, and every state is an immutable value.
The frontier stores the state, feeds it events, and asks :func:`decide` when the scope may
send next and, if not now, why.

The delay of a scope is the largest of:
- its **base**: the configured ``delay`` (lowered by rampup), raised by robots.txt
  ``Crawl-delay`` unless ``ignore_robots_txt``;
- the **AutoThrottle** delay (Scrapy's rule, see :func:`autothrottle`), never below the base;
- the **adaptation** delay (:mod:`frontier.core.adapt`): responses move it. Limit signals teach the
  scope its limit and each success brings the delay back toward it; trouble signals probe at
  doubling intervals until the first success ends the outage;
- the quota **spread** (``window / quota``) when asked for, a **published budget**'s
  spread (RateLimit / X-RateLimit ``reset / remaining``), and a **budget not told**'s pace
  (:mod:`frontier.core.budget`: refusals that follow a count per period, not the rate).

Separately from the delay, a scope may be **gated** (Retry-After / RateLimit: no request at
all until a time that adaptation never shortens), **quota**-limited, or full
(``concurrency`` requests in flight). Server-stated intervals (Crawl-delay, Request-rate) are
a **floor** timed from the end of the previous response, with a margin (§9); jitter never
shortens a gap below it. Gates end with the same margin. (Pausing is an operator's override,
checked by the partition before it asks: :mod:`frontier.core.control`.)

The state and the events are :mod:`frontier.core.state` (re-exported here); adaptation is
:mod:`frontier.core.adapt` and header parsing :mod:`frontier.core.headers`. A little over ~300
lines: what is left is the order in which THROTTLING.md's rules combine, which reads best whole.
"""

from __future__ import annotations

import dataclasses

import msgspec

from frontier.config import ScopeSettings
from frontier.core import adapt, budget
from frontier.core.caps import capped_seconds
from frontier.core.causes import Cause
from frontier.core.headers import RateLimit, gate_seconds, ratelimit
from frontier.core.state import Decision, Done, Event, Lost, Robots, ScopeState, Sent
from topics.schemas import NETWORK_ERRORS

# the state and its events are part of this module's interface (callers write ``policy.Sent(...)``)
__all__ = [
    "MARGIN",
    "Decision",
    "Done",
    "Event",
    "Lost",
    "Robots",
    "ScopeState",
    "Sent",
    "advance",
    "apply",
    "autothrottle",
    "base_delay",
    "concurrency",
    "current_at_delay",
    "decide",
    "delay",
    "floor",
    "jitter_factor",
    "with_margin",
]

_EPS = 1e-9
MARGIN = (0.02, 0.02)  # server-stated intervals and windows are kept with 2 % + 20 ms to spare (§9)


def with_margin(seconds: float) -> float:
    return seconds * (1 + MARGIN[0]) + MARGIN[1] if seconds > 0 else 0.0


# -- the pieces ---------------------------------------------------------------------------------
def autothrottle(old: float, latency: float, status: int, s: ScopeSettings, min_delay: float) -> float:
    """Scrapy's AutoThrottle step (scrapy/extensions/throttle.py), commented line by line."""
    # If a server needs `latency` seconds to respond, sending every latency/N seconds keeps
    # N requests in flight on average.
    target = latency / s.autothrottle.target_concurrency
    # Move halfway from the old delay toward the target...
    new = (old + target) / 2.0
    # ...but if the target is above the old delay, go there at once: it works better with
    # struggling sites.
    new = max(target, new)
    # Never below the scope's minimum (its configured delay), never above the maximum.
    new = min(max(min_delay, new), s.autothrottle.max_delay)
    # Error pages are usually fast: never let a non-200 make us faster.
    if status != 200 and new <= old:
        return old
    return new


def jitter_factor(u: float, s: ScopeSettings) -> float:
    lo, hi = s.jitter
    return 1.0 + lo + (hi - lo) * u


def base_delay(state: ScopeState, s: ScopeSettings) -> float:
    base = state.ru_delay if s.rampup.enabled and state.ru_delay >= 0 else s.delay
    if state.robots_delay > base and not s.ignore_robots_txt:
        base = state.robots_delay
    return base


def concurrency(state: ScopeState, s: ScopeSettings) -> int:
    if state.robots_delay > 0 and not s.ignore_robots_txt:
        return 1  # Crawl-delay means one request at a time (seed 002)
    return state.ru_concurrency if s.rampup.enabled and state.ru_concurrency else s.concurrency


def current_at_delay(state: ScopeState, s: ScopeSettings) -> float:
    base = base_delay(state, s)
    if state.at_delay < 0:
        return max(base, s.autothrottle.start_delay)
    return max(base, state.at_delay)


def delay(state: ScopeState, s: ScopeSettings) -> float:
    """The scope's current gap between two sends (before jitter)."""
    d = current_at_delay(state, s) if s.autothrottle.enabled else base_delay(state, s)
    if budget.testing(state):  # a few requests at the limit before the refusals tell a budget's turn from a rate limit
        d = max(d, floor(state, s), budget.went_through(state))
    elif state.backoff > d:
        d = state.backoff
    if state.trouble > d:  # (a test, too, goes at a troubled server's pace)
        d = state.trouble
    if s.spread and s.quota > 0:
        d = max(d, s.window / s.quota)
    if state.srv_remaining > 0 and state.srv_spread > d:
        d = state.srv_spread  # a published budget: spread what is left over what is left of its window
    pace = budget.pace(state)
    return pace if pace > d else d  # (max(d, pace), without the call: 5 delays a job)


def floor(state: ScopeState, s: ScopeSettings) -> float:
    """The server-stated interval (Crawl-delay / Request-rate) with its margin; 0 when none."""
    return with_margin(state.robots_delay) if state.robots_delay > 0 and not s.ignore_robots_txt else 0.0


def _rampup(state: ScopeState, now: float, s: ScopeSettings) -> ScopeState:
    r = s.rampup
    if not r.enabled:
        return state
    if state.ru_window_start < 0:
        return msgspec.structs.replace(state, ru_window_start=now)
    if now - state.ru_window_start < r.window:
        return state
    lo, hi = r.target
    d = state.ru_delay if state.ru_delay >= 0 else s.delay
    c = state.ru_concurrency or s.concurrency
    cause, kind = state.cause, state.cause_kind
    unsafe = state.unsafe
    if state.ru_triggers < lo and state.backoff == 0 and state.ru_sent > 0:
        if unsafe and d <= unsafe + _EPS:
            unsafe = 0.0  # a whole quiet window at or below the old limit: it has moved
        if d > r.min_delay + _EPS:
            lower = max(r.min_delay, d / 2)
            if unsafe and lower < unsafe < d:
                lower = (d + unsafe) / 2  # do not jump past a delay known to trigger: bisect toward it
            cause, kind = f"rampup: quiet window, delay {d:.2f}->{lower:.2f}", Cause.RAMPUP
            d = lower
        elif c < r.max_concurrency:
            cause, kind = f"rampup: quiet window, concurrency {c}->{c + 1}", Cause.RAMPUP
            c += 1
    elif state.ru_triggers > hi:
        if c > s.concurrency:
            cause, kind = f"rampup: {state.ru_triggers} backoff responses, concurrency {c}->{c - 1}", Cause.RAMPUP
            c -= 1
        else:
            cause = f"rampup: {state.ru_triggers} backoff responses, delay {d:.2f}->{min(s.delay, d * 2):.2f}"
            kind = Cause.RAMPUP
            d = min(s.delay, d * 2)
    # windows during which nothing was sent tell nothing: start the next window now
    return msgspec.structs.replace(
        state,
        ru_delay=d,
        ru_concurrency=c,
        ru_window_start=now,
        ru_triggers=0,
        ru_sent=0,
        cause=cause,
        unsafe=unsafe,
        cause_kind=kind,
    )


def advance(state: ScopeState, now: float, s: ScopeSettings) -> ScopeState:
    """Apply what the passing of time does: a published budget's window ends; rampup windows
    (adaptation moves on responses only)."""
    if state.srv_spread and now >= state.srv_until:
        state = msgspec.structs.replace(state, srv_spread=0.0, srv_remaining=-1)
    return _rampup(budget.advance(state, now), now, s)


# -- events -----------------------------------------------------------------------------------
def apply(state: ScopeState, event: Event, now: float, s: ScopeSettings) -> ScopeState:
    """Return the scope's state after ``event`` at time ``now``."""
    state = advance(state, now, s)
    rep = msgspec.structs.replace
    if isinstance(event, Sent):
        used, start = state.quota_used, state.quota_start
        if s.quota > 0:
            if start < 0 or now >= start + s.window:
                used, start = 0.0, now
            used += event.cost
        srv = state.srv_remaining - 1 if state.srv_remaining > 0 and now < state.srv_until else state.srv_remaining
        gap, returned = adapt.sent_fields(state, event.at, delay(state, s))
        state = budget.on_sent(state, event.at)
        last = event.at if event.at > state.last_sent else state.last_sent  # (max() without the call, as below)
        return rep(state, inflight=state.inflight + 1, last_sent=last, jitter_u=event.u,
                   quota_used=used, quota_start=start, srv_remaining=srv, ru_sent=state.ru_sent + 1,
                   sent_total=state.sent_total + 1, gap=gap, returned=returned)  # fmt: skip
    if isinstance(event, Lost):
        return rep(state, inflight=max(0, state.inflight - 1))
    if isinstance(event, Robots):
        asked = max(0.0, event.delay)
        d = min(asked, s.robots_max_delay)
        cause, kind = state.cause, state.cause_kind
        if asked > d:
            cause = f"robots.txt asks {asked:.2f}s between requests, capped at {d:.2f}s (robots_max_delay)"
            kind = Cause.ROBOTS
        elif d:
            cause, kind = f"robots.txt delay {d:.2f}", Cause.ROBOTS
        return rep(state, robots_delay=d, cause=cause, cause_kind=kind)
    return _done(state, event, now, s)


def _done(state: ScopeState, ev: Done, now: float, s: ScopeSettings) -> ScopeState:
    rep = msgspec.structs.replace
    # A worker may have sent later than we dispatched (queueing in Kafka, waiting for its own
    # per-host gap): time the next slot from the real send so lag never shortens a gap.
    # A worker clock running ahead must not push the next slot into the future: a send time is
    # never later than the moment its result reaches us.
    # (min and max written out: this runs for every result)
    sent_at = now if now < ev.sent_at else ev.sent_at
    last = state.last_sent
    if sent_at > 0 and sent_at > last:  # (0: never sent)
        last = sent_at
    inflight = state.inflight if ev.late else (state.inflight - 1 if state.inflight > 1 else 0)
    # the response ended when the worker says (else no earlier than its headers), never after now
    if sent_at > 0:
        told = ev.done_at or sent_at + ev.latency
        end = told if told < now else now
    else:
        end = state.last_end
    state = rep(state, inflight=inflight, last_sent=last, last_end=end if end > state.last_end else state.last_end)
    if ev.outcome in ("expired", "skipped"):  # no request went out: nothing to learn
        return state
    # AutoThrottle: only real responses with a latency move it; exceptions never lower it.
    if s.autothrottle.enabled and ev.adjust and ev.status and not ev.error and ev.latency > 0:
        old = current_at_delay(state, s)
        new = autothrottle(old, ev.latency, ev.status, s, base_delay(state, s))
        if abs(new - old) > _EPS:
            why = f"autothrottle {old:.2f}->{new:.2f} (latency {ev.latency:.3f}s, {ev.status})"
            state = rep(state, at_delay=new, cause=why, cause_kind=Cause.AUTOTHROTTLE)
        else:
            state = rep(state, at_delay=new)
    trigger = ev.status in s.backoff.codes or ev.error in NETWORK_ERRORS
    # the host's failing run (frontier.core.retries): begun by a failure, ended by any answer
    if trigger and state.failing_since < 0:
        state = rep(state, failing_since=now)
    elif not trigger and ev.status and not ev.error and state.failing_since >= 0:
        state = rep(state, failing_since=-1.0)
    # Hard gates: Retry-After (trigger responses only) or RateLimit remaining=0.
    headers = ev.headers
    gate = gate_seconds(ev.status, headers, trigger, now) if headers else None  # (no header: nothing said)
    rl = ratelimit(headers, now) if headers else None
    if rl is not None and rl.reset > s.gate_max:  # a reset from outside: at most gate_max away (frontier.core.caps)
        rl = dataclasses.replace(rl, reset=capped_seconds(rl.reset, s.gate_max))
    if gate is not None:
        seconds, why = gate
        if rl is not None and rl.remaining == 0 and why.startswith("RateLimit") and state.srv_seen > 0:
            # the budget of a window that answered with remaining > 0 before has run out: its end,
            # narrowed by those answers (see _narrowed). Repeated zeros (a token bucket refilling
            # one token at a time) are not narrowed: each extends the gate.
            seconds = _narrowed(state, rl, now)[1] - now
        until = now + with_margin(min(seconds, s.gate_max))
        if until > state.gate_until:
            state = rep(state, gate_until=until, gate_cause=f"{why}: {seconds:.0f}s")
    if rl is not None and rl.remaining == 0 and rl.reset > 0:
        state = rep(state, srv_seen=0)
    if rl is not None and rl.remaining > 0 and rl.reset > 0:
        # A published budget: never more than `remaining` requests before the reset (a hard stop,
        # with the margin), spread evenly over it (those in flight already count against it). The
        # pacing itself takes no margin: paced at reset/remaining, the last request lands at the
        # reset, in the next window, and the stop is never reached when the budget is kept.
        #
        # The reset is in whole seconds, rounded up: it says the window ends within (t-1, t]. Each
        # response of the same window narrows that down (the intersection), so a fixed window of
        # 5 s is not paced as if it were up to a second longer.
        left = max(0, rl.remaining - state.inflight)
        lo, hi = _narrowed(state, rl, now)
        spread = (hi - now) / left if left else 0.0
        state = rep(state, srv_remaining=left, srv_until=now + with_margin(hi - now), srv_spread=spread,
                    srv_lo=lo, srv_hi=hi, srv_seen=rl.remaining)  # fmt: skip
        if s.quota > 0:
            state = rep(state, quota_used=max(0.0, s.quota - rl.remaining))
    kind = adapt.classify(ev.status, ev.error, trigger, gate is not None)
    if kind != adapt.TROUBLE and ev.status:  # a budget not told: refusals that follow a count
        current = delay(state, s)
        state, theirs = budget.on_response(state, kind == adapt.LIMIT, ev.dispatched_at or min(ev.sent_at, now) or now,
                                           now, current, adapt.interval(state, current))  # fmt: skip
        if theirs:
            return state
    if kind == adapt.SUCCESS:
        if not ev.status or ev.late:
            return state
        base = base_delay(state, s)
        paced = budget.pace(state) > 2 * max(state.backoff, base)  # (successes at a budget's pace test no faster rate)
        return adapt.on_success(state, s, base, now, probe=not paced)
    state = rep(state, ru_triggers=state.ru_triggers + 1)
    # One step per incident: a response to a request sent before the last step belongs to the
    # incident that step already answered (eight in-flight 429s make one step, not eight).
    # Compared on the frontier's clock: the scheduled send time, not the worker's sent_at.
    sent = ev.dispatched_at or min(ev.sent_at, now) or now
    if sent < state.backoff_step_at:
        return state
    current = delay(state, s)
    why = str(ev.status or ev.error)
    if kind == adapt.LIMIT:
        return adapt.on_limit(state, now, s, current, why, sent)
    return adapt.on_trouble(state, now, s, delay(rep(state, trouble=0.0), s), why)


def _narrowed(state: ScopeState, rl: RateLimit, now: float) -> tuple[float, float]:
    """When the published window ends, at the earliest and the latest: a reset of ``t`` whole
    seconds (rounded up) means (t - 1, t] from now; answers of the same window (its remaining
    count going down) narrow that to the intersection."""
    hi, lo = now + rl.reset, now - 0.2 + rl.reset - 1.0  # 0.2: the answer is read after it was written
    same = rl.remaining <= state.srv_seen and state.srv_hi > now and lo <= state.srv_hi and hi >= state.srv_lo
    if same:
        lo, hi = max(lo, state.srv_lo), min(hi, state.srv_hi)
    return lo, hi


# -- the question -------------------------------------------------------------------------------
def decide(state: ScopeState, now: float, s: ScopeSettings, cost: float = 1.0) -> Decision:
    """May the scope send a job of ``cost`` at ``now``? If not, when (or whether only feedback can tell)?"""
    state = advance(state, now, s)
    if state.inflight >= concurrency(state, s):
        return Decision(None, "concurrency")
    if state.gate_until > now:
        return Decision(state.gate_until, "gate")
    if s.quota > 0 and state.quota_start >= 0 and now < state.quota_start + s.window:
        if state.quota_used > 0 and state.quota_used + cost > s.quota + _EPS:
            return Decision(state.quota_start + s.window, "quota")
    if state.srv_remaining == 0 and now < state.srv_until:
        return Decision(state.srv_until, "ratelimit")
    held = budget.hold(state)
    if held is not None and held > now:
        return Decision(held, "budget")
    if state.last_sent >= 0:
        d = delay(state, s)
        least = floor(state, s)
        # jitter may lengthen any gap, but never shortens one below a server-stated floor
        gap = d * jitter_factor(state.jitter_u, s)
        gap = least if least > gap else gap
        nxt = state.last_sent + gap
        after_end = state.last_end + least if least else 0.0
        if after_end > nxt:
            nxt = after_end
        if nxt > now:
            return Decision(nxt, _why(state, d, least))
    return Decision(now, "ready")


def _why(state: ScopeState, d: float, least: float) -> str:
    if state.trouble and state.trouble >= d - _EPS:
        return "trouble"
    if state.backoff and state.backoff >= d - _EPS:
        return "backoff"
    if least and least >= d - _EPS:
        return "floor"
    return "delay"

"""Adaptation: responses move a scope's delay (``../shared/THROTTLING.md`` v2 §3). Pure functions
over :class:`~frontier.core.policy.ScopeState`; no clock, no I/O.

Every response is evidence, in one of three classes (:func:`classify`):

- a **limit signal** (the server says "you, slower": 429, or a trigger carrying Retry-After or a
  RateLimit remaining of 0). The interval we were sending at is too short: remember it as the
  scope's **limit**, and step the delay up to ``factor`` (1.5) times that interval. From the
  second signal on, the limit is also measured: a token bucket (or a fixed window) went from
  empty to empty between two signals, so the successes in between over that time are its rate.
  Each success brings the delay back down, fast while far above the limit (a share of the
  excess per success), and it settles just above it (``NEAR``, 3 %). After ``PROBE_AFTER``
  successes there it **probes** faster by growing steps (:func:`probe_factor`), until the next
  signal. A token bucket of any rate is then served at 90-100 % of its rate with a few 429s
  per drain of its burst.
- a **trouble signal** (502/503/504/520-524 without Retry-After, network errors): the server or
  the path is unwell, maybe not because of us. Probe at a doubling interval, from max(current
  delay, 1 s) up to ``trouble_max`` (60 s); the **first success ends the outage** and the extra
  delay is gone within about three successes. Trouble that comes back within ``RELAPSE`` sends
  of returning is overload: it counts as a limit signal.
- **success**: everything else.

One step per incident: a response to a request dispatched before the last step belongs to the
incident that step already answered. Times are the frontier's own (dispatch times), so a worker
whose clock is off cannot split or merge incidents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from frontier.config import ScopeSettings
from frontier.core.causes import Cause

if TYPE_CHECKING:
    from frontier.core.state import ScopeState

NEAR = 0.03  # settle this much above the learned limit interval
RECOVER = 0.35  # share of the excess above the target removed by each success
PROBE_AFTER = 16  # successes at the target before each probe step...
PROBE_SECONDS = 5.0  # ...and seconds (or PROBE_IDLE seconds and 3 successes)
PROBE_IDLE = 60.0
PROBE_STEP = 0.05  # the first probe shortens the target interval by this share, each next one doubles it
TROUBLE_START = 1.0  # seconds: the first probe interval in an outage (at least)
RELAPSE = 20  # trouble within this many sends of returning counts as a limit signal
GAP_WEIGHT = 0.5  # EWMA weight of each new send gap
LIMIT = "limit"
TROUBLE = "trouble"
SUCCESS = "success"


def classify(status: int, error: str, trigger: bool, announced: bool) -> str:
    """``announced``: the response carried Retry-After or a RateLimit remaining of 0.

    Differs from THROTTLING.md v2 in one place, on the simulator's evidence: a 5xx with
    Retry-After is trouble (its gate is obeyed), not a limit signal: a site in maintenance that
    says "come back in 5 s" every 5 s for two minutes would otherwise teach the scope a limit of
    one request per 5 s, and the scope would stay that slow after the outage. A 5xx with
    Retry-After right after an outage ended still counts as a limit (relapse, see on_trouble),
    and so does any response saying RateLimit remaining = 0.
    """
    if status == 429 or (trigger and announced and not 500 <= status < 600):
        return LIMIT
    if trigger:
        return TROUBLE
    return SUCCESS


def sent_fields(state: ScopeState, at: float, current: float) -> tuple[float, int]:
    """A send's ``(gap, returned)``: the real sending interval (an EWMA of gaps, idle gaps capped)
    and relapse counting (the policy sets them with the send's other fields, in one copy)."""
    gap = state.gap
    # gaps the server imposed (a gate) or an outage stretched say nothing about our sending rate
    if state.last_sent >= 0 and at > state.last_sent and state.gate_until <= state.last_sent and not state.trouble:
        sample = min(at - state.last_sent, 2 * current + 1.0)
        gap = sample if gap < 0 else (1 - GAP_WEIGHT) * gap + GAP_WEIGHT * sample
    return gap, state.returned + 1 if 0 <= state.returned < RELAPSE else -1


def interval(state: ScopeState, current: float) -> float:
    """The interval the scope was really sending at: its delay, or its measured gaps if longer."""
    return max(current, state.gap if state.gap >= 0 else 0.0)


def on_limit(state: ScopeState, now: float, s: ScopeSettings, current: float, why: str, sent: float) -> ScopeState:
    """A limit signal, first of its incident: learn the limit and step up from the sending interval.

    The limit is learned two ways, and the slower wins. (1) The interval we were sending at is
    too short. (2) Between two limit signals a token bucket (or a fixed window) went from empty to
    empty: the successes in between, over the time between the two requests, are its rate.
    """
    b = s.backoff
    at = interval(state, current)
    limit = at
    span = sent - state.sig_sent
    if state.sig_sent >= 0 and state.sig_ok >= 5 and span > 0:
        limit = max(at, span / state.sig_ok)
    new = min(max(b.min_delay, at * b.factor), b.max_delay)
    # counting starts when sending may resume (after the gate the server set with this signal)
    start = max(sent, state.gate_until)
    return msgspec.structs.replace(
        state, backoff=new, limit=limit, near=0, probes=0, near_at=-1.0, trouble=0.0, returned=-1, backoff_step_at=now,
        sig_sent=start, sig_ok=0,
        cause=f"limit signal ({why}) at {at:.3f}s between requests: delay {current:.2f}->{new:.2f}, "
              f"limit ≈ {_rate(limit)} from {why}", cause_kind=Cause.LIMIT,
    )  # fmt: skip


def on_trouble(state: ScopeState, now: float, s: ScopeSettings, current: float, why: str) -> ScopeState:
    """A trouble signal, first of its incident: probe at a doubling interval (or, on a relapse
    right after returning, treat it as a limit signal)."""
    if 0 <= state.returned < RELAPSE:
        return on_limit(state, now, s, current, f"{why} again right after recovering", now)
    cap = max(s.backoff.trouble_max, TROUBLE_START)
    if state.trouble > 0:
        new = min(cap, state.trouble * 2)
    else:
        new = min(cap, max(current, TROUBLE_START))
    return msgspec.structs.replace(
        state,
        trouble=new,
        backoff_step_at=now,
        cause=f"trouble ({why}): probing every {new:.1f}s until it answers",
        cause_kind=Cause.TROUBLE,
    )


def on_success(state: ScopeState, s: ScopeSettings, base: float, now: float, probe: bool = True) -> ScopeState:
    """One success: end an outage, bring the delay down toward the learned limit, or probe
    (``probe`` False: the scope was sent far slower than the limit, by a learned budget's pace,
    so the success says nothing about a faster rate)."""
    rep = msgspec.structs.replace
    if state.sig_sent >= 0:
        state = rep(state, sig_ok=state.sig_ok + 1)
    if state.trouble > 0:
        # the first success ends the outage: at most 2 s, then an eighth per success
        left = min(state.trouble / 8, 2.0)
        returned = state.returned if state.returned >= 0 else 0  # relapses count from the first success
        if left <= max(base, state.backoff, 0.05) * 1.5:
            return rep(state, trouble=0.0, returned=returned, cause="outage over: back to the delay before it",
                       cause_kind=Cause.RECOVERY)  # fmt: skip
        return rep(state, trouble=left, returned=returned, cause=f"outage over: {state.trouble:.1f}s->{left:.1f}s",
                   cause_kind=Cause.RECOVERY)  # fmt: skip
    if state.backoff <= 0:
        return state
    if state.limit <= 0:  # a step with nothing learned (nothing sent before): halve back to nothing
        new = state.backoff / 2 if state.backoff / 2 > max(base, 0.01) else 0.0
        return rep(state, backoff=new)
    target = state.limit * (1 + NEAR) * probe_factor(state.probes)
    if state.backoff > target * 1.01:
        return rep(state, backoff=max(target, target + (state.backoff - target) * (1 - RECOVER)))
    if target <= base or target < 0.001:
        return rep(state, backoff=0.0, near=0, probes=0)  # probed past what the base allows: no longer binding
    if not probe:
        return state
    near, probes, since, cause, kind = state.near + 1, state.probes, state.near_at, state.cause, state.cause_kind
    if since < 0:
        since = now
    # A probe step needs both enough successes and enough time at the current step: at 50 req/s
    # a step every 40 responses would probe every second, and a server that answers a probe
    # with Retry-After costs a whole second of its allowance each time.
    # ...and with many requests in flight (slow responses), an overshoot is paid by all of them:
    # wait for more successes per step.
    # A slow scope (one request per 10 s) would wait minutes for that many successes: after
    # PROBE_IDLE seconds a few are enough (limits move, a daily quota resets).
    many = near >= PROBE_AFTER + 2 * state.inflight and now - since >= PROBE_SECONDS
    if many or (near >= 3 and now - since >= PROBE_IDLE):
        near, probes, since = 0, probes + 1, now
        faster = state.limit * (1 + NEAR) * probe_factor(probes)
        cause, kind = f"probing: {PROBE_AFTER}+ successes at {target:.3f}s, trying {faster:.3f}s", Cause.PROBE
        target = faster
    return rep(state, backoff=target, near=near, probes=probes, near_at=since, cause=cause, cause_kind=kind)


def _step(k: int) -> float:
    return 1.0 - min(0.5, PROBE_STEP * 2.0**k)


def probe_factor(probes: int) -> float:
    """How far below the settled target a scope probes after ``probes`` steps: 3 %, then 6 %,
    12 %, ... more per step (convex, like TCP CUBIC past its last maximum: a limit that moved is
    found fast, and the limit measured at the next signal corrects any overshoot)."""
    factor = 1.0
    for k in range(min(probes, 8)):
        factor *= _step(k)
    return factor


def _rate(seconds: float) -> str:
    return f"{1 / seconds:.2f} req/s" if seconds > 0 else "unlimited"

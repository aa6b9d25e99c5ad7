"""When a budget lets a scope send (pure): its pace over the period, the hold while it is spent
(probes for the period's turn), the periods' turns in time (:func:`advance`), the first send,
and the budget in words for status rows.
"""

from __future__ import annotations

import math

from frontier.core.budget.base import (
    CATCH_UP,
    CLEAN,
    COUNTING,
    EARLY,
    FULL,
    PACING,
    PROBE_MAX,
    PROBE_MIN,
    PROBE_SHARE,
    RAN_PROBES,
    RAN_SHARE,
    SPARE,
    SPENT,
    UP,
    WATCHING,
    duration,
    half_budget,
    rep,
)
from frontier.core.state import ScopeState


def pace(state: ScopeState) -> float:
    """The gap a learned budget asks for (0: none). Pacing, what is left of the budget (less the
    requests in flight) is spread over what is left of the period (a period slowed down by a
    refusal being judged catches up), at most ``CATCH_UP`` times faster than evenly. The scope's
    periods hold at most its budget; a server's period out of phase with them may hold a little
    more while one catches up (its refusal then rephases the scope: see ``periods._near_turn``)."""
    if state.bud_mode == PACING and state.bud_size > 0 and state.bud_period > 0:
        even = state.bud_period / (state.bud_size * (1 - SPARE))
        left = state.bud_size * (1 - SPARE) - state.bud_ok - state.inflight
        ends = state.bud_start + state.bud_period - max(state.last_sent, state.bud_start)
        if left <= 1 or ends <= 0:
            return even
        return max(min(even, ends / left), even / CATCH_UP)
    if state.bud_mode == SPENT and state.bud_size > 0 and state.bud_period > 0:
        return state.bud_period / (state.bud_size * (1 - SPARE))
    if state.bud_mode == COUNTING and state.bud_size > 0 and state.bud_guess > 0:
        return state.bud_guess / (state.bud_size * (1 - SPARE))
    return 0.0


def hold(state: ScopeState) -> float | None:
    """When the scope may send again because of its budget (None: the budget does not hold it):
    spent, the next probe for the period's turn (at once after a success)."""
    if state.bud_mode == SPENT and state.bud_streak == 0 and state.last_sent >= 0 and state.bud_refused >= 0:
        cap = PROBE_MAX if state.bud_period <= 0 else max(PROBE_MIN, state.bud_period * PROBE_SHARE)
        # a turn seen before this period's refusals: the period is at least as long as it has run;
        # a small budget's probes are a large share of it (each one 1/size), so they go further apart
        share = min(RAN_SHARE, max(PROBE_SHARE, RAN_PROBES / state.bud_size)) if state.bud_size > 0 else PROBE_SHARE
        began = state.bud_seen >= 0 and 0 <= state.bud_start <= state.bud_refused  # (at a turn seen, or one due)
        ran = (state.last_sent - state.bud_start) * share if began else 0.0
        gap = min(max((state.last_sent - state.bud_refused) * PROBE_SHARE, ran, PROBE_MIN), cap)
        # a period that used its budget, its length known or guessed, is not probed for its turn long
        # before that is due (a period refused at its start, the turn expected passed: probes go on)
        period = state.bud_period if state.bud_period > 0 else state.bud_guess
        # (as periods._judged_spent tells early from used; a budget under two turns' worth: all of it used)
        used = period > 0 and state.bud_start >= 0 and state.bud_ok >= min(half_budget(state), state.bud_size)
        due = state.bud_start + period * (1 - EARLY) if used else -1.0
        return max(state.last_sent + gap, due)
    return None


def advance(state: ScopeState, now: float) -> ScopeState:
    """Pacing: a period that has ended makes way for the next (probing upward when it used its
    budget without a refusal). Counting over a guessed period: once it has passed with no refusal,
    the guess is dropped (the scope runs as the adaptation lets it until the budget refuses); a
    refusal being judged keeps it until judged (refusals at the budget's edge, then successes:
    the period turned, and the guess held for the budget's)."""
    guessed = state.bud_mode == COUNTING and state.bud_guess > 0 and state.bud_run_at < 0  # (kept while judging)
    if guessed and now >= state.bud_start + state.bud_guess:
        return rep(state, bud_guess=0.0)
    if state.bud_mode != PACING or state.bud_period <= 0 or now < state.bud_start + state.bud_period:
        return state
    size, clean = state.bud_size, 0
    if state.bud_refused < 0 and state.bud_ok >= FULL * size:
        clean = state.bud_clean + 1
        if clean >= CLEAN:  # growing steps (3 %, 6 %, 12 % ... at most half): a budget learned too low is found
            size *= 1 + min(UP * 2.0 ** (clean - CLEAN), 0.5)
    periods = math.floor((now - state.bud_start) / state.bud_period)
    return rep(state, bud_start=state.bud_start + periods * state.bud_period, bud_ok=0, bud_refused=-1.0,
               bud_size=size, bud_clean=clean, bud_fresh=False, bud_exact=False, bud_last=state.bud_ok)  # fmt: skip


def on_sent(state: ScopeState, at: float) -> ScopeState:
    """The first send starts the first period (as far as this scope can tell); a test request is
    one fewer to send."""
    if state.bud_test_left > 0:
        left = state.bud_test_left - 1
        state = rep(state, bud_test_left=left, bud_test_at=at if state.bud_test_at < 0 else state.bud_test_at,
                    bud_test_end=at if left == 0 else -1.0)  # fmt: skip
    # (the crawl's first send: what this scope counts from then on is all the site has seen of it)
    return rep(state, bud_start=at, bud_exact=True) if state.bud_start < 0 else state


def testing(state: ScopeState) -> bool:
    """Whether the scope sends test requests now, at the pace that went through before the
    refusals (see :func:`~frontier.core.budget.watching.went_through` and
    :func:`~frontier.core.budget.watching.on_test_answer`)."""
    return state.bud_test_left > 0


def describe(state: ScopeState) -> str:
    """The budget in words for status rows ("" when none is learned)."""
    if state.bud_mode == WATCHING:
        return ""
    size = f"{state.bud_size:.0f}" if state.bud_size > 0 else "?"
    per = f"per {duration(state.bud_period)}" if state.bud_period > 0 else "a period (its length not known yet)"
    head = f"budget ≈ {size} {per} from 429s that did not follow the rate"
    if state.bud_mode == SPENT:
        return f"{head}; spent this period: probing for its turn"
    return f"{head}; {state.bud_ok} used this period"

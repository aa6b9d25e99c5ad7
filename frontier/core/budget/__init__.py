"""Budgets not told (``../shared/THROTTLING.md`` v3 §6): refusals that follow a count per period,
not the sending rate. Pure functions over :class:`~frontier.core.state.ScopeState`; no clock, no I/O.

Seed 003's operator answers 429 to 50 %, then 75 %, then every request as the day's count grows.
The adaptation (:mod:`frontier.core.adapt`) takes that for a rate limit: it slows down, the
refusals go on (they follow the count), it slows down again. A scope tells the two apart here.

- **watching** (every scope): a run of limit signals begins. The rate the server accepts is
  measured while the adaptation slows the scope down, and again once it sends at half the rate
  the run began at, and again at half that. A rate limit (a token bucket, a window) accepts as
  much at each rate (once its burst is spent), or stops refusing; if refusals still come at
  ``RUN_SHARE`` of the responses or more and the accepted rate fell with the sending rate at
  both halvings, the server counts, whatever the rate: a **budget**. What this period let
  through before the run is the budget; the adaptation is put back as it was before the run (a
  budget is no rate, and the slowest rate the refusals forced must not outlive the period).
  A run that ends at once is tested (short periods turn before two halvings can be seen): at
  least half of the four answers before four successes in a row were refused (a refusal that
  announced a window does not count: a bucket refills meanwhile), the successes came at most
  ``TURN_GAP`` times the last refusal's interval apart, the refusals went on at half the rate
  that went through before the run or slower (the adaptation's limit then, or the faster pace it
  was probing at), and at most ``TEST_INFLIGHT`` requests are in flight. Then ``TEST`` requests
  go at that pace (never under the scope's delay, AutoThrottle's, a Crawl-delay or a spread; the
  floor when none was learned): a budget fresh from its turn lets them through (the period
  turned: **counting**, the adaptation put back as it was before the run), a rate limit that just
  refused does not (one refusal, not the adaptation's, nor are refusals of requests sent before
  it came: the run ends, and after ``n`` refused tests in a row the next ``2**n - 1`` runs are
  not tested). A test whose answer never comes (a 5xx, a lost job) ends when a later request is
  answered. A period counted from a tested turn that lets twice its budget through had none.
  ``RUN_END`` successes in a row end a run: at the pace the refusals came at, the period may have
  turned (the count starts again from them); only once the scope slowed down, a rate limit's
  refusals ended (the count goes on). A refusal once the scope ran settled (``RUN_NEW`` successes
  in a row, or half as many with at most one refusal among the ``RUN_NEW`` answers before it)
  begins a new run.
- **spent**: the period's budget is gone. Only probes go out, at a growing interval (1/32 of the
  time since the refusals began, 1 s to an hour, 1/32 of the period once it is known), the next
  at once after a success (at the budget's pace once it is known); when a turn began the period,
  a small budget's probes go up to a tenth of the time since then apart (each refused probe is
  1/size of it: about ``RAN_PROBES`` per size); a period that used its budget and whose length
  is known or guessed is not probed before ``EARLY`` of it is left;
  ``TURN`` successes in a row say the period turned (refusals that end at once).
- **counting**: a period began, its length is not known yet. After the first turn seen (or
  tested), the budget is paced over a guessed period (as long as the refusals lasted) until that guess has
  passed or a second turn measures it. The scope runs as the adaptation lets it until refusals
  begin again at about the budget: that period's count is the budget, and the next turn gives
  the period (the time between two turns seen: refusals at the budget's edge that end, when the
  turn was tested or the period guessed; it came between the latest refusal and the first
  success after it).
- **pacing**: budget and period known: requests are spread evenly, ``period / budget`` apart
  (``SPARE`` to spare), whatever the phase, so no period holds more than the budget (a period
  slowed by a refusal being judged catches up over what is left of it, at most ``CATCH_UP``
  times faster: a server's period out of phase may then hold a little more). A period
  that ends with its budget used and no refusal, the second in a row, probes upward: the next
  allows ``UP`` more, and each further one twice as much more (at most half), so a budget
  learned too low is found in a few periods (never inside a period that already refused).
  A refusal that goes on once the period has used half its budget: spent until the period
  turns; the budget is what went through, counted from a turn seen (else one probe step back),
  and the turn is watched for again, which keeps the phase and the period measured. A refusal
  early in a period, then successes: the period turned a little later than expected (a turn
  seen: phase and period measured again; the period before was full). A refusal in the second
  half of a period, then successes, that puts the turn within ``DRIFT`` of a period before the
  one expected: the period turned a little earlier than expected (a period measured a little
  long drifts; measured again, the budget at most what the period let through in proportion).
  A refusal early in a period that goes on: spent again, the budget kept. Successes that a
  run's judging saw after its latest refusal are the first of the turn's streak (the turn
  between them).

A Retry-After on a refusal still closes the scope until then (:mod:`frontier.core.policy`).

The learner's parts: :mod:`~frontier.core.budget.base` (modes, tunables, shared reckonings),
:mod:`~frontier.core.budget.watching` (a run of refusals judged: budget or rate limit?),
:mod:`~frontier.core.budget.periods` (a known budget's periods and turns) and
:mod:`~frontier.core.budget.pacing` (when the budget lets the scope send). This module is their
public face: :func:`on_response` takes each answer to the part of the scope's mode.
"""

from __future__ import annotations

from frontier.core.budget.base import (
    CATCH_UP,
    CLEAN,
    COUNTING,
    DRIFT,
    EARLY,
    FOLLOWS,
    FULL,
    HALVINGS,
    JUDGE,
    NO_TEST,
    PACING,
    PROBE_MAX,
    PROBE_MIN,
    PROBE_SHARE,
    RAN_PROBES,
    RAN_SHARE,
    RATE_SHARE,
    RUN_END,
    RUN_MIN,
    RUN_NEW,
    RUN_SHARE,
    SLOWED,
    SPARE,
    SPENT,
    TEST,
    TEST_BACKOFF,
    TEST_INFLIGHT,
    TURN,
    TURN_GAP,
    TURN_LONG,
    TURN_RUN,
    UP,
    WATCHING,
    rep,
)
from frontier.core.budget.pacing import advance, describe, hold, on_sent, pace, testing
from frontier.core.budget.periods import on_period_answer, on_spent_answer
from frontier.core.budget.watching import on_answer, on_test_answer, went_through
from frontier.core.state import ScopeState

__all__ = [
    "CATCH_UP",
    "CLEAN",
    "COUNTING",
    "DRIFT",
    "EARLY",
    "FOLLOWS",
    "FULL",
    "HALVINGS",
    "JUDGE",
    "PACING",
    "PROBE_MAX",
    "PROBE_MIN",
    "PROBE_SHARE",
    "RAN_PROBES",
    "RAN_SHARE",
    "RATE_SHARE",
    "RUN_END",
    "RUN_MIN",
    "RUN_NEW",
    "RUN_SHARE",
    "SLOWED",
    "SPARE",
    "SPENT",
    "TEST",
    "TEST_BACKOFF",
    "TEST_INFLIGHT",
    "TURN",
    "TURN_GAP",
    "TURN_LONG",
    "TURN_RUN",
    "UP",
    "WATCHING",
    "advance",
    "describe",
    "hold",
    "on_response",
    "on_sent",
    "pace",
    "testing",
    "went_through",
]


def on_response(
    state: ScopeState, refused: bool, sent: float, now: float, current: float, gap: float
) -> tuple[ScopeState, bool]:
    """A success or a limit signal (``refused``) to a request dispatched at ``sent``; ``current``
    is the scope's delay and ``gap`` its sending interval before this response. Returns the
    state and whether the refusal is the budget's (the adaptation must not take it as a rate)."""
    mode = state.bud_mode
    # sent at a refused test's pace: its burst's, not a rate to learn (a time ahead of this clock, a
    # previous owner's clock ahead of this one, hides nothing)
    if refused and sent < state.bud_test_over <= now:
        return state, True
    if state.bud_test_at >= 0 and sent >= state.bud_test_at:
        if state.bud_test_end < 0 or sent <= state.bud_test_end:
            return on_test_answer(state, refused, now)
        state = rep(state, **NO_TEST)  # a later request answered first: a test answer never came (5xx, lost)
    if mode == SPENT:  # probes sent slowly tell nothing about the rate: the adaptation is left as it was
        return on_spent_answer(state, refused, sent), True
    if mode in (COUNTING, PACING):
        return on_period_answer(state, refused, sent, now)
    return on_answer(state, refused, sent, now, current, gap)

"""The budget learner's modes, tunables and the small reckonings its parts share (pure: the
module docstring of :mod:`frontier.core.budget` says what each tunable does in the learning).

A scope's budget state lives in its :class:`~frontier.core.state.ScopeState` (the ``bud_*``
fields); every step here returns a new state (``rep``).
"""

from __future__ import annotations

import msgspec

from frontier.core.state import ScopeState

WATCHING, SPENT, COUNTING, PACING = 0, 1, 2, 3
SLOWED = 2.0  # a run is judged again once the scope sends this many times slower than when it began
RUN_MIN = 4  # responses in each phase of a run before it is judged
RUN_SHARE = 0.3  # a budget: at least this share refused at the lower rate...
FOLLOWS = 0.7  # ...and at most this share of the rate accepted before (a rate limit accepts as much)...
HALVINGS = 2  # ...at this many halvings of the sending rate in a row (a bucket's burst fades after one)
RATE_SHARE = 0.15  # under this share refused at the lower rate: a rate limit
JUDGE = 6  # once a period's budget is known, a refusal is judged by the answers to this many requests after it
RUN_END = 20  # successes in a row end a run of refusals
RUN_NEW = 8  # a refusal after this many successes in a row (or half, one refused among them) begins a new run
TURN = 4  # successes in a row while spent: the period turned
UP = 0.03  # periods that used their budget without refusal: the next one allows this much more...
CLEAN = 2  # ...after this many of them in a row, and twice as much more after each next one
SPARE = 0.02  # paced this much under the budget; a budget lowered by a refusal loses this much more
CATCH_UP = 1.5  # a period behind its pace spreads what is left over what is left, at most this much faster
PROBE_SHARE = 1 / 32  # while spent: probe every this share of the time since the refusals began...
PROBE_MIN, PROBE_MAX = 1.0, 3600.0  # ...within these bounds (seconds)
RAN_SHARE = 1 / 10  # ...or, when a turn began the period, up to this share of the time since it began...
RAN_PROBES = 10  # ...as far as probes every that share of it come to this many per size of the budget
EARLY = 0.1  # ...and from this share of a known or guessed period before its turn is due
DRIFT = 0.25  # pacing: a refusal, then successes, this share of a period before the turn expected: it turned early
FULL = 0.9  # a period that used this share of its budget tells whether more would have passed
# refusals that end at once at the rate they came at: maybe a period turned (at least half of the
# TURN_RUN answers before TURN_LONG successes in a row refused, the successes sent at most TURN_GAP
# times the last refusal's interval apart)
TURN_RUN, TURN_LONG, TURN_GAP = 4, 4, 1.5
TEST = 4  # such a turn is tested with this many requests at the limit before the run: all must pass...
TEST_INFLIGHT = 2  # ...only while at most this many requests are in flight
TEST_BACKOFF = 6  # after n tests refused in a row, the next 2**n - 1 runs (at most 63) are not tested


NO_TEST: dict[str, object] = {"bud_test_left": 0, "bud_test_at": -1.0, "bud_test_end": -1.0, "bud_test_n": 0}


def rep(state: ScopeState, **changes: object) -> ScopeState:
    return msgspec.structs.replace(state, **changes)


def end_run(st: ScopeState) -> ScopeState:
    return rep(st, bud_run_at=-1.0, bud_slow_at=-1.0, bud_n=0, bud_r=0, bud_n1=0, bud_r1=0, bud_follows=0)


def half_budget(st: ScopeState) -> float:
    """Half the budget (at least two turns' worth): a refusal before it is early in a period."""
    return max(2 * TURN, st.bud_size / 2)


def nearest_turn(turn: float, period: float, at: float) -> float:
    """The turn nearest to ``at`` of a period of ``period`` seconds that turned at ``turn``."""
    return turn + round((at - turn) / period) * period


def last_refused(st: ScopeState) -> float:
    """The dispatch time of the latest refusal of the run being judged."""
    return max(st.bud_run_at, st.bud_last_ref)


def between(st: ScopeState) -> float:
    """When the period turned, as far as the run being judged tells: between its latest refusal and
    the first success sent after it (the latest refusal when none is known)."""
    last = last_refused(st)
    return (last + st.bud_streak_at) / 2 if st.bud_streak_at > last else last


def measured(period: float, seen: float, at: float) -> float:
    """The period, measured again from a turn seen at ``at`` (the last one seen: ``seen``); turns
    missed in between (an idle scope) count as whole periods."""
    if seen < 0 or at <= seen:
        return period
    span = at - seen
    if period <= 0:
        return span
    return (period + span / max(1, round(span / period))) / 2


def duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"

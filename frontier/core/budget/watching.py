"""The judgement of a run of refusals while a scope has no budget (pure): do the refusals follow
the sending rate (a rate limit, the adaptation's) or a count per period (a budget)? Two halvings
of the rate, or refusals that end at once and a burst of test requests (a period's turn), tell.
"""

from __future__ import annotations

from frontier.core.budget.base import (
    COUNTING,
    FOLLOWS,
    HALVINGS,
    NO_TEST,
    RATE_SHARE,
    RUN_END,
    RUN_MIN,
    RUN_NEW,
    RUN_SHARE,
    SLOWED,
    SPENT,
    TEST,
    TEST_BACKOFF,
    TEST_INFLIGHT,
    TURN_GAP,
    TURN_LONG,
    TURN_RUN,
    between,
    duration,
    end_run,
    last_refused,
    rep,
)
from frontier.core.causes import Cause
from frontier.core.state import ScopeState


def on_answer(
    state: ScopeState, refused: bool, sent: float, now: float, current: float, gap: float
) -> tuple[ScopeState, bool]:
    """An answer while the scope is watching (no budget learned). A run of
    refusals is judged in two phases: the responses to requests sent from its first
    refusal on (fast), then those sent once the scope got down to half that rate (slow). A rate
    limit accepts about as much at both rates (a token bucket lets its rate through, then stops
    refusing below it); a budget accepts its share of whatever is sent: half the rate, half the
    accepted."""
    st = rep(
        state,
        bud_ok=state.bud_ok + (not refused),
        bud_streak=0 if refused else state.bud_streak + 1,
        bud_hist=((state.bud_hist << 1) | (refused and state.gate_until <= now)) & 0xFFFF,
    )
    if refused:
        st = rep(st, bud_ref_gap=gap, bud_last_ref=max(st.bud_last_ref, sent))  # (answers may come out of order)
    elif st.bud_streak == 1:
        st = rep(st, bud_streak_at=sent)
    # (with many requests in flight, answers interleave by arrival: a short burst tells nothing)
    if (st.bud_run_at >= 0 and st.bud_streak == TURN_LONG and st.bud_test_left == 0 and st.bud_test_at < 0
            and st.bud_run_ok >= 2 * TEST and st.bud_test_skip == 0
            and st.inflight <= TEST_INFLIGHT and _turned(st, sent)):  # fmt: skip
        # refusals that ended at once: a period's turn, or a rate limit's? A budget fresh from its
        # turn lets a burst through; a rate limit that just refused does not
        return rep(st, **{**NO_TEST, "bud_test_left": TEST}), False
    if st.bud_run_at < 0 or (refused and _settled(state)):
        if not refused:
            return st, False
        # a run begins (a refusal once the scope ran settled begins a new one): remember what the
        # period let through and what the adaptation knew before it
        return rep(st, bud_run_at=sent, bud_run_ok=state.bud_ok, bud_run_gap=gap, bud_gap0=current, bud_n1=1, bud_r1=1,
                   bud_slow_at=-1.0, bud_n=0, bud_r=0, bud_limit0=st.limit, bud_test_skip=max(0, st.bud_test_skip - 1),
                   bud_backoff0=st.backoff), False  # fmt: skip
    if sent < st.bud_run_at:
        return st, False
    if st.bud_slow_at < 0 or sent < st.bud_slow_at:
        st = rep(st, bud_n1=st.bud_n1 + 1, bud_r1=st.bud_r1 + refused)
        if st.bud_slow_at < 0 and st.bud_n1 >= RUN_MIN and current >= SLOWED * st.bud_run_gap:
            st = rep(st, bud_slow_at=now)
    else:
        st = rep(st, bud_n=st.bud_n + 1, bud_r=st.bud_r + refused)
    if st.bud_streak >= RUN_END:  # the refusals ended
        if (sent - st.bud_streak_at) / (st.bud_streak - 1) > TURN_GAP * st.bud_ref_gap:
            return end_run(st), False  # ...once the scope slowed down: a rate limit's (the count goes on)
        return rep(end_run(st), bud_ok=st.bud_streak, bud_exact=False), False  # at once: maybe a turn
    if st.bud_n < RUN_MIN:
        return st, False
    if st.bud_r < RATE_SHARE * st.bud_n:  # it stopped refusing at the lower rate: a rate limit
        return end_run(st), False
    fast = (st.bud_n1 - st.bud_r1) / max(st.bud_slow_at - st.bud_run_at, 1e-3)
    slow = (st.bud_n - st.bud_r) / max(now - st.bud_slow_at, 1e-3)
    # (nothing accepted at all: a ban, or a bucket far too slow to tell; the adaptation backs off)
    follows = st.bud_r >= RUN_SHARE * st.bud_n and 0 < fast and slow <= FOLLOWS * fast
    if follows and st.bud_follows + 1 >= HALVINGS:
        return _found(st, now, fast, slow), True
    # judged again at half this rate: as much accepted at the lower rate (a bucket still above its
    # rate), or the accepted rate fell once (a budget; or a bucket whose burst was still draining)
    halvings = st.bud_follows + 1 if follows else 0
    return rep(st, bud_run_at=st.bud_slow_at, bud_run_gap=current, bud_n1=st.bud_n, bud_r1=st.bud_r,
               bud_slow_at=-1.0, bud_n=0, bud_r=0, bud_follows=halvings), False  # fmt: skip


def _settled(state: ScopeState) -> bool:
    """The scope ran settled before this refusal: ``RUN_NEW`` successes in a row, or half as many
    with at most one refusal in the ``RUN_NEW`` answers before it (a rate limit the adaptation has
    found refuses one of its probes now and then: refusals that follow are another run's, a
    budget's edge; a budget's own stages refuse half the answers or more)."""
    if state.bud_streak >= RUN_NEW:
        return True
    recent = bin(state.bud_hist & ((1 << RUN_NEW) - 1)).count("1")
    return state.bud_streak >= RUN_NEW // 2 and recent <= 1


def _turned(st: ScopeState, sent: float) -> bool:
    """Refusals that ended at once while the rate stayed: at least half of the ``TURN_RUN`` answers
    before ``TURN_LONG`` successes in a row were refused, and the successes were sent at most
    ``TURN_GAP`` times the interval of the last refusal apart on average; a refusal that announced
    a window is none of them (a bucket refills meanwhile)."""
    before = (st.bud_hist >> TURN_LONG) & ((1 << TURN_RUN) - 1)
    mean = (sent - st.bud_streak_at) / (TURN_LONG - 1)
    slowed = st.bud_ref_gap >= 2 * went_through(st)  # refused at half the rate that went through before, or slower
    return bin(before).count("1") * 2 >= TURN_RUN and 0 < mean <= TURN_GAP * st.bud_ref_gap and slowed


def went_through(st: ScopeState) -> float:
    """The interval that went through before the run: the adaptation's limit then, or the one it
    was sending at when it probed faster than that limit (a test goes at it: a rate limit refuses
    it again once its burst is gone, a budget fresh from its turn does not)."""
    known = [gap for gap in (st.bud_limit0, st.bud_gap0) if gap > 0]  # (no limit learned before the run: 0)
    return min(known) if known else 0.0


def on_test_answer(st: ScopeState, refused: bool, now: float) -> tuple[ScopeState, bool]:
    """An answer to a test request: a refusal ends the test (a rate limit: the adaptation does not
    take it, nor a refusal of a request sent before it came: the burst was the test's); ``TEST``
    successes say the period turned."""
    if refused:  # a rate limit: the next runs are not tested (fewer and fewer of them, as tests keep failing)
        fails = st.bud_test_fails + 1
        return end_run(rep(st, **NO_TEST, bud_streak=0, bud_test_fails=fails, bud_test_over=now,
                           bud_test_skip=2 ** min(fails, TEST_BACKOFF))), True  # fmt: skip
    st = rep(st, bud_test_n=st.bud_test_n + 1, bud_ok=st.bud_ok + 1, bud_streak=st.bud_streak + 1)
    if st.bud_test_n < TEST:
        return st, False
    return _turn_seen(rep(st, **NO_TEST)), False


def _turn_seen(st: ScopeState) -> ScopeState:
    """A period turned: what went through before the refusals is its budget (counted again this
    period); the adaptation is put back as it was before them."""
    at = st.bud_streak_at
    size = float(st.bud_run_ok)
    guess = at - st.bud_run_at if 0 <= st.bud_run_at < at and st.bud_period <= 0 else 0.0
    said = f" (paced over {duration(guess)} until the next turn measures the period)" if guess else ""
    return end_run(rep(
        st, bud_mode=COUNTING, bud_size=size, bud_start=at, bud_ok=st.bud_streak, bud_refused=-1.0, bud_streak=0,
        bud_period_was=st.bud_period, bud_fresh=True, bud_exact=True, limit=st.bud_limit0, backoff=st.bud_backoff0,
        sig_sent=-1.0, sig_ok=0, bud_tested=True, bud_guess=guess, bud_test_fails=0, bud_test_skip=0,
        cause=f"refusals ended at once and a burst went through: a period turned; budget ≈ {size:.0f} a period{said}",
        cause_kind=Cause.BUDGET,
    ))  # fmt: skip


def _found(st: ScopeState, now: float, fast: float, slow: float) -> ScopeState:
    """The run's refusals did not follow the rate: a budget of what the period let through."""
    size = float(st.bud_run_ok)
    # successes since the latest refusal (judged on one of them): the period may have turned
    # between that refusal and the first of them; they are the first of the turn's streak
    streak = st.bud_streak if st.bud_streak_at > last_refused(st) else 0
    span = st.bud_streak_at - last_refused(st) if streak else 0.0
    at = between(st)
    return end_run(rep(
        st, bud_mode=SPENT, bud_tested=False, bud_size=size, bud_refused=st.bud_run_at, bud_streak=streak,
        bud_streak_at=at, bud_turn_span=span,
        limit=st.bud_limit0,
        backoff=st.bud_backoff0, sig_sent=-1.0, sig_ok=0,
        cause=f"budget ≈ {size:.0f} this period from 429s that did not follow the rate ({st.bud_r} of "
              f"{st.bud_n} refused at half the rate, {slow:.2f}/s accepted against {fast:.2f}/s): "
              "waiting for the period to turn",
        cause_kind=Cause.BUDGET,
    ))  # fmt: skip

"""A budget's periods and their turns (pure): the answers while the budget is spent (probes
for the turn), counting (the period's length not known yet) or pacing (budget and period known):
a turn seen measures the period again and rephases it, a refusal at the budget's edge spends it.
"""

from __future__ import annotations

from frontier.core.budget.base import (
    COUNTING,
    DRIFT,
    FULL,
    JUDGE,
    PACING,
    RUN_SHARE,
    SPENT,
    TURN,
    UP,
    WATCHING,
    between,
    duration,
    end_run,
    half_budget,
    last_refused,
    measured,
    nearest_turn,
    rep,
)
from frontier.core.causes import Cause
from frontier.core.state import ScopeState


def on_spent_answer(st: ScopeState, refused: bool, sent: float) -> ScopeState:
    """Spent: an answer to a probe. ``TURN`` successes in a row say the period turned (counting,
    or pacing once the period is measured from the turn seen before)."""
    if refused:  # (the last refused probe: the turn comes after it)
        return rep(st, bud_streak=0, bud_streak_at=sent)
    streak = st.bud_streak + 1
    at, span = st.bud_streak_at, st.bud_turn_span
    if streak == 1:
        # the turn came after the last refused probe (and after the gate a refusal set, which
        # ends at the turn when the server says so) and before this success: the middle
        after = max(st.bud_streak_at, st.gate_until if st.gate_until <= sent else -1.0)
        known = 0 <= st.bud_refused <= after < sent
        at, span = ((sent + after) / 2, sent - after) if known else (sent, 0.0)
    st = rep(st, bud_streak=streak, bud_streak_at=at, bud_turn_span=span)
    if streak < TURN:
        return st
    # the period turned: refusals ended at once; a period is known from the turn seen before. When
    # the last refused probe and this streak's first success are more than a quarter period apart
    # (a scope left idle meanwhile), the turn expected from it is the turn if it lies between them
    if st.bud_period > 0 and st.bud_seen >= 0 and span > st.bud_period / 4:
        expected = nearest_turn(st.bud_seen, st.bud_period, at)
        at = expected if abs(expected - at) <= span / 2 else at
    period = measured(st.bud_period, st.bud_seen, at)
    mode = PACING if period > 0 and st.bud_size > 0 else COUNTING
    said = f"≈ {st.bud_size:.0f} per {duration(period)}" if mode == PACING else f"≈ {st.bud_size:.0f} a period"
    # the first turn seen: until a second one measures the period, it is taken to be as long as the
    # refusals lasted (their first to this turn), and the budget paced over that; not when the turn
    # is known only within more than a quarter of that (the scope was idle: the refusals may have
    # ended long before)
    guess = at - st.bud_refused if mode == COUNTING and 0 <= st.bud_refused < at else 0.0
    guess = 0.0 if span > guess / 4 else guess
    said += f" (paced over {duration(guess)} until the next turn measures the period)" if guess else ""
    return rep(st, bud_mode=mode, bud_tested=False, bud_start=at, bud_ok=streak, bud_refused=-1.0, bud_streak=0,
               bud_guess=guess,
               bud_period_was=st.bud_period, bud_period=period, bud_fresh=True, bud_exact=True,
               cause=f"the period turned (refusals ended at once): budget {said}",
               cause_kind=Cause.BUDGET)  # fmt: skip


def on_period_answer(st: ScopeState, refused: bool, sent: float, now: float) -> tuple[ScopeState, bool]:
    """Counting or pacing: successes count toward the period's budget. A refusal is held for the
    budget's only when a request sent after it was answered refuses too (a rate limit on top
    stops refusing once the adaptation has slowed down: until then the refusal is the
    adaptation's): while counting, any refusal; while pacing, one once half the budget went
    through, or early in the period (its turn not come yet). A refusal right after a turn says
    the turn was not one."""
    half = half_budget(st)
    if st.bud_fresh and refused and st.bud_ok < 2 * TURN:  # not a turn: still the spent period
        return _spent_again(st, sent, "refused again right after what looked like the period's turn", period=True), True
    if not refused:
        st = rep(st, bud_ok=st.bud_ok + 1)
        if st.bud_tested and st.bud_mode == COUNTING and st.bud_ok > 2 * st.bud_size + 2 * TURN:
            # twice the budget went through without a refusal: it was none (or is another now)
            return rep(end_run(st), bud_mode=WATCHING, bud_size=0.0, bud_guess=0.0, bud_fresh=False, bud_tested=False,
                       bud_exact=False, bud_seen=-1.0, bud_period=0.0, bud_period_was=0.0, bud_streak_at=-1.0,
                       cause=f"no budget after all: {st.bud_ok} went through in a period",
                       cause_kind=Cause.BUDGET), False  # fmt: skip
        if st.bud_fresh and st.bud_ok >= 2 * TURN:  # the turn is confirmed: periods are measured from it
            st = rep(st, bud_seen=st.bud_start, bud_fresh=False)
    if st.bud_run_at >= 0 and sent > st.bud_slow_at:  # a refusal being judged: answers sent after it
        # (successes since the latest refusal: the turn is before them, they are the new period's)
        st = rep(st, bud_n=st.bud_n + 1, bud_r=st.bud_r + refused, bud_streak=0 if refused else st.bud_streak + 1)
        if refused and sent > st.bud_last_ref:  # a turn comes after the latest refusal
            st = rep(st, bud_last_ref=sent, bud_streak_at=-1.0 if st.bud_streak_at < sent else st.bud_streak_at)
        elif not refused and st.bud_streak_at < last_refused(st):  # the first success since the refusals
            st = rep(st, bud_streak_at=sent)
        if st.bud_r >= RUN_SHARE * JUDGE:  # it goes on refusing: the budget is spent
            return _judged_spent(st, sent), True
        if st.bud_n >= JUDGE:  # it stopped refusing
            back = {"limit": st.bud_limit0, "backoff": st.bud_backoff0, "sig_sent": -1.0, "sig_ok": 0, "bud_clean": 0}
            if st.bud_mode == PACING and st.bud_run_ok < half:  # the period expected had not turned yet
                st = rep(_rephased(st, float(st.bud_last + st.bud_run_ok) if st.bud_last > 0 else 0.0), **back)
            elif st.bud_mode == PACING and _near_turn(st):  # it turned a little earlier than expected
                st = rep(_rephased(st, _full_early(st)), **back)
            elif st.bud_run_ok >= FULL * st.bud_size:  # at the budget's edge: the period turned meanwhile
                turned = st.bud_mode == COUNTING and (st.bud_tested or st.bud_guess > 0)  # (not a bucket's)
                st = rep(_counted_turn(st) if turned else st, **back)
            return rep(st, bud_run_at=-1.0, bud_n=0, bud_r=0), False  # (else a rate limit's refusal, the adaptation's)
        return st, False
    if refused and st.bud_run_at < 0:
        early = st.bud_mode == PACING and now - st.bud_start < st.bud_period / 4
        if st.bud_mode == COUNTING or st.bud_ok >= half or st.bud_size <= 0 or early:
            return rep(st, bud_run_at=sent, bud_last_ref=sent, bud_slow_at=now, bud_run_ok=st.bud_ok, bud_n=0,
                       bud_r=0, bud_limit0=st.limit, bud_backoff0=st.backoff, bud_streak_at=-1.0,
                       bud_streak=0), False  # fmt: skip
    return st, False  # far under the budget: a rate limit on top (the adaptation's)


def _counted_turn(st: ScopeState) -> ScopeState:
    """Counting: refusals at the budget's edge, then successes: the period turned between them. The
    count is the budget (exact when counted from a turn), and the period is measured from the turn
    seen before (then paced)."""
    at = between(st)
    period = measured(st.bud_period, st.bud_seen, at)
    size = float(st.bud_run_ok) if st.bud_exact else st.bud_size
    mode = PACING if period > 0 and size > 0 else COUNTING
    said = f"≈ {size:.0f} per {duration(period)}" if mode == PACING else f"≈ {size:.0f} a period"
    return rep(st, bud_mode=mode, bud_start=at, bud_seen=at if st.bud_seen >= 0 else -1.0, bud_period=period,
               bud_size=size, bud_ok=st.bud_streak, bud_streak=0, bud_exact=True, bud_fresh=st.bud_seen < 0,
               bud_tested=False, bud_guess=0.0,
               cause=f"the period turned (refusals at the budget's edge ended): budget {said}",
               cause_kind=Cause.BUDGET)  # fmt: skip


def _near_turn(st: ScopeState) -> bool:
    """Pacing: the refusal being judged came in the second half of the period expected then, with
    half the budget gone, and the turn it implies (between it and the first success after it) is
    within ``DRIFT`` of the period before the turn expected (the phase a little off: a period
    measured a little long drifts later each period)."""
    if st.bud_period <= 0 or st.bud_run_ok < half_budget(st):
        return False
    end = _expected_end(st)
    return end - st.bud_run_at <= st.bud_period / 2 and end - between(st) <= DRIFT * st.bud_period


def _expected_end(st: ScopeState) -> float:
    """Pacing: the end of the period expected when the refusal being judged came."""
    return st.bud_start if st.bud_start > st.bud_run_at else st.bud_start + st.bud_period


def _full_early(st: ScopeState) -> float:
    """A period that turned a little earlier than expected: what it let through. The requests sent
    between its turn and the start expected were counted for the period before; paced evenly,
    they are in proportion to the time: the count before the refusal over the expected period's
    share that had gone by."""
    gone = st.bud_run_at - (_expected_end(st) - st.bud_period)
    return st.bud_run_ok * st.bud_period / gone if gone > 0 else float(st.bud_run_ok)


def _rephased(st: ScopeState, full: float) -> ScopeState:
    """Pacing: a refusal, then successes: the period turned between them, a little later than
    expected (the refusal early in an expected period) or earlier (near its end). That is a turn
    seen: the period is measured again from it, the current one starts there, and the one
    before, which was refused at its end, was full: the budget is at most ``full``, what it let
    through (later: what was counted for it, and the successes counted for this one before the
    refusal, which were its; earlier: see :func:`_full_early`), and it does not grow next."""
    at = between(st)
    period = measured(st.bud_period, st.bud_seen, at)
    size = min(st.bud_size, full) if full > 0 else st.bud_size
    # (the turn expected nearest to it: the period may have been advanced while the refusal was judged)
    off = at - nearest_turn(st.bud_start, st.bud_period, at)
    when = f"{abs(off):.1f} s {'later' if off > 0 else 'earlier'} than expected"
    return rep(st, bud_start=at, bud_seen=at, bud_period=period, bud_size=size, bud_ok=st.bud_streak, bud_streak=0,
               bud_exact=True, bud_fresh=False,
               cause=f"the period turned {when}: budget ≈ {size:.0f} per {duration(period)}",
               cause_kind=Cause.BUDGET)  # fmt: skip


def _judged_spent(st: ScopeState, sent: float) -> ScopeState:
    """A refusal judged the budget's: what the period let through is its budget (counted from a
    turn seen; else, a period expected whose phase was not seen, one probe step back, at least
    what went through); early in an expected period, the turn has not come yet."""
    half = half_budget(st)
    if st.bud_mode == PACING and st.bud_run_ok < half:
        return _spent_again(st, sent, "refused at the start of an expected period: probing for its turn")
    exact = st.bud_exact or st.bud_mode == COUNTING
    size = float(st.bud_run_ok) if exact else max(st.bud_run_ok, st.bud_size / (1 + UP))
    why = f"budget ≈ {size:.0f} a period: {st.bud_run_ok} went through before this period refused"
    return _spent_again(rep(st, bud_size=size), sent, why)


def _spent_again(st: ScopeState, sent: float, why: str, period: bool = False) -> ScopeState:
    """Spent: wait for the period to turn, the adaptation as it was before the refusals."""
    limit, backoff = (st.bud_limit0, st.bud_backoff0) if st.bud_run_at >= 0 else (st.limit, st.backoff)
    return rep(st, bud_mode=SPENT, bud_tested=False, bud_refused=sent, bud_streak=0, bud_streak_at=sent,
               bud_fresh=False,
               bud_period=st.bud_period_was if period else st.bud_period, bud_run_at=-1.0, bud_slow_at=-1.0,
               bud_n=0, limit=limit,
               backoff=backoff, sig_sent=-1.0, sig_ok=0, cause=why, cause_kind=Cause.BUDGET)  # fmt: skip

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
"""

from __future__ import annotations

import math

import msgspec

from frontier.core.causes import Cause
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


def _rep(state: ScopeState, **changes: object) -> ScopeState:
    return msgspec.structs.replace(state, **changes)


def pace(state: ScopeState) -> float:
    """The gap a learned budget asks for (0: none). Pacing, what is left of the budget (less the
    requests in flight) is spread over what is left of the period (a period slowed down by a
    refusal being judged catches up), at most ``CATCH_UP`` times faster than evenly. The scope's
    periods hold at most its budget; a server's period out of phase with them may hold a little
    more while one catches up (its refusal then rephases the scope: see :func:`_near_turn`)."""
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
        # (as _judged_spent tells early from used; a budget under two turns' worth: all of it used)
        used = period > 0 and state.bud_start >= 0 and state.bud_ok >= min(_half(state), state.bud_size)
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
        return _rep(state, bud_guess=0.0)
    if state.bud_mode != PACING or state.bud_period <= 0 or now < state.bud_start + state.bud_period:
        return state
    size, clean = state.bud_size, 0
    if state.bud_refused < 0 and state.bud_ok >= FULL * size:
        clean = state.bud_clean + 1
        if clean >= CLEAN:  # growing steps (3 %, 6 %, 12 % ... at most half): a budget learned too low is found
            size *= 1 + min(UP * 2.0 ** (clean - CLEAN), 0.5)
    periods = math.floor((now - state.bud_start) / state.bud_period)
    return _rep(state, bud_start=state.bud_start + periods * state.bud_period, bud_ok=0, bud_refused=-1.0,
                bud_size=size, bud_clean=clean, bud_fresh=False, bud_exact=False, bud_last=state.bud_ok)  # fmt: skip


def on_sent(state: ScopeState, at: float) -> ScopeState:
    """The first send starts the first period (as far as this scope can tell); a test request is
    one fewer to send."""
    if state.bud_test_left > 0:
        left = state.bud_test_left - 1
        state = _rep(state, bud_test_left=left, bud_test_at=at if state.bud_test_at < 0 else state.bud_test_at,
                     bud_test_end=at if left == 0 else -1.0)  # fmt: skip
    # (the crawl's first send: what this scope counts from then on is all the site has seen of it)
    return _rep(state, bud_start=at, bud_exact=True) if state.bud_start < 0 else state


def testing(state: ScopeState) -> bool:
    """Whether the scope sends test requests now, at the pace that went through before the
    refusals (see :func:`went_through`, :func:`_test_answer`)."""
    return state.bud_test_left > 0


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
            return _test_answer(state, refused, now)
        state = _rep(state, **NO_TEST)  # a later request answered first: a test answer never came (5xx, lost)
    if mode == SPENT:  # probes sent slowly tell nothing about the rate: the adaptation is left as it was
        return _spent(state, refused, sent), True
    if mode in (COUNTING, PACING):
        return _period(state, refused, sent, now)
    return _watching(state, refused, sent, now, current, gap)


def _watching(
    state: ScopeState, refused: bool, sent: float, now: float, current: float, gap: float
) -> tuple[ScopeState, bool]:
    """A run of refusals is judged in two phases: the responses to requests sent from its first
    refusal on (fast), then those sent once the scope got down to half that rate (slow). A rate
    limit accepts about as much at both rates (a token bucket lets its rate through, then stops
    refusing below it); a budget accepts its share of whatever is sent: half the rate, half the
    accepted."""
    st = _rep(
        state,
        bud_ok=state.bud_ok + (not refused),
        bud_streak=0 if refused else state.bud_streak + 1,
        bud_hist=((state.bud_hist << 1) | (refused and state.gate_until <= now)) & 0xFFFF,
    )
    if refused:
        st = _rep(st, bud_ref_gap=gap, bud_last_ref=max(st.bud_last_ref, sent))  # (answers may come out of order)
    elif st.bud_streak == 1:
        st = _rep(st, bud_streak_at=sent)
    # (with many requests in flight, answers interleave by arrival: a short burst tells nothing)
    if (st.bud_run_at >= 0 and st.bud_streak == TURN_LONG and st.bud_test_left == 0 and st.bud_test_at < 0
            and st.bud_run_ok >= 2 * TEST and st.bud_test_skip == 0
            and st.inflight <= TEST_INFLIGHT and _turned(st, sent)):  # fmt: skip
        # refusals that ended at once: a period's turn, or a rate limit's? A budget fresh from its
        # turn lets a burst through; a rate limit that just refused does not
        return _rep(st, **{**NO_TEST, "bud_test_left": TEST}), False
    if st.bud_run_at < 0 or (refused and _settled(state)):
        if not refused:
            return st, False
        # a run begins (a refusal once the scope ran settled begins a new one): remember what the
        # period let through and what the adaptation knew before it
        return _rep(st, bud_run_at=sent, bud_run_ok=state.bud_ok, bud_run_gap=gap, bud_gap0=current, bud_n1=1, bud_r1=1,
                    bud_slow_at=-1.0, bud_n=0, bud_r=0, bud_limit0=st.limit, bud_test_skip=max(0, st.bud_test_skip - 1),
                    bud_backoff0=st.backoff), False  # fmt: skip
    if sent < st.bud_run_at:
        return st, False
    if st.bud_slow_at < 0 or sent < st.bud_slow_at:
        st = _rep(st, bud_n1=st.bud_n1 + 1, bud_r1=st.bud_r1 + refused)
        if st.bud_slow_at < 0 and st.bud_n1 >= RUN_MIN and current >= SLOWED * st.bud_run_gap:
            st = _rep(st, bud_slow_at=now)
    else:
        st = _rep(st, bud_n=st.bud_n + 1, bud_r=st.bud_r + refused)
    if st.bud_streak >= RUN_END:  # the refusals ended
        if (sent - st.bud_streak_at) / (st.bud_streak - 1) > TURN_GAP * st.bud_ref_gap:
            return _end_run(st), False  # ...once the scope slowed down: a rate limit's (the count goes on)
        return _rep(_end_run(st), bud_ok=st.bud_streak, bud_exact=False), False  # at once: maybe a turn
    if st.bud_n < RUN_MIN:
        return st, False
    if st.bud_r < RATE_SHARE * st.bud_n:  # it stopped refusing at the lower rate: a rate limit
        return _end_run(st), False
    fast = (st.bud_n1 - st.bud_r1) / max(st.bud_slow_at - st.bud_run_at, 1e-3)
    slow = (st.bud_n - st.bud_r) / max(now - st.bud_slow_at, 1e-3)
    # (nothing accepted at all: a ban, or a bucket far too slow to tell; the adaptation backs off)
    follows = st.bud_r >= RUN_SHARE * st.bud_n and 0 < fast and slow <= FOLLOWS * fast
    if follows and st.bud_follows + 1 >= HALVINGS:
        return _found(st, now, fast, slow), True
    # judged again at half this rate: as much accepted at the lower rate (a bucket still above its
    # rate), or the accepted rate fell once (a budget; or a bucket whose burst was still draining)
    halvings = st.bud_follows + 1 if follows else 0
    return _rep(st, bud_run_at=st.bud_slow_at, bud_run_gap=current, bud_n1=st.bud_n, bud_r1=st.bud_r,
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


def _test_answer(st: ScopeState, refused: bool, now: float) -> tuple[ScopeState, bool]:
    """An answer to a test request: a refusal ends the test (a rate limit: the adaptation does not
    take it, nor a refusal of a request sent before it came: the burst was the test's); ``TEST``
    successes say the period turned."""
    if refused:  # a rate limit: the next runs are not tested (fewer and fewer of them, as tests keep failing)
        fails = st.bud_test_fails + 1
        return _end_run(_rep(st, **NO_TEST, bud_streak=0, bud_test_fails=fails, bud_test_over=now,
                             bud_test_skip=2 ** min(fails, TEST_BACKOFF))), True  # fmt: skip
    st = _rep(st, bud_test_n=st.bud_test_n + 1, bud_ok=st.bud_ok + 1, bud_streak=st.bud_streak + 1)
    if st.bud_test_n < TEST:
        return st, False
    return _turn_seen(_rep(st, **NO_TEST)), False


def _turn_seen(st: ScopeState) -> ScopeState:
    """A period turned: what went through before the refusals is its budget (counted again this
    period); the adaptation is put back as it was before them."""
    at = st.bud_streak_at
    size = float(st.bud_run_ok)
    guess = at - st.bud_run_at if 0 <= st.bud_run_at < at and st.bud_period <= 0 else 0.0
    said = f" (paced over {_span(guess)} until the next turn measures the period)" if guess else ""
    return _end_run(_rep(
        st, bud_mode=COUNTING, bud_size=size, bud_start=at, bud_ok=st.bud_streak, bud_refused=-1.0, bud_streak=0,
        bud_period_was=st.bud_period, bud_fresh=True, bud_exact=True, limit=st.bud_limit0, backoff=st.bud_backoff0,
        sig_sent=-1.0, sig_ok=0, bud_tested=True, bud_guess=guess, bud_test_fails=0, bud_test_skip=0,
        cause=f"refusals ended at once and a burst went through: a period turned; budget ≈ {size:.0f} a period{said}",
        cause_kind=Cause.BUDGET,
    ))  # fmt: skip


def _end_run(st: ScopeState) -> ScopeState:
    return _rep(st, bud_run_at=-1.0, bud_slow_at=-1.0, bud_n=0, bud_r=0, bud_n1=0, bud_r1=0, bud_follows=0)


def _found(st: ScopeState, now: float, fast: float, slow: float) -> ScopeState:
    """The run's refusals did not follow the rate: a budget of what the period let through."""
    size = float(st.bud_run_ok)
    # successes since the latest refusal (judged on one of them): the period may have turned
    # between that refusal and the first of them; they are the first of the turn's streak
    streak = st.bud_streak if st.bud_streak_at > _last_refused(st) else 0
    span = st.bud_streak_at - _last_refused(st) if streak else 0.0
    at = _between(st)
    return _end_run(_rep(
        st, bud_mode=SPENT, bud_tested=False, bud_size=size, bud_refused=st.bud_run_at, bud_streak=streak,
        bud_streak_at=at, bud_turn_span=span,
        limit=st.bud_limit0,
        backoff=st.bud_backoff0, sig_sent=-1.0, sig_ok=0,
        cause=f"budget ≈ {size:.0f} this period from 429s that did not follow the rate ({st.bud_r} of "
              f"{st.bud_n} refused at half the rate, {slow:.2f}/s accepted against {fast:.2f}/s): "
              "waiting for the period to turn",
        cause_kind=Cause.BUDGET,
    ))  # fmt: skip


def _spent(st: ScopeState, refused: bool, sent: float) -> ScopeState:
    if refused:  # (the last refused probe: the turn comes after it)
        return _rep(st, bud_streak=0, bud_streak_at=sent)
    streak = st.bud_streak + 1
    at, span = st.bud_streak_at, st.bud_turn_span
    if streak == 1:
        # the turn came after the last refused probe (and after the gate a refusal set, which
        # ends at the turn when the server says so) and before this success: the middle
        after = max(st.bud_streak_at, st.gate_until if st.gate_until <= sent else -1.0)
        known = 0 <= st.bud_refused <= after < sent
        at, span = ((sent + after) / 2, sent - after) if known else (sent, 0.0)
    st = _rep(st, bud_streak=streak, bud_streak_at=at, bud_turn_span=span)
    if streak < TURN:
        return st
    # the period turned: refusals ended at once; a period is known from the turn seen before. When
    # the last refused probe and this streak's first success are more than a quarter period apart
    # (a scope left idle meanwhile), the turn expected from it is the turn if it lies between them
    if st.bud_period > 0 and st.bud_seen >= 0 and span > st.bud_period / 4:
        expected = _nearest_turn(st.bud_seen, st.bud_period, at)
        at = expected if abs(expected - at) <= span / 2 else at
    period = _measured(st.bud_period, st.bud_seen, at)
    mode = PACING if period > 0 and st.bud_size > 0 else COUNTING
    said = f"≈ {st.bud_size:.0f} per {_span(period)}" if mode == PACING else f"≈ {st.bud_size:.0f} a period"
    # the first turn seen: until a second one measures the period, it is taken to be as long as the
    # refusals lasted (their first to this turn), and the budget paced over that; not when the turn
    # is known only within more than a quarter of that (the scope was idle: the refusals may have
    # ended long before)
    guess = at - st.bud_refused if mode == COUNTING and 0 <= st.bud_refused < at else 0.0
    guess = 0.0 if span > guess / 4 else guess
    said += f" (paced over {_span(guess)} until the next turn measures the period)" if guess else ""
    return _rep(st, bud_mode=mode, bud_tested=False, bud_start=at, bud_ok=streak, bud_refused=-1.0, bud_streak=0,
                bud_guess=guess,
                bud_period_was=st.bud_period, bud_period=period, bud_fresh=True, bud_exact=True,
                cause=f"the period turned (refusals ended at once): budget {said}",
                cause_kind=Cause.BUDGET)  # fmt: skip


def _period(st: ScopeState, refused: bool, sent: float, now: float) -> tuple[ScopeState, bool]:
    """Counting or pacing: successes count toward the period's budget. A refusal is held for the
    budget's only when a request sent after it was answered refuses too (a rate limit on top
    stops refusing once the adaptation has slowed down: until then the refusal is the
    adaptation's): while counting, any refusal; while pacing, one once half the budget went
    through, or early in the period (its turn not come yet). A refusal right after a turn says
    the turn was not one."""
    half = _half(st)
    if st.bud_fresh and refused and st.bud_ok < 2 * TURN:  # not a turn: still the spent period
        return _spent_again(st, sent, "refused again right after what looked like the period's turn", period=True), True
    if not refused:
        st = _rep(st, bud_ok=st.bud_ok + 1)
        if st.bud_tested and st.bud_mode == COUNTING and st.bud_ok > 2 * st.bud_size + 2 * TURN:
            # twice the budget went through without a refusal: it was none (or is another now)
            return _rep(_end_run(st), bud_mode=WATCHING, bud_size=0.0, bud_guess=0.0, bud_fresh=False, bud_tested=False,
                        bud_exact=False, bud_seen=-1.0, bud_period=0.0, bud_period_was=0.0, bud_streak_at=-1.0,
                        cause=f"no budget after all: {st.bud_ok} went through in a period",
                        cause_kind=Cause.BUDGET), False  # fmt: skip
        if st.bud_fresh and st.bud_ok >= 2 * TURN:  # the turn is confirmed: periods are measured from it
            st = _rep(st, bud_seen=st.bud_start, bud_fresh=False)
    if st.bud_run_at >= 0 and sent > st.bud_slow_at:  # a refusal being judged: answers sent after it
        # (successes since the latest refusal: the turn is before them, they are the new period's)
        st = _rep(st, bud_n=st.bud_n + 1, bud_r=st.bud_r + refused, bud_streak=0 if refused else st.bud_streak + 1)
        if refused and sent > st.bud_last_ref:  # a turn comes after the latest refusal
            st = _rep(st, bud_last_ref=sent, bud_streak_at=-1.0 if st.bud_streak_at < sent else st.bud_streak_at)
        elif not refused and st.bud_streak_at < _last_refused(st):  # the first success since the refusals
            st = _rep(st, bud_streak_at=sent)
        if st.bud_r >= RUN_SHARE * JUDGE:  # it goes on refusing: the budget is spent
            return _judged_spent(st, sent), True
        if st.bud_n >= JUDGE:  # it stopped refusing
            back = {"limit": st.bud_limit0, "backoff": st.bud_backoff0, "sig_sent": -1.0, "sig_ok": 0, "bud_clean": 0}
            if st.bud_mode == PACING and st.bud_run_ok < half:  # the period expected had not turned yet
                st = _rep(_rephased(st, float(st.bud_last + st.bud_run_ok) if st.bud_last > 0 else 0.0), **back)
            elif st.bud_mode == PACING and _near_turn(st):  # it turned a little earlier than expected
                st = _rep(_rephased(st, _full_early(st)), **back)
            elif st.bud_run_ok >= FULL * st.bud_size:  # at the budget's edge: the period turned meanwhile
                turned = st.bud_mode == COUNTING and (st.bud_tested or st.bud_guess > 0)  # (not a bucket's)
                st = _rep(_counted_turn(st) if turned else st, **back)
            return _rep(st, bud_run_at=-1.0, bud_n=0, bud_r=0), False  # (else a rate limit's refusal, the adaptation's)
        return st, False
    if refused and st.bud_run_at < 0:
        early = st.bud_mode == PACING and now - st.bud_start < st.bud_period / 4
        if st.bud_mode == COUNTING or st.bud_ok >= half or st.bud_size <= 0 or early:
            return _rep(st, bud_run_at=sent, bud_last_ref=sent, bud_slow_at=now, bud_run_ok=st.bud_ok, bud_n=0,
                        bud_r=0, bud_limit0=st.limit, bud_backoff0=st.backoff, bud_streak_at=-1.0,
                        bud_streak=0), False  # fmt: skip
    return st, False  # far under the budget: a rate limit on top (the adaptation's)


def _counted_turn(st: ScopeState) -> ScopeState:
    """Counting: refusals at the budget's edge, then successes: the period turned between them. The
    count is the budget (exact when counted from a turn), and the period is measured from the turn
    seen before (then paced)."""
    at = _between(st)
    period = _measured(st.bud_period, st.bud_seen, at)
    size = float(st.bud_run_ok) if st.bud_exact else st.bud_size
    mode = PACING if period > 0 and size > 0 else COUNTING
    said = f"≈ {size:.0f} per {_span(period)}" if mode == PACING else f"≈ {size:.0f} a period"
    return _rep(st, bud_mode=mode, bud_start=at, bud_seen=at if st.bud_seen >= 0 else -1.0, bud_period=period,
                bud_size=size, bud_ok=st.bud_streak, bud_streak=0, bud_exact=True, bud_fresh=st.bud_seen < 0,
                bud_tested=False, bud_guess=0.0,
                cause=f"the period turned (refusals at the budget's edge ended): budget {said}",
                cause_kind=Cause.BUDGET)  # fmt: skip


def _half(st: ScopeState) -> float:
    """Half the budget (at least two turns' worth): a refusal before it is early in a period."""
    return max(2 * TURN, st.bud_size / 2)


def _near_turn(st: ScopeState) -> bool:
    """Pacing: the refusal being judged came in the second half of the period expected then, with
    half the budget gone, and the turn it implies (between it and the first success after it) is
    within ``DRIFT`` of the period before the turn expected (the phase a little off: a period
    measured a little long drifts later each period)."""
    if st.bud_period <= 0 or st.bud_run_ok < _half(st):
        return False
    end = _expected_end(st)
    return end - st.bud_run_at <= st.bud_period / 2 and end - _between(st) <= DRIFT * st.bud_period


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
    at = _between(st)
    period = _measured(st.bud_period, st.bud_seen, at)
    size = min(st.bud_size, full) if full > 0 else st.bud_size
    # (the turn expected nearest to it: the period may have been advanced while the refusal was judged)
    off = at - _nearest_turn(st.bud_start, st.bud_period, at)
    when = f"{abs(off):.1f} s {'later' if off > 0 else 'earlier'} than expected"
    return _rep(st, bud_start=at, bud_seen=at, bud_period=period, bud_size=size, bud_ok=st.bud_streak, bud_streak=0,
                bud_exact=True, bud_fresh=False,
                cause=f"the period turned {when}: budget ≈ {size:.0f} per {_span(period)}",
                cause_kind=Cause.BUDGET)  # fmt: skip


def _nearest_turn(turn: float, period: float, at: float) -> float:
    """The turn nearest to ``at`` of a period of ``period`` seconds that turned at ``turn``."""
    return turn + round((at - turn) / period) * period


def _last_refused(st: ScopeState) -> float:
    """The dispatch time of the latest refusal of the run being judged."""
    return max(st.bud_run_at, st.bud_last_ref)


def _between(st: ScopeState) -> float:
    """When the period turned, as far as the run being judged tells: between its latest refusal and
    the first success sent after it (the latest refusal when none is known)."""
    last = _last_refused(st)
    return (last + st.bud_streak_at) / 2 if st.bud_streak_at > last else last


def _measured(period: float, seen: float, at: float) -> float:
    """The period, measured again from a turn seen at ``at`` (the last one seen: ``seen``); turns
    missed in between (an idle scope) count as whole periods."""
    if seen < 0 or at <= seen:
        return period
    span = at - seen
    if period <= 0:
        return span
    return (period + span / max(1, round(span / period))) / 2


def _judged_spent(st: ScopeState, sent: float) -> ScopeState:
    """A refusal judged the budget's: what the period let through is its budget (counted from a
    turn seen; else, a period expected whose phase was not seen, one probe step back, at least
    what went through); early in an expected period, the turn has not come yet."""
    half = _half(st)
    if st.bud_mode == PACING and st.bud_run_ok < half:
        return _spent_again(st, sent, "refused at the start of an expected period: probing for its turn")
    exact = st.bud_exact or st.bud_mode == COUNTING
    size = float(st.bud_run_ok) if exact else max(st.bud_run_ok, st.bud_size / (1 + UP))
    why = f"budget ≈ {size:.0f} a period: {st.bud_run_ok} went through before this period refused"
    return _spent_again(_rep(st, bud_size=size), sent, why)


def _spent_again(st: ScopeState, sent: float, why: str, period: bool = False) -> ScopeState:
    """Spent: wait for the period to turn, the adaptation as it was before the refusals."""
    limit, backoff = (st.bud_limit0, st.bud_backoff0) if st.bud_run_at >= 0 else (st.limit, st.backoff)
    return _rep(st, bud_mode=SPENT, bud_tested=False, bud_refused=sent, bud_streak=0, bud_streak_at=sent,
                bud_fresh=False,
                bud_period=st.bud_period_was if period else st.bud_period, bud_run_at=-1.0, bud_slow_at=-1.0,
                bud_n=0, limit=limit,
                backoff=backoff, sig_sent=-1.0, sig_ok=0, cause=why, cause_kind=Cause.BUDGET)  # fmt: skip


def describe(state: ScopeState) -> str:
    """The budget in words for status rows ("" when none is learned)."""
    if state.bud_mode == WATCHING:
        return ""
    size = f"{state.bud_size:.0f}" if state.bud_size > 0 else "?"
    per = f"per {_span(state.bud_period)}" if state.bud_period > 0 else "a period (its length not known yet)"
    head = f"budget ≈ {size} {per} from 429s that did not follow the rate"
    if state.bud_mode == SPENT:
        return f"{head}; spent this period: probing for its turn"
    return f"{head}; {state.bud_ok} used this period"


def _span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"

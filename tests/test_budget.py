"""Budgets not told (THROTTLING.md v3 §6, frontier.core.budget): seed 003's staged quotas learned
as a count per period, not a rate. The real policy against model sites in virtual time (the
simulator), and the pure state machine with injected time. Nothing here sleeps or reads a clock."""

import msgspec
import pytest

from frontier.client.status import sentence
from frontier.config import ScopeSettings
from frontier.core import budget
from frontier.core.policy import Done, ScopeState, Sent, apply, decide, delay
from frontier.sim import sites
from frontier.sim.engine import T0, simulate
from frontier.sim.grid import BUDGETS, _budget_row, budgets, open_settings

DEFAULTS = ScopeSettings()
OPEN = open_settings(DEFAULTS, 5.0, 0.05)


@pytest.mark.parametrize("case", BUDGETS, ids=lambda c: f"{c[0]}/{c[1]:g}s ra={c[2]} rate={c[3]} every={c[4]}")
def test_a_staged_quota_is_spent_evenly_each_period_after_two(case: tuple[int, float, bool, float, bool]) -> None:
    (row,) = budgets(DEFAULTS, (case,))
    assert row.met, f"{row.scenario}: {row.detail}; inside windows {row.result.inside_windows}"


# short periods entered late, with the defaults (a 0.1 s floor, one request in flight): the first
# period's refusals end at its turn before two halvings of the rate could be seen
LATE = ((40, 20.0, False, 0.8), (40, 20.0, True, 0.5), (200, 20.0, False, 0.95), (40, 60.0, False, 0.8),
        (120, 60.0, True, 0.8), (120, 60.0, False, 0.8))  # fmt: skip


@pytest.mark.parametrize("case", LATE, ids=lambda c: f"{c[0]}/{c[1]:g}s ra={c[2]} entered {c[3]:.0%}")
def test_a_short_period_entered_late_is_found_from_its_turn(case: tuple[int, float, bool, float]) -> None:
    """Refusals that end at once are tested with a burst at the floor: a period that turned lets it
    through, and the scope counts the next period at the rate it had before the refusals."""
    quota, window, retry_after, phase = case
    row = _budget_row(DEFAULTS, quota, window, retry_after, 0.0, True, phase)
    assert row.met, f"{row.scenario}: {row.detail}"


def _staged(quota: int = 120, window: float = 60.0) -> sites.StagedQuota:
    return sites.StagedQuota(name="s", latency=0.05, quota=quota, window=window, phase=0.3 * window)


def test_the_budget_is_learned_as_a_count_and_a_period_and_said_in_words() -> None:
    site = _staged()
    trace: list[str] = []
    state = simulate(site, OPEN, duration=60.0 * 5, warmup=0.0, trace=trace).state
    assert state.bud_mode == budget.PACING
    assert state.bud_size == pytest.approx(site.free, rel=0.1)
    assert state.bud_period == pytest.approx(60.0, rel=0.05)
    words = budget.describe(state)
    assert words.startswith(f"budget ≈ {state.bud_size:.0f} per ") and "from 429s that did not follow the rate" in words
    assert any("did not follow the rate" in line for line in trace)


def test_the_slowest_rate_a_spent_period_forced_does_not_outlive_it() -> None:
    """After the turn, the scope sends at the budget's pace, not at the delay the refusals forced."""
    site = _staged()
    state = simulate(site, OPEN, duration=60.0 * 5, warmup=0.0).state
    assert delay(state, OPEN) == pytest.approx(budget.pace(state))
    assert state.backoff < budget.pace(state)


def test_a_token_bucket_is_never_taken_for_a_budget() -> None:
    for rate in (0.5, 2.0, 10.0):
        site = sites.TokenBucket(name="b", rate=rate, burst=rate * 2, latency=0.05)
        state = simulate(site, open_settings(DEFAULTS, rate, 0.05), duration=300.0).state
        assert state.bud_mode == budget.WATCHING, rate


def test_a_period_that_refused_gets_no_more_than_probes_for_its_turn() -> None:
    """Spent: one probe at a growing interval (a 32nd of the time since the refusals began, at
    least 1 s), never the scope's normal rate."""
    s = OPEN
    state = ScopeState(bud_mode=budget.SPENT, bud_size=50.0, bud_refused=T0, bud_streak_at=T0, last_sent=T0 + 64.0)
    d = decide(state, T0 + 64.5, s)
    assert d.reason == "budget" and d.at == pytest.approx(T0 + 64.0 + 2.0, abs=1e-6)
    assert sentence(d.reason, d.at, T0 + 64.5).startswith("this period's budget (learned from 429s) spent")
    assert budget.describe(state).endswith("spent this period: probing for its turn")


def test_pacing_probes_upward_after_two_full_periods_without_refusal_by_growing_steps() -> None:
    state = ScopeState(bud_mode=budget.PACING, bud_size=100.0, bud_period=10.0, bud_start=T0, bud_ok=95)
    once = budget.advance(state, T0 + 10.5)
    assert once.bud_size == 100.0 and once.bud_clean == 1 and once.bud_ok == 0 and once.bud_start == T0 + 10.0
    assert once.bud_last == 95
    twice = budget.advance(_with_ok(once, 95), T0 + 20.5)
    assert twice.bud_size == pytest.approx(100.0 * (1 + budget.UP)) and twice.bud_clean == 2
    thrice = budget.advance(_with_ok(twice, 100), T0 + 30.5)
    assert thrice.bud_size == pytest.approx(twice.bud_size * (1 + 2 * budget.UP))
    refused = budget.advance(_with_ok(once, 95, refused=T0 + 15.0), T0 + 20.5)
    assert refused.bud_size == 100.0 and refused.bud_clean == 0
    idle = budget.advance(_with_ok(once, 10), T0 + 20.5)  # a period far from full tells nothing
    assert idle.bud_size == 100.0 and idle.bud_clean == 0


def test_a_refusal_early_in_a_period_of_a_rate_limit_on_top_goes_to_the_adaptation() -> None:
    """Pacing, a quarter of the period gone, far under the budget: a 429 is the adaptation's."""
    s = OPEN
    state = ScopeState(bud_mode=budget.PACING, bud_size=100.0, bud_period=40.0, bud_start=T0, bud_ok=10)
    t = T0 + 15.0
    state = apply(state, Sent(t), t, s)
    after = apply(state, Done(sent_at=t, dispatched_at=t, status=429, latency=0.05), t + 0.1, s)
    assert after.bud_mode == budget.PACING and after.bud_run_at < 0
    assert after.backoff > 0  # the adaptation stepped up


def test_a_period_that_turns_later_than_expected_is_seen_and_measured_again() -> None:
    """Pacing, the expected period began at T0 but the site's turns at T0 + 2: a refusal at
    T0 + 0.5, then successes. That is a turn seen: the period and its phase are measured again;
    the period before, refused at its end, was full, so the budget does not grow next."""
    s = OPEN
    state = ScopeState(bud_mode=budget.PACING, bud_size=40.0, bud_period=19.4, bud_start=T0, bud_seen=T0 - 3 * 19.4,
                       bud_last=38, bud_clean=3)  # fmt: skip
    t = T0 + 0.5
    state = apply(state, Done(sent_at=t, dispatched_at=t, status=429, latency=0.05), t + 0.05, s)
    assert state.bud_mode == budget.PACING and state.bud_run_at == t  # judged by the next answers
    for i in range(budget.JUDGE):
        t = T0 + 2.0 + i * 0.5
        state = apply(state, Done(sent_at=t, dispatched_at=t, status=200, latency=0.05), t + 0.05, s)
    assert state.bud_mode == budget.PACING and state.bud_run_at < 0
    assert state.bud_start == pytest.approx(T0 + 1.25, abs=1e-6) and state.bud_seen == state.bud_start
    assert "the period turned 1.2 s later than expected" in state.cause
    assert 19.4 < state.bud_period < 20.0
    assert state.bud_size == 38.0 and state.bud_clean == 0
    # two successes counted for the expected period before its refusal were the earlier period's
    state = ScopeState(bud_mode=budget.PACING, bud_size=40.0, bud_period=19.4, bud_start=T0, bud_seen=T0 - 3 * 19.4,
                       bud_last=37, bud_clean=3, bud_ok=2)  # fmt: skip
    for i, offset in enumerate([0.5] + [2.0 + i * 0.5 for i in range(budget.JUDGE)]):
        t = T0 + offset
        status = 429 if i == 0 else 200
        state = apply(state, Done(sent_at=t, dispatched_at=t, status=status, latency=0.05), t + 0.05, s)
    assert state.bud_size == 39.0


def _with_ok(state: ScopeState, ok: int, refused: float = -1.0) -> ScopeState:
    return msgspec.structs.replace(state, bud_ok=ok, bud_refused=refused)


def test_a_turn_test_goes_at_the_rate_before_the_refusals_never_under_a_floor_or_a_spread() -> None:
    """The test's few requests skip the adaptation's slowdown, not AutoThrottle's delay, the site's
    Crawl-delay, a configured spread or a published budget's, nor a server in trouble."""
    testing = ScopeState(bud_test_left=4, bud_limit0=0.3, backoff=5.0, at_delay=0.05)
    assert budget.testing(testing)
    assert delay(testing, DEFAULTS) == 0.3  # not the backoff of 5 s: the rate that went through before
    assert delay(msgspec.structs.replace(testing, robots_delay=2.0), DEFAULTS) >= 2.0
    spread = ScopeSettings(quota=10, window=60.0, spread=True)
    assert delay(testing, spread) == 6.0
    assert delay(msgspec.structs.replace(testing, trouble=4.0), DEFAULTS) == 4.0
    assert delay(msgspec.structs.replace(testing, at_delay=0.8), DEFAULTS) == 0.8  # a slow site's latency
    assert delay(msgspec.structs.replace(testing, bud_test_left=0), DEFAULTS) == 5.0  # tested: the backoff again


def test_a_period_counted_after_its_turn_turns_between_its_latest_refusal_and_the_success_after_it() -> None:
    """Counting over a guessed period (50 s), a turn seen 3.5 s before T0 and a budget of 20: past
    it the server refuses half (a refusal at T0 + 45, a success, another refusal at T0 + 51),
    then the period turns at T0 + 56.5 (successes from T0 + 62; the guess has passed, the
    refusal being judged keeps it). The turn is between the latest refusal and the first success
    after it, not after the first refusal: the period is measured at 60 s, then paced."""
    s = OPEN
    state = ScopeState(bud_mode=budget.COUNTING, bud_size=20.0, bud_start=T0, bud_seen=T0 - 3.5, bud_ok=20,
                       bud_exact=True, bud_guess=50.0)  # fmt: skip
    answers = [(45.0, 429), (48.0, 200), (51.0, 429), (62.0, 200), (65.0, 200), (68.0, 200), (71.0, 200)]
    for offset, status in answers:
        t = T0 + offset
        state = apply(state, Done(sent_at=t, dispatched_at=t, status=status, latency=0.05), t + 0.05, s)
    assert state.bud_mode == budget.PACING and state.bud_run_at < 0
    assert state.bud_start == pytest.approx(T0 + 56.5, abs=1e-6)
    assert state.bud_period == pytest.approx(60.0)
    assert state.bud_size == 20.0


def test_the_first_turn_seen_paces_the_budget_over_as_long_as_the_refusals_lasted() -> None:
    """Spent since T0 (a budget of 21 counted from a run's end, not from a turn: not exact), then
    four successes in a row from T0 + 58: the period turned, its length not known. Until a second
    turn measures it, the budget is paced over as long as the refusals lasted (58 s here): at
    full speed it would be gone in seconds, and the rest of the period refused."""
    s = OPEN
    state = ScopeState(bud_mode=budget.SPENT, bud_size=21.0, bud_refused=T0, bud_streak_at=T0 + 55.0, bud_exact=False)
    for i in range(budget.TURN):
        t = T0 + 58.0 + i * 0.2
        state = apply(state, Done(sent_at=t, dispatched_at=t, status=200, latency=0.05), t + 0.05, s)
    assert state.bud_mode == budget.COUNTING
    assert state.bud_guess == pytest.approx(56.5)  # the turn: between the last refusal (55) and 58
    assert budget.pace(state) == pytest.approx(56.5 / (21 * (1 - budget.SPARE)))
    assert delay(state, s) >= budget.pace(state)


def test_a_period_that_used_its_budget_is_not_probed_long_before_its_turn_is_due() -> None:
    """Spent 40 s into a 60 s period that used its budget: the next probe waits until a tenth of
    the period before the turn is due (a probe at 1 s would be refused each second till then).
    The same with a guessed period. A period refused at its start (the turn expected has passed
    and not come): probes go on at the growing interval."""
    used = ScopeState(bud_mode=budget.SPENT, bud_size=60.0, bud_ok=60, bud_period=60.0, bud_start=T0,
                      bud_refused=T0 + 40.0, bud_streak_at=T0 + 40.0, last_sent=T0 + 40.0)  # fmt: skip
    assert budget.hold(used) == pytest.approx(T0 + 60.0 * (1 - budget.EARLY), abs=1e-6)
    guessed = msgspec.structs.replace(used, bud_period=0.0, bud_guess=50.0)
    assert budget.hold(guessed) == pytest.approx(T0 + 50.0 * (1 - budget.EARLY), abs=1e-6)
    early = msgspec.structs.replace(used, bud_ok=3)
    assert budget.hold(early) == pytest.approx(T0 + 40.0 + budget.PROBE_MIN, abs=1e-6)
    late = msgspec.structs.replace(used, last_sent=T0 + 58.0, bud_refused=T0 + 26.0)  # past the due time
    assert budget.hold(late) == pytest.approx(T0 + 58.0 + budget.PROBE_MIN, abs=1e-6)
    # a budget of 10 with 6 used: early in the period as _judged_spent tells it (under two turns'
    # worth), so its turn may come any time: probed, not held for most of a period
    small = msgspec.structs.replace(used, bud_size=10.0, bud_ok=6)
    assert budget.hold(small) == pytest.approx(T0 + 40.0 + budget.PROBE_MIN, abs=1e-6)
    tiny = msgspec.structs.replace(used, bud_size=5.0, bud_ok=5)  # all of a budget under two turns' worth
    assert budget.hold(tiny) == pytest.approx(T0 + 60.0 * (1 - budget.EARLY), abs=1e-6)


def test_successes_at_a_budgets_pace_do_not_probe_the_rate_limit_faster() -> None:
    """A rate limit learned at 0.33 s, the scope paced at 10 s by a budget: its successes test no
    faster rate, so the limit's probe does not step (it crept to 0.07 s in the simulator, and the
    limit's refusals were then counted for the budget). Without the budget's pace it steps."""
    from frontier.core import adapt

    s = OPEN
    state = ScopeState(limit=0.333, backoff=0.333 * (1 + adapt.NEAR), near=adapt.PROBE_AFTER + 4, near_at=T0 - 1000.0,
                       bud_mode=budget.PACING, bud_size=10.0, bud_period=100.0, bud_start=T0)  # fmt: skip
    assert budget.pace(state) > 2 * state.backoff
    t = T0 + 10.0
    paced = apply(state, Done(sent_at=t, dispatched_at=t, status=200, latency=0.05), t + 0.05, s)
    assert paced.backoff == state.backoff and paced.probes == 0
    free = msgspec.structs.replace(state, bud_mode=budget.WATCHING, bud_size=0.0, bud_period=0.0)
    probed = apply(free, Done(sent_at=t, dispatched_at=t, status=200, latency=0.05), t + 0.05, s)
    assert probed.probes == 1 and probed.backoff < state.backoff


def test_a_small_budgets_probes_go_further_apart_once_a_turn_began_its_period() -> None:
    """Spent 32 s after a turn seen (the period's length not known): the period is at least that
    long, and with a budget of 60 each refused probe is a sixtieth of it. Probes go a tenth of
    the time since the turn apart (3.2 s), not 1 s (a 32nd of the time since the refusals began,
    at least 1 s: ~24 refused probes before a 60 s period turns). A budget of 2000: a 32nd."""
    small = ScopeState(bud_mode=budget.SPENT, bud_size=60.0, bud_ok=60, bud_start=T0, bud_seen=T0,
                       bud_refused=T0 + 30.0, bud_streak_at=T0 + 30.0, last_sent=T0 + 32.0)  # fmt: skip
    assert budget.hold(small) == pytest.approx(T0 + 32.0 + 3.2, abs=1e-6)
    large = msgspec.structs.replace(small, bud_size=2000.0, bud_ok=2000)
    assert budget.hold(large) == pytest.approx(T0 + 32.0 + budget.PROBE_MIN, abs=1e-6)  # 32 s / 32: 1 s
    unseen = msgspec.structs.replace(small, bud_seen=-1.0)  # counted from the crawl's first send: no turn seen
    assert budget.hold(unseen) == pytest.approx(T0 + 32.0 + budget.PROBE_MIN, abs=1e-6)


def test_pacing_spreads_what_is_left_of_the_budget_over_what_is_left_of_the_period() -> None:
    """20 per 20 s: evenly about 1 s apart. Behind (9 used, 8 s left): what is left over what is
    left, at most 1.5 times faster than evenly. Ahead, or nothing left: evenly."""
    even = 20.0 / (20 * (1 - budget.SPARE))
    state = ScopeState(bud_mode=budget.PACING, bud_size=20.0, bud_period=20.0, bud_start=T0, bud_ok=0, last_sent=T0)
    assert budget.pace(state) == pytest.approx(even)
    behind = msgspec.structs.replace(state, bud_ok=9, last_sent=T0 + 12.0)  # 10.6 left in 8 s
    assert budget.pace(behind) == pytest.approx(8.0 / (20 * (1 - budget.SPARE) - 9))
    far_behind = msgspec.structs.replace(state, bud_ok=2, last_sent=T0 + 10.0)  # 17.6 left in 10 s
    assert budget.pace(far_behind) == pytest.approx(even / budget.CATCH_UP)
    ahead = msgspec.structs.replace(state, bud_ok=15, last_sent=T0 + 5.0)
    assert budget.pace(ahead) == pytest.approx(even)
    # requests in flight are spent already: two of them leave 8.6 for the 8 s
    in_flight = msgspec.structs.replace(behind, inflight=2)
    assert budget.pace(in_flight) == pytest.approx(8.0 / (20 * (1 - budget.SPARE) - 9 - 2))


def test_a_run_judged_on_a_success_after_its_latest_refusal_starts_the_turns_streak_there() -> None:
    """Watching, a run judged a budget (the accepted rate fell with the sending rate at two
    halvings) on a success: its latest refusal was sent at T0 + 14, a success at T0 + 16 and this
    one at T0 + 18. The period may have turned between 14 and 16: the two successes are the first
    of the turn's streak, and two more say it turned there, at T0 + 15 (not at the next success)."""
    s = OPEN
    state = ScopeState(bud_run_at=T0, bud_slow_at=T0 + 10.0, bud_n1=10, bud_r1=2, bud_n=3, bud_r=2, bud_follows=1,
                       bud_last_ref=T0 + 14.0, bud_streak=1, bud_streak_at=T0 + 16.0, bud_run_ok=40,
                       bud_ok=41)  # fmt: skip
    t = T0 + 18.0
    state = apply(state, Done(sent_at=t, dispatched_at=t, status=200, latency=0.05), t + 0.05, s)
    assert state.bud_mode == budget.SPENT and state.bud_size == 40.0
    assert state.bud_streak == 2 and state.bud_streak_at == pytest.approx(T0 + 15.0, abs=1e-6)
    assert state.bud_turn_span == pytest.approx(2.0)  # the turn is known within 14-16
    for t in (T0 + 19.0, T0 + 20.0):
        state = apply(state, Done(sent_at=t, dispatched_at=t, status=200, latency=0.05), t + 0.05, s)
    assert state.bud_mode == budget.COUNTING and state.bud_start == pytest.approx(T0 + 15.0, abs=1e-6)
    assert state.bud_guess == pytest.approx(15.0)  # as long as the refusals lasted: T0 to the turn


def _pacing_refused_then_ok(refused_at: float, ok_from: float) -> ScopeState:
    """Pacing 20 per 20 s from T0 (three periods measured before), 12 used; a refusal sent at
    ``refused_at``, then successes from ``ok_from``, 0.5 s apart."""
    s = OPEN
    state = ScopeState(bud_mode=budget.PACING, bud_size=20.0, bud_period=20.0, bud_start=T0, bud_seen=T0 - 60.0,
                       bud_ok=12, limit=0.2, backoff=0.2)  # fmt: skip
    t = T0 + refused_at
    state = apply(state, Done(sent_at=t, dispatched_at=t, status=429, latency=0.05), t + 0.05, s)
    for i in range(budget.JUDGE):
        t = T0 + ok_from + i * 0.5
        state = apply(state, Done(sent_at=t, dispatched_at=t, status=200, latency=0.05), t + 0.05, s)
    return state


def test_a_period_measured_a_little_long_drifts_and_its_early_turn_is_seen() -> None:
    """The scope's period is 20 s from T0, the server's turned at about T0 + 15 (its period a
    little shorter: each one drifts). A refusal 72 % into the period expected (half the budget
    gone), then successes: a turn between them (T0 + 15.25), 4.75 s before the one expected,
    within a quarter period. Measured again: the phase from there, the budget at most what the
    period let through in proportion (12 in 14.5 s of 20). A turn implied 8.5 s before the one
    expected is none: the refusal goes to the adaptation."""
    early = _pacing_refused_then_ok(14.5, 16.0)
    assert early.bud_mode == budget.PACING and early.bud_run_at < 0
    assert early.bud_start == pytest.approx(T0 + 15.25, abs=1e-6) and early.bud_seen == early.bud_start
    assert "the period turned 4.8 s earlier than expected" in early.cause
    assert early.bud_size == pytest.approx(12 * 20.0 / 14.5)
    assert 18.0 < early.bud_period < 20.0
    far = _pacing_refused_then_ok(11.0, 12.0)
    assert far.bud_start == T0 and far.bud_size == 20.0 and far.bud_seen == T0 - 60.0
    assert far.backoff > 0.2  # the adaptation's refusal


def test_a_scope_left_idle_while_spent_keeps_its_phase_and_guesses_no_period() -> None:
    """Spent from T0 + 5, the last refused probe at T0 + 8, then nothing to send until T0 + 50:
    the turn is somewhere in those 42 s. With a 60 s period seen turning at T0 - 45, the turn
    expected (T0 + 15) lies there: it is the turn, and the period stays 60 s (the middle, T0 + 29,
    would have measured 67 s). With no period known, no period is guessed from so vague a turn."""
    s = OPEN
    known = ScopeState(bud_mode=budget.SPENT, bud_size=30.0, bud_period=60.0, bud_seen=T0 - 45.0, bud_start=T0 - 45.0,
                       bud_refused=T0 + 5.0, bud_streak_at=T0 + 8.0)  # fmt: skip
    unknown = msgspec.structs.replace(known, bud_period=0.0, bud_seen=-1.0)
    for i in range(budget.TURN):
        t = T0 + 50.0 + i * 0.2
        known = apply(known, Done(sent_at=t, dispatched_at=t, status=200, latency=0.05), t + 0.05, s)
        unknown = apply(unknown, Done(sent_at=t, dispatched_at=t, status=200, latency=0.05), t + 0.05, s)
    assert known.bud_mode == budget.PACING
    assert known.bud_start == pytest.approx(T0 + 15.0, abs=1e-6) and known.bud_period == 60.0
    assert unknown.bud_mode == budget.COUNTING and unknown.bud_guess == 0.0
    assert unknown.bud_start == pytest.approx(T0 + 29.0, abs=1e-6)


def _probe_run_that_ends_at_once(limit: float = 0.765, probe: float = 0.323) -> ScopeState:
    """Watching: the adaptation probes at ``probe`` s, faster than its learned ``limit``; 30 went
    through, then refusals (the budget's edge) while it slows down, then successes at once (a
    turn, at about the slowed pace)."""
    state = ScopeState(limit=limit, bud_ok=30)
    answers = [(True, 0.0, probe), (True, 0.49, 0.485), (False, 1.2, 0.73), (False, 1.85, 0.65),
               (True, 2.45, 0.6), (True, 3.35, 0.9), (False, 4.7, 1.35), (False, 5.9, 1.2), (False, 7.0, 1.1),
               (False, 8.05, 1.05)]  # fmt: skip
    for refused, at, gap in answers:
        state, _ = budget.on_response(state, refused, T0 + at, T0 + at + 0.02, gap, gap)
    return state


def test_refusals_that_end_at_once_after_a_probe_faster_than_the_limit_are_tested_at_the_probes_pace() -> None:
    """The rate that went through before the refusals was the probe's, not the learned limit's:
    refusals at half of it, then successes at once, are a turn to test (THROTTLING.md v3 §6), and
    the test goes at that pace. Seen end to end (the 3/s bucket site of test_budgets.py): with the
    limit as the rate before, no test came, and the adaptation's slower limit outlived the period."""
    state = _probe_run_that_ends_at_once()
    assert budget.testing(state) and state.bud_test_left == budget.TEST
    assert delay(msgspec.structs.replace(state, at_delay=0.05), DEFAULTS) == pytest.approx(0.323)
    for n in range(budget.TEST):
        state = budget.on_sent(state, T0 + 8.1 + 0.33 * n)
    for n in range(budget.TEST):
        state, _ = budget.on_response(state, False, T0 + 8.1 + 0.33 * n, T0 + 8.2 + 0.33 * n, 0.33, 0.33)
    assert state.bud_mode == budget.COUNTING and state.bud_size == 30.0 and state.limit == 0.765
    # a probe no faster than the limit: refusals at 0.9 s are not half the rate (1.53 s) of the 0.765 s limit
    assert not budget.testing(_probe_run_that_ends_at_once(limit=0.765, probe=0.8))


def test_a_refused_test_hides_its_burst_from_the_adaptation_and_the_next_runs_go_untested() -> None:
    """A rate limit refuses the test's burst at the probe's pace: that refusal, and those of
    requests sent before it came, are the test's (not a rate for the adaptation to learn); the next
    run is not tested (three after a second refused test, 2**n - 1 after n), so a token bucket is
    not tested over and over. A refused test at a time ahead of this clock (a previous owner's
    clock ran ahead) hides nothing."""
    state = _probe_run_that_ends_at_once()
    for n in range(budget.TEST):
        state = budget.on_sent(state, T0 + 8.1 + 0.33 * n)
    state, theirs = budget.on_response(state, False, T0 + 8.1, T0 + 8.2, 0.33, 0.33)
    assert not theirs
    state, theirs = budget.on_response(state, True, T0 + 8.43, T0 + 8.5, 0.33, 0.33)
    assert theirs and not budget.testing(state) and state.bud_run_at < 0
    assert state.bud_test_fails == 1 and state.bud_test_skip == 2
    after, theirs = budget.on_response(state, True, T0 + 8.45, T0 + 8.55, 0.33, 0.33)  # sent before it came
    assert theirs and after == state
    later, theirs = budget.on_response(state, True, T0 + 9.5, T0 + 9.6, 0.5, 0.5)  # a new run: the adaptation's
    assert not theirs and later.bud_run_at == T0 + 9.5 and later.bud_test_skip == 1
    ahead = msgspec.structs.replace(state, bud_test_over=T0 + 100.0)
    _, theirs = budget.on_response(ahead, True, T0 + 9.0, T0 + 9.1, 0.5, 0.5)
    assert not theirs, "a refusal is hidden only by a test refused before now"


def test_the_end_to_end_bucket_sites_periods_are_used_whatever_its_phase() -> None:
    """tests/integration/test_budgets.py's third site (30 a period of 20 s without refusal, a 3/s
    bucket on top) entered at 20 phases of its period, at 20 and 50 ms latency: each period judged
    (after the first two whole ones) uses at least 80 % of its refusal-free count, and at most 2 of
    the 160 under 90 % (before the probe's pace was the rate tested: 9, down to 70 %)."""
    used: list[float] = []
    for latency in (0.02, 0.05):
        for i in range(20):
            phase = i * 0.05
            site = sites.StagedQuota(name="b", latency=latency, quota=60, window=20.0, phase=phase * 20.0, rate=3.0,
                                     burst=3.0)  # fmt: skip
            simulate(site, DEFAULTS, duration=20.0 * (8 - phase), warmup=0.0)
            ks = sorted(site.periods)
            used += [site.periods.get(k, [0, 0])[0] / site.free for k in range(ks[0] + 3, ks[-1])]
    assert len(used) == 160
    assert min(used) >= 0.8 and sum(u < 0.9 for u in used) <= 2, sorted(used)[:12]


def test_a_budgets_edge_right_after_a_rate_limits_refusals_is_a_run_of_its_own() -> None:
    """Seen end to end (the 3/s bucket site of test_budgets.py, entered at its period's end): the
    bucket refused while the adaptation found its rate, then one of its probes, and 6 successes
    later the period's count reached the budget's edge. Taken for one run, the turn was tested at
    the pace of the crawl's first burst (0.1 s, no limit learned then), the bucket refused it, and
    the slow rate the budget's refusals forced outlived their period (53-73 % of four periods).
    A refusal once the scope ran settled (at most one refusal among the 8 answers before it) begins
    a run of its own: its turn is tested at the rate found, and the budget is what went through."""
    state = ScopeState(bud_ok=17, bud_start=T0 - 10.0)
    bucket = [(True, 0.0, 0.1), (False, 0.33, 0.25), (False, 0.53, 0.21), (True, 0.72, 0.18), (False, 1.0, 0.28),
              (False, 1.25, 0.25), (False, 1.49, 0.23), (True, 1.71, 0.22), (False, 2.05, 0.34), (False, 2.36, 0.31),
              (False, 2.64, 0.28), (False, 2.91, 0.27), (False, 3.16, 0.25), (True, 3.41, 0.25), (False, 3.8, 0.385),
              (False, 4.17, 0.37), (False, 4.54, 0.365), (False, 4.91, 0.36), (False, 5.33, 0.357),
              (False, 5.68, 0.355)]  # fmt: skip
    for refused, at, gap in bucket:
        state, _ = budget.on_response(state, refused, T0 + at, T0 + at + 0.1, gap, gap)
        state = msgspec.structs.replace(state, limit=0.34 if at >= 3.41 else 0.0)  # (the adaptation's, found)
    assert state.bud_ok == 33
    edge = [(True, 6.04, 0.353), (True, 6.57, 0.53), (False, 7.38, 0.8), (False, 8.08, 0.71), (True, 8.74, 0.65),
            (True, 9.73, 0.99), (False, 11.2, 1.48), (False, 12.5, 1.32), (True, 13.75, 1.21), (False, 15.6, 1.84),
            (False, 17.2, 1.64), (False, 18.7, 1.5), (False, 20.2, 1.42)]  # fmt: skip
    for refused, at, gap in edge:
        state, _ = budget.on_response(state, refused, T0 + at, T0 + at + 0.1, gap, gap)
    assert budget.testing(state) and budget.went_through(state) == pytest.approx(0.34)
    for n in range(budget.TEST):
        state = budget.on_sent(state, T0 + 20.5 + 0.34 * n)
        state, _ = budget.on_response(state, False, T0 + 20.5 + 0.34 * n, T0 + 20.6 + 0.34 * n, 0.34, 0.34)
    assert state.bud_mode == budget.COUNTING and state.bud_size == 33.0 and state.limit == 0.34


def test_refusals_that_end_only_once_the_scope_slowed_down_do_not_restart_the_count() -> None:
    """Twenty successes in a row end a run of refusals. When they come at the pace the refusals
    came at, the period may have turned: the count starts again from them. When they come only
    once the scope slowed down (a token bucket whose rate the adaptation found), nothing turned:
    the period's count goes on. Seen end to end: a bucket's run ended that way restarted the
    count 11 successes into its period, the budget was taken as 22 for 30, and a period refused
    7 % of its requests."""

    def run(slowed_to: float) -> ScopeState:
        state = ScopeState(bud_ok=10)
        at = 0.0
        for refused, gap in [(True, 0.2), (False, 0.2), (True, 0.2), (False, 0.25), (True, 0.2)]:
            state, _ = budget.on_response(state, refused, T0 + at, T0 + at + 0.05, gap, gap)
            at += gap
        for _ in range(budget.RUN_END):
            at += slowed_to
            state, _ = budget.on_response(state, False, T0 + at, T0 + at + 0.05, slowed_to, slowed_to)
        return state

    slowed, turned = run(0.35), run(0.22)
    assert slowed.bud_run_at < 0 and slowed.bud_ok == 12 + budget.RUN_END
    assert turned.bud_run_at < 0 and turned.bud_ok == budget.RUN_END

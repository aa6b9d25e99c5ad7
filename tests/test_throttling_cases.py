"""Every numeric case of shared/THROTTLING.md, as a table-driven test of the pure policy.

Cases 21-22 (several scopes per job) are in test_scopes.py, where jobs and scopes meet.
Time is injected: nothing here sleeps or reads a clock.
"""

import itertools
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from frontier.config import AutoThrottleSettings, BackoffSettings, RampupSettings, ScopeSettings
from frontier.core.headers import retry_after
from frontier.core.policy import (
    Done,
    Robots,
    ScopeState,
    Sent,
    apply,
    autothrottle,
    concurrency,
    current_at_delay,
    decide,
    delay,
    jitter_factor,
    with_margin,
)  # fmt: skip
from frontier.core.robots import RobotsRecord, Rules
from frontier.sim import sites
from frontier.sim.engine import T0 as SIM_T0
from frontier.sim.engine import simulate

AT = ScopeSettings(
    delay=0.0, autothrottle=AutoThrottleSettings(start_delay=5.0)
)  # Scrapy: min 0, start 5, max 60, TC 1


def respond(state: ScopeState, s: ScopeSettings, now: float, status: int = 200, latency: float = 0.1,
            sent_at: float | None = None, headers: dict[str, str] | None = None) -> ScopeState:  # fmt: skip
    """One request sent at ``sent_at`` (default ``now``) and answered at ``now``."""
    sent = now if sent_at is None else sent_at
    state = apply(state, Sent(sent), sent, s)
    return apply(state, Done(sent_at=sent, status=status, latency=latency, headers=headers or {}), now, s)


# -- AutoThrottle (cases 1-6) -------------------------------------------------------------------
def test_case_1_start_delay_then_converge() -> None:
    s, state = AT, ScopeState()
    assert current_at_delay(state, s) == 5.0
    seen = []
    for t in (1.0, 2.0, 3.0):
        state = respond(state, s, t, latency=0.2)
        seen.append(round(current_at_delay(state, s), 6))
    assert seen == [2.6, 1.4, 0.8]


@pytest.mark.parametrize(
    ("settings", "old", "status", "latency", "expected"),
    [
        (AT, 0.8, 200, 3.0, 3.0),  # case 2: a slow response jumps straight to the target
        (AT, 3.0, 503, 0.1, 3.0),  # case 3: a fast error never speeds us up
        (AT, 3.0, 503, 10.0, 10.0),  # case 3: a slow error does slow us down
        (AT, 10.0, 200, 100.0, 60.0),  # case 4: capped at max_delay
        (replace(AT, autothrottle=AutoThrottleSettings(target_concurrency=2.0)), 1.0, 200, 3.0, 1.5),  # case 5
        (replace(AT, delay=2.0), 2.0, 200, 0.1, 2.0),  # case 6: never below the configured delay
    ],
)
def test_cases_2_to_6_autothrottle_rule(
    settings: ScopeSettings, old: float, status: int, latency: float, expected: float
) -> None:
    assert autothrottle(old, latency, status, settings, settings.delay) == pytest.approx(expected)
    # and through the stateful policy
    state = respond(ScopeState(at_delay=old), settings, 100.0, status=status, latency=latency)
    assert state.at_delay == pytest.approx(expected)


def test_network_errors_never_lower_the_autothrottle_delay() -> None:
    state = apply(apply(ScopeState(at_delay=3.0), Sent(1.0), 1.0, AT), Done(sent_at=1.0, error="timeout"), 1.5, AT)
    assert state.at_delay == 3.0


def test_per_request_opt_out() -> None:
    state = apply(ScopeState(at_delay=3.0), Sent(1.0), 1.0, AT)
    state = apply(state, Done(sent_at=1.0, status=200, latency=0.01, adjust=False), 1.1, AT)
    assert state.at_delay == 3.0


# -- Adaptation (cases 7-10, v2): base 0, AutoThrottle off ----------------------------------------
BO = ScopeSettings(delay=0.0, concurrency=16, autothrottle=AutoThrottleSettings(enabled=False))
T0 = 1_000_000.0


def test_case_7_one_429_steps_by_1_5_from_the_sending_interval() -> None:
    state, t = ScopeState(), T0
    for _ in range(10):  # sending every 0.2 s
        state = respond(state, BO, t)
        t += 0.2
    state = respond(state, BO, t, status=429)
    assert delay(state, BO) == pytest.approx(0.3)
    first = respond(ScopeState(), BO, T0, status=429)  # nothing sent before: the minimum step
    assert delay(first, BO) == 0.25
    jittered = replace(BO, jitter=(-0.1, 0.1))
    for u in (0.0, 0.5, 0.9999):
        st = apply(first, Sent(T0 + 10, u=u), T0 + 10, jittered)
        gap = decide(st, T0 + 10, jittered).at - (T0 + 10)  # type: ignore[operator]
        assert 0.225 - 1e-9 <= gap <= 0.275 + 1e-9


def test_case_8_one_step_per_incident() -> None:
    state = ScopeState()
    for _ in range(8):
        state = apply(state, Sent(T0), T0, BO)
    for i in range(8):  # eight 429s, all from requests sent before the first step
        state = apply(state, Done(sent_at=T0, dispatched_at=T0, status=429, latency=0.05), T0 + 0.1 + i * 0.01, BO)
    assert delay(state, BO) == 0.25  # Scrapy: 2**7 = 128


def test_case_9_an_outage_is_probed_at_growing_intervals_and_the_first_success_ends_it() -> None:
    """A 503 outage from t=10 to t=40 on a site served every 0.25 s (run by the simulator)."""
    served = replace(BO, delay=0.25, concurrency=1)
    site = sites.Outage(name="case 9", start=SIM_T0 + 10, end=SIM_T0 + 40, latency=0.02)
    simulate(site, served, duration=60.0, warmup=0.0)
    during = [a - SIM_T0 for a in site.arrivals if SIM_T0 + 10 <= a < SIM_T0 + 40]
    gaps = [b - a for a, b in itertools.pairwise(during)]
    assert len(during) <= 8 and all(b >= a for a, b in itertools.pairwise(gaps)) and gaps[-1] >= 8
    after = [a for a in site.arrivals if a >= SIM_T0 + 40]
    back = [b - a for a, b in itertools.pairwise(after)]
    assert back[1:4] == pytest.approx([0.25, 0.25, 0.25], abs=0.03)  # at 0.25 s from the third success on
    assert back[0] <= 2.0 + 1e-6


def test_case_10_capped() -> None:
    state, t = ScopeState(), T0
    for _ in range(30):  # stepped limit signals, each from a request sent after the previous step
        state = respond(state, BO, t, status=429)
        t += delay(state, BO)
    assert delay(state, BO) == 300.0


def test_trouble_probes_double_up_to_trouble_max() -> None:
    state, t, seen = ScopeState(), T0, []
    for _ in range(10):
        state = respond(state, BO, t, status=503)
        seen.append(delay(state, BO))
        t += delay(state, BO)
    assert seen[:7] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0] and seen[-1] == 60.0


def test_network_errors_are_trouble() -> None:
    state = apply(apply(ScopeState(), Sent(T0), T0, BO), Done(sent_at=T0, error="connect"), T0 + 0.1, BO)
    assert delay(state, BO) == 1.0 and state.trouble == 1.0 and state.limit == 0.0


def test_trouble_right_after_an_outage_is_overload_a_limit_signal() -> None:
    state = respond(ScopeState(), BO, T0, status=503)
    state = respond(state, BO, T0 + 1.0)  # the outage is over
    state = respond(state, BO, T0 + 1.05)
    state = respond(state, BO, T0 + 1.1, status=503)  # and back within a few requests
    assert state.trouble == 0.0 and state.limit > 0 and "again right after recovering" in state.cause


def test_case_23_a_token_bucket_is_served_near_its_rate_with_one_configuration() -> None:
    """5 req/s, burst 10, no headers, 20 ms, delay 0, nothing per site (simulator)."""
    s = replace(ScopeSettings(), delay=0.0, concurrency=8)
    result = simulate(sites.TokenBucket(name="case 23", rate=5.0, burst=10.0, latency=0.02), s, duration=180.0)
    assert result.rate >= 4.25 and result.limit_share <= 0.03


# -- Hard gates (cases 11-17) -------------------------------------------------------------------
NOW = datetime(2026, 8, 21, 12, 0, 0, tzinfo=UTC).timestamp()
G = replace(BO, concurrency=100)


def gate_after(status: int, headers: dict[str, str], s: ScopeSettings = G) -> ScopeState:
    return respond(ScopeState(), s, NOW, status=status, headers=headers)


def test_case_11_retry_after_seconds() -> None:
    state = gate_after(429, {"retry-after": "120"})
    d = decide(state, NOW + 1, G)
    assert (d.at, d.reason) == (NOW + with_margin(120), "gate")  # §9: windows end with a margin
    assert datetime.fromtimestamp(state.gate_until, UTC).strftime("%H:%M:%S") == "12:02:02"


def test_case_12_gate_outlives_adaptation() -> None:
    state = gate_after(429, {"retry-after": "1000"})
    assert state.gate_until == NOW + with_margin(1000)
    for k in range(20):  # successes bring the delay back down...
        state = apply(state, Done(sent_at=NOW + 1, status=200, latency=0.1), NOW + 2 + k, G)
    assert delay(state, G) < 0.3
    assert decide(state, NOW + 900, G).reason == "gate"  # ...the gate holds
    assert decide(state, NOW + 1021, G).reason == "ready"
    capped = gate_after(429, {"retry-after": "99999"})
    assert capped.gate_until == NOW + with_margin(3600)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("Fri, 21 Aug 2026 12:02:00 GMT", 120.0),  # IMF-fixdate
        ("Friday, 21-Aug-26 12:01:00 GMT", 60.0),  # RFC 850
        ("Fri Aug 21 12:00:30 2026", 30.0),  # asctime
        ("Fri Aug  1 12:00:30 2026", None),  # asctime, single-digit day: in the past
        ("Fri, 21 Aug 2026 11:59:00 GMT", None),  # past date: no gate
        ("0", None),
        ("-5", None),
        ("1.5", None),
        ("garbage", None),
        ("\u00b2", None),  # a superscript two is a digit to str.isdigit(), not to HTTP
        (" 7 ", 7.0),
        ("Fri, 32 Aug 2026 12:02:00 GMT", None),
        ("", None),
    ],
)
def test_cases_13_14_retry_after_values(value: str, seconds: float | None) -> None:
    assert retry_after(value, NOW) == seconds


def test_case_13_past_date_still_steps_backoff() -> None:
    state = gate_after(503, {"retry-after": "Fri, 21 Aug 2026 11:00:00 GMT"})
    assert state.gate_until == 0.0 and delay(state, G) == 1.0


def test_case_15_retry_after_on_200_is_ignored() -> None:
    assert gate_after(200, {"retry-after": "60"}).gate_until == 0.0


def test_case_16_retry_after_wins_over_ratelimit() -> None:
    state = gate_after(429, {"retry-after": "30", "ratelimit-remaining": "0", "ratelimit-reset": "45"})
    assert state.gate_until == NOW + with_margin(30)


@pytest.mark.parametrize(
    ("headers", "gate"),
    [
        ({"ratelimit": '"default";r=0;t=30', "ratelimit-policy": '"default";q=100;w=10'}, 30.0),  # case 17
        ({"ratelimit": '"default";r=5;t=30'}, 0.0),  # r > 0: no gate
        ({"ratelimit": '"default";r=zero;t=30'}, 0.0),  # malformed: ignored
        ({"ratelimit": "limit=100, remaining=0, reset=5"}, 5.0),  # generation 2
        ({"ratelimit": "limit=100, remaining=x, reset=5"}, 0.0),
        ({"ratelimit-limit": "10", "ratelimit-remaining": "0", "ratelimit-reset": "45"}, 45.0),  # generation 1
        ({"ratelimit-remaining": "0", "ratelimit-reset": "soon"}, 0.0),
        ({"ratelimit": '"default";r=0'}, 0.0),  # no reset and no policy window: nothing to wait for
        ({"ratelimit": '"default";r=0', "ratelimit-policy": '"default";q=100;w=10'}, 10.0),
    ],
)
def test_case_17_ratelimit_generations(headers: dict[str, str], gate: float) -> None:
    state = gate_after(200, headers)
    assert state.gate_until == (NOW + with_margin(gate) if gate else 0.0)


def test_a_published_budget_is_spread_and_never_exceeded() -> None:
    """§4: RateLimit remaining=2, reset=20 on a 200: at most 2 requests before the reset, spread."""
    s = replace(G, concurrency=10)
    state = gate_after(200, {"ratelimit": "limit=10, remaining=2, reset=20"})
    assert delay(state, s) == pytest.approx(20 / 2)
    t, sends = NOW, []
    while t < NOW + 20:
        d = decide(state, t, s)
        assert d.at is not None
        t = d.at
        if t < NOW + 20:
            sends.append(t)
        state = apply(state, Sent(t), t, s)
    assert len(sends) == 1 and sends[0] - NOW == pytest.approx(20 / 2)
    assert t >= NOW + 20  # the second of the two goes at the reset (with its margin), not before


# -- Crawl-delay (case 18) ----------------------------------------------------------------------
def robots_delay(text: str) -> float:
    return Rules(RobotsRecord(status=200, body=text.encode()), "mybot").delay()


@pytest.mark.parametrize(
    ("directive", "base"),
    [
        ("Crawl-delay: 10", 10.0),
        ("Crawl-delay: 120", 60.0),  # capped by robots_max_delay
        ("Crawl-delay: 0", 1.0),
        ("Crawl-delay: abc", 1.0),
        ("Crawl-delay: nan", 1.0),
        ("Crawl-delay: -3", 1.0),
        ("Request-rate: 3/1m", 20.0),
    ],
)
def test_case_18_crawl_delay(directive: str, base: float) -> None:
    s = ScopeSettings(delay=1.0, concurrency=4, autothrottle=AutoThrottleSettings(enabled=False))
    state = apply(ScopeState(), Robots(robots_delay(f"User-agent: *\n{directive}\n")), 0.0, s)
    assert delay(state, s) == base
    assert concurrency(state, s) == (1 if base > 1.0 else 4)  # Crawl-delay means one at a time


def test_ignore_robots_txt_keeps_the_configured_delay() -> None:
    s = ScopeSettings(delay=1.0, ignore_robots_txt=True, autothrottle=AutoThrottleSettings(enabled=False))
    assert delay(apply(ScopeState(), Robots(10.0), 0.0, s), s) == 1.0


# -- Quotas (cases 19-20): quota 100, window 60 --------------------------------------------------
Q = ScopeSettings(
    delay=0.0, concurrency=100, quota=100.0, window=60.0, autothrottle=AutoThrottleSettings(enabled=False)
)


def test_case_19_quota_window() -> None:
    state = ScopeState()
    for t, cost in ((T0, 60.0), (T0 + 10, 30.0)):
        assert decide(state, t, Q, cost).reason == "ready"
        state = apply(state, Sent(t, cost=cost), t, Q)
    d = decide(state, T0 + 20, Q, 20.0)
    assert (d.at, d.reason) == (T0 + 60, "quota")
    assert decide(state, T0 + 60, Q, 20.0).reason == "ready"


def test_case_20_first_job_passes_then_reconcile() -> None:
    state = ScopeState()
    assert decide(state, T0, Q, 500.0).reason == "ready"
    state = apply(state, Sent(T0, cost=500.0), T0, Q)
    d = decide(state, T0 + 1, Q, 1.0)
    assert (d.at - (T0 + 1), d.reason) == (59.0, "quota")  # type: ignore[operator]
    state = apply(state, Done(sent_at=T0, status=200, latency=0.1, headers={"ratelimit": '"q";r=10;t=50'}), T0 + 2, Q)
    assert state.quota_used == 90.0


def test_spread_paces_requests_over_the_window() -> None:
    s = replace(Q, spread=True)
    assert delay(ScopeState(), s) == 0.6


# -- Rampup (case 23): base delay 1, min_delay 0.25, window 60 ----------------------------------
RU = ScopeSettings(
    delay=1.0, concurrency=1, autothrottle=AutoThrottleSettings(enabled=False),
    rampup=RampupSettings(enabled=True, window=60.0, min_delay=0.25, max_concurrency=3),
)  # fmt: skip


def test_case_23_rampup() -> None:
    state, t = apply(ScopeState(), Sent(T0), T0, RU), T0
    state = apply(state, Done(sent_at=T0, status=200, latency=0.1), T0 + 0.1, RU)
    seen = [(delay(state, RU), concurrency(state, RU))]
    for _ in range(5):  # quiet windows with traffic in each
        t += 60
        state = respond(state, RU, t)
        seen.append((delay(state, RU), concurrency(state, RU)))
    assert seen == [(1.0, 1), (0.5, 1), (0.25, 1), (0.25, 2), (0.25, 3), (0.25, 3)]
    t += 1
    state = respond(state, RU, t, status=429)
    assert delay(state, RU) >= 0.25 * 1.5  # the 429 steps back (1.5 x the sending interval, at least)
    t += 60
    state = respond(state, RU, t)
    assert concurrency(state, RU) == 3  # one trigger = the target: hold, do not ramp on


def test_rampup_steps_back_on_too_many_triggers() -> None:
    s = replace(RU, rampup=replace(RU.rampup, target=(0, 1)))
    state = ScopeState(ru_delay=0.25, ru_concurrency=3, ru_window_start=T0)
    for k in range(3):
        state = respond(state, s, T0 + 1 + k, status=429, sent_at=T0 + 1 + k)
    state = respond(state, s, T0 + 61)
    assert concurrency(state, s) == 2


# -- Jitter (case 24) ---------------------------------------------------------------------------
@pytest.mark.parametrize(("jitter", "lo", "hi"), [((-0.5, 0.5), 0.5, 1.5), ((-0.1, 0.3), 0.9, 1.3)])
def test_case_24_jitter(jitter: tuple[float, float], lo: float, hi: float) -> None:
    s = ScopeSettings(jitter=jitter)
    factors = [jitter_factor(u / 100, s) for u in range(100)]
    assert min(factors) == pytest.approx(lo) and max(factors) <= hi and max(factors) > hi - 0.02


def test_backoff_settings_are_per_scope() -> None:
    s = replace(BO, backoff=BackoffSettings(factor=3.0, min_delay=2.0, max_delay=10.0))
    state = ScopeState()
    for k in range(3):
        state = respond(state, s, T0 + k, status=429, sent_at=T0 + k)
    assert delay(state, s) == 10.0  # 2 -> 6 -> capped 10


# -- Published budgets (case 25, v2) and X-RateLimit -------------------------------------------
def test_case_25_x_ratelimit_on_a_200_is_a_spread_budget() -> None:
    s = replace(G, concurrency=50)
    state = gate_after(200, {"x-ratelimit-remaining": "20", "x-ratelimit-reset": "10"})
    assert delay(state, s) >= 0.5
    t, sent = NOW, 0
    while True:
        d = decide(state, t, s)
        assert d.at is not None
        t = d.at
        if t >= NOW + 10:
            break
        state = apply(state, Sent(t), t, s)
        sent += 1
    assert 18 <= sent <= 20  # spread over the 10 s, never more than the 20 it published


@pytest.mark.parametrize(
    ("headers", "gate"),
    [
        ({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "12"}, 12.0),  # seconds
        ({"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 40)}, 40.0),  # an epoch time
        ({"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) - 40)}, 0.0),  # in the past
        ({"x-ratelimit-remaining": "0"}, 0.0),
        ({"x-ratelimit-remaining": "zero", "x-ratelimit-reset": "12"}, 0.0),
    ],
)
def test_x_ratelimit_remaining_zero_is_a_gate(headers: dict[str, str], gate: float) -> None:
    state = gate_after(200, headers)
    assert state.gate_until == (NOW + with_margin(gate) if gate else 0.0)


@pytest.mark.parametrize(
    ("skew", "expected"),
    [
        (0.0, 60.0),  # same clocks: the frontier's own clock is exact (Date only has whole seconds)
        (0.6, 60.0),
        (30.0, 60.0),  # the server's clock 30 s ahead: read the date against its Date header
        (-30.0, 60.0),
    ],
)
def test_an_http_date_retry_after_means_what_the_server_meant(skew: float, expected: float) -> None:
    from email.utils import formatdate

    server_now = NOW + skew
    headers = {"retry-after": formatdate(server_now + 60, usegmt=True), "date": formatdate(server_now, usegmt=True)}
    assert retry_after(headers["retry-after"], NOW, headers["date"]) == pytest.approx(expected, abs=1.0)

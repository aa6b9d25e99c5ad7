"""Every numeric case of shared/THROTTLING.md, as a table-driven test of the pure policy.

Cases 21-22 (several scopes per job) are in test_scopes.py, where jobs and scopes meet.
Time is injected: nothing here sleeps or reads a clock.
"""

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from frontier.config import AutoThrottleSettings, BackoffSettings, RampupSettings, ScopeSettings
from frontier.headers import retry_after
from frontier.policy import (
    Done,
    Robots,
    ScopeState,
    Sent,
    advance,
    apply,
    autothrottle,
    concurrency,
    current_at_delay,
    decide,
    delay,
    jitter_factor,
)  # fmt: skip
from frontier.robots import RobotsRecord, Rules

AT = ScopeSettings(delay=0.0)  # Scrapy defaults: min 0, start 5, max 60, TC 1


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


# -- Backoff (cases 7-10): base 0, AutoThrottle off ----------------------------------------------
BO = ScopeSettings(delay=0.0, concurrency=16, autothrottle=AutoThrottleSettings(enabled=False))
T0 = 1_000_000.0


def test_case_7_one_429_and_jitter() -> None:
    state = respond(ScopeState(), BO, T0, status=429)
    assert delay(state, BO) == 1.0
    jittered = replace(BO, jitter=(-0.1, 0.1))
    for u in (0.0, 0.5, 0.9999):
        st = apply(state, Sent(T0 + 10, u=u), T0 + 10, jittered)
        gap = decide(st, T0 + 10, jittered).at - (T0 + 10)  # type: ignore[operator]
        assert 0.9 - 1e-9 <= gap <= 1.1 + 1e-9


def test_case_8_one_step_per_incident() -> None:
    state = ScopeState()
    for _ in range(8):
        state = apply(state, Sent(T0), T0, BO)
    for i in range(8):  # eight 429s, all from requests sent before the first step
        state = apply(state, Done(sent_at=T0, status=429, latency=0.05), T0 + 0.1 + i * 0.01, BO)
    assert delay(state, BO) == 1.0  # Scrapy: 2**7 = 128


def test_case_9_steps_then_recovers_by_bisection_to_base() -> None:
    state = ScopeState()
    for k in range(4):  # triggers at t=0,1,2,3, each from a request sent after the previous step
        state = respond(state, BO, T0 + k, status=429, sent_at=T0 + k)
    assert delay(state, BO) == 8.0
    assert decide(state, T0 + 62.9, BO).at is not None
    lower = apply(state, Sent(T0 + 63), T0 + 63, BO)
    assert 4.0 <= delay(lower, BO) < 8.0  # lower, and at most halfway toward the base
    previous, t = delay(lower, BO), T0 + 63
    while previous > 0:
        t += 60
        d = delay(apply(lower, Sent(t), t, BO), BO)
        # at most halfway each window; the very last step drops a negligible (< 0.1 s) backoff to 0
        assert d <= previous and (d >= previous / 2 - 1e-9 or (d == 0 and previous < 0.1))
        previous = d
        assert t < T0 + 60 * 40, "never returned to base"
    assert previous == 0.0


def test_case_10_capped() -> None:
    state = ScopeState()
    for k in range(12):
        state = respond(state, BO, T0 + k, status=503, sent_at=T0 + k)
    assert delay(state, BO) == 300.0


def test_network_errors_trigger_backoff() -> None:
    state = apply(apply(ScopeState(), Sent(T0), T0, BO), Done(sent_at=T0, error="connect"), T0 + 0.1, BO)
    assert delay(state, BO) == 1.0


# -- Hard gates (cases 11-17) -------------------------------------------------------------------
NOW = datetime(2026, 8, 21, 12, 0, 0, tzinfo=UTC).timestamp()
G = replace(BO, concurrency=100)


def gate_after(status: int, headers: dict[str, str], s: ScopeSettings = G) -> ScopeState:
    return respond(ScopeState(), s, NOW, status=status, headers=headers)


def test_case_11_retry_after_seconds() -> None:
    state = gate_after(429, {"retry-after": "120"})
    d = decide(state, NOW + 1, G)
    assert (d.at, d.reason) == (NOW + 120, "gate")
    assert datetime.fromtimestamp(state.gate_until, UTC).strftime("%H:%M:%S") == "12:02:00"


def test_case_12_gate_outlives_backoff_recovery() -> None:
    state = gate_after(429, {"retry-after": "1000"})
    assert state.gate_until == NOW + 1000
    assert delay(advance(state, NOW + 900, G), G) == 0.0  # backoff has recovered by t=900...
    assert decide(state, NOW + 900, G).reason == "gate"  # ...the gate has not
    assert decide(state, NOW + 1000, G).reason == "ready"
    capped = gate_after(429, {"retry-after": "99999"})
    assert capped.gate_until == NOW + 3600


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
    assert state.gate_until == NOW + 30


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
    assert state.gate_until == (NOW + gate if gate else 0.0)


def test_ratelimit_remaining_is_obeyed_as_a_server_quota() -> None:
    s = replace(G, concurrency=10)
    state = gate_after(200, {"ratelimit": "limit=10, remaining=2, reset=20"})
    for i in range(2):
        assert decide(state, NOW + 1 + i, s).reason == "ready"
        state = apply(state, Sent(NOW + 1 + i), NOW + 1 + i, s)
    d = decide(state, NOW + 3, s)
    assert (d.at, d.reason) == (NOW + 20, "ratelimit")


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
    assert delay(state, RU) == 1.0  # the 429 steps back (backoff: max(min 1.0, 0.25 * 2))
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


def test_a_failed_probe_returns_to_the_last_safe_delay_not_double() -> None:
    state = ScopeState()
    for k in range(3):  # 1, 2, 4
        state = respond(state, BO, T0 + k, status=429, sent_at=T0 + k)
    state = advance(state, T0 + 62, BO)  # a quiet window at 4: safe=4, probe at bisect(4, 2) = 3
    assert (state.safe, delay(state, BO)) == (4.0, 3.0)
    state = respond(state, BO, T0 + 63, status=429, sent_at=T0 + 63)
    assert delay(state, BO) == 4.0  # not 6: 4 is known to be safe

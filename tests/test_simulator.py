"""The simulator's required results (THROTTLING.md v2 §3, §4, §10), asserted: the real policy
against model sites in virtual time, one configuration for every site. Deterministic (seeded),
no clock, no sleeping: the whole grid runs in a few seconds."""

import pytest

from frontier.config import AutoThrottleSettings, ScopeSettings
from frontier.sim import sites
from frontier.sim.engine import T0, simulate
from frontier.sim.grid import KNOWN_SHORT, SIGNALS, Row, kinds, token_bucket_grid

DEFAULTS = ScopeSettings()


@pytest.mark.parametrize("signal", SIGNALS)
def test_token_buckets_of_every_rate_and_latency_are_served_near_their_rate(signal: str) -> None:
    rows = list(token_bucket_grid(DEFAULTS, signals=(signal,)))
    assert len(rows) == 32
    failed = [_explain(r) for r in rows if not r.met]
    assert not failed, "\n".join(failed)


def test_every_other_kind_of_site_gets_its_required_result() -> None:
    rows = list(kinds(DEFAULTS))
    failed = [_explain(r) for r in rows if not r.met and r.scenario not in KNOWN_SHORT]
    assert not failed, "\n".join(failed)
    assert {r.scenario for r in rows} >= set(KNOWN_SHORT)  # the known shortfalls are still measured


def test_no_request_inside_a_window_even_with_many_in_flight() -> None:
    """Case 26's situation in the simulator: the worker holding jobs when a 429 + Retry-After
    arrives sends none of them inside the window."""
    site = sites.TokenBucket(name="w", rate=5.0, burst=5.0, signal="retry-after", latency=0.3)
    s = ScopeSettings(delay=0.0, concurrency=16, autothrottle=AutoThrottleSettings(target_concurrency=16.0))
    result = simulate(site, s, duration=120.0)
    assert result.limited > 0 and result.inside_windows == 0


def test_the_simulator_is_deterministic() -> None:
    def once() -> tuple[int, int, float]:
        site = sites.TokenBucket(name="d", rate=3.0, burst=6.0, latency=0.05)
        r = simulate(site, ScopeSettings(delay=0.0, concurrency=4, jitter=(-0.3, 0.3)), duration=60.0)
        return r.sent, r.limited, r.rate

    assert once() == once()


def test_an_outage_ends_with_the_first_success() -> None:
    site = sites.Outage(name="o", start=T0 + 20, end=T0 + 80, latency=0.05)
    r = simulate(site, ScopeSettings(delay=0.25), duration=140.0)
    assert r.recovery is not None and r.recovery <= 10.0
    during = [a for a in site.arrivals if T0 + 20 <= a < T0 + 80]
    assert len(during) <= 8  # probes at 1, 2, 4, ... 60 s, not one every 0.25 s


def _explain(row: Row) -> str:
    r = row.result
    return (f"{row.scenario}: share {r.share:.0%}, 429s {r.limit_share:.1%}, inside windows {r.inside_windows}, "
            f"under floor {r.under_floor}, recovery {r.recovery} (required: {row.required})")  # fmt: skip

"""The simulator's scenarios and required results (``../shared/THROTTLING.md`` §3, §4, §10).

:func:`token_bucket_grid` crawls token buckets of every rate from 0.2 to 50 req/s and latencies
from 10 ms to 2 s, with each way a site can say "slower"; :func:`kinds` crawls one site of every
other kind. Both return :class:`Row` s that say whether the required result was met; the unit
tests assert them and ``python -m frontier.sim`` prints them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

from frontier.config import ScopeSettings
from frontier.sim import sites
from frontier.sim.engine import T0, Result, simulate

RATES = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
# Scenarios measured and printed whose required result is not met yet (docs/BENCHMARKS.md says why).
KNOWN_SHORT: tuple[str, ...] = ()
LATENCIES = (0.01, 0.1, 0.5, 2.0)
SIGNALS = ("none", "retry-after", "http-date", "ratelimit-1", "ratelimit-2", "ratelimit-3", "x-ratelimit")


@dataclass(frozen=True)
class Row:
    scenario: str
    result: Result
    required: str  # the required result, in words
    met: bool
    detail: str = ""  # what the row measured beyond the result's figures (budgets: per period)


def open_settings(base: ScopeSettings, rate: float, latency: float) -> ScopeSettings:
    """``delay = 0`` and enough concurrency for the model's latency (§3: the grid measures the
    adaptation, not the floor): twice the requests in flight the rate needs, at least 2."""
    c = max(2, math.ceil(rate * latency * 2) + 1)
    return replace(base, delay=0.0, concurrency=c, autothrottle=replace(base.autothrottle, target_concurrency=float(c)))


def _duration(rate: float) -> float:
    return max(180.0, 300.0 / rate)  # at least ~300 requests' worth of allowance


def token_bucket_grid(
    base: ScopeSettings, rates: tuple[float, ...] = RATES, latencies: tuple[float, ...] = LATENCIES,
    signals: tuple[str, ...] = SIGNALS,
) -> Iterator[Row]:  # fmt: skip
    for signal in signals:
        for rate in rates:
            for latency in latencies:
                s = open_settings(base, rate, latency)
                site = sites.TokenBucket(name=f"bucket {rate:g}/s {signal} {latency * 1000:g}ms", rate=rate,
                                         burst=max(2.0, rate * 2), signal=signal, latency=latency)  # fmt: skip
                r = simulate(site, s, duration=_duration(rate), warmup=20.0 + 5.0 / rate)
                yield _judge(r, signal)


def _judge(r: Result, signal: str) -> Row:
    if signal == "none":
        return Row(r.site, r, ">= 85 % of the rate, <= 3 % 429s", r.share >= 0.85 and r.limit_share <= 0.03)
    return Row(r.site, r, ">= 90 % of the rate, 0 requests inside a window",
               r.share >= 0.90 and r.inside_windows == 0)  # fmt: skip


def kinds(base: ScopeSettings) -> Iterator[Row]:
    """One site of every other kind, with ``base`` as is (the defaults, or a profile)."""
    open_ = open_settings(base, 5.0, 0.05)
    site: sites.Site
    for label, publish in (("RateLimit", "ratelimit-3"), ("X-RateLimit", "x-ratelimit")):
        site = sites.TokenBucket(name=f"publishes its budget ({label}) 10/s", rate=10.0, burst=20.0,
                                 signal=publish, publish=True, latency=0.05)  # fmt: skip
        r = simulate(site, open_settings(base, 10.0, 0.05), duration=180.0)
        yield Row(r.site, r, ">= 95 % of the budget, no 429", r.share >= 0.95 and r.limited == 0)
    for label, kw in (("503", {}), ("503 + Retry-After 5", {"retry_after": 5}), ("refused", {"refuse": True})):
        for length in (5.0, 30.0, 120.0):
            site = sites.Outage(name=f"outage {length:g}s ({label})", start=T0 + 40, end=T0 + 40 + length,
                                latency=0.05, **kw)  # fmt: skip
            r = simulate(site, replace(open_, concurrency=2), duration=40 + length + 60)
            ok = r.recovery is not None and r.recovery <= 10.0 and r.inside_windows == 0
            yield Row(r.site, r, "back to the pre-outage rate within 10 s", ok)
    site = sites.Loaded(name="latency grows with load", latency=0.05, growth=0.5)
    r = simulate(site, replace(base, concurrency=8), duration=180.0)
    yield Row(r.site, r, "few requests in flight (AutoThrottle), no errors", r.troubled == 0)
    for floor in (0.5, 2.0):
        site = sites.CrawlDelay(name=f"Crawl-delay {floor:g}", latency=0.05, floor=floor, allowance=1 / floor)
        r = simulate(site, base, duration=180.0)
        # timed from the end of the previous response with a margin (§9): latency + 2 % + 20 ms per gap
        yield Row(r.site, r, "no gap under the Crawl-delay, >= 80 % of it", r.under_floor == 0 and r.share >= 0.8)
        site = sites.CrawlDelay(name=f"Crawl-delay {floor:g}, jitter 0.5", latency=0.05, floor=floor,
                                allowance=1 / floor)  # fmt: skip
        r = simulate(site, replace(base, jitter=(-0.5, 0.5)), duration=180.0)
        yield Row(r.site, r, "no gap under the Crawl-delay", r.under_floor == 0)
    for before, after in ((10.0, 2.0), (2.0, 10.0)):
        site = sites.Changing(name=f"limit {before:g}/s -> {after:g}/s at 90 s", rate=before, later=after,
                              change_at=T0 + 90, burst=max(before, after) * 2, latency=0.05)  # fmt: skip
        r = simulate(site, open_settings(base, max(before, after), 0.05), duration=300.0)
        yield Row(r.site, r, ">= 80 % of the changing rate, <= 5 % 429s", r.share >= 0.8 and r.limit_share <= 0.05)
    yield from budgets(base)


DAY = 86400.0
# seed 003's sites: (quota, period, Retry-After on the last stage, a rate limit on top (req/s),
# the stages follow every request (refused ones too) rather than the ones served)
BUDGETS = ((600, 600.0, False, 0.0, False), (600, 600.0, True, 0.0, False), (120, 60.0, False, 0.0, False),
           (40, 20.0, True, 0.0, False), (80, 20.0, False, 0.0, True), (4000, DAY, False, 0.0, False),
           (600, 600.0, False, 2.0, False))  # fmt: skip
BUDGET_PERIODS = 8  # periods crawled; the first two (the first one entered part way) are for learning


# the entry-phase sweep: (quota, period) pairs from 20-second to day-long periods; each entered at
# these shares of a period, with and without Retry-After on the last stage and a rate limit on top
PHASE_CASES = ((40, 20.0), (200, 20.0), (40, 60.0), (120, 60.0), (200, 600.0), (1200, 600.0), (200, 3600.0),
               (2000, 3600.0), (2000, DAY), (20000, DAY))  # fmt: skip
PHASES = (0.5, 0.8, 0.95)


def budget_phases(base: ScopeSettings) -> Iterator[Row]:
    """Seed 003's staged quotas entered at several points of a period (the crawler cannot choose):
    the same requirement as :func:`budgets`, with the defaults as they are. A table for the docs
    (``python -m frontier.sim --budget-phases``), not a test: short periods fall short."""
    for quota, window in PHASE_CASES:
        for retry_after, rate in ((False, 0.0), (True, 0.0), (False, 3.0)):
            for phase in PHASES:
                yield _budget_row(base, quota, window, retry_after, rate, True, phase)


def budgets(base: ScopeSettings, cases: tuple[tuple[int, float, bool, float, bool], ...] = BUDGETS) -> Iterator[Row]:
    """Seed 003's staged quotas, not told (THROTTLING.md v3 §6): after the first two periods, each
    period uses >= 90 % of what it serves before refusing any, and <= 5 % of requests are refused."""
    for quota, window, retry_after, rate, every in cases:
        yield _budget_row(open_settings(base, 5.0, 0.05), quota, window, retry_after, rate, every, 0.3)


def _budget_row(s: ScopeSettings, quota: int, window: float, retry_after: bool, rate: float, every: bool,
                phase: float) -> Row:  # fmt: skip
    name = f"seed 003 staged quota {quota}/{_span(window)}"
    name += " + Retry-After on the last stage" if retry_after else ""
    name += f" + rate limit {rate:g}/s" if rate else ""
    name += ", refusals counted" if every else ""
    name += f", entered {phase:.0%} into a period" if phase != 0.3 else ""
    site = sites.StagedQuota(name=name, latency=0.05, quota=quota, window=window, phase=phase * window,
                             retry_after=retry_after, rate=rate, every=every)  # fmt: skip
    r = simulate(site, s, duration=window * (BUDGET_PERIODS - phase), warmup=window * (2 - phase))
    judged = [site.periods.get(k, [0, 0]) for k in range(2, BUDGET_PERIODS)]
    # what a period serves without refusing any: the staged quota's first half, or less under a
    # token bucket that lets fewer through in a period (its rate; its burst at most once)
    free = min(site.free, rate * window) if rate else site.free
    used = [served / free for served, _ in judged]
    sent = sum(a + b for a, b in judged)
    refused = sum(b for _, b in judged) / sent if sent else 0.0
    ok = bool(used) and min(used) >= 0.9 and refused <= 0.05 and r.inside_windows == 0
    detail = f"periods 3-{BUDGET_PERIODS}: {' '.join(f'{u:.0%}' for u in used)} of the refusal-free count; " \
             f"{refused:.1%} refused"  # fmt: skip
    return Row(name, r, ">= 90 % of the refusal-free count each period, <= 5 % refused (after two periods)",
               ok, detail)  # fmt: skip


def _span(seconds: float) -> str:
    return "day" if seconds == DAY else f"{seconds:g}s"

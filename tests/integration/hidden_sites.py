"""Local test sites that enforce limits the crawler is never told, and record every request.

Each site judges the crawler by its own clock and logs: requests inside a gate it announced,
requests to paths robots.txt disallows, gaps shorter than its Crawl-delay, concurrency. All run
on loopback addresses (127.0.0.1xx) and every load is bounded by the URLs the test submits.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from email.utils import formatdate

from aiohttp import web

from frontier.demo.sites import Hit, Site, SiteFleet, take_token

GATE_TOLERANCE = 0.005  # seconds; clock reads on one machine


@dataclass
class Limits:
    """A site's hidden behaviour and what it observed."""

    kind: str
    rate: float = 0.0  # requests/s the site allows (token bucket / fixed window)
    burst: float = 2.0
    window: float = 5.0
    quota: int = 0
    crawl_delay: float = 0.0
    outage: tuple[float, float] = (0.0, 0.0)  # seconds after the first page request: answer 503
    tokens: float = 0.0
    last: float = 0.0
    blocked_until: float = 0.0
    gate_violations: list[float] = field(default_factory=list)
    disallowed_fetched: list[str] = field(default_factory=list)
    window_start: float = 0.0
    window_count: int = 0
    first_page: float = 0.0
    day_count: int = 0
    epoch: float = 0.0  # staged: when period 0 began (the crawler is not told)
    retry_last: bool = False  # staged: the last stage's 429s carry Retry-After until the period turns
    served: int = 0  # staged: requests served in the current period...
    period: int = -1  # ...which is this one
    periods: dict[int, list[int]] = field(default_factory=dict)  # staged: period -> [served, refused]
    active_log: list[tuple[float, int]] = field(default_factory=list)


def _page(n: int, private: bool = False) -> str:
    links = f'<a href="/page/{n + 1}">next</a>' + ('<a href="/private/1">private</a>' if private else "")
    return f"<html><body>page {n} {links}</body></html>"


class HiddenLimitFleet(SiteFleet):
    def __init__(self, limits: list[Limits], first_octet: int = 101) -> None:
        super().__init__(len(limits), pages=0, latency=0.02, first_octet=first_octet)
        self.limits = {site.host: lim for site, lim in zip(self.sites, limits, strict=True)}

    def by_kind(self, kind: str) -> tuple[Site, Limits]:
        return next((self.site(h), lim) for h, lim in self.limits.items() if lim.kind == kind)

    async def respond(self, site: Site, request: web.Request, hit: Hit) -> web.Response:
        lim = self.limits[site.host]
        now = hit.start
        lim.active_log.append((now, site.active))
        if now < lim.blocked_until - GATE_TOLERANCE:
            lim.gate_violations.append(now - lim.blocked_until)
        if request.path == "/robots.txt":
            if lim.kind == "robots":
                return web.Response(text=self.robots_txt(lim))
            return web.Response(status=404)
        if not lim.first_page:
            lim.first_page = now
        try:
            return await getattr(self, f"_{lim.kind}")(site, lim, request, now)
        finally:
            lim.active_log.append((time.time(), site.active - 1))

    def robots_txt(self, lim: Limits) -> str:
        """The robots site's robots.txt (a subclass may address its rules to one agent)."""
        return f"User-agent: *\nCrawl-delay: {lim.crawl_delay}\nDisallow: /private\n"

    def html(self, request: web.Request, private: bool = False) -> str:
        """The body of a page that is served (the same for every path here; a subclass may vary it)."""
        return _page(0, private)

    # -- behaviours -------------------------------------------------------------------------------
    async def _bucket(self, site: Site, lim: Limits, request: web.Request, now: float) -> web.Response:
        """A token bucket that answers a bare 429 above its rate: nothing says how long to wait."""
        await asyncio.sleep(site.latency)
        if take_token(lim, now) is None:
            return web.Response(text=self.html(request), content_type="text/html")
        return web.Response(status=429)

    async def _xratelimit(self, site: Site, lim: Limits, request: web.Request, now: float) -> web.Response:
        """Fixed windows of ``quota`` requests, published on every answer as X-RateLimit-* (a de-facto
        API convention: remaining requests, seconds until the window resets)."""
        await asyncio.sleep(site.latency)
        if not lim.window_start or now >= lim.window_start + lim.window:
            lim.window_start, lim.window_count = now, 0
        reset = lim.window_start + lim.window
        lim.window_count += 1
        remaining = max(0, lim.quota - lim.window_count)
        headers = {"X-RateLimit-Limit": str(lim.quota), "X-RateLimit-Remaining": str(remaining),
                   "X-RateLimit-Reset": str(max(1, math.ceil(reset - now)))}  # fmt: skip
        if remaining == 0:
            lim.blocked_until = max(lim.blocked_until, reset)
        if lim.window_count > lim.quota:
            return web.Response(status=429, headers=headers)
        return web.Response(text=self.html(request), content_type="text/html", headers=headers)

    async def _retry_after_seconds(self, site: Site, lim: Limits, request: web.Request, now: float) -> web.Response:
        await asyncio.sleep(site.latency)
        wait = take_token(lim, now)
        if wait is None:
            return web.Response(text=self.html(request), content_type="text/html")
        seconds = max(1, math.ceil(wait))
        lim.blocked_until = max(lim.blocked_until, now + seconds)
        return web.Response(status=429, headers={"Retry-After": str(seconds)})

    async def _retry_after_date(self, site: Site, lim: Limits, request: web.Request, now: float) -> web.Response:
        await asyncio.sleep(site.latency)
        wait = take_token(lim, now)
        if wait is None:
            return web.Response(text=self.html(request), content_type="text/html")
        until = math.ceil(now + max(wait, 1.0))
        lim.blocked_until = max(lim.blocked_until, float(until))
        return web.Response(status=429, headers={"Retry-After": formatdate(until, usegmt=True)})

    async def _ratelimit(self, site: Site, lim: Limits, request: web.Request, now: float) -> web.Response:
        """Fixed windows of ``quota`` requests; every answer carries RateLimit headers (draft -07+)."""
        await asyncio.sleep(site.latency)
        if not lim.window_start or now >= lim.window_start + lim.window:
            lim.window_start, lim.window_count = now, 0
        reset = lim.window_start + lim.window
        t = max(1, math.ceil(reset - now))
        lim.window_count += 1
        remaining = max(0, lim.quota - lim.window_count)
        headers = {"RateLimit": f'"default";r={remaining};t={t}',
                   "RateLimit-Policy": f'"default";q={lim.quota};w={lim.window:.0f}'}  # fmt: skip
        if remaining == 0:
            lim.blocked_until = max(lim.blocked_until, reset)
        if lim.window_count > lim.quota:
            return web.Response(status=429, headers=headers)
        return web.Response(text=self.html(request), content_type="text/html", headers=headers)

    async def _robots(self, site: Site, lim: Limits, request: web.Request, now: float) -> web.Response:
        await asyncio.sleep(site.latency)
        if request.path.startswith("/private"):
            lim.disallowed_fetched.append(request.path)
        return web.Response(text=self.html(request, private=True), content_type="text/html")

    async def _outage(self, site: Site, lim: Limits, request: web.Request, now: float) -> web.Response:
        await asyncio.sleep(site.latency)
        start, end = lim.outage
        if lim.first_page + start <= now < lim.first_page + end:
            return web.Response(status=503)
        return web.Response(text=self.html(request), content_type="text/html")

    async def _latency(self, site: Site, lim: Limits, request: web.Request, now: float) -> web.Response:
        # the more requests in progress, the slower each one: 0.1 s alone, +0.15 s per extra
        await asyncio.sleep(0.1 + 0.15 * (site.active - 1))
        return web.Response(text=self.html(request), content_type="text/html")

    async def _staged(self, site: Site, lim: Limits, request: web.Request, now: float) -> web.Response:
        """Seed 003 on a clock: fixed periods of ``window`` seconds from ``epoch``, ``quota``
        requests served per period before any is refused; past it 50 % of requests get a 429, past
        1.5 times 75 %, past twice all of them (``retry_last``: with Retry-After until the period
        turns). ``rate`` > 0: a token bucket on top, answering a bare 429 first."""
        await asyncio.sleep(site.latency)
        k = math.floor((now - lim.epoch) / lim.window)
        if k != lim.period:
            lim.period, lim.served, lim.day_count = k, 0, 0
        tally = lim.periods.setdefault(k, [0, 0])
        if lim.rate > 0 and take_token(lim, now) is not None:
            tally[1] += 1
            return web.Response(status=429)
        lim.day_count += 1
        n, q = lim.served, lim.quota
        share = 1.0 if n >= 2 * q else 0.75 if n >= 1.5 * q else 0.5 if n >= q else 0.0
        if lim.day_count % 4 < share * 4:
            tally[1] += 1
            if lim.retry_last and share == 1.0:
                turn = lim.epoch + (k + 1) * lim.window
                seconds = max(1, math.ceil(turn - now))
                lim.blocked_until = max(lim.blocked_until, now + seconds)
                return web.Response(status=429, headers={"Retry-After": str(seconds)})
            return web.Response(status=429)
        lim.served += 1
        tally[0] += 1
        return web.Response(text=self.html(request), content_type="text/html")

    async def _daily_quota(self, site: Site, lim: Limits, request: web.Request, now: float) -> web.Response:
        """Seed 003: past the quota, answer 429 to 50 %, then 75 %, then 100 % of requests."""
        await asyncio.sleep(site.latency)
        if not lim.window_start or now >= lim.window_start + lim.window:
            lim.window_start, lim.day_count = now, 0
        lim.day_count += 1
        n, q = lim.day_count, lim.quota
        refuse = (n > 2 * q) or (n > 1.5 * q and n % 4 != 0) or (n > q and n % 2 == 0)
        if refuse:
            return web.Response(status=429)
        return web.Response(text=self.html(request), content_type="text/html")


def mean_concurrency(lim: Limits, start: float, end: float) -> float:
    """Time-weighted mean of requests in progress at the site over [start, end]."""
    log = sorted(lim.active_log)
    total, level, prev = 0.0, 0, start
    for t, active in log:
        if t > end:
            break
        if t > start:
            total += level * (t - prev)
            prev = t
        level = active
    total += level * max(0.0, end - prev)
    return total / (end - start) if end > start else 0.0

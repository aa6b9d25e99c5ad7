"""The benchmark fleet: many loopback sites, each with a hidden token bucket, served from a child
process so that the crawler under test does not share its interpreter.

Every site allows ``rate`` requests/s (bucket of ``burst``); above it, it answers 429 with
``Retry-After`` (whole seconds). Its robots.txt disallows ``/private``. Each site judges the
crawler from its own log: requests arriving inside a Retry-After it announced (gate violations),
requests to disallowed paths, 429s served, most requests in progress at once.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from aiohttp import web

from frontier.demo.sites import Hit, Site, SiteFleet, take_token

GATE_TOLERANCE = 0.005  # seconds; both clocks are this machine's


@dataclass
class Bucket:
    rate: float
    burst: float
    tokens: float = 0.0
    last: float = 0.0
    blocked_until: float = 0.0
    announced_at: float = 0.0  # when the latest 429 (the window's start) went out
    gate_violations: int = 0
    violation_delays: list[float] = field(default_factory=list)  # seconds after that 429 went out
    disallowed_fetched: int = 0

    def take(self, now: float) -> float | None:
        return take_token(self, now)


@dataclass
class FleetSpec:
    sites: int = 500
    pages: int = 20
    rate: float = 4.0
    burst: float = 4.0
    latency: float = 0.02
    second_octet: int = 1  # sites on 127.<second_octet>.x.y: separate fleets never share a host

    def hosts(self) -> list[str]:
        return [f"127.{self.second_octet}.{1 + i // 200}.{1 + i % 200}" for i in range(self.sites)]


@dataclass
class FleetReport:
    requests: int = 0
    pages_200: int = 0  # distinct page URLs served with 200
    status_429: int = 0
    robots_requests: int = 0
    gate_violations: int = 0
    violations_within_50ms: int = 0  # of those, arriving less than 50 ms after the 429 went out
    disallowed_fetched: int = 0
    max_concurrency: int = 0
    first: float = 0.0
    last: float = 0.0
    per_site_429: list[int] = field(default_factory=list)

    @property
    def span(self) -> float:
        return max(self.last - self.first, 1e-9)


class BucketFleet(SiteFleet):
    def __init__(self, spec: FleetSpec) -> None:
        super().__init__(0, pages=spec.pages, latency=spec.latency)
        self.sites = [Site(host=h, pages=spec.pages, latency=spec.latency) for h in spec.hosts()]
        self.buckets = {s.host: Bucket(spec.rate, spec.burst) for s in self.sites}

    async def respond(self, site: Site, request: web.Request, hit: Hit) -> web.Response:
        b = self.buckets[site.host]
        now = hit.start
        if now < b.blocked_until - GATE_TOLERANCE:
            b.gate_violations += 1
            b.violation_delays.append(now - b.announced_at)
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nDisallow: /private\n")
        if request.path.startswith("/private"):
            b.disallowed_fetched += 1
        await asyncio.sleep(site.latency)
        wait = b.take(now)
        if wait is not None:
            seconds = max(1, math.ceil(wait))
            b.blocked_until = max(b.blocked_until, now + seconds)
            b.announced_at = time.time()
            return web.Response(status=429, headers={"Retry-After": str(seconds)})
        return await super().respond(site, request, hit)

    def report(self) -> FleetReport:
        r = FleetReport()
        starts: list[float] = []
        for s in self.sites:
            b = self.buckets[s.host]
            pages = {h.path for h in s.hits if h.status == 200 and h.path != "/robots.txt"}
            n429 = sum(1 for h in s.hits if h.status == 429)
            r.requests += len(s.hits)
            r.pages_200 += len(pages)
            r.status_429 += n429
            r.per_site_429.append(n429)
            r.robots_requests += sum(1 for h in s.hits if h.path == "/robots.txt")
            r.gate_violations += b.gate_violations
            r.violations_within_50ms += sum(1 for d in b.violation_delays if d < 0.05)
            r.disallowed_fetched += b.disallowed_fetched
            r.max_concurrency = max(r.max_concurrency, s.max_active)
            starts.extend(h.start for h in s.hits)
        if starts:
            r.first, r.last = min(starts), max(starts)
        return r

    def urls(self) -> list[str]:
        """Every page of every site, plus one disallowed URL per site (to be skipped)."""
        return self.all_urls() + [s.url(self.port, "/private/1") for s in self.sites]


def _serve(spec: FleetSpec, conn: Connection) -> None:
    fleet = BucketFleet(spec).start()
    conn.send((fleet.port, fleet.urls()))
    conn.recv()  # "report"
    conn.send(fleet.report())
    fleet.stop()


class ChildFleet:
    """A fleet served by ``serve(spec, conn)`` in a child process: ``port`` and ``urls`` at start,
    ``report()`` (whatever the fleet reports) at the end."""

    def __init__(self, serve: Callable[[Any, Connection], None], spec: Any) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc: Any = ctx.Process(target=serve, args=(spec, child), daemon=True)
        self._proc.start()
        if not self._conn.poll(60):
            raise RuntimeError("benchmark fleet did not start")
        self.port, self.urls = self._conn.recv()

    def report(self) -> Any:
        self._conn.send("report")
        report = self._conn.recv()
        self._proc.join(30)
        return report

    def close(self) -> None:
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(10)


class FleetProcess(ChildFleet):
    """A :class:`BucketFleet` in a child process."""

    def __init__(self, spec: FleetSpec) -> None:
        super().__init__(_serve, spec)

    def report(self) -> FleetReport:
        report: FleetReport = super().report()
        return report

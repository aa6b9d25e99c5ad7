"""A fleet of small local web sites for the demo and the tests.

Each site listens on its own loopback address (``127.0.0.N``; every 127.x.y.z is a distinct
host on Linux), serves a few interlinked HTML pages, and records every request it receives
(arrival time, path, how many requests were in progress at once). Politeness is judged from
these server-side logs, never from the crawler's own account.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

STALL_TICK = 0.005  # seconds between two looks at the fleet's event loop
STALL_MIN = 0.01  # a loop that wakes up this much later than asked is recorded as stalled


class Bucketed(Protocol):
    """Anything that carries a token bucket's settings and state."""

    rate: float
    burst: float
    tokens: float
    last: float


def take_token(b: Bucketed, now: float) -> float | None:
    """Token bucket (``burst`` tokens, ``rate`` per second): None when a request may pass now,
    else the seconds until a token is back. Test sites use it to enforce limits they keep hidden."""
    if not b.last:
        b.tokens, b.last = b.burst, now
    b.tokens = min(b.burst, b.tokens + (now - b.last) * b.rate)
    b.last = now
    if b.tokens >= 1:
        b.tokens -= 1
        return None
    return (1 - b.tokens) / b.rate


@dataclass
class Hit:
    path: str
    start: float  # epoch seconds when the request arrived
    end: float = 0.0
    status: int = 200


@dataclass
class Site:
    host: str  # e.g. 127.0.0.11
    pages: int
    latency: float = 0.02
    hits: list[Hit] = field(default_factory=list)
    active: int = 0
    max_active: int = 0

    def url(self, port: int, path: str = "/") -> str:
        return f"http://{self.host}:{port}{path}"

    def gaps(self) -> list[float]:
        starts = sorted(h.start for h in self.hits)
        return [b - a for a, b in itertools.pairwise(starts)]

    def min_gap(self) -> float | None:
        g = self.gaps()
        return min(g) if g else None


def _page(site: Site, n: int) -> str:
    links = "".join(f'<li><a href="/page/{i}">page {i}</a></li>' for i in range(1, site.pages) if i != n)
    return (
        f"<!doctype html><html><head><title>{site.host} page {n}</title></head>"
        f"<body><h1>Demo site {site.host}, page {n}</h1><ul>{links}</ul>"
        f'<a href="http://example.invalid/offsite">off-site link (never followed)</a></body></html>'
    )


class SiteFleet:
    """``count`` sites on 127.0.0.(first_octet + i), all on one port, served from a background thread."""

    def __init__(self, count: int, pages: int = 10, latency: float = 0.02, first_octet: int = 10) -> None:
        self.sites = [Site(host=f"127.0.0.{first_octet + i}", pages=pages, latency=latency) for i in range(count)]
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runners: list[web.AppRunner] = []
        self._ready = threading.Event()
        # When the fleet's own event loop stopped answering (epoch seconds, how long): a request that
        # arrives meanwhile is stamped late, so the gap before it looks longer and the one after it
        # shorter than the crawler made them (a starved test process, not an impolite crawler).
        self.stalls: list[tuple[float, float]] = []

    def roots(self) -> list[str]:
        return [s.url(self.port) for s in self.sites]

    def all_urls(self) -> list[str]:
        return [s.url(self.port, "/" if i == 0 else f"/page/{i}") for s in self.sites for i in range(s.pages)]

    def site(self, host: str) -> Site:
        return next(s for s in self.sites if s.host == host)

    def stalls_between(self, start: float, end: float) -> list[tuple[float, float]]:
        """The stalls that overlap ``[start, end]`` (epoch seconds)."""
        return [(t, d) for t, d in self.stalls if t <= end and t + d >= start]

    async def _watch(self) -> None:
        while True:
            t = time.time()
            await asyncio.sleep(STALL_TICK)
            late = time.time() - t - STALL_TICK
            if late > STALL_MIN:
                self.stalls.append((t, late))

    async def respond(self, site: Site, request: web.Request, hit: Hit) -> web.Response:
        """Serve one request (override for sites with other behaviour)."""
        await asyncio.sleep(site.latency)  # simulated server work
        if request.path == "/":
            return web.Response(text=_page(site, 0), content_type="text/html")
        if request.path.startswith("/page/"):
            try:
                n = int(request.path.rsplit("/", 1)[1])
            except ValueError:
                n = -1
            if 0 < n < site.pages:
                return web.Response(text=_page(site, n), content_type="text/html")
        return web.Response(status=404, text="not found")

    def _app(self, site: Site) -> web.Application:
        async def handle(request: web.Request) -> web.StreamResponse:
            hit = Hit(path=request.path_qs, start=time.time())
            site.hits.append(hit)
            site.active += 1
            site.max_active = max(site.max_active, site.active)
            try:
                response = await self.respond(site, request, hit)
                hit.status = response.status
                return response
            finally:
                site.active -= 1
                hit.end = time.time()

        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", handle)
        return app

    def start(self) -> SiteFleet:
        with socket.socket() as s:
            s.bind((self.sites[0].host, 0))
            self.port = s.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="site-fleet", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("site fleet did not start")
        return self

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)

        async def start_all() -> None:
            for site in self.sites:
                runner = web.AppRunner(self._app(site), access_log=None)
                await runner.setup()
                await web.TCPSite(runner, site.host, self.port).start()
                self._runners.append(runner)

        loop.run_until_complete(start_all())
        watch = loop.create_task(self._watch())
        self._ready.set()
        loop.run_forever()
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(watch)
        for runner in self._runners:
            loop.run_until_complete(runner.cleanup())
        loop.close()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> SiteFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

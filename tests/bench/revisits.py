"""Revisits that learn (issue 25): the same local sites revisited for the same time with a fixed
interval and with an adaptive one, judged from the sites' own logs.

Each site's pages change at random (Poisson) at known mean intervals: of 12 pages, one every 10 s,
two every minute, three every 10 minutes, six never (most pages of a site rarely change); a
page's body is 4 KB. Sites of one kind honour
validators (``ETag``, ``Last-Modified`` from the page's last change, 304 to a matching conditional
request); sites of the other kind give none and always answer 200 with the body (the frontier then
compares content digests). Every URL is submitted once with its revisit, the crawl runs for the
given time with the defaults, and each site logs every request: the version it served and the
bytes. Figures per run:

- ``requests``, ``requests_unchanged`` (the page was as it was at the crawler's previous request),
  ``body_bytes`` sent, and ``body_bytes_unconditional``: what the same requests cost before
  revisits were conditional (every one a full body);
- ``mean_unseen_s``: over every change that happened in the run, the time until the crawler's next
  request of that page (to the run's end when none came): how long a change stays unseen;
- ``stale_share``: the share of page-time (from each page's first fetch) when the crawler's copy
  was not the page's current version;
- ``unchanged_reported``: pages the worker published as unchanged (crawl.pages), to compare with the
  server's own count of requests that found the page unchanged.

    python -m tests.bench.revisits [--smoke | --full] [--bootstrap HOST:PORT] [--seconds S]

The figures are counts and times under a fixed load, not speeds: the machine's speed hardly moves
them (one frontier, one worker, a few requests a second); ``calibration_s`` is printed beside them
anyway (a fixed CPU task's time).
"""

from __future__ import annotations

import asyncio
import bisect
import email.utils
import json
import random
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from confluent_kafka import Producer

from deploy.kafka import free_port
from frontier.demo.stack import Stack, TopicReader, read_pages
from tests.bench.common import broker, parser, report, size

# mean seconds between changes (0: never): pages of a site per class, most of them rarely changing
CLASSES = {"fast": 10.0, "minute": 60.0, "slow": 600.0, "static": 0.0}
MIX = {"fast": 1, "minute": 2, "slow": 3, "static": 6}
BODY_BYTES = 4000
FIXED = 60.0  # the fixed interval compared
BOUNDS = (15.0, 3600.0)  # the adaptive revisit's bounds: down to a quarter of the fixed interval


@dataclass
class PageTruth:
    """One page's changes (epoch seconds) and the crawler's requests of it, as the site saw them."""

    changes: list[float]
    since: float  # its last change before the run (Last-Modified of version 0)
    requests: list[tuple[float, int, int, int]] = field(default_factory=list)  # (time, version, status, bytes)

    def version(self, at: float) -> int:
        return bisect.bisect_right(self.changes, at)


class Sites:
    """``hosts`` local sites on 127.26.0.x (one port each), ``per_class`` times :data:`MIX` pages of
    each change class per host; ``validators``: ETag / Last-Modified / 304 honoured, else none given."""

    def __init__(self, hosts: int, per_class: int, validators: bool, seconds: float, seed: int) -> None:
        self.validators = validators
        self.start = time.time()
        rng = random.Random(seed)
        self.pages: dict[str, PageTruth] = {}
        self.bases: list[str] = []
        paths = []
        for kind, mean in CLASSES.items():
            for i in range(MIX[kind] * per_class):
                paths.append((f"/{kind}/{i}", mean))
        self._hosts = [f"127.26.0.{h + 1}" for h in range(hosts)]
        self._ports = [free_port() for _ in self._hosts]
        for host, port in zip(self._hosts, self._ports, strict=True):
            base = f"http://{host}:{port}"
            self.bases.append(base)
            for path, mean in paths:
                changes: list[float] = []
                if mean > 0:
                    at = self.start + rng.expovariate(1 / mean)
                    while at < self.start + seconds + 3600:
                        changes.append(at)
                        at += rng.expovariate(1 / mean)
                since = self.start - (rng.expovariate(1 / mean) if mean > 0 else 30 * 86400.0)
                self.pages[base + path] = PageTruth(changes, since)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the revisit sites did not start")

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/robots.txt", lambda _r: _robots())
        app.router.add_get("/{tail:.*}", self._answer)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        for host, port in zip(self._hosts, self._ports, strict=True):
            await web.TCPSite(self._runner, host, port).start()

    async def _answer(self, request: web.Request) -> web.Response:
        now = time.time()
        page = self.pages.get(f"http://{request.host}{request.path}")
        if page is None:
            return web.Response(status=404)
        version = page.version(now)
        changed_at = page.changes[version - 1] if version else page.since
        etag = f'"v{version}"'
        if self.validators and request.headers.get("If-None-Match") == etag:
            page.requests.append((now, version, 304, 0))
            return web.Response(status=304, headers={"ETag": etag})
        body = (f"<html><body><h1>{request.path} version {version}</h1>".encode()).ljust(BODY_BYTES, b".")
        headers = {"ETag": etag, "Last-Modified": email.utils.formatdate(changed_at, usegmt=True)}
        page.requests.append((now, version, 200, len(body)))
        return web.Response(body=body, content_type="text/html", headers=headers if self.validators else {})

    def close(self) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    def figures(self, end: float, since: float = 0.0) -> dict[str, Any]:
        """The run's figures over ``[since, end)``: requests sent and changes made in it."""
        requests = unchanged = body = changes = 0
        unseen = stale = lifetime = 0.0
        by_class: dict[str, list[int]] = {kind: [0, 0] for kind in CLASSES}
        for url, page in self.pages.items():
            kind = url.split("/")[3]
            times = [t for t, *_ in page.requests]
            pairs = zip([None, *page.requests], page.requests, strict=False)
            for before, (t, v, _, sent) in pairs:
                if since <= t < end:
                    requests += 1
                    body += sent
                    unchanged += before is not None and before[1] == v
                    by_class[kind][0] += 1
            for c in page.changes:
                if c >= end:
                    break
                if c < since:
                    continue
                changes += 1
                by_class[kind][1] += 1
                i = bisect.bisect_left(times, c)
                unseen += (times[i] if i < len(times) else end) - c
            if times:  # stale: from its first fetch, while the crawler's version is not the current one
                lifetime += end - max(times[0], since)
                for (t, v, *_), nxt in zip(page.requests, [*times[1:], end], strict=True):
                    later = [c for c in page.changes[v:] if c < nxt]
                    if later and nxt > since:
                        stale += nxt - max(t, later[0], since)
        return {"requests": requests, "requests_unchanged": unchanged, "body_bytes": body,
                "body_bytes_unconditional": requests * BODY_BYTES, "changes": changes,
                "mean_unseen_s": round(unseen / changes, 1) if changes else 0.0,
                "stale_share": round(stale / lifetime, 3) if lifetime else 0.0,
                "requests_by_class": {k: v[0] for k, v in by_class.items()},
                "changes_by_class": {k: v[1] for k, v in by_class.items()}}  # fmt: skip


def _robots() -> web.Response:
    return web.Response(text="User-agent: *\nAllow: /\n")


def run(bootstrap: str, workdir: Path, validators: bool, schedule: str, seconds: float, hosts: int,
        per_class: int, seed: int) -> dict[str, Any]:  # fmt: skip
    """One crawl of fresh sites for ``seconds`` with revisits ``schedule`` (fixed or adaptive)."""
    sites = Sites(hosts, per_class, validators, seconds, seed)
    stack = Stack(bootstrap, workdir / f"{schedule}-{int(validators)}", prefix=f"r{uuid.uuid4().hex[:6]}.",
                  partitions=4)  # fmt: skip
    reader: TopicReader | None = None
    spec: float | list[float] = FIXED if schedule == "fixed" else list(BOUNDS)
    reported = 0
    try:
        stack.create_topics()
        stack.start_frontier("f0")
        stack.start_worker("w0", concurrency=16)
        reader = TopicReader(stack.client, stack.topics.pages)
        producer = Producer(stack.client)
        for url in sites.pages:
            producer.produce(stack.topics.urls, json.dumps({"url": url, "revisit": spec}).encode())
        producer.flush(60)
        end = sites.start + seconds
        while time.time() < end:
            stack.check_alive()
            reported += sum(1 for p in read_pages(reader, timeout=1.0) if p.unchanged)
        return {"validators": validators, "schedule": schedule if schedule == "fixed" else "adaptive",
                "revisit": spec, "seconds": seconds, "pages": len(sites.pages), "unchanged_reported": reported,
                **sites.figures(end), "second_half": sites.figures(end, since=sites.start + seconds / 2)}  # fmt: skip
    finally:
        if reader is not None:
            reader.close()
        stack.stop_all()
        sites.close()


def calibration_s() -> float:
    """A fixed CPU task's seconds (the machine's speed today)."""
    t0 = time.perf_counter()
    sum(i * i for i in range(2_000_000))
    return round(time.perf_counter() - t0, 3)


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=0.0, help="each run's length (default by size)")
    args = p.parse_args()
    seconds = args.seconds or size(args, smoke=20, default=600, full=1800)
    hosts, per_class = size(args, smoke=1, default=4, full=8), 1
    with broker(args) as bootstrap, tempfile.TemporaryDirectory(prefix="bench-revisits-") as tmp:
        for validators in (True, False):
            runs = {}
            for schedule in ("fixed", "adaptive"):  # the two in turn, on sites with the same changes
                runs[schedule] = run(bootstrap, Path(tmp), validators, schedule, seconds, hosts, per_class, seed=25)
                report("revisits", calibration_s=calibration_s(), **runs[schedule])
            for part in ("whole", "second_half"):
                fixed, adaptive = (
                    r if part == "whole" else r["second_half"] for r in (runs["fixed"], runs["adaptive"])
                )
                report("revisits_ratio", validators=validators, seconds=seconds, part=part,
                       requests_unchanged=_ratio(adaptive["requests_unchanged"], fixed["requests_unchanged"]),
                       body_bytes=_ratio(adaptive["body_bytes"], fixed["body_bytes"]),
                       body_bytes_vs_unconditional=_ratio(adaptive["body_bytes"], fixed["body_bytes_unconditional"]),
                       requests=_ratio(adaptive["requests"], fixed["requests"]),
                       mean_unseen_s=_ratio(adaptive["mean_unseen_s"], fixed["mean_unseen_s"]),
                       stale_share=_ratio(adaptive["stale_share"], fixed["stale_share"]))  # fmt: skip


def _ratio(a: float, b: float) -> float | None:
    """adaptive / fixed (below 1: adaptive spent or waited less); None when fixed had none."""
    return round(a / b, 3) if b else None


if __name__ == "__main__":
    main()

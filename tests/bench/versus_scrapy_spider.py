"""Benchmark 6, Scrapy spiders on the frontier (issue 21): the same spider three ways, side by side
on sites of every kind. The spider is the example project's (``workers/examples/scrapy_books``,
spider ``books``: catalogue pages lead to the next one and to book pages, each book an item),
run with ``scrapy crawl``:

- ``scrapy``: plain Scrapy, one process, the add-on removed (``-s ADDONS={}``) and the project's
  own settings otherwise: ROBOTSTXT_OBEY, AutoThrottle, DOWNLOAD_DELAY 0.5, CONCURRENT_REQUESTS 16;
- ``frontier-1``: the add-on (``workers.scrapy.FrontierAddon``), one process, on a frontier with
  its default throttle;
- ``frontier-3``: the add-on, three processes of one crawl.

Each run gets a fresh bookshop fleet of its own (``tests/integration/bookshop_sites.py``, hosts
``127.0.0.<first_octet + i>``, distinct per run) with sites of every kind of ``tests/bench/kinds.py``
(bare 429, Retry-After seconds and HTTP-date, RateLimit and X-RateLimit windows, Crawl-delay, a
503 outage, load-dependent latency, a staged daily quota). The robots site's robots.txt addresses
its Crawl-delay and ``Disallow: /private`` to ``bookshop-bot`` (the project's User-Agent) only.
Figures are the sites' own, per run and per kind, plus a total row per run: pages served 200,
pages/s over each site's active span, 429 share, requests inside a window a site announced,
disallowed paths fetched, gaps under the Crawl-delay; and the items written against those
expected, the wall time of the ``scrapy crawl`` processes. The Kafka echo ceiling (benchmark 1)
and the load average are printed as calibration.

``--spider rules`` runs the project's ``CrawlSpider`` instead (spider ``rules``: the same bookshop
through ``Rule`` / ``LinkExtractor``, as most Scrapy users write a site crawl), the three ways.

    python -m tests.bench.versus_scrapy_spider [--smoke | --full] [--spider books|rules] [--bootstrap HOST:PORT]
        [--workdir DIR]
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from frontier.demo.stack import Stack, wait_until
from tests.bench.common import broker, parser, report, size, snapshot
from tests.bench.kafka_ceiling import echo_loop
from tests.bench.kinds import KINDS, limits_of
from tests.integration.bookshop_sites import BookshopFleet
from tests.integration.hidden_sites import GATE_TOLERANCE

PROJECT = Path(__file__).resolve().parents[2] / "workers" / "examples" / "scrapy_books"
BENCH = "versus_scrapy_spider"
# what the add-on says in a process's log (absent from the plain Scrapy run)
ADDON_LINES = re.compile(r"crawl-frontier add-on:|on the frontier at |workers\.scrapy")
NOT_DONE = re.compile(r"crawl .* not done: (.*)")


@dataclass(frozen=True)
class Run:
    name: str
    crawler: str
    processes: int
    addon: bool
    first_octet: int  # the fleet's hosts: 127.0.0.<first_octet + i>


RUNS = (
    Run("scrapy", "scrapy (plain, AutoThrottle)", 1, False, 20),
    Run("frontier-1", "scrapy + frontier add-on", 1, True, 90),
    Run("frontier-3", "scrapy + frontier add-on", 3, True, 160),
)


class Spiders:
    """``scrapy crawl SPIDER`` processes of the example project, each with its own items file and log."""

    def __init__(self, workdir: Path, starts: list[str], config: Path | None, spider: str = "books") -> None:
        self.workdir, self.starts, self.config, self.spider = workdir, ",".join(starts), config, spider
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.exited: dict[str, float] = {}

    def start(self, name: str) -> None:
        log = open(self.workdir / f"{name}.log", "ab")  # the child owns it
        cmd = [sys.executable, "-m", "scrapy", "crawl", self.spider, "-a", f"start_urls={self.starts}",
               "-s", f"BOOKSHOP_ITEMS={self.workdir / f'{name}.jsonl'}", "-s", "LOG_LEVEL=INFO"]  # fmt: skip
        # plain Scrapy: the project's settings without its add-on; else the add-on on this frontier
        cmd += ["-s", f"CRAWL_FRONTIER_CONFIG={self.config}"] if self.config else ["-s", "ADDONS={}"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT), os.environ.get("PYTHONPATH", "")])}
        self.procs[name] = subprocess.Popen(cmd, cwd=PROJECT, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)  # fmt: skip

    def poll(self) -> bool:
        """True once every process has exited (noting when each did)."""
        for name, proc in self.procs.items():
            if name not in self.exited and proc.poll() is not None:
                self.exited[name] = time.time()
        return len(self.exited) == len(self.procs)

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def items(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for path in sorted(self.workdir.glob("*.jsonl")):
            out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return out

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)


def site_figures(fleet: BookshopFleet, host: str, got: Counter[str]) -> dict[str, Any]:
    """One site, judged from its own log (robots.txt requests left out of the page figures)."""
    site, lim = fleet.site(host), fleet.limits[host]
    hits = sorted((h for h in site.hits if h.path != "/robots.txt"), key=lambda h: h.start)
    ok = [h.path for h in hits if h.status == 200]
    starts = [h.start for h in hits]
    gaps = [b - a for a, b in itertools.pairwise(starts)] if lim.crawl_delay else []
    expected = fleet.expected_books(host)
    mine = {url: n for url, n in got.items() if urlsplit(url).hostname == host}
    return {
        "pages_200": len(set(ok)),
        "refetched_200": len(ok) - len(set(ok)),  # a page served 200 more than once
        "requests": len(hits),
        "status_429": sum(1 for h in hits if h.status == 429),
        "status_5xx": sum(1 for h in hits if h.status >= 500),
        "first": starts[0] if starts else 0.0,
        "last": starts[-1] if starts else 0.0,
        "gate_violations": len(lim.gate_violations),
        "disallowed_fetched": len(lim.disallowed_fetched),
        "under_crawl_delay": sum(1 for g in gaps if g < lim.crawl_delay - GATE_TOLERANCE),
        "smallest_gap": min(gaps) if gaps else None,
        "max_concurrency": site.max_active,
        "items": sum(mine.values()),  # every item written for this site's pages, duplicates included
        "items_expected": len(expected),
        "items_missing": len(expected - set(mine)),
        "items_duplicate": sum(n - 1 for n in mine.values()),
        "items_unexpected": sum(1 for url in mine if url not in expected),
    }


def sum_up(sites: list[dict[str, Any]]) -> dict[str, Any]:
    """A kind's (or the whole run's) figures from its sites'."""
    keys = ("pages_200", "refetched_200", "requests", "status_429", "status_5xx", "gate_violations",
            "disallowed_fetched", "under_crawl_delay", "items", "items_expected", "items_missing",
            "items_duplicate", "items_unexpected")  # fmt: skip
    out: dict[str, Any] = {k: sum(s[k] for s in sites) for k in keys}
    active = [s for s in sites if s["requests"]]
    rates = [s["pages_200"] / (s["last"] - s["first"]) for s in active if s["last"] > s["first"]]
    span = max((s["last"] for s in active), default=0.0) - min((s["first"] for s in active), default=0.0)
    gaps = [s["smallest_gap"] for s in sites if s["smallest_gap"] is not None]
    out.update(
        # each site's pages over its own active span (first to last page request), mean over the sites
        pages_per_s_per_site=round(sum(rates) / len(rates), 2) if rates else 0.0,
        # all these sites' pages over their joint span
        pages_per_s=round(out["pages_200"] / span, 2) if span > 0 else 0.0,
        span_s=round(span, 1),
        ratio_429=round(out["status_429"] / max(1, out["requests"]), 4),
        smallest_gap=round(min(gaps), 4) if gaps else None,
        max_concurrency_at_a_site=max((s["max_concurrency"] for s in sites), default=0),
    )
    return out


@contextmanager
def frontier(bootstrap: str, workdir: Path, timeout: float) -> Iterator[Stack]:
    """A frontier with its default throttle, started and publishing its status before it is yielded."""
    stack = Stack(bootstrap, workdir, partitions=4)
    try:
        stack.create_topics()
        stack.start_frontier()

        def publishing() -> bool:
            stack.check_alive()
            return snapshot(bootstrap, stack.topics.status)[0] > 0

        wait_until(publishing, timeout, interval=0.5, what="the frontier's first status snapshot")
        yield stack
    finally:
        stack.stop_all()


def crawl(run: Run, fleet: BookshopFleet, workdir: Path, stack: Stack | None, timeout: float,
          spider: str = "books") -> dict[str, Any]:  # fmt: skip
    """Run the spiders to completion (or ``timeout``); what the processes said."""
    starts = [fleet.start_url(h) for h in fleet.limits]
    spiders = Spiders(workdir, starts, stack.config_path if stack else None, spider)
    started = time.time()
    try:
        for i in range(run.processes):
            spiders.start(f"spider{i}")

        def finished() -> bool:
            if stack is not None:
                stack.check_alive()
            return spiders.poll()

        try:
            wait_until(finished, timeout, interval=0.2, what="the spiders to close by themselves")
        except TimeoutError:
            pass  # reported: all_exited false, the processes' exit codes
    finally:
        spiders.stop_all()
    logs = {name: spiders.log(name) for name in spiders.procs}
    frontier_log = stack.log("frontier") if stack is not None else ""
    reasons = [re.search(r"'finish_reason': '([^']*)'", text) for text in logs.values()]
    files = [workdir / f"{name}.jsonl" for name in spiders.procs]
    given_up = [int(n) for text in logs.values() for n in re.findall(r"'retry/max_reached': (\d+)", text)]
    return {
        "got": Counter(str(i.get("url")) for i in spiders.items()),
        "all_exited": len(spiders.exited) == len(spiders.procs),
        "wall_s": round(max(spiders.exited.values(), default=time.time()) - started, 1),
        "exit_codes": [p.returncode for p in spiders.procs.values()],
        "finish_reasons": [m.group(1) if m else None for m in reasons],
        "items_per_process": [len(f.read_text().splitlines()) if f.exists() else 0 for f in files],
        "addon_log_lines": sum(len(ADDON_LINES.findall(text)) for text in logs.values()),
        "spider_error_lines": sum(text.count(" ERROR: ") for text in logs.values()),
        "retries_given_up": sum(given_up),  # plain Scrapy's RetryMiddleware (off with the add-on)
        "frontier_error_lines": sum(1 for line in frontier_log.splitlines() if "ERROR" in line),
        # what each process last said keeps its crawl open (the add-on says it every 30 s while waiting)
        "last_not_done": [m[-1][:300] if (m := NOT_DONE.findall(text)) else "" for text in logs.values()],
    }


def bench_run(run: Run, bootstrap: str, per_kind: int, pages: int, workdir: Path, timeout: float,
              calibration: dict[str, Any], spider: str = "books") -> None:  # fmt: skip
    workdir.mkdir(parents=True)
    limits = [limits_of(kind) for kind in KINDS for _ in range(per_kind)]
    load = round(os.getloadavg()[0], 2)
    fleet = BookshopFleet(limits, pages=pages, first_octet=run.first_octet)
    fleet.start()
    try:
        if run.addon:
            with frontier(bootstrap, workdir / "stack", timeout) as stack:
                said = crawl(run, fleet, workdir, stack, timeout, spider)
        else:
            said = crawl(run, fleet, workdir, None, timeout, spider)
    finally:
        fleet.stop()
    got: Counter[str] = said.pop("got")
    sites = {host: site_figures(fleet, host, got) for host in fleet.limits}
    common = {"run": run.name, "crawler": run.crawler, "spider": spider, "processes": run.processes,
              "sites_per_kind": per_kind, "catalogue_pages": pages}  # fmt: skip
    for kind in KINDS:
        figures = sum_up([f for host, f in sites.items() if fleet.limits[host].kind == kind])
        report(BENCH, **common, kind=kind, **figures)
    stalls = [d for _, d in fleet.stalls]
    report(BENCH, **common, kind="total", sites=len(sites), **sum_up(list(sites.values())), **said,
           site_loop_stalls_over_50ms=sum(1 for d in stalls if d > 0.05), load_1min_at_start=load,
           workdir=str(workdir), **calibration)  # fmt: skip


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--workdir", default="", help="keep the spiders' logs and items here (default: a temporary dir)")
    p.add_argument("--spider", choices=("books", "rules"), default="books",
                   help="the example project's spider: books (callbacks) or rules (a CrawlSpider)")  # fmt: skip
    args = p.parse_args()
    per_kind = size(args, smoke=1, default=2, full=4)
    pages = size(args, smoke=3, default=20, full=20)  # catalogue pages a site: 5 pages each (1 + 4 books)
    timeout = 150.0 if args.smoke else 900.0
    with broker(args) as bootstrap, tempfile.TemporaryDirectory(prefix="bench-vs-scrapy-spider-") as tmp:
        root = Path(args.workdir) if args.workdir else Path(tmp)
        n = size(args, smoke=2_000, default=50_000, full=200_000)
        calibration = {"kafka_echo_per_s": round(echo_loop(bootstrap, n))}
        report(f"{BENCH}_calibration", messages=n, load_1min=round(os.getloadavg()[0], 2), **calibration)
        for run in RUNS:
            bench_run(run, bootstrap, per_kind, pages, root / run.name, timeout, calibration, args.spider)


if __name__ == "__main__":
    main()

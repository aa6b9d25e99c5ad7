"""A stock Scrapy project on the frontier through the add-on (issue 21), on the real broker: the
example project (``workers/examples/scrapy_books``: a spider with two callbacks, a JSON-lines item
pipeline, ``ROBOTSTXT_OBEY``/AutoThrottle/``DOWNLOAD_DELAY`` as a polite project sets them) crawled
as 3 ``scrapy crawl`` processes of one crawl against local sites that enforce limits they never
tell. Judged from the sites' own logs and the items: every page fetched (and parsed) once across
the processes, items complete, nothing inside a window a site announced, no gap under a
Crawl-delay, nothing robots.txt disallows; the spiders close by themselves when the crawl is done.
A process killed with SIGKILL mid-crawl loses nothing."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from frontier.client import FrontierClient
from frontier.demo.stack import Stack, wait_until
from tests.integration.bookshop_sites import BookshopFleet
from tests.integration.hidden_sites import Limits

PROJECT = Path(__file__).resolve().parents[2] / "workers" / "examples" / "scrapy_books"
PROCESSES = 3
CATALOGUE_PAGES = 5


def limits() -> list[Limits]:
    return [
        Limits("bucket", rate=5.0, burst=3.0),
        Limits("retry_after_seconds", rate=4.0),
        Limits("retry_after_date", rate=4.0),
        Limits("ratelimit", quota=12, window=4.0),
        Limits("xratelimit", quota=12, window=4.0),
        Limits("robots", crawl_delay=0.4),
        Limits("latency"),
    ]


class Spiders:
    """``scrapy crawl books`` processes of the example project, each with its own items file and log."""

    def __init__(self, stack: Stack, fleet: BookshopFleet, workdir: Path) -> None:
        self.stack, self.fleet, self.workdir = stack, fleet, workdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.starts = ",".join(fleet.start_url(h) for h in fleet.limits)

    def start(self, name: str) -> None:
        log = open(self.workdir / f"{name}.log", "ab")
        cmd = [sys.executable, "-m", "scrapy", "crawl", "books", "-a", f"start_urls={self.starts}",
               "-s", f"BOOKSHOP_ITEMS={self.workdir / f'{name}.jsonl'}",
               "-s", f"CRAWL_FRONTIER_CONFIG={self.stack.config_path}", "-s", "LOG_LEVEL=INFO"]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT), os.environ.get("PYTHONPATH", "")])}
        self.procs[name] = subprocess.Popen(cmd, cwd=PROJECT, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)  # fmt: skip

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def items(self) -> list[dict[str, str]]:
        out: list[dict[str, str]] = []
        for path in self.workdir.glob("*.jsonl"):
            out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return out

    def all_exited(self) -> bool:
        return all(p.poll() is not None for p in self.procs.values())

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


def politeness(fleet: BookshopFleet) -> list[str]:
    failures: list[str] = []
    for host, lim in fleet.limits.items():
        site = fleet.site(host)
        if lim.gate_violations:
            failures.append(f"{lim.kind}: {len(lim.gate_violations)} requests inside a window the site announced")
        if lim.disallowed_fetched:
            failures.append(f"{lim.kind}: fetched what robots.txt disallows: {lim.disallowed_fetched[:3]}")
        if lim.crawl_delay:
            starts = sorted(h.start for h in site.hits if h.path != "/robots.txt")
            short = [b - a for a, b in itertools.pairwise(starts) if b - a < lim.crawl_delay - 0.005]
            if short:
                failures.append(f"{lim.kind}: {len(short)} gaps under its Crawl-delay {lim.crawl_delay}: {short[:3]}")
    return failures


def run_crawl(bootstrap: str, tmp_path: Path, kill_after: int = 0) -> tuple[BookshopFleet, Spiders, Stack]:
    fleet = BookshopFleet(limits(), pages=CATALOGUE_PAGES).start()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4)
    spiders = Spiders(stack, fleet, tmp_path)
    try:
        stack.create_topics()
        stack.start_frontier()
        for i in range(PROCESSES):
            spiders.start(f"spider{i}")
        expected = set().union(*(fleet.expected_books(h) for h in fleet.limits))
        if not kill_after:  # status shows the Scrapy processes as the crawl's workers
            client = FrontierClient(stack.config_path, crawl="books")

            def three_workers() -> bool:
                row = client.crawl()
                workers[:] = [row.workers if row is not None else -1]
                return workers[0] == PROCESSES

            workers: list[int] = []
            wait_until(three_workers, timeout=60, interval=0.5, what=f"status to show {PROCESSES} workers")
        if kill_after:
            wait_until(lambda: len(spiders.items()) >= kill_after, timeout=180, interval=0.2,
                       what=f"{kill_after} items before the kill")  # fmt: skip
            os.killpg(spiders.procs["spider0"].pid, signal.SIGKILL)

        def finished() -> bool:
            stack.check_alive()
            return spiders.all_exited()

        wait_until(finished, timeout=300, interval=0.5, what="the spiders to close by themselves")
        got = {i["url"] for i in spiders.items()}
        assert got == expected, f"{len(expected - got)} books missing, e.g. {sorted(expected - got)[:3]}"
        return fleet, spiders, stack
    finally:
        spiders.stop_all()
        stack.stop_all()
        fleet.stop()


def test_three_scrapy_processes_share_one_polite_crawl(bootstrap: str, tmp_path: Path) -> None:
    fleet, spiders, _ = run_crawl(bootstrap, tmp_path)
    for name, proc in spiders.procs.items():
        assert proc.returncode == 0, f"{name} exited with {proc.returncode}:\n{spiders.log(name)[-3000:]}"
        assert "'finish_reason': 'finished'" in spiders.log(name), spiders.log(name)[-2000:]
    items = spiders.items()
    twice = [u for u, n in Counter(i["url"] for i in items).items() if n > 1]
    assert not twice, f"books parsed more than once: {twice[:5]}"
    assert all(i["title"] and i["price"] and i["listing"] for i in items), items[:3]
    # each page answered 200 once, whatever process fetched it (a 429 is retried by the frontier)
    for host in fleet.limits:
        ok = Counter(h.path for h in fleet.site(host).hits if h.status == 200 and h.path != "/robots.txt")
        again = {p: n for p, n in ok.items() if n > 1}
        assert not again, f"{host}: pages fetched more than once: {again}"
    # the work was shared (jobs go by domain: a process may own partitions no site of these maps to)
    per_process = {p.name: len(p.read_text().splitlines()) for p in tmp_path.glob("*.jsonl")}
    assert sum(1 for n in per_process.values() if n) >= 2, f"items per process: {per_process}"
    assert not politeness(fleet), politeness(fleet)


def test_a_killed_scrapy_process_loses_nothing(bootstrap: str, tmp_path: Path) -> None:
    fleet, spiders, _ = run_crawl(bootstrap, tmp_path, kill_after=15)
    for name, proc in spiders.procs.items():
        if name != "spider0":
            assert proc.returncode == 0, f"{name} exited with {proc.returncode}:\n{spiders.log(name)[-3000:]}"
    assert spiders.procs["spider0"].returncode == -signal.SIGKILL
    assert not politeness(fleet), politeness(fleet)

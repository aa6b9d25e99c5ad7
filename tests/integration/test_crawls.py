"""Crawls on the real broker (issue 20): two crawls over overlapping hosts, each with its own
workers. Every job reaches only its crawl's workers, each crawl's pages are complete, the sites'
own logs show one delay per host across both crawls, a drop of one crawl leaves the other
complete, ``wait_done`` returns when a crawl is done and not before, a crawl without a worker
waits queued (nothing leased, nothing lost) until one comes, and a frontier killed with SIGKILL
mid-crawl loses nothing of either crawl."""

from __future__ import annotations

import signal
import socket
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from frontier.client import FrontierClient
from frontier.demo.sites import SiteFleet
from frontier.demo.stack import Stack, TopicReader, read_pages, wait_until
from tests.integration.helpers import politeness_failures
from topics.schemas import Page

DELAY = 0.4
THROTTLE = {"delay": DELAY, "concurrency": 1, "autothrottle": {"enabled": False}}


class CrawlPages:
    """Every page on crawl.pages, by crawl."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.by_crawl: dict[str, list[Page]] = defaultdict(list)
        self._reader = TopicReader(stack.client, stack.topics.pages)

    def poll(self) -> None:
        for page in read_pages(self._reader, 0.2):
            self.by_crawl[page.crawl].append(page)

    def urls(self, crawl: str) -> set[str]:
        return {p.url for p in self.by_crawl[crawl]}

    def wait_for(self, want: dict[str, set[str]], timeout: float) -> None:
        def complete() -> bool:
            self.stack.check_alive()
            self.poll()
            return all(self.urls(c) >= urls for c, urls in want.items())

        try:
            wait_until(complete, timeout=timeout, what="every crawl's pages")
        except TimeoutError:
            missing = {c: len(urls - self.urls(c)) for c, urls in want.items()}
            raise AssertionError(f"pages missing per crawl: {missing}") from None

    def close(self) -> None:
        self._reader.close()


@contextmanager
def running(
    bootstrap: str, tmp_path: Path, fleet: SiteFleet, throttle: dict[str, Any]
) -> Iterator[tuple[Stack, CrawlPages]]:
    """The fleet started, a stack of 4 partitions with its topics, and the pages collector; all torn
    down at the end, whatever happens."""
    fleet.start()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4, throttle=throttle)
    pages = None
    try:
        stack.create_topics()
        pages = CrawlPages(stack)
        yield stack, pages
    finally:
        if pages is not None:
            pages.close()
        stack.stop_all()
        fleet.stop()


def page_hits(fleet: SiteFleet) -> dict[str, int]:
    return {s.host: sum(1 for h in s.hits if h.path != "/robots.txt") for s in fleet.sites}


def worker_name(stack: Stack, name: str) -> str:
    return f"{socket.gethostname()}-{stack.procs[name].pid}"


def test_two_crawls_their_own_workers_one_delay_per_host(bootstrap: str, tmp_path: Path) -> None:
    fleet = SiteFleet(3, pages=6, latency=0.02, first_octet=110)
    with running(bootstrap, tmp_path, fleet, THROTTLE) as (stack, pages):
        stack.start_frontier()
        for name, crawl in (("a1", "a"), ("a2", "a"), ("b1", "b")):
            stack.start_worker(name, 2, "--crawl", crawl)
        urls_a = set(fleet.all_urls())  # every site
        urls_b = {u for u in urls_a if fleet.sites[2].host not in u}  # two of them: shared hosts
        with FrontierClient(stack.config_path, crawl="a") as client:
            client.submit(sorted(urls_a))
            client.submit(sorted(urls_b), crawl="b")
            early = client.wait_done("b", timeout=1.0)
            assert not early.done, "b cannot be done a second after its URLs went in"
            pages.wait_for({"a": urls_a, "b": urls_b}, timeout=120)
            done_a = client.wait_done("a", timeout=60)
            done_b = client.wait_done("b", timeout=60)
            assert done_a.done and done_b.done, (done_a, done_b)
            rows = {r.crawl: r for r in client.crawls()}
        pages.poll()
        assert sorted(p.url for p in pages.by_crawl["a"]) == sorted(urls_a), "crawl a: every URL once"
        assert sorted(p.url for p in pages.by_crawl["b"]) == sorted(urls_b), "crawl b: every URL once"
        workers_a = {worker_name(stack, "a1"), worker_name(stack, "a2")}
        assert {p.worker for p in pages.by_crawl["a"]} <= workers_a, "a's jobs went to a's workers only"
        assert {p.worker for p in pages.by_crawl["b"]} == {worker_name(stack, "b1")}, "b's jobs to b's worker only"
        # the hosts both crawls share answered both: each URL once per crawl
        hits = page_hits(fleet)
        for i, site in enumerate(fleet.sites):
            assert hits[site.host] == site.pages * (2 if i < 2 else 1), hits
        # one delay per host, across both crawls, from the sites' own logs
        assert not politeness_failures(fleet, DELAY, 1), politeness_failures(fleet, DELAY, 1)
        assert rows["a"].completed == len(urls_a) and rows["b"].completed == len(urls_b), rows
        assert rows["a"].queued == rows["b"].queued == 0 and rows["b"].workers == 1, rows


def test_drop_one_crawl_and_a_crawl_without_workers_waits(bootstrap: str, tmp_path: Path) -> None:
    fleet = SiteFleet(2, pages=10, latency=0.02, first_octet=120)
    with running(bootstrap, tmp_path, fleet, {**THROTTLE, "delay": 0.5}) as (stack, pages):
        stack.start_frontier()
        stack.start_worker("a1", 2, "--crawl", "a")
        stack.start_worker("b1", 2, "--crawl", "b")
        urls = set(fleet.all_urls())
        with FrontierClient(stack.config_path) as client:
            client.submit(sorted(urls), crawl="a")
            client.submit(sorted(urls), crawl="b")
            client.submit(sorted(urls), crawl="c")  # no worker for c yet

            def some_of_b() -> bool:
                pages.poll()
                return len(pages.urls("b")) >= 2

            wait_until(some_of_b, timeout=60, what="a few pages of crawl b")
            client.drop_crawl("b")
            pages.wait_for({"a": urls}, timeout=120)
            assert client.wait_done("b", timeout=30).done, "b is done once dropped (nothing queued)"
            b_pages = len(pages.urls("b"))
            rows = {r.crawl: r for r in client.crawls()}
            assert rows["b"].dropped > 0 and rows["b"].queued == 0, rows["b"]
            assert b_pages + rows["b"].dropped == len(urls), (b_pages, rows["b"])
            # c has no worker: its URLs wait queued, nothing leased, nothing lost or fetched
            assert rows["c"].queued == len(urls) and rows["c"].inflight == 0 and rows["c"].workers == 0, rows["c"]
            assert not pages.urls("c")
            left = client.wait_done("c", timeout=1.0)
            assert not left.done and "queued" in left.left, left
            stack.start_worker("c1", 2, "--crawl", "c")  # a worker comes: c goes
            pages.wait_for({"c": urls}, timeout=120)
            assert client.wait_done("c", timeout=60).done
        pages.poll()
        assert len(pages.urls("b")) == b_pages, "nothing of b after its drop"
        assert sorted(p.url for p in pages.by_crawl["c"]) == sorted(urls), "c: every URL once"
        assert not politeness_failures(fleet, 0.5, 1), politeness_failures(fleet, 0.5, 1)


def test_frontier_killed_mid_crawl_loses_nothing_of_either_crawl(bootstrap: str, tmp_path: Path) -> None:
    fleet = SiteFleet(3, pages=8, latency=0.02, first_octet=130)
    with running(bootstrap, tmp_path, fleet, {**THROTTLE, "delay": 0.3}) as (stack, pages):
        stack.start_frontier("f1", own_state=True)
        stack.start_worker("a1", 2, "--crawl", "a")
        stack.start_worker("b1", 2, "--crawl", "b")
        urls = set(fleet.all_urls())
        with FrontierClient(stack.config_path) as client:
            client.submit(sorted(urls), crawl="a")
            client.submit(sorted(urls), crawl="b")

            def under_way() -> bool:
                pages.poll()
                return len(pages.urls("a")) >= 3 and len(pages.urls("b")) >= 3

            wait_until(under_way, timeout=60, what="both crawls under way")
            stack.stop("f1", sig=signal.SIGKILL)
            started = time.monotonic()
            stack.start_frontier("f2", own_state=True)  # an instance with no local state takes over
            pages.wait_for({"a": urls, "b": urls}, timeout=180)
            print(f"both crawls complete {time.monotonic() - started:.1f} s after the kill")
            assert client.wait_done("a", timeout=60).done and client.wait_done("b", timeout=60).done

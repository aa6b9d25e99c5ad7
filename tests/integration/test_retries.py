"""Retries spread over time, not counted in seconds (issue 23), with the defaults, judged from what
the sites saw: a site that resets its first eight connections (robots.txt's, then the root's) and
one whose robots.txt answers 429 with Retry-After: 2 twice are crawled completely within a few
minutes, each page published once; a robots.txt is never asked again before its Retry-After."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from frontier.demo.stack import Stack, TopicReader, read_pages, wait_until
from tests.integration.flaky_sites import FlakyFleet, FlakySite
from tests.integration.helpers import submit

DEADLINE = 300.0  # seconds for the whole crawl (the resets alone need about three minutes)


def test_sites_that_fail_first_are_crawled_completely_with_the_defaults(bootstrap: str, tmp_path: Path) -> None:
    fleet = FlakyFleet([
        FlakySite("127.0.0.81", resets=8),  # robots.txt's connections are the first eight
        FlakySite("127.0.0.82", resets=8, reset_from=1),  # robots.txt answers; the root's eight are reset
        FlakySite("127.0.0.83", robots_429=2, retry_after=2),
    ]).start()  # fmt: skip
    stack = Stack(bootstrap, tmp_path / "stack", partitions=2)
    reader = None
    try:
        stack.create_topics()
        stack.start_frontier()
        stack.start_worker("w1", concurrency=4)
        started = time.time()
        submit(stack, [u for site in fleet.sites for u in site.urls()])
        reader = TopicReader(stack.client, stack.topics.pages)
        pages = []

        def crawled() -> bool:
            stack.check_alive()
            pages.extend(read_pages(reader, 0.5))
            return len({p.url for p in pages}) >= sum(len(s.urls()) for s in fleet.sites)

        wait_until(crawled, timeout=DEADLINE, what="every page of the failing sites on crawl.pages")
        took = time.time() - started
        for _ in range(6):  # a short, bounded look for late duplicates
            pages.extend(read_pages(reader, 0.25))
        report = {s.host: [(round(x.at - started, 1), x.path or "RESET", x.status) for x in s.log] for s in fleet.sites}
        print(f"[sites that fail first] took={took:.0f}s", report)
        assert all(s.complete() for s in fleet.sites), report
        assert [p for p in pages if p.outcome != "fetched" or p.status != 200] == []
        assert len(pages) == len({p.url for p in pages}), "a page published twice"
        for site in fleet.sites:  # every reset was sent at the host's pace, and nothing more than needed
            assert sum(1 for x in site.log if x.status == 0) == site.resets
        robots = [x.at for x in fleet.sites[2].log if x.path == "/robots.txt"]
        gaps = [b - a for a, b in itertools.pairwise(robots)]
        assert len(robots) == 3 and all(2.0 <= g < 10.0 for g in gaps), gaps  # its Retry-After, not a minute
        root = fleet.sites[1]
        assert root.answered("/") and all(x.path in ("/robots.txt", "") for x in root.log[:9])
    finally:
        if reader is not None:
            reader.close()
        stack.stop_all()
        fleet.stop()

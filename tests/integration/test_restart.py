"""Stop the frontier mid-crawl, start it again: the crawl completes with nothing lost, and the
sites still see no request closer than the delay across the restart."""

import signal
from pathlib import Path

import pytest

from frontier.demo.sites import SiteFleet
from frontier.demo.stack import Stack
from tests.integration.helpers import crawling, politeness_failures

DELAY = 0.3


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_frontier_restart_loses_nothing(bootstrap: str, tmp_path: Path, how: str) -> None:
    fleet = SiteFleet(2, pages=15, latency=0.02, first_octet=50 if how == "sigterm" else 60).start()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4,
                  throttle={"delay": DELAY, "concurrency": 1, "autothrottle": {"start_delay": 0}})  # fmt: skip
    urls = fleet.all_urls()
    with crawling(stack, fleet) as pages:
        pages.wait_for(8, timeout=90, what="the crawl to be under way")
        assert len(set(pages.urls)) < len(urls), "the crawl finished before the restart"
        stack.stop("frontier", sig=signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
        stack.start_frontier("frontier-2")
        pages.wait_for(len(urls), timeout=120, what="the crawl to complete after restart")
        pages.settle()
        assert set(pages.urls) == set(urls), "nothing lost"
        if how == "sigterm":
            assert pages.duplicates() == 0, pages.urls
        else:
            assert pages.duplicates() <= 2, f"{pages.duplicates()} duplicates after kill -9"  # at least once
        assert not politeness_failures(fleet, DELAY, 1)

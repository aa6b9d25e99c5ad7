"""The seen set's commands on the real broker (issue 13): a crawled URL submitted again is a
duplicate and not fetched; ``crawl-frontier submit --recrawl`` fetches it again; after
``crawl-frontier forget`` a plain submission fetches it again. Counted at the site itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from frontier.client import FrontierClient
from frontier.demo.sites import SiteFleet
from frontier.demo.stack import Stack, wait_until
from tests.integration.helpers import crawling, submit


def test_duplicate_recrawl_and_forget_through_the_cli(bootstrap: str, tmp_path: Path) -> None:
    fleet = SiteFleet(1, pages=2, first_octet=113).start()
    site = fleet.sites[0]
    url = site.url(fleet.port, "/page/1")
    stack = Stack(bootstrap, tmp_path / "stack", partitions=2, frontier={"status_interval": 0.5},
                  throttle={"delay": 0.1, "autothrottle": {"enabled": False}})  # fmt: skip
    cli = [sys.executable, "-m", "frontier.cli", "--config", str(stack.config_path)]

    def fetches() -> int:
        return sum(1 for h in site.hits if h.path == "/page/1")

    with crawling(stack, fleet, concurrency=2, urls=[url]) as pages:
        client = FrontierClient(stack.config_path)

        def totals() -> dict[str, int]:
            return {k: int(v) for k, v in client.status().totals.items()}

        pages.wait_for(1, timeout=45, what="the first fetch")
        assert fetches() == 1

        submit(stack, [url])  # seen: a duplicate, not fetched again
        wait_until(lambda: totals().get("duplicates", 0) >= 1, 30, what="the duplicate counted")
        pages.settle()
        assert fetches() == 1 and len(pages.urls) == 1

        out = subprocess.run([*cli, "submit", "--recrawl", url], check=True, timeout=60, capture_output=True, text=True)
        assert "submitted 1 record" in out.stdout
        wait_until(lambda: fetches() == 2, 30, what="the recrawl's fetch")
        wait_until(lambda: totals().get("recrawls", 0) == 1 and totals().get("completed", 0) == 2, 30,
                   what="the recrawl counted and completed")  # fmt: skip

        out = subprocess.run([*cli, "forget", url], check=True, timeout=60, capture_output=True, text=True)
        assert "sent 1 forget record" in out.stdout
        wait_until(lambda: totals().get("forgotten", 0) == 1, 30, what="the URL forgotten")
        assert fetches() == 2  # a forget fetches nothing
        submit(stack, [url])
        wait_until(lambda: fetches() == 3, 30, what="the fetch after forget")

        def three_pages() -> bool:
            pages.poll()
            return len(pages.urls) == 3

        wait_until(three_pages, 30, what="three pages of the URL")
        wait_until(lambda: totals().get("ingested", 0) == 3, 30, what="the third URL counted (status lags)")
        assert totals().get("duplicates", 0) == 1 and fetches() == 3

"""The Scrapy add-on's edges on the real broker (issue 21): a request whose meta JSON cannot carry
is refused where it is yielded, the key named; a request a project's downloader middleware drops
ends ``skipped`` with the reason; a 404 the callback never gets is reported; every URL ends with a
page and the spider closes by itself. A spider's revisits are conditional requests (a 304 reaches no
callback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from frontier.demo.sites import SiteFleet
from frontier.demo.stack import Stack, TopicReader, read_pages, wait_until
from tests.integration.test_revisits import Asked, ChangingSite
from topics.schemas import Page

SPIDER = Path(__file__).resolve().parent / "scrapy_edge_spider.py"


def test_refused_dropped_and_unparsed_requests_are_said_and_reported(bootstrap: str, tmp_path: Path) -> None:
    fleet = SiteFleet(1, pages=4, first_octet=171).start()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=2)
    base = fleet.sites[0].url(fleet.port, "").rstrip("/")
    reader = None
    try:
        stack.create_topics()
        stack.start_frontier()
        env = {**os.environ, "EDGE_BASE": base}
        cmd = [sys.executable, "-m", "scrapy", "runspider", str(SPIDER), "-s",
               f"CRAWL_FRONTIER_CONFIG={stack.config_path}", "-s", "LOG_LEVEL=INFO"]  # fmt: skip
        run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False)
        log = run.stderr
        assert run.returncode == 0, log[-3000:]
        assert "'finish_reason': 'finished'" in log, log[-3000:]
        assert f"request {base}/page/3: meta key 'bad' cannot be sent to the frontier" in log, log[-3000:]
        reader = TopicReader(stack.client, stack.topics.pages)
        pages: dict[str, Page] = {}

        def four_pages() -> bool:
            pages.update((p.url, p) for p in read_pages(reader))  # type: ignore[arg-type]
            return len(pages) >= 4

        wait_until(four_pages, timeout=30, interval=0.2, what="the crawl's pages")
    finally:
        if reader is not None:
            reader.close()
        stack.stop_all()
        fleet.stop()
    assert sorted(pages) == sorted(f"{base}{p}" for p in ("/page/1", "/page/2", "/drop/1", "/missing"))
    assert pages[f"{base}/page/1"].status == 200 and pages[f"{base}/page/2"].outcome == "fetched"
    dropped = pages[f"{base}/drop/1"]
    assert dropped.outcome == "skipped" and "dropped before download: dropped by the project's" in dropped.error
    missing = pages[f"{base}/missing"]
    assert missing.outcome == "fetched" and missing.status == 404, missing
    assert all(p.crawl == "edges" for p in pages.values())
    hits = [h.path for h in fleet.sites[0].hits if h.path != "/robots.txt"]
    assert sorted(hits) == ["/missing", "/page/1", "/page/2"], hits  # nothing dropped or refused was sent


REVISIT_SPIDER = Path(__file__).resolve().parent / "scrapy_revisit_spider.py"


def test_a_spiders_revisits_are_conditional_and_a_304_never_reaches_its_callback(
    bootstrap: str, tmp_path: Path
) -> None:
    """``CRAWL_FRONTIER_REVISIT`` on a stock spider: /static (an ETag) is asked again with
    If-None-Match and answered 304, which no callback sees; /changing (a new body each time, no
    validators) is parsed at every revisit. Judged from the site's log of requests and headers."""
    fleet = ChangingSite(1, first_octet=172)
    fleet.asked = []
    fleet.start()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=2)
    base = fleet.sites[0].url(fleet.port, "").rstrip("/")
    items = tmp_path / "parsed.txt"
    proc = None
    try:
        stack.create_topics()
        stack.start_frontier()
        env = {**os.environ, "REVISIT_BASE": base, "REVISIT_ITEMS": str(items)}
        cmd = [sys.executable, "-m", "scrapy", "runspider", str(REVISIT_SPIDER), "-s",
               f"CRAWL_FRONTIER_CONFIG={stack.config_path}", "-s", "LOG_LEVEL=INFO"]  # fmt: skip
        with open(tmp_path / "spider.log", "wb") as log:
            proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)

        def asked(path: str) -> list[Asked]:
            return [a for a in fleet.asked if a.path == path]

        def revisited() -> bool:
            assert proc is not None and proc.poll() is None, (tmp_path / "spider.log").read_text()[-3000:]
            return len(asked("/static")) >= 4 and len(asked("/changing")) >= 4

        wait_until(revisited, timeout=120, interval=0.2, what="each page asked four times")
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        stack.stop_all()
        fleet.stop()
    static, changing = asked("/static"), asked("/changing")
    assert static[0].if_none_match == "" and static[0].status == 200
    assert all(a.if_none_match == '"s"' and a.status == 304 for a in static[1:]), static
    assert all(a.if_none_match == "" for a in changing)  # no validators: compared by digest
    parsed = items.read_text().splitlines()
    assert parsed.count(f"200 {base}/static") == 1, parsed  # the 304s reached no callback
    assert parsed.count(f"200 {base}/changing") >= len(changing) - 1, parsed  # (the last may be in flight)

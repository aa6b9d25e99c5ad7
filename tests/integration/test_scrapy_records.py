"""Records on ``crawl.urls`` cannot steer a Scrapy worker (issue 36), on the real broker, judged
from the sites' own logs. Anyone who may write the topic writes a job's ``scrapy`` meta; a stock
spider on the add-on, ``worker.allow_networks`` one local site (A), takes crafted records: a
request to another host (B, outside ``allow_networks``), a ``file://`` URL, a ``proxy`` meta naming
B, a dunder and a private callback, a request class from a module nobody imported. None of them is
fetched, called or imported: each job ends ``skipped`` with the reason on its page, B sees no
request, no file's content reaches an item, and the honest records beside them are crawled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from frontier.client import FrontierClient
from frontier.demo.sites import SiteFleet
from frontier.demo.stack import Stack, TopicReader, read_pages, wait_until
from topics.schemas import Page

ROOT = Path(__file__).resolve().parents[2]
SPIDER = Path(__file__).resolve().parent / "scrapy_record_spider.py"
ZEN = "Beautiful is better than ugly"  # what `import this` prints


def test_crafted_records_fetch_call_and_import_nothing(bootstrap: str, tmp_path: Path) -> None:
    fleet = SiteFleet(2, pages=10, first_octet=246).start()
    allowed, other = fleet.sites
    stack = Stack(bootstrap, tmp_path / "stack", partitions=2, worker={"allow_networks": [f"{allowed.host}/32"]})
    a = allowed.url(fleet.port, "").rstrip("/")
    b = other.url(fleet.port, "").rstrip("/")
    secret = tmp_path / "secret.txt"
    secret.write_text("the-file-content-7f3a\n")
    marks = tmp_path / "marks.txt"
    items = tmp_path / "items.jsonl"
    records = {
        f"{a}/page/1": {"url": f"{a}/page/1", "callback": "parse"},  # honest
        f"{a}/page/2": {"url": f"{b}/page/1", "callback": "parse"},
        f"{a}/page/3": {"url": secret.as_uri(), "callback": "parse"},
        f"{a}/page/4": {"url": f"{a}/page/4", "callback": "parse", "meta": {"proxy": b}},
        f"{a}/page/5": {"url": f"{a}/page/5", "callback": "__init__"},
        f"{a}/page/6": {"url": f"{a}/page/6", "callback": "_secret"},
        f"{a}/page/7": {"url": f"{a}/page/7", "_class": "tests.integration.import_marker.Nothing"},
        f"{a}/page/8": {"url": f"{a}/page/8", "_class": "this.Nothing"},
    }
    refused = {
        f"{a}/page/2": "is not at the job's origin",
        f"{a}/page/3": "is not at the job's origin",
        f"{a}/page/4": "meta proxy",
        f"{a}/page/5": "callback '__init__' is not a public method",
        f"{a}/page/6": "callback '_secret' is not a public method",
        f"{a}/page/7": "is not a Request class this process imported",
        f"{a}/page/8": "is not a Request class this process imported",
    }
    lines = [json.dumps({"url": url, "crawl": "records", "meta": {"scrapy": d}}).encode() for url, d in records.items()]
    lines.append(json.dumps({"url": f"{a}/page/9", "crawl": "records"}).encode())  # honest, from outside Scrapy
    reader = None
    try:
        stack.create_topics()
        stack.start_frontier()
        client = FrontierClient(stack.config_path, crawl="records")
        client.submit_lines(lines)

        def queued() -> bool:
            row = client.crawl()
            return row is not None and row.queued + row.inflight >= len(lines)

        wait_until(queued, timeout=60, interval=0.3, what="the records queued")
        env = {**os.environ, "RECORDS_MARKS": str(marks),
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
        cmd = [sys.executable, "-m", "scrapy", "runspider", str(SPIDER), "-o", f"{items}:jsonlines",
               "-s", f"CRAWL_FRONTIER_CONFIG={stack.config_path}", "-s", "LOG_LEVEL=INFO"]  # fmt: skip
        run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False)
        log = run.stdout + run.stderr
        assert run.returncode == 0 and "'finish_reason': 'finished'" in log, log[-3000:]
        reader = TopicReader(stack.client, stack.topics.pages)
        pages: dict[str, Page] = {}

        def every_page() -> bool:
            pages.update((p.url, p) for p in read_pages(reader))  # type: ignore[arg-type]
            return len(pages) >= len(lines)

        wait_until(every_page, timeout=30, interval=0.2, what="a page for every record")
    finally:
        if reader is not None:
            reader.close()
        stack.stop_all()
        fleet.stop()
    assert other.hits == [], f"B (outside allow_networks) was asked: {[h.path for h in other.hits]}"
    fetched = sorted(h.path for h in allowed.hits if h.path != "/robots.txt")
    assert fetched == ["/page/1", "/page/9"], fetched
    for url, reason in refused.items():
        page = pages[url]
        assert page.outcome == "skipped" and reason in page.error, (url, page.outcome, page.error)
    assert pages[f"{a}/page/1"].outcome == "fetched" and pages[f"{a}/page/9"].outcome == "fetched"
    got = [json.loads(line) for line in items.read_text().splitlines() if line.strip()]
    assert sorted(i["url"] for i in got) == [f"{a}/page/1", f"{a}/page/9"], got
    assert not any("the-file-content" in i["body"] for i in got), "a file's content became an item"
    said = marks.read_text().splitlines()
    assert [m for m in said if not m.startswith("__init__")] == [], said  # nothing imported, _secret not called
    assert len(said) == 1, f"__init__ called again by a record: {said}"
    assert ZEN not in log, "a record made the worker import `this`"

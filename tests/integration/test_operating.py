"""Operating the frontier on the real broker: the Python client, scope commands through
crawl.control (pause, resume, drop, set), recrawl, Prometheus metrics of the frontier and the
worker, and the live page rendered by a real headless Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from deploy.kafka import free_port
from frontier.client import FrontierClient
from frontier.demo.sites import SiteFleet
from frontier.demo.stack import Stack, wait_until
from tests.integration.helpers import short_gaps
from topics.schemas import Page

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DELAY = 0.2


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
        return body


def metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(get(url).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def chromium(url: str, workdir: Path, *extra: str) -> str:
    """Load ``url`` in headless Chromium, let its scripts run, return the rendered DOM."""
    run = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={workdir}", "--virtual-time-budget=6000", "--window-size=1200,1000", *extra, url],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


class Collected:
    def __init__(self, client: FrontierClient) -> None:
        self.client = client
        self.pages: dict[str, Page] = {}

    def until(self, predicate: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for page in self.client.iter_pages(follow=False, idle=1.0):
                self.pages[page.url] = page
            if predicate():
                return
        raise TimeoutError(f"timed out waiting for {what}")


def test_client_control_recrawl_metrics_and_live_page(bootstrap: str, tmp_path: Path) -> None:
    fleet = SiteFleet(4, pages=4, first_octet=70).start()
    a, b, c, d = fleet.sites
    web, wm = free_port(), free_port()
    stack = Stack(bootstrap, tmp_path / "stack", throttle={"delay": DELAY, "autothrottle": {"enabled": False}},
                  frontier={"web_port": web, "status_interval": 0.5},
                  worker={"allow_networks": ["127.0.0.0/8"], "metrics_port": wm})  # fmt: skip
    try:
        stack.create_topics()
        stack.start_frontier()
        stack.start_worker("w1", concurrency=8)
        client = FrontierClient(stack.config_path)
        got = Collected(client)
        wait_until(lambda: client.status().instances != [], 60, what="a frontier instance's status")
        wait_until(lambda: client.status().partitions == stack.partitions, 60, what="all partitions assigned")

        # pause a host before its URLs arrive; drop another's queue while it is paused (via the CLI)
        client.pause(a.host)
        cli = [sys.executable, "-m", "frontier.cli", "--config", str(stack.config_path), "scope"]
        subprocess.run([*cli, "pause", d.host], check=True, timeout=60)
        for site in (a, b, d):
            assert (
                client.submit([site.url(fleet.port, f"/page/{i}") for i in range(1, 4)], meta={"site": site.host}) == 3
            )
        news = c.url(fleet.port, "/page/1")
        client.submit([news], revisit=2.0)
        b_urls = {b.url(fleet.port, f"/page/{i}") for i in range(1, 4)}
        got.until(lambda: b_urls <= set(got.pages), 60, "the unpaused host's pages")
        assert all(got.pages[u].meta == {"site": b.host} for u in b_urls)  # meta comes back on the page

        wait_until(lambda: any(r.scope == a.host and r.reason.startswith("paused") for r in client.status().scopes),
                   30, what="status showing the paused scope")  # fmt: skip
        drop = subprocess.run([*cli, "drop", d.host], check=True, timeout=60, capture_output=True, text=True)
        assert "sent: drop" in drop.stdout
        wait_until(lambda: client.status().totals.get("dropped", 0) == 3, 30, what="3 dropped URLs")
        assert not [h for h in a.hits + d.hits if h.path != "/robots.txt"], "a paused scope was fetched"

        # resume: the held pages come; a dropped scope's URLs never do, even after a resume
        client.resume(a.host)
        client.resume(d.host)
        a_urls = {a.url(fleet.port, f"/page/{i}") for i in range(1, 4)}
        got.until(lambda: a_urls <= set(got.pages), 60, "the resumed host's pages")
        assert not [h for h in d.hits if h.path != "/robots.txt"]

        # set: a slower delay at run time; the status shows it (charting b on the page makes the
        # instance report b's row even with an empty queue), and the server sees it
        watch = urllib.request.Request(f"http://127.0.0.1:{web}/api/watch", data=json.dumps({"scope": b.host}).encode(),
                                       headers={"Content-Type": "application/json"})  # fmt: skip
        urllib.request.urlopen(watch, timeout=10).close()  # what the page POSTs (GET /api/history is read-only)
        client.set(b.host, delay=1.0)
        wait_until(lambda: any(r.scope == b.host and abs(r.delay - 1.0) < 1e-6 for r in client.status(top=50).scopes),
                   30, what="b's delay override in the status")  # fmt: skip
        since = time.time()
        client.submit([b.url(fleet.port, f"/page/1?n={n}") for n in range(3)])
        wait_until(lambda: sum(1 for h in b.hits if h.start > since) >= 3, 30, what="3 more requests to b")
        starts = sorted(h.start for h in b.hits if h.start > since)
        # (judged as every test judges gaps: a stamp the sites' loop took late, after a stall, is
        # forgiven; CI at 08cf30f: 1.053 s then 0.957 s, the middle request stamped late)
        assert not short_gaps(fleet, starts, 1.0), (starts, fleet.stalls_between(since, time.time()))

        # recrawl: the news page was fetched again after its revisit interval
        wait_until(lambda: sum(1 for h in c.hits if h.path == "/page/1") >= 2, 30, what="a revisit of the news page")
        starts = sorted(h.start for h in c.hits if h.path == "/page/1")
        assert not short_gaps(fleet, starts[:2], 2.0), starts

        # metrics, from both processes, with the figures the crawl produced
        fm = metrics(f"http://127.0.0.1:{web}/metrics")
        assert fm[("crawl_frontier_jobs_dispatched_total", (("kind", "page"),))] >= 9
        assert fm[("crawl_frontier_partitions", ())] == stack.partitions
        assert fm[("crawl_frontier_partition_events", (("event", "dropped"),))] == 3
        assert ("crawl_frontier_consumer_lag", (("topic", "feedback"),)) in fm
        wkm = metrics(f"http://127.0.0.1:{wm}/metrics")
        assert wkm[("crawl_worker_fetches_total", (("class", "2xx"), ("kind", "page")))] >= 9
        assert wkm[("crawl_worker_fetch_latency_seconds_count", ())] >= 9

        # the live page, rendered by a real browser: totals, the scope table and the chosen scope's chart
        api = json.loads(get(f"http://127.0.0.1:{web}/api/status"))
        assert api["totals"]["fetched"] >= 9 and api["instances"]
        wait_until(lambda: len(json.loads(get(f"http://127.0.0.1:{web}/api/history?scope={b.host}"))["points"]) >= 3,
                   30, what="history points for the charted scope")  # fmt: skip
        dom = chromium(f"http://127.0.0.1:{web}/?scope={b.host}", tmp_path / "chrome", "--dump-dom")
        assert 'data-key="fetched"' in dom and "pages/s" in dom
        assert f'data-scope="{b.host}"' in dom or "requests/s" in dom
        assert 'id="delay-line"' in dom and 'points="' in dom, dom[-3000:]
        shot = tmp_path / "live-page.png"
        chromium(f"http://127.0.0.1:{web}/?scope={b.host}", tmp_path / "chrome2", f"--screenshot={shot}")
        assert shot.stat().st_size > 10_000
    finally:
        stack.stop_all()
        fleet.stop()

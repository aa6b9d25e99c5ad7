"""``crawl-frontier demo``: a complete local crawl, start to finish, leaving nothing running.

Starts a private Kafka broker (temporary directory, free ports), creates the topics, starts
one frontier and two workers as separate processes, serves a fleet of demo sites on loopback
addresses, submits their roots with link following, shows progress, and ends with a summary
judged from the sites' own request logs.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

from deploy.kafka import LocalKafka, free_port
from frontier.client import FrontierClient
from frontier.client.feed import read_status
from frontier.client.status import render
from frontier.demo.sites import SiteFleet
from frontier.demo.stack import Stack, TopicReader, read_pages, read_rejected
from topics.schemas import Page, Rejected

DEFAULT_DELAY, DEFAULT_CONCURRENCY = 0.5, 1


def _summary(
    fleet: SiteFleet,
    got: dict[str, Page],
    expected: int,
    scopes: dict[str, dict[str, float]],
    elapsed: float,
    rejected: list[Rejected],
) -> int:
    """Print the crawl's outcome per site, judged from the sites' own request logs; 0 if all held."""
    statuses = Counter(p.status for p in got.values())
    print("\nsummary")
    print(f"  pages fetched: {len(got)}/{expected} in {elapsed:.1f}s (status counts: {dict(statuses)})")
    print(f"  rejected inputs: {len(rejected)} " + ", ".join(f"{r.original[:40]!r}: {r.reason}" for r in rejected))
    print(f"  {'site':<12} {'pages':>5} {'errors':>6} {'requests':>8} {'delay':>6} {'min gap':>8} "
          f"{'conc':>4} {'max conc':>8}")  # fmt: skip
    complete, polite = len(got) == expected, True
    for s in fleet.sites:
        cfg = scopes.get(s.host, {"delay": DEFAULT_DELAY, "concurrency": DEFAULT_CONCURRENCY})
        pages = [p for p in got.values() if urlsplit(p.url).hostname == s.host]
        errors = sum(1 for p in pages if p.outcome == "error" or p.status >= 400)
        gap = s.min_gap()
        gap_text = f"{gap:.3f}" if gap is not None else "-"
        print(f"  {s.host:<12} {len(pages):>5} {errors:>6} {len(s.hits):>8} {cfg['delay']:>6.2f} {gap_text:>8} "
              f"{cfg['concurrency']:>4.0f} {s.max_active:>8}")  # fmt: skip
        if (gap is not None and gap < cfg["delay"] - 0.05) or s.max_active > cfg["concurrency"]:
            polite = False
    print(f"  politeness: {'held' if polite else 'VIOLATED'} (min gap = the smallest interval between two "
          "requests that the site itself saw; max conc = most requests it served at once)")  # fmt: skip
    if not complete:
        print(f"  crawl incomplete: {expected - len(got)} page(s) missing")
    return 0 if complete and polite else 1


def _submit(stack: Stack, roots: list[str]) -> None:
    """Publish the sites' roots (with link following) and one invalid input, unkeyed, as a user would."""
    lines = [json.dumps({"url": root, "follow": 2}).encode() for root in roots]
    lines.append(b"ftp://not-a-web-url.example/")  # shows crawl.rejected at work
    with FrontierClient(stack.config_path) as client:
        client.submit_lines(lines)  # raises SubmitError unless every record is acknowledged


def run_demo(duration: float = 60.0, sites: int = 4, pages: int = 12, linger: float = 0.0) -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="crawl-demo-") as tmp:
        work = Path(tmp)
        kafka = LocalKafka(home=work / "kafka", port=free_port(), controller_port=free_port(), heap="512m")
        fleet = SiteFleet(sites, pages=pages, latency=0.03)
        stack: Stack | None = None
        try:
            print("demo: starting Kafka (first run fetches it from Maven Central)...", flush=True)
            bootstrap = kafka.up()
            print(f"demo: Kafka ready at {bootstrap}", flush=True)
            # One site is configured faster, one slower, to show per-scope settings at work.
            fleet.start()
            scopes = {
                fleet.sites[0].host: {"delay": 0.25, "concurrency": 2},
                fleet.sites[-1].host: {"delay": 1.0, "concurrency": 1},
            }
            default = {"delay": DEFAULT_DELAY, "concurrency": DEFAULT_CONCURRENCY,
                       "autothrottle": {"start_delay": 1.0}}  # fmt: skip
            web = free_port()
            stack = Stack(bootstrap, work / "stack", prefix="demo.", partitions=4,
                          throttle={**default, "scopes": scopes},
                          frontier={"web_port": web, "status_interval": 1.0})  # fmt: skip
            stack.create_topics()
            stack.start_frontier()
            stack.start_worker("worker-1", concurrency=8)
            stack.start_worker("worker-2", concurrency=8)
            _submit(stack, fleet.roots())
            expected = sites * pages
            print(f"demo: {sites} sites x {pages} pages on {', '.join(s.host for s in fleet.sites)} "
                  f"port {fleet.port}; expecting {expected} pages", flush=True)  # fmt: skip
            print(f"demo: live page http://127.0.0.1:{web}/  metrics http://127.0.0.1:{web}/metrics", flush=True)
            reader = TopicReader(stack.client, stack.topics.pages)
            got: dict[str, Page] = {}
            last_print = 0.0
            shown_status = False
            deadline = time.monotonic() + duration
            while time.monotonic() < deadline and len(got) < expected:
                stack.check_alive()
                for page in read_pages(reader, timeout=0.5):
                    got[page.url] = page
                if time.monotonic() - last_print > 2:
                    last_print = time.monotonic()
                    per_site = " ".join(f"{s.host}:{len(s.hits)}" for s in fleet.sites)
                    print(f"  {time.monotonic() - started:5.1f}s  pages {len(got)}/{expected}  requests {per_site}",
                          flush=True)  # fmt: skip
                    if not shown_status and len(got) >= expected // 3:
                        shown_status = True  # what `crawl-frontier status` shows mid-crawl
                        print("\n$ crawl-frontier status   (mid-crawl)")
                        print(render(read_status(stack.client, stack.topics.status), top=8) + "\n", flush=True)
            reader.close()
            rejected_reader = TopicReader(stack.client, stack.topics.rejected)
            rejected = read_rejected(rejected_reader, timeout=2.0)
            rejected_reader.close()
            print("\n$ crawl-frontier status   (at the end)")
            print(render(read_status(stack.client, stack.topics.status), top=8))
            code = _summary(fleet, got, expected, scopes, time.monotonic() - started, rejected)
            if linger > 0:
                print(f"\ndemo: the stack stays up for {linger:.0f}s: http://127.0.0.1:{web}/ (Ctrl-C ends it)",
                      flush=True)  # fmt: skip
                end = time.monotonic() + linger
                while time.monotonic() < end:
                    stack.check_alive()
                    time.sleep(min(1.0, max(0.0, end - time.monotonic())))
            return code
        except KeyboardInterrupt:
            print("demo: interrupted", file=sys.stderr)
            return 130
        finally:
            if stack is not None:
                stack.stop_all()
            fleet.stop()
            kafka.down()

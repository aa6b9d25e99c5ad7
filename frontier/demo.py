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

from deploy.kafka import LocalKafka, free_port
from frontier.demo_sites import SiteFleet
from frontier.stack import Stack, TopicReader, read_pages


def run_demo(duration: float = 60.0, sites: int = 4, pages: int = 12) -> int:
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
            stack = Stack(bootstrap, work / "stack", prefix="demo.", partitions=4,
                          throttle={"delay": 0.5, "concurrency": 1, "scopes": scopes})  # fmt: skip
            stack.create_topics()
            stack.start_frontier()
            stack.start_worker("worker-1", concurrency=8)
            stack.start_worker("worker-2", concurrency=8)
            from confluent_kafka import Producer

            producer = Producer({**stack.client, "partitioner": "murmur2_random"})
            for root in fleet.roots():
                producer.produce(stack.topics.urls, json.dumps({"url": root, "follow": 2}).encode())
            producer.produce(stack.topics.urls, b"ftp://not-a-web-url.example/")  # shows crawl.rejected at work
            producer.flush(30)
            expected = sites * pages
            print(f"demo: {sites} sites x {pages} pages on {', '.join(s.host for s in fleet.sites)} "
                  f"port {fleet.port}; expecting {expected} pages", flush=True)  # fmt: skip
            reader = TopicReader(stack.client, stack.topics.pages)
            got: dict[str, int] = {}
            statuses: Counter[int] = Counter()
            last_print = 0.0
            deadline = time.monotonic() + duration
            while time.monotonic() < deadline and len(got) < expected:
                stack.check_alive()
                for page in read_pages(reader, timeout=0.5):
                    got[page.url] = page.status
                    statuses[page.status] += 1
                if time.monotonic() - last_print > 2:
                    last_print = time.monotonic()
                    per_site = " ".join(f"{s.host}:{len(s.hits)}" for s in fleet.sites)
                    print(f"  {time.monotonic() - started:5.1f}s  pages {len(got)}/{expected}  requests {per_site}",
                          flush=True)  # fmt: skip
            reader.close()
            elapsed = time.monotonic() - started
            print("\nsummary")
            print(f"  pages fetched: {len(got)}/{expected} in {elapsed:.1f}s (status counts: {dict(statuses)})")
            print(f"  {'site':<14} {'requests':>8} {'delay cfg':>9} {'min gap':>8} {'max conc':>8} {'conc cfg':>8}")
            ok = len(got) == expected
            for s in fleet.sites:
                cfg = scopes.get(s.host, {"delay": 0.5, "concurrency": 1})
                gap = s.min_gap()
                gap_text = f"{gap:.3f}" if gap is not None else "-"
                print(f"  {s.host:<14} {len(s.hits):>8} {cfg['delay']:>9.2f} {gap_text:>8} {s.max_active:>8} "
                      f"{cfg['concurrency']:>8}")  # fmt: skip
                if gap is not None and gap < cfg["delay"] - 0.05:
                    ok = False
                if s.max_active > cfg["concurrency"]:
                    ok = False
            print(f"  politeness: {'held' if ok else 'VIOLATED or crawl incomplete'} "
                  "(min gap = smallest interval between two requests the site itself saw)")  # fmt: skip
            return 0 if ok else 1
        except KeyboardInterrupt:
            print("demo: interrupted", file=sys.stderr)
            return 130
        finally:
            if stack is not None:
                stack.stop_all()
            fleet.stop()
            kafka.down()

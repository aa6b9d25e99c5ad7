"""Benchmark 2, frontier ingest: URLs per second accepted from crawl.urls (router: parse,
canonicalise, key by domain; frontier: dedup, enqueue in RocksDB, changelog) into an empty
frontier, then into one already holding many queued URLs.

The URLs are on the topic before the frontier starts. The rate is taken over the middle 90 % of
each run, timed by the frontier's own status snapshots (every 0.2 s). It runs twice, side by
side: with the router embedded in the frontier process (the default) and with the router as a
process of its own (``frontier.embedded_router = false`` + ``crawl-frontier router``).

    python -m tests.bench.ingest [--smoke | --full] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from frontier.demo.stack import Stack
from tests.bench.common import broker, measure_rate, parser, produce_urls, report, size, snapshot, wait_total

FRONTIER = {"robots_obey": False, "status_interval": 0.2, "max_inflight": 1}  # ingest only: no dispatch to speak of


def run_ingest(bootstrap: str, workdir: Path, embedded: bool, preload: int, batch: int, domains: int) -> dict[str, int]:
    frontier = {**FRONTIER, "embedded_router": embedded}
    stack = Stack(bootstrap, workdir, partitions=8, frontier=frontier)
    stack.create_topics()
    results = {}
    try:
        for label, n, start in (("empty", preload, 0), ("holding", batch, preload)):
            at, totals = snapshot(bootstrap, stack.topics.status)
            before = (at, totals.get("ingested", 0))  # the frontier's last word before the run
            produce_urls(bootstrap, stack.topics.urls, n, domains, start)
            if label == "empty":
                # no frontier yet: its start stands in (a tiny run can be over before the first
                # snapshot; then the rate includes start-up, and any snapshot below 5 % replaces it)
                before = (time.time(), 0)
                stack.start_frontier()
                if not embedded:
                    stack.start_router()
            rate = measure_rate(bootstrap, stack.topics.status, "ingested", start, n, 900, stack.check_alive, before)
            wait_total(bootstrap, stack.topics.status, "ingested", start + n, 900, stack.check_alive)
            results[label] = round(rate)
    finally:
        stack.stop_all()
    return results


def main() -> None:
    args = parser(__doc__.split("\n\n")[0]).parse_args()
    preload = size(args, smoke=2_000, default=200_000, full=1_000_000)
    domains = size(args, smoke=200, default=20_000, full=100_000)
    batch = size(args, smoke=2_000, default=100_000, full=200_000)
    with broker(args) as bootstrap, tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        for router in ("embedded", "separate"):
            r = run_ingest(bootstrap, Path(tmp, router), router == "embedded", preload, batch, domains)
            report("ingest", router=router, urls_into_empty=preload, domains=domains,
                   urls_per_s_into_empty=r["empty"], urls_into_holding=batch, already_queued=preload,
                   urls_per_s_into_holding=r["holding"])  # fmt: skip


if __name__ == "__main__":
    main()

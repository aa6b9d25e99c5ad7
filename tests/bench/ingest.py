"""Benchmark 2, frontier ingest: URLs per second accepted from crawl.urls (router: parse,
canonicalise, key by domain; frontier: dedup, enqueue in RocksDB, changelog) into an empty
frontier, then into one already holding many queued URLs.

The URLs are on the topic before the frontier starts; the clock runs from the first accepted
URL to the last (read from the frontier's status snapshots, every 0.2 s).

    python -m tests.bench.ingest [--smoke | --full] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from frontier.stack import Stack
from tests.bench.common import broker, parser, produce_urls, report, size, wait_total

FRONTIER = {"robots_obey": False, "status_interval": 0.2, "max_inflight": 1}  # ingest only: no dispatch to speak of


def main() -> None:
    args = parser(__doc__.split("\n\n")[0]).parse_args()
    preload = size(args, smoke=2_000, default=200_000, full=1_000_000)
    domains = size(args, smoke=200, default=20_000, full=100_000)
    batch = size(args, smoke=2_000, default=100_000, full=200_000)
    with broker(args) as bootstrap, tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        stack = Stack(bootstrap, Path(tmp), partitions=8, frontier=FRONTIER)
        stack.create_topics()
        try:
            results = {}
            for label, n, start in (("empty", preload, 0), ("holding", batch, preload)):
                produce_urls(bootstrap, stack.topics.urls, n, domains, start)
                if label == "empty":
                    stack.start_frontier()
                    first = wait_total(bootstrap, stack.topics.status, "ingested", 1, 180, stack.check_alive)
                else:
                    first = time.perf_counter()
                done = wait_total(bootstrap, stack.topics.status, "ingested", start + n, 900, stack.check_alive)
                results[label] = round(n / max(done - first, 1e-9))
        finally:
            stack.stop_all()
    report("ingest", urls_into_empty=preload, domains=domains, urls_per_s_into_empty=results["empty"],
           urls_into_holding=batch, already_queued=preload, urls_per_s_into_holding=results["holding"])  # fmt: skip


if __name__ == "__main__":
    main()

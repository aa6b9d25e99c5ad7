"""Benchmark 4, memory: the frontier's RSS and on-disk size holding D domains with 10 queued
URLs each. RSS must stay bounded (queues on disk, only due domains in the heap, bounded caches).

Dispatch is held back (max_inflight 1, robots.txt pending for every host) so everything stays
queued; the figure is read once ingest is complete.

    python -m tests.bench.memory [--smoke | --full] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from frontier.stack import Stack
from tests.bench.common import broker, parser, produce_urls, report, wait_total

FRONTIER = {"status_interval": 2.0, "max_inflight": 1}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def disk_mb(path: Path) -> float:
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=False).stdout.split()
    return int(out[0]) / 1024 if out else 0.0


def main() -> None:
    args = parser(__doc__.split("\n\n")[0]).parse_args()
    steps = [1_000] if args.smoke else [10_000, 100_000, 1_000_000] if args.full else [10_000, 100_000]
    with broker(args) as bootstrap:
        for domains in steps:
            with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
                stack = Stack(bootstrap, Path(tmp), partitions=8, frontier=FRONTIER)
                stack.create_topics()
                urls = domains * 10
                produce_urls(bootstrap, stack.topics.urls, urls, domains)
                proc = stack.start_frontier()
                try:
                    wait_total(bootstrap, stack.topics.status, "ingested", urls, 3600, stack.check_alive)
                    report("memory", domains=domains, queued_urls=urls, rss_mb=round(rss_mb(proc.pid)),
                           disk_mb=round(disk_mb(Path(tmp) / "state")))  # fmt: skip
                finally:
                    stack.stop_all()


if __name__ == "__main__":
    main()

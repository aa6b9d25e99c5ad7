"""Benchmark 4, memory: the frontier's RSS and on-disk size holding D domains with 10 queued
URLs each, and the time to restore them. RSS must stay bounded (queues on disk, only due domains
in the heap, bounded caches).

Dispatch is held back (max_inflight 1, robots.txt pending for every host) so everything stays
queued; the figure is read once ingest is complete. Then the frontier is killed (SIGKILL) and its
local state directory deleted, so that a new frontier must rebuild every partition from the
changelog: ``restore_s`` is the time from its start until its own status snapshot counts every
ingested URL again (all partitions restored and rebuilt), and ``rss_restored_mb`` its RSS then.

    python -m tests.bench.memory [--smoke | --full] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from frontier.client.feed import read_status
from frontier.demo.stack import Stack
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


def own_ingested(stack: Stack, pid: int) -> int:
    """The ``ingested`` total in the latest snapshot of the frontier process ``pid`` (0 before its first)."""
    instance = f"{socket.gethostname()}-{pid}"
    for status in read_status(stack.client, stack.topics.status):
        if status.instance == instance:
            return status.totals.get("ingested", 0)
    return 0


def restore(stack: Stack, state: Path, urls: int, timeout: float) -> tuple[float, float]:
    """Kill the frontier, delete its local state, start a new one; (seconds until its own status
    counts ``urls`` ingested URLs again, its RSS then)."""
    stack.stop("frontier", signal.SIGKILL)
    shutil.rmtree(state)
    started = time.perf_counter()
    proc = stack.start_frontier()
    deadline = started + timeout
    while own_ingested(stack, proc.pid) < urls:
        stack.check_alive()
        if time.perf_counter() > deadline:
            raise TimeoutError(f"the restarted frontier did not count {urls} ingested URLs within {timeout:.0f}s")
        time.sleep(0.2)
    return time.perf_counter() - started, rss_mb(proc.pid)


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
                    rss, disk = rss_mb(proc.pid), disk_mb(Path(tmp) / "state")
                    restore_s, restored_rss = restore(stack, Path(tmp) / "state", urls, 3600)
                    report("memory", domains=domains, queued_urls=urls, rss_mb=round(rss), disk_mb=round(disk),
                           restore_s=round(restore_s, 1), rss_restored_mb=round(restored_rss))  # fmt: skip
                finally:
                    stack.stop_all()


if __name__ == "__main__":
    main()

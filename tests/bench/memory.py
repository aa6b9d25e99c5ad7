"""Benchmark 4, memory and takeover: the frontier's RSS and on-disk size holding D domains with
10 queued URLs each, and the times to have them served again after a kill -9.

Dispatch is held back (max_inflight 1, robots.txt pending for every host) so everything stays
queued; the figures are read once ingest is complete (``rss_mb``, ``disk_mb``; ``ingest_s``: from the
frontier's start, the URLs produced beforehand, and ``ingest_rate`` in URLs/s). Then, each from
a SIGKILL of the frontier:

- ``restart_s``: a new frontier on the same disk, from its start until its own status snapshot
  counts every ingested URL again; ``restart_replayed`` is the changelog records it replayed
  (the whole changelog when the killed copy was not trusted, only the tail when it was);
- ``rebuild_s``: the same with the local state deleted first (rebuilt from nothing), and
  ``rss_rebuilt_mb`` its RSS then;
- ``takeover_s``: with ``standby_replicas = 1``, a second frontier joins, and once its standby
  copies of the first one's partitions have caught up the first is killed: the longest time,
  among the partitions the survivor takes, from the group's assignment to the partition being
  ready to dispatch (its log's ``ready ... in Xs``; ``takeover_wall_s`` is from the kill, which
  includes the group's session timeout).

    python -m tests.bench.memory [--smoke | --full | --domains D] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import re
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

FRONTIER = {"status_interval": 2.0, "max_inflight": 1, "standby_replicas": 1}
PARTITIONS = 8
READY = re.compile(r"partition (\d+) ready: (\d+) changelog records replayed in ([0-9.]+)s[^(\n]*(?:\(([^)\n]*)\))?")
CAUGHT_UP = re.compile(r"standby for partition (\d+) caught up")


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


def ready_lines(stack: Stack, name: str, since: int = 0) -> list[tuple[int, int, float, str]]:
    """(partition, records replayed, seconds, the open's steps) of each ``ready`` line in
    ``name``'s log after character ``since``."""
    return [(int(p), int(n), float(s), steps) for p, n, s, steps in READY.findall(stack.log(name)[since:])]


def wait_for(what: str, done: object, stack: Stack, timeout: float) -> None:
    deadline = time.perf_counter() + timeout
    while not done():  # type: ignore[operator]
        stack.check_alive()
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{what} not within {timeout:.0f}s")
        time.sleep(0.2)


def restart(stack: Stack, state: Path | None, urls: int, timeout: float) -> tuple[float, float, int]:
    """Kill the frontier, delete its local state when ``state`` is given, start a new one on the
    same disk; (seconds until its own status counts ``urls`` ingested URLs again, its RSS then,
    the changelog records it replayed)."""
    stack.stop("a", signal.SIGKILL)
    if state is not None:
        shutil.rmtree(state)
    since = len(stack.log("a"))
    started = time.perf_counter()
    proc = stack.start_frontier("a", own_state=True)
    wait_for(f"{urls} URLs counted again", lambda: own_ingested(stack, proc.pid) >= urls, stack, timeout)
    took = time.perf_counter() - started
    wait_for("every partition ready", lambda: len(ready_lines(stack, "a", since)) >= PARTITIONS, stack, 60)
    return took, rss_mb(proc.pid), sum(n for _, n, _, _ in ready_lines(stack, "a", since))


def takeover(stack: Stack, timeout: float) -> tuple[float, float, int, str]:
    """A standby frontier ``b`` joins; once its copies of ``a``'s partitions caught up, ``a`` is
    killed. (the longest assignment-to-ready time of the partitions ``b`` takes, the time from
    the kill until they are all ready, how many it took, the steps of the slowest one's open)."""
    stack.start_frontier("b", own_state=True)

    def settled() -> bool:
        b_owns = {p for p, _, _, _ in ready_lines(stack, "b")}
        caught = {int(p) for p in CAUGHT_UP.findall(stack.log("b"))}
        return 0 < len(b_owns) < PARTITIONS and caught >= set(range(PARTITIONS)) - b_owns

    wait_for("the standby copies caught up", settled, stack, timeout)
    owned_before = {p for p, _, _, _ in ready_lines(stack, "b")}
    since = len(stack.log("b"))
    killed = time.perf_counter()
    stack.stop("a", signal.SIGKILL)
    taken = set(range(PARTITIONS)) - owned_before

    def all_taken() -> bool:
        return {p for p, _, _, _ in ready_lines(stack, "b", since)} >= taken

    wait_for("the taken partitions ready", all_taken, stack, timeout)
    wall = time.perf_counter() - killed
    longest = max(((s, steps) for p, _, s, steps in ready_lines(stack, "b", since) if p in taken), default=(0.0, ""))
    return longest[0], wall, len(taken), longest[1]


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--domains", type=int, default=0, help="one step of this many domains (10 URLs each)")
    args = p.parse_args()
    steps = ([args.domains] if args.domains else [1_000] if args.smoke
             else [10_000, 100_000, 1_000_000] if args.full else [10_000, 100_000])  # fmt: skip
    with broker(args) as bootstrap:
        for domains in steps:
            with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
                stack = Stack(bootstrap, Path(tmp), partitions=PARTITIONS, frontier=FRONTIER)
                stack.create_topics()
                urls = domains * 10
                produce_urls(bootstrap, stack.topics.urls, urls, domains)
                proc = stack.start_frontier("a", own_state=True)
                started = time.perf_counter()
                state = Path(tmp) / "state-a"
                try:
                    wait_total(bootstrap, stack.topics.status, "ingested", urls, 3600, stack.check_alive)
                    ingest_s = time.perf_counter() - started
                    rss, disk = rss_mb(proc.pid), disk_mb(state)
                    restart_s, _, replayed = restart(stack, None, urls, 3600)
                    rebuild_s, rebuilt_rss, rebuilt = restart(stack, state, urls, 3600)
                    takeover_s, takeover_wall, taken, steps = takeover(stack, 3600)
                    report("memory", domains=domains, queued_urls=urls, rss_mb=round(rss), disk_mb=round(disk),
                           ingest_s=round(ingest_s, 1), ingest_rate=round(urls / ingest_s),
                           restart_s=round(restart_s, 1), restart_replayed=replayed, rebuild_s=round(rebuild_s, 1),
                           rebuild_replayed=rebuilt, rss_rebuilt_mb=round(rebuilt_rss),
                           takeover_s=round(takeover_s, 2), takeover_wall_s=round(takeover_wall, 1),
                           taken_partitions=taken, takeover_steps=steps)  # fmt: skip
                finally:
                    stack.stop_all()


if __name__ == "__main__":
    main()

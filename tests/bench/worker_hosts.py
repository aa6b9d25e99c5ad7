"""Worker memory per host: a worker's RSS after jobs of N distinct hosts went through its per-host
gate, and after ``prune_gates`` forgot them.

No network and no broker: each job goes through ``FetchWorker._fetch_in_slot`` (the worker slot,
the host's gate, its lock and its idle event, the send callback, the headers callback and the end
of the answer, exactly as a real fetch does) with a stub in place of the HTTP fetch. Jobs run
``--concurrency`` at a time; every host gets one job.

    python -m tests.bench.worker_hosts [--smoke | --full]     (10,000 / 100,000 / 1,000,000 hosts)
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from pathlib import Path

from frontier.config import Config
from tests.bench.common import parser, report, size
from topics.schemas import Job, UrlItem
from workers.fetch import FetchResult
from workers.worker import GATE_IDLE, FetchWorker


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def stub_fetch(
    _session: object, job: Job, sent: Callable[[float], None], headers: Callable[[FetchResult], None] | None = None
) -> FetchResult:
    """What the HTTP fetch does to the gate: the request goes out, its headers come in, it ends."""
    at = time.time()
    sent(at)
    result = FetchResult(sent_at=at, status=200)
    if headers is not None:
        headers(result)
    await asyncio.sleep(0)  # the answer's body: other jobs run meanwhile
    return result


async def drive(worker: FetchWorker, hosts: int, concurrency: int) -> int:
    """One job for each of ``hosts`` distinct hosts; returns how many were fetched."""
    sem = asyncio.Semaphore(concurrency)
    fetched = 0

    async def one(n: int) -> None:
        nonlocal fetched
        host = f"h{n}.bench.example"
        now = time.time()
        job = Job(lease=f"L{n}", item=UrlItem(url=f"http://{host}/", host=host, domain=host), not_before=now,
                  expires_at=now + 600, timeout=5)  # fmt: skip
        if await worker._fetch_in_slot(None, sem, job) is not None:  # type: ignore[arg-type]  # the stub needs none
            fetched += 1

    step = concurrency * 4  # bounded: at most this many jobs exist at a time
    for start in range(0, hosts, step):
        await asyncio.gather(*(one(n) for n in range(start, min(hosts, start + step))))
    return fetched


async def measure(hosts: int, concurrency: int) -> None:
    worker = FetchWorker(Config(), concurrency=concurrency, name="bench-worker-hosts")
    worker._fetch = stub_fetch  # type: ignore[method-assign,assignment]  # no network: the stub fetch
    gc.collect()
    before = rss_mb()
    started = time.perf_counter()
    fetched = await drive(worker, hosts, concurrency)
    took = time.perf_counter() - started
    gc.collect()
    after = rss_mb()
    gates = len(worker._gates)
    forgotten = worker.prune_gates(time.time() + max(GATE_IDLE, 2 * worker.cfg.frontier.fetch_timeout) + 1)
    gc.collect()
    pruned = rss_mb()
    report("worker_hosts", hosts=hosts, fetched=fetched, gates=gates, forgotten=forgotten, left=len(worker._gates),
           rss_before_mb=round(before, 1), rss_after_mb=round(after, 1), rss_after_prune_mb=round(pruned, 1),
           bytes_per_host=round((after - before) * 2**20 / hosts), seconds=round(took, 1))  # fmt: skip
    if fetched != hosts or forgotten != hosts or worker._gates:
        raise SystemExit(f"expected {hosts} fetched and forgotten, got {fetched} and {forgotten}")


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, default=256, help="jobs in their fetch at a time (worker slots)")
    args = p.parse_args()
    asyncio.run(measure(size(args, 10_000, 100_000, 1_000_000), args.concurrency))


if __name__ == "__main__":
    main()

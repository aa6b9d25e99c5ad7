"""Worker memory per host: a worker's RSS after jobs of N distinct hosts went through its per-host
gate, and after ``prune_gates`` forgot them.

No network and no broker: each job goes through ``Jobs.handle`` (the worker slot,
the host's gate, its lock and its idle event, the send callback, the headers callback and the end
of the answer, exactly as a real fetch does) with a stub in place of the HTTP fetch. Jobs run
``--concurrency`` at a time; every host gets one job.

    python -m tests.bench.worker_hosts [--smoke | --full]     (10,000 / 100,000 / 1,000,000 hosts)
"""

from __future__ import annotations

import asyncio
import gc
import time
from pathlib import Path
from typing import Any

from frontier.config import Config
from tests.bench.common import parser, report, size
from tests.fakes import FakeMessage
from topics.schemas import Job, UrlItem, encode
from workers.api import LeasedJob, Outcome
from workers.api.holding import GATE_IDLE
from workers.api.publishing import Publisher
from workers.fetcher.worker import FetchWorker


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class NullProducer:
    """Every record acknowledged at once (no broker)."""

    def send(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None) -> Any:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


async def stub_fetch(job: LeasedJob) -> Outcome:
    """What the HTTP fetch does to the gate: the request goes out, its headers come in, it ends."""
    at = time.time()
    job.sent(at)
    job.answered(200, {})
    await asyncio.sleep(0)  # the answer's body: other jobs run meanwhile
    return Outcome(sent_at=at, status=200)


async def drive(worker: FetchWorker, hosts: int, concurrency: int) -> int:
    """One job for each of ``hosts`` distinct hosts; returns how many were fetched."""

    async def one(n: int) -> None:
        host = f"h{n}.bench.example"
        now = time.time()
        job = Job(lease=f"L{n}", item=UrlItem(url=f"http://{host}/", host=host, domain=host), not_before=now,
                  expires_at=now + 600, timeout=5)  # fmt: skip
        await worker.jobs.handle(FakeMessage(encode(job), offset_=n))  # type: ignore[arg-type]

    step = concurrency * 4  # bounded: at most this many jobs exist at a time
    for start in range(0, hosts, step):
        await asyncio.gather(*(one(n) for n in range(start, min(hosts, start + step))))
    return worker.jobs.reporter.fetched


async def measure(hosts: int, concurrency: int) -> None:
    worker = FetchWorker(Config(), concurrency=concurrency, name="bench-worker-hosts")
    worker.jobs.reporter.publisher = Publisher(NullProducer(), worker.cfg.topics)  # type: ignore[arg-type]
    worker.jobs._bind()
    worker.jobs.handler = stub_fetch  # no network: the stub fetch
    gc.collect()
    before = rss_mb()
    started = time.perf_counter()
    fetched = await drive(worker, hosts, concurrency)
    took = time.perf_counter() - started
    gc.collect()
    after = rss_mb()
    gates = len(worker.jobs.holder.gates)
    forgotten = worker.jobs.holder.prune_gates(time.time() + max(GATE_IDLE, 2 * worker.cfg.frontier.fetch_timeout) + 1)
    gc.collect()
    pruned = rss_mb()
    left = len(worker.jobs.holder.gates)
    report("worker_hosts", hosts=hosts, fetched=fetched, gates=gates, forgotten=forgotten, left=left,
           rss_before_mb=round(before, 1), rss_after_mb=round(after, 1), rss_after_prune_mb=round(pruned, 1),
           bytes_per_host=round((after - before) * 2**20 / hosts), seconds=round(took, 1))  # fmt: skip
    if fetched != hosts or forgotten != hosts or worker.jobs.holder.gates:
        raise SystemExit(f"expected {hosts} fetched and forgotten, got {fetched} and {forgotten}")


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, default=256, help="jobs in their fetch at a time (worker slots)")
    args = p.parse_args()
    asyncio.run(measure(size(args, 10_000, 100_000, 1_000_000), args.concurrency))


if __name__ == "__main__":
    main()

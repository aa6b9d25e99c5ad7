"""Benchmark: what watched scopes cost the dispatch loop at 1,000,000 queues (issue 13).

One :class:`~frontier.partition.PartitionFrontier` on a RocksKV in a temporary directory,
1,000,000 URLs on 1,000,000 hosts (one queue each; 1 % also carry a named scope, so their
queues are multi-scope ids), no Kafka: the changelog is a no-op. Then:

- ``scope_row_ms``: one watched scope's row (``scope_row(scope, now)``, the index) and the old
  full scan of ``_queued`` it replaced, per scope;
- ``status_ms``: a status snapshot's partition work: the busiest rows (``scope_rows``) plus
  0 or 100 watched scopes;
- ``jobs_per_s``: ``dispatch()`` rounds for a fixed time, taking a status snapshot every
  ``--interval`` seconds as the service's loop does, alternately with 0 and with 100 watched
  scopes, twice each (each run takes at most 20 % of the URLs: no queue is drained and popped
  again empty here).

    python -m tests.bench.watch [--smoke | --full] [--interval 2.0] [--seconds 20]

Prints figures; asserts nothing about speed.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from frontier.config import AutoThrottleSettings, FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.partition import PartitionFrontier
from frontier.partition.keys import queue_scopes
from frontier.service.rocks import RocksKV
from tests.bench.common import parser, report, size
from topics.schemas import UrlItem

WATCHED = 100
BATCH = 10_000  # URLs per ingest call


def _noop(_key: bytes, _value: bytes | None) -> None:
    pass


def make_frontier(path: Path) -> PartitionFrontier:
    settings = FrontierConfig(robots_obey=False, dispatch_lead=0.0, max_inflight=1_000_000)
    throttle = ThrottleConfig(default=ScopeSettings(delay=0.0, concurrency=1,
                                                    autothrottle=AutoThrottleSettings(enabled=False)))  # fmt: skip
    return PartitionFrontier(0, RocksKV(path), settings, throttle, _noop)


def host(i: int) -> str:
    return f"h{i}.bench{i % 97}.example"


def fill(f: PartitionFrontier, n: int, now: float) -> float:
    """Ingest ``n`` URLs on ``n`` hosts in batches; return the seconds it took."""
    started = time.perf_counter()
    for lo in range(0, n, BATCH):
        batch = []
        for i in range(lo, min(n, lo + BATCH)):
            h = host(i)
            batch.append(UrlItem(url=f"http://{h}/p", host=h, domain=h, scopes=["api"] if i % 100 == 0 else []))
        f.ingest(batch, now)
    return time.perf_counter() - started


def old_scan_row(f: PartitionFrontier, scope: str) -> tuple[int, str]:
    """What scope_row did before the index: scan every queue id (kept here for comparison)."""
    mine = [(n, q) for q, n in f.queues._queued.items() if scope in queue_scopes(q)]
    return sum(n for n, _ in mine), max(mine)[1] if mine else ""


def status_work(f: PartitionFrontier, watched: list[str], now: float) -> float:
    """A status snapshot's partition work (busiest rows + watched rows); return its seconds."""
    started = time.perf_counter()
    f.scope_rows(now, 20)
    for scope in watched:
        f.scope_row(scope, now)
    return time.perf_counter() - started


def dispatch_run(
    f: PartitionFrontier, watched: list[str], seconds: float, interval: float, max_jobs: int
) -> dict[str, float]:
    """Dispatch rounds for ``seconds`` (or ``max_jobs``), a status snapshot every ``interval``:
    jobs/s and the share of the time the snapshots took."""
    jobs = snapshots = 0
    status_s = 0.0
    started = time.perf_counter()
    last_status = started - interval  # the first snapshot at once
    while time.perf_counter() - started < seconds and jobs < max_jobs:
        now = time.time()
        jobs += len(f.dispatch(now).jobs)
        if time.perf_counter() - last_status >= interval:
            last_status = time.perf_counter()
            status_s += status_work(f, watched, now)
            snapshots += 1
    elapsed = time.perf_counter() - started
    return {"jobs_per_s": round(jobs / elapsed), "snapshots": snapshots,
            "status_share": round(status_s / elapsed, 4)}  # fmt: skip


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--interval", type=float, default=2.0, help="seconds between status snapshots")
    p.add_argument("--seconds", type=float, default=10.0, help="dispatch time per run (at most 20 %% of the URLs)")
    args = p.parse_args()
    n = size(args, smoke=20_000, default=1_000_000, full=1_000_000)
    seconds = 2.0 if args.smoke else args.seconds
    rng = random.Random(13)
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        f = make_frontier(Path(tmp) / "p0")
        now = time.time()
        ingest_s = fill(f, n, now)
        multi = [f"{host(i)}#api" for i in range(0, n, 100)]
        watched = rng.sample([host(i) for i in range(n)], WATCHED // 2) + rng.sample(multi, WATCHED // 2)
        report("watch-ingest", queues=len(f.queues), urls=n, seconds=round(ingest_s, 1),
               urls_per_s=round(n / ingest_s))  # fmt: skip

        started = time.perf_counter()
        rows = [f.scope_row(scope, now) for scope in watched]
        indexed_ms = (time.perf_counter() - started) * 1000 / len(watched)
        sample = watched[:: max(1, len(watched) // 4)]  # the old scan is slow: a few scopes only
        started = time.perf_counter()
        old = [old_scan_row(f, scope) for scope in sample]
        scan_ms = (time.perf_counter() - started) * 1000 / len(sample)
        assert [(r.queued) for r in rows[:: max(1, len(watched) // 4)]] == [q for q, _ in old]  # same answer
        report("watch-scope-row", queues=len(f.queues), indexed_ms=round(indexed_ms, 3), old_scan_ms=round(scan_ms, 1),
               old_scan_100_watched_s=round(scan_ms * WATCHED / 1000, 1))  # fmt: skip

        for label, scopes in (("0 watched", []), (f"{WATCHED} watched", watched)):
            status_ms = [status_work(f, scopes, now) * 1000 for _ in range(3)]
            report("watch-status", watched=len(scopes), queues=len(f.queues), status_ms=round(min(status_ms), 1),
                   status_ms_max=round(max(status_ms), 1), mode=label)  # fmt: skip
        # the modes alternate (0, 100, 0, 100): a drift of the machine or the store shows as such;
        # each run takes at most 20 % of the URLs, so no queue is drained and popped again empty
        for run in range(4):
            label, scopes = (("0 watched", []), (f"{WATCHED} watched", watched))[run % 2]
            figures = dispatch_run(f, scopes, seconds, args.interval, max_jobs=n // 5)
            report("watch-dispatch", run=run + 1, watched=len(scopes), queues_at_start=n, interval_s=args.interval,
                   seconds=seconds, mode=label, **figures)  # fmt: skip
        f.kv.close()


if __name__ == "__main__":
    main()

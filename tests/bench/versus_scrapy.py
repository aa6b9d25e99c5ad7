"""Benchmark 6, end to end side by side with Scrapy: the same fleet of loopback sites (each with
a hidden 4 requests/s token bucket, 429 + Retry-After above it, robots.txt disallowing /private),
crawled by this project (1 frontier + 4 workers) and by Scrapy (AutoThrottle, ROBOTSTXT_OBEY,
CONCURRENT_REQUESTS 64) in one run. Each crawler gets a fresh fleet of its own; figures are the
sites' own: pages/s, total time, 429 ratio, politeness violations.

Then sites of every kind (tests/bench/kinds.py: bare 429, Retry-After seconds and HTTP-date,
published RateLimit and X-RateLimit budgets, Crawl-delay, a 503 outage, load-dependent latency,
a staged daily quota), crawled by this project with its defaults and by Scrapy: per kind, the
share of the allowance, the 429 share and the violations the sites saw.

    python -m tests.bench.versus_scrapy [--smoke | --full] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from frontier.demo.stack import Stack, TopicReader, read_pages, wait_until
from tests.bench.common import broker, cpu_per_1000, parser, process_cpu_s, report, size
from tests.bench.fleet import FleetProcess, FleetReport, FleetSpec
from tests.bench.kinds import KindsProcess, KindsSpec

# This project runs twice: with its defaults (nothing configured: a 0.1 s floor per host, one
# request in flight, AutoThrottle from 1 s, adaptation to the servers' signals), and with the
# "fast" profile's settings (no floor, up to 8 in flight, AutoThrottle aiming at 4).
CONFIGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "fast": {"delay": 0.0, "concurrency": 8, "autothrottle": {"start_delay": 0.5, "target_concurrency": 4.0}},
}
WORKERS, WORKER_CONCURRENCY = 4, 64


def figures(fleet: FleetReport, pages: int, crawler_seconds: float) -> dict[str, Any]:
    page_requests = fleet.requests - fleet.robots_requests
    return {
        "pages_200": fleet.pages_200,
        "pages_reported": pages,
        "pages_per_s": round(fleet.pages_200 / fleet.span, 1),
        "site_span_s": round(fleet.span, 1),
        "crawler_total_s": round(crawler_seconds, 1),
        "requests": fleet.requests,
        "status_429": fleet.status_429,
        "ratio_429": round(fleet.status_429 / max(page_requests, 1), 4),
        "sites_with_429": sum(1 for n in fleet.per_site_429 if n),
        "gate_violations": fleet.gate_violations,
        "violations_within_50ms_of_the_429": fleet.violations_within_50ms,
        "disallowed_fetched": fleet.disallowed_fetched,
        "max_concurrency_at_a_site": fleet.max_concurrency,
    }


def frontier_crawl(bootstrap: str, urls: list[str], workdir: Path, throttle: dict[str, Any], timeout: float,
                   workers: int = WORKERS, frontiers: int = 1,
                   cpu: dict[str, Any] | None = None) -> tuple[dict[str, str], float]:  # fmt: skip
    """Crawl ``urls`` with this project; the outcome of every URL and the seconds it took. ``cpu``,
    if given, gets the CPU-seconds per 1,000 pages of the frontier and the workers (each process's
    own accounting) from the first page reported to the last, start-up left out."""
    stack = Stack(bootstrap, workdir, prefix=f"v{uuid.uuid4().hex[:6]}.", partitions=8, throttle=throttle)
    reader: TopicReader | None = None
    try:
        stack.create_topics()
        for i in range(frontiers):
            stack.start_frontier(f"f{i}", own_state=frontiers > 1)
        for i in range(workers):
            stack.start_worker(f"w{i}", concurrency=WORKER_CONCURRENCY)
        reader = TopicReader(stack.client, stack.topics.pages)
        started = time.time()
        producer = Producer(stack.client)
        for url in urls:
            producer.produce(stack.topics.urls, json.dumps({"url": url}).encode())
        producer.flush(60)
        seen: dict[str, str] = {}
        first: tuple[int, dict[str, float]] | None = None  # pages reported, CPU-seconds: at the first page

        def all_reported() -> bool:
            nonlocal first
            stack.check_alive()
            seen.update((p.url, p.outcome) for p in read_pages(reader))  # type: ignore[arg-type]
            if first is None and seen and cpu is not None:
                first = (len(seen), {name: process_cpu_s(p.pid) for name, p in stack.procs.items()})
            return len(seen) >= len(urls)

        wait_until(all_reported, timeout, what="every URL on crawl.pages")
        if cpu is not None and first is not None:
            after = {name: process_cpu_s(p.pid) for name, p in stack.procs.items()}
            cpu.update(cpu_per_1000(first[1], after, len(seen) - first[0]))
        return seen, time.time() - started
    finally:
        if reader is not None:
            reader.close()
        stack.stop_all()


def crawl_with_frontier(bootstrap: str, spec: FleetSpec, workdir: Path, throttle: dict[str, Any], timeout: float,
                        workers: int = WORKERS, frontiers: int = 1) -> dict[str, Any]:  # fmt: skip
    fleet = FleetProcess(spec)
    try:
        cpu: dict[str, Any] = {}
        seen, seconds = frontier_crawl(bootstrap, fleet.urls, workdir, throttle, timeout, workers, frontiers, cpu)
        fetched = sum(1 for o in seen.values() if o == "fetched")
        return {"disallowed_reported": sum(1 for o in seen.values() if o == "disallowed"),
                **figures(fleet.report(), fetched, seconds), **cpu}  # fmt: skip
    finally:
        fleet.close()


def scrapy_crawl(urls: list[str], workdir: Path, timeout: float) -> dict[str, Any]:
    """Crawl ``urls`` with Scrapy in its own process; what it reported."""
    listing, result = workdir / "urls.txt", workdir / "scrapy.json"
    listing.write_text("\n".join(urls))
    subprocess.run([sys.executable, "-m", "tests.bench.scrapy_crawl", str(listing), str(result)], check=True,
                   timeout=timeout)  # fmt: skip
    got: dict[str, Any] = json.loads(result.read_text())
    return got


def crawl_with_scrapy(spec: FleetSpec, workdir: Path, timeout: float) -> dict[str, Any]:
    fleet = FleetProcess(spec)
    try:
        got = scrapy_crawl(fleet.urls, workdir, timeout)
        return {"scrapy": got["scrapy"], "outcomes": {k: v for k, v in got.items() if k.startswith(("status", "fail"))},
                **figures(fleet.report(), got.get("status_200", 0), got["finished"] - got["started"])}  # fmt: skip
    finally:
        fleet.close()


def kinds_side_by_side(bootstrap: str, spec: KindsSpec, workdir: Path, timeout: float) -> None:
    """Sites of every kind: per kind, this project with its defaults, then Scrapy, each on a fresh fleet."""
    for crawler, octet in (("kafka-crawl-frontier (defaults)", spec.second_octet), ("scrapy", spec.second_octet + 1)):
        fleet = KindsProcess(replace(spec, second_octet=octet))
        try:
            here = workdir / f"kinds-{octet}"
            here.mkdir()
            if crawler == "scrapy":
                seconds = scrapy_crawl(fleet.urls, here, timeout)
                took = seconds["finished"] - seconds["started"]
            else:
                _, took = frontier_crawl(bootstrap, fleet.urls, here, {}, timeout)
            for kind, figures_ in fleet.report().items():
                report("versus_scrapy_kinds", crawler=crawler, kind=kind, sites=spec.sites_per_kind,
                       pages_per_site=spec.pages, crawl_s=round(took, 1), **figures_)  # fmt: skip
        finally:
            fleet.close()


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    args = p.parse_args()
    spec = FleetSpec(sites=size(args, smoke=10, default=100, full=500), pages=size(args, smoke=5, default=20, full=20))
    timeout = 120.0 if args.smoke else 900.0
    with broker(args) as bootstrap, tempfile.TemporaryDirectory(prefix="bench-vs-scrapy-") as tmp:
        rates: dict[str, float] = {}
        for octet, (name, throttle) in enumerate(CONFIGS.items(), start=1):
            fleet = FleetSpec(**{**spec.__dict__, "second_octet": octet})
            ours = crawl_with_frontier(bootstrap, fleet, Path(tmp, name), throttle, timeout)
            rates[name] = ours["pages_per_s"]
            report("versus_scrapy", crawler=f"kafka-crawl-frontier ({name})", throttle=throttle, sites=spec.sites,
                   pages_per_site=spec.pages, workers=WORKERS, **ours)  # fmt: skip
        Path(tmp, "scrapy").mkdir()
        fleet = FleetSpec(**{**spec.__dict__, "second_octet": len(CONFIGS) + 1})
        theirs = crawl_with_scrapy(fleet, Path(tmp, "scrapy"), timeout)
        report("versus_scrapy", crawler="scrapy", sites=spec.sites, pages_per_site=spec.pages, **theirs)
        report("versus_scrapy", crawler="ratio", **{f"pages_per_s_{name}_over_scrapy": round(
            rate / max(theirs["pages_per_s"], 1e-9), 2) for name, rate in rates.items()})  # fmt: skip
        kinds = KindsSpec(sites_per_kind=size(args, smoke=1, default=4, full=10),
                          pages=size(args, smoke=20, default=100, full=150), second_octet=len(CONFIGS) + 2)  # fmt: skip
        kinds_side_by_side(bootstrap, kinds, Path(tmp), timeout)


if __name__ == "__main__":
    main()

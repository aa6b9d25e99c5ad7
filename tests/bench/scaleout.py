"""Benchmark 5, scale-out on one broker: the dispatch round trip (benchmark 3) with 1 and 2
frontier processes, then end to end with 1, 2 and 4 worker processes on a fleet of loopback
sites whose limits are out of the way (the crawl is bound by the crawler, not by politeness).

    python -m tests.bench.scaleout [--smoke | --full] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.bench.common import broker, parser, report, size
from tests.bench.dispatch import run_dispatch
from tests.bench.fleet import FleetSpec
from tests.bench.versus_scrapy import crawl_with_frontier

# no politeness limit in the way: several requests at once per host, no delay
UNBOUND = {"delay": 0.0, "concurrency": 4, "autothrottle": {"enabled": False}}


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    args = p.parse_args()
    domains = size(args, smoke=200, default=20_000, full=100_000)
    sites, pages = size(args, smoke=10, default=200, full=500), size(args, smoke=5, default=50, full=50)
    with broker(args) as bootstrap, tempfile.TemporaryDirectory(prefix="bench-scaleout-") as tmp:
        for frontiers in (1, 2):
            rate = run_dispatch(bootstrap, frontiers, domains, per_domain=5 if not args.smoke else 2)
            report("scaleout_dispatch", frontiers=frontiers, domains=domains, jobs_per_s=round(rate))
        for octet, workers in enumerate((1, 2, 4), start=5):
            spec = FleetSpec(sites=sites, pages=pages, rate=1000.0, burst=1000.0, second_octet=octet)
            got = crawl_with_frontier(bootstrap, spec, Path(tmp, f"w{workers}"), UNBOUND, 600.0, workers=workers)
            report("scaleout_e2e", frontiers=1, workers=workers, sites=sites, pages=got["pages_200"],
                   pages_per_s=got["pages_per_s"], crawler_total_s=got["crawler_total_s"])  # fmt: skip


if __name__ == "__main__":
    main()

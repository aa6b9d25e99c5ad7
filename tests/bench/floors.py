"""Server-stated intervals under load (THROTTLING.md v2 §9): a few hundred local sites, each with
robots.txt `Crawl-delay: 0.5`, crawled at once by this project with its defaults; every site counts
the gaps between two of its requests that came in under its Crawl-delay. The whole fleet shares
this 2-core machine with the broker, the frontier and the workers, so the event loops are busy:
the point is that the gaps hold when the crawler is loaded, not only when it is idle.

Beside pages/s: the CPU-seconds per 1,000 pages of the frontier, the workers and their sum (each
process's own accounting, from the first page reported to the last), and a calibration (a fixed
CPU task's seconds and the load) taken before the crawl.

    python -m tests.bench.floors [--smoke | --full] [--sites N] [--pages N] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from tests.bench.common import broker, calibration, parser, report, size
from tests.bench.kinds import KindsProcess, KindsSpec
from tests.bench.versus_scrapy import frontier_crawl


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--sites", type=int, default=0, help="this many sites instead of the size's")
    p.add_argument("--pages", type=int, default=0, help="this many pages per site instead of the size's")
    args = p.parse_args()
    spec = KindsSpec(sites_per_kind=args.sites or size(args, smoke=5, default=300, full=500),
                     pages=args.pages or size(args, smoke=4, default=12, full=20), second_octet=21,
                     kinds=("robots",))  # fmt: skip
    with broker(args) as bootstrap, tempfile.TemporaryDirectory(prefix="bench-floors-") as tmp:
        calibrated = calibration()
        fleet = KindsProcess(spec)
        cpu: dict[str, Any] = {}
        try:
            seen, took = frontier_crawl(bootstrap, fleet.urls, Path(tmp), {}, timeout=900.0, cpu=cpu)
            figures = fleet.report()["robots"]
        finally:
            fleet.close()
        fetched = sum(1 for o in seen.values() if o == "fetched")
        report("floors", sites=spec.sites_per_kind, pages_per_site=spec.pages, crawl_delay=0.5, crawl_s=round(took, 1),
               pages_per_s=round(fetched / took, 1), **cpu, **calibrated, **figures)  # fmt: skip


if __name__ == "__main__":
    main()

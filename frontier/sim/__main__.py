"""``python -m frontier.sim [--quick | --budget-phases]``: print the simulator's tables (markdown)
for docs/BENCHMARKS.md."""

from __future__ import annotations

import argparse
import time

from frontier.config import ScopeSettings
from frontier.sim.grid import LATENCIES, RATES, SIGNALS, Row, budget_phases, kinds, token_bucket_grid


def _line(row: Row) -> str:
    r = row.result
    rec = f"{r.recovery:.1f}" if r.recovery is not None else "-"
    share = row.detail or f"{r.share * 100:.0f} %"  # budgets: per period, of what it serves before refusing
    return (f"| {row.scenario} | {share} | {r.limit_share * 100:.1f} % | {r.inside_windows} | "
            f"{r.under_floor} | {rec} | {row.required} | {'yes' if row.met else '**no**'} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a coarse grid (CI smoke size)")
    parser.add_argument("--budget-phases", action="store_true",
                        help="only seed 003's budgets, entered part way into 20 s to day-long periods")  # fmt: skip
    args = parser.parse_args()
    base = ScopeSettings()
    rates, latencies = ((0.5, 5.0, 50.0), (0.01, 0.5)) if args.quick else (RATES, LATENCIES)
    started = time.perf_counter()
    print("| scenario | share of allowance | 429 share | inside windows | under floor | recovery s | required | met |")
    print("|---|---|---|---|---|---|---|---|")
    if args.budget_phases:
        rows = list(budget_phases(base))
    else:
        rows = [*token_bucket_grid(base, rates, latencies, SIGNALS), *kinds(base)]
    for row in rows:
        print(_line(row))
    met = sum(row.met for row in rows)
    print(f"\n{met} of {len(rows)} scenarios met their required result ({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()

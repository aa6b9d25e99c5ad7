"""Shared plumbing for the benchmark programs: a broker (a private one unless --bootstrap is
given), argument parsing with small/smoke/full sizes, figure printing, a calibration (the
machine's speed and load at the time) and the CPU-seconds the project's processes spent, from
their own accounting (``/proc/PID/stat``).

Benchmarks are programs that print figures; they assert nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from deploy.kafka import LocalKafka, free_port


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--smoke", action="store_true", help="tiny sizes: proves the benchmark runs (CI)")
    size.add_argument("--full", action="store_true", help="the full sizes named in docs/BENCHMARKS.md")
    p.add_argument("--bootstrap", default="", help="use this broker instead of starting a private one")
    return p


def size(args: argparse.Namespace, smoke: int, default: int, full: int) -> int:
    return smoke if args.smoke else full if args.full else default


@contextmanager
def broker(args: argparse.Namespace) -> Iterator[str]:
    if args.bootstrap:
        yield args.bootstrap
        return
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as tmp:
        kafka = LocalKafka(home=Path(tmp), port=free_port(), controller_port=free_port())
        try:
            yield kafka.up(timeout=180)
        finally:
            kafka.down()


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def report(name: str, **figures: Any) -> None:
    """One JSON line per result, easy to paste into docs/BENCHMARKS.md and to parse."""
    print(json.dumps({"bench": name, "at": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), **figures}),
          flush=True)  # fmt: skip


def calibration() -> dict[str, float]:
    """The machine's speed now (seconds of a fixed CPU task) and its load, printed beside the figures."""
    t0 = time.perf_counter()
    sum(i * i for i in range(2_000_000))
    return {"calibration_s": round(time.perf_counter() - t0, 3), "load_1min": round(os.getloadavg()[0], 2)}


def process_cpu_s(pid: int) -> float:
    """User + system CPU-seconds of ``pid`` and its live descendants, from their own accounting
    (``/proc/PID/stat`` utime + stime, Linux); 0 for a process that is gone."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent, cpu seconds)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        # after the command: state ppid ... utime (14th field of the line) stime (15th)
        stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    tree, total, seen = [pid], 0.0, set()
    while tree:
        here = tree.pop()
        if here in seen or here not in stats:
            continue
        seen.add(here)
        total += stats[here][1]
        tree.extend(child for child, (parent, _) in stats.items() if parent == here)
    return total


def role_of(name: str) -> str:
    """The role of a benchmark's process by its name in the stack: frontier, router or workers."""
    return "router" if name.startswith("router") else "frontier" if name.startswith("f") else "workers"


def cpu_per_1000(before: dict[str, float], after: dict[str, float], pages: int) -> dict[str, Any]:
    """CPU-seconds per 1,000 pages of each role (frontier, workers, router) and their sum, from two
    readings of each process's CPU-seconds by name; the seconds of each process beside them."""
    spent = {name: max(after[name] - before.get(name, 0.0), 0.0) for name in after}
    roles: dict[str, float] = {}
    for name, seconds in spent.items():
        roles[role_of(name)] = roles.get(role_of(name), 0.0) + seconds
    per = 1000.0 / max(pages, 1)
    return {"cpu_pages": pages, **{f"cpu_s_per_1000_pages_{r}": round(s * per, 3) for r, s in sorted(roles.items())},
            "cpu_s_per_1000_pages_sum": round(sum(roles.values()) * per, 3),
            "cpu_s": {name: round(s, 2) for name, s in sorted(spent.items())}}  # fmt: skip


def produce_urls(bootstrap: str, topic: str, n: int, domains: int, start: int = 0) -> None:
    """``n`` distinct URLs spread evenly over ``domains`` registrable domains, unkeyed."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    for i in range(start, start + n):
        while True:
            try:
                producer.produce(topic, f"http://d{i % domains}.bench.example/p{i}".encode())
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)


def frontier_totals(bootstrap: str, status_topic: str) -> dict[str, int]:
    return snapshot(bootstrap, status_topic)[1]


def snapshot(bootstrap: str, status_topic: str) -> tuple[float, dict[str, int]]:
    """(time of the newest instance snapshot, totals summed over the live instances)."""
    from frontier.client.feed import read_status
    from frontier.client.status import overview

    ov = overview(read_status({"bootstrap.servers": bootstrap, "log_level": "3"}, status_topic, max_age=10))
    return ov.at, ov.totals


def measure_rate(bootstrap: str, status_topic: str, key: str, start: int, n: int, timeout: float,
                 alive: Any = None, before: tuple[float, int] | None = None) -> float:  # fmt: skip
    """Per second of ``key`` over the middle of a run of ``n`` (from ``start``), timed by the
    frontier's own snapshots: from the last snapshot below 5 % (or ``before``, a snapshot taken
    before the run began) to the first at or above 95 %. The poll's own latency is left out."""
    return rate_of(lambda: snapshot(bootstrap, status_topic), key, start, n, timeout, alive, before)


def rate_of(snapshots: Callable[[], tuple[float, dict[str, int]]], key: str, start: int, n: int, timeout: float,
            alive: Callable[[], None] | None = None, before: tuple[float, int] | None = None) -> float:  # fmt: skip
    """:func:`measure_rate` over any source of (time, totals) snapshots."""
    lo, hi = start + 0.05 * n, start + 0.95 * n
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if alive is not None:
            alive()
        at, totals = snapshots()
        value = totals.get(key, 0)
        if at <= 0:
            pass  # no live instance has published yet
        elif value < lo:
            before = (at, value)
        elif value >= hi and before is not None and at > before[0]:
            return (value - before[1]) / (at - before[0])
        time.sleep(0.1)
    raise TimeoutError(f"{key} did not reach {hi:.0f} within {timeout:.0f}s")


def wait_total(bootstrap: str, status_topic: str, key: str, target: int, timeout: float, alive: Any = None) -> float:
    """Poll the frontier's totals until ``key`` reaches ``target``; return when it did (perf_counter)."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if alive is not None:
            alive()
        if frontier_totals(bootstrap, status_topic).get(key, 0) >= target:
            return time.perf_counter()
        time.sleep(0.2)
    raise TimeoutError(f"{key} did not reach {target} within {timeout:.0f}s")

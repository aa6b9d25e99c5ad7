"""What the frontier's and the workers' metrics share (docs/METRICS.md): the classes of a fetch's
outcome, the latency buckets, the process's own gauges (RSS, CPU, open files, the memory bound
they are read against), and the process's cyclic-collector settings (:func:`tune_collector`).
Workers import this module and nothing else of the service's observability."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

FETCH_CLASSES = ("2xx", "3xx", "4xx", "429", "5xx", "error", "expired", "disallowed", "skipped")
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
NO_LIMIT = 1 << 60  # a cgroup memory limit this high (or "max") is no limit


def tune_collector(young: int | None = None) -> None:
    """Python's cyclic collector, set for a long-running process that allocates a few objects per
    job and frees nearly all of them by their reference counts: what start-up made (modules,
    settings, clients) is frozen out of every collection, so each pass looks at the jobs' garbage
    only; ``young``: allocations between two young collections (CPython's default: 700), else
    left as it is (issue 39: measured in docs/BENCHMARKS.md, "Issue 39, session 2")."""
    gc.freeze()
    if young is not None:
        _, middle, old = gc.get_threshold()
        gc.set_threshold(young, middle, old)


def fetch_class(outcome: str, status: int) -> str:
    if outcome in ("expired", "disallowed", "skipped"):
        return outcome
    if outcome == "error" or status <= 0:
        return "error"
    if status == 429:
        return "429"
    return f"{min(max(status // 100, 2), 5)}xx"


def _cgroup_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit() or int(text) >= NO_LIMIT:
        return None  # "max", or v1's "unlimited" (a page-rounded 2**63)
    return int(text)


def memory_limit(root: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc")) -> int:
    """The memory this process may use: the lowest limit of its memory cgroup and those above it
    (v2 ``memory.max``, v1 ``memory.limit_in_bytes``: a container's, a systemd unit's MemoryMax),
    else the machine's memory (``MemTotal``)."""
    limits: list[int] = []
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if controllers == "":
            base, name = root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        parts = [p for p in rel.split("/") if p]
        for depth in range(len(parts), -1, -1):  # the cgroup, then each one above it (a container sees /)
            found = _cgroup_limit(base.joinpath(*parts[:depth], name))
            if found is not None:
                limits.append(found)
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                limits.append(int(line.split()[1]) * 1024)
                break
    except (OSError, ValueError, IndexError):
        pass
    return min(limits) if limits else 0


class _Memory(Collector):
    """The process's memory bound, read at each scrape (a container's limit may be changed)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "crawl_process_memory_limit_bytes",
            "memory this process may use: its cgroup's limit (container, systemd unit), else the machine's memory",
            value=memory_limit(),
        )


def process_metrics(registry: CollectorRegistry) -> None:
    """process_* (RSS, CPU, open files) and the memory bound they are read against (Linux)."""
    if os.path.isdir("/proc/self"):
        ProcessCollector(registry=registry)
        registry.register(_Memory())

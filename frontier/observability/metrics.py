"""Prometheus metrics of the frontier and the workers (documented in docs/METRICS.md).

Label values are bounded by construction: status classes, event kinds, cause classes and topic
roles are fixed sets. No label ever carries a host, URL or scope name (millions of them). The one
label that carries a name is ``crawl``: the busiest :data:`~frontier.observability.crawls.SHOWN_CRAWLS`
crawls by name, the others added up as ``other``, whatever their number (and on a worker, the one
crawl it serves). What is known per host or scope is counted here, never named: the hosts a
worker sees refusing it (:class:`HostWatch`, bounded), the scopes whose budget is spent.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from frontier.core.causes import CAUSES  # the classes of delay changes: the cause label
from frontier.observability.crawls import shown
from topics.schemas import DEFAULT_CRAWL, CrawlStatus

FETCH_CLASSES = ("2xx", "3xx", "4xx", "429", "5xx", "error", "expired", "disallowed", "skipped")
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIGNALS = ("limit", "outage")  # why a host refuses: 429 (a limit), or 5xx / no answer (an outage)
REFUSING_RUN = 3  # refusals in a run before its host counts as refusing
REFUSING_STALE = 3900.0  # a run not answered for this long is forgotten (a gate holds a host up to 1 h)
ROBOTS_WINDOW = 900.0  # hosts counted by their latest robots.txt fetch over this many seconds
MAX_WATCHED_HOSTS = 10_000  # hosts each of a worker's two tables keeps (the least recently answered go first)
MAX_BUDGET_SCOPES = 10_000  # scopes a frontier instance follows for the budget gauge (beyond: not counted)
NO_LIMIT = 1 << 60  # a cgroup memory limit this high (or "max") is no limit
LOOP_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


def fetch_class(outcome: str, status: int) -> str:
    if outcome in ("expired", "disallowed", "skipped"):
        return outcome
    if outcome == "error" or status <= 0:
        return "error"
    if status == 429:
        return "429"
    return f"{min(max(status // 100, 2), 5)}xx"


def refusal(outcome: str, status: int) -> str | None:
    """What an answer says of its host: ``limit`` (429), ``outage`` (5xx, or no response at all),
    None (it answered: 2xx, 3xx, 4xx)."""
    if status == 429:
        return "limit"
    if status >= 500 or (outcome == "error" and status <= 0):
        return "outage"
    return None


@dataclass(slots=True)
class _Run:
    """A host's current run of refusals: it began at ``since`` and lasts while they are at least
    as many as the answers that came between them."""

    since: float
    last: float
    limit: int = 0
    outage: int = 0
    ok: int = 0


class HostWatch:
    """What a worker knows of the hosts it fetches, counted and never named (a host's jobs go to
    one worker of its crawl at a time, so a host is watched where its answers arrive):

    - hosts refusing it: a run of refusals begins at a 429, 5xx or unanswered request and ends once
      more requests were answered than refused since it began; a run of ``REFUSING_RUN`` refusals
      or more counts, as ``limit`` when 429s are at least half of them, else ``outage``; a run that
      got no answer for ``REFUSING_STALE`` seconds (the host's jobs went to another worker) is
      forgotten;
    - hosts by their latest robots.txt fetch in the last ``ROBOTS_WINDOW`` seconds: ``failing``
      (429, 5xx, no answer: the host's URLs wait, all disallowed until a retry answers) or
      ``answered``.

    Each table keeps at most ``size`` hosts, the least recently answered dropped first. Thread-safe:
    fetches are noted on the worker's loop, read by the metrics server's thread."""

    def __init__(self, size: int = MAX_WATCHED_HOSTS) -> None:
        self.size = size
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._robots: OrderedDict[str, tuple[float, bool]] = OrderedDict()
        self._lock = threading.Lock()

    def answer(self, host: str, kind: str, signal: str | None, now: float) -> None:
        with self._lock:
            if kind == "robots":
                self._robots[host] = (now, signal is not None)
                self._robots.move_to_end(host)
                if len(self._robots) > self.size:
                    self._robots.popitem(last=False)
            run = self._runs.get(host)
            if signal is None:
                if run is not None:
                    run.ok += 1
                    if run.ok > run.limit + run.outage:
                        del self._runs[host]
                return
            if run is None:
                run = self._runs[host] = _Run(since=now, last=now)
                if len(self._runs) > self.size:
                    self._runs.popitem(last=False)
            run.last = now
            self._runs.move_to_end(host)
            if signal == "limit":
                run.limit += 1
            else:
                run.outage += 1

    def refusing(self, now: float) -> dict[str, int]:
        """Hosts refusing now, by signal (runs not answered for ``REFUSING_STALE`` are dropped)."""
        counts = dict.fromkeys(SIGNALS, 0)
        with self._lock:
            while self._runs:
                host, first = next(iter(self._runs.items()))
                if now - first.last < REFUSING_STALE:
                    break
                del self._runs[host]
            for run in self._runs.values():
                if run.limit + run.outage >= REFUSING_RUN:
                    counts["limit" if run.limit >= run.outage else "outage"] += 1
        return counts

    def robots(self, now: float) -> dict[str, int]:
        """Hosts by their latest robots.txt fetch of the last ``ROBOTS_WINDOW`` seconds."""
        counts = {"failing": 0, "answered": 0}
        with self._lock:
            while self._robots:
                host, (at, _) = next(iter(self._robots.items()))
                if now - at < ROBOTS_WINDOW:
                    break
                del self._robots[host]
            for _, failed in self._robots.values():
                counts["failing" if failed else "answered"] += 1
        return counts


class _Hosts(Collector):
    def __init__(self, hosts: HostWatch) -> None:
        self._hosts = hosts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = time.monotonic()
        refusing = GaugeMetricFamily(
            "crawl_worker_refusing_hosts",
            "hosts in a run of refusals at this worker (3+, at least as many as answers): 429s (limit) or 5xx and "
            "unanswered requests (outage)",
            labels=["signal"],
        )
        for signal, n in self._hosts.refusing(now).items():
            refusing.add_metric([signal], n)
        yield refusing
        robots = GaugeMetricFamily(
            "crawl_worker_robots_hosts",
            "hosts by their latest robots.txt fetch at this worker in the last 15 minutes: failing or answered",
            labels=["state"],
        )
        for state, n in self._hosts.robots(now).items():
            robots.add_metric([state], n)
        yield robots


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


def _process_metrics(registry: CollectorRegistry) -> None:
    """process_* (RSS, CPU, open files) and the memory bound they are read against (Linux)."""
    if os.path.isdir("/proc/self"):
        ProcessCollector(registry=registry)
        registry.register(_Memory())


class _Totals(Collector):
    """Gauges read at scrape time from the frontier's owned partitions."""

    def __init__(self, read: Callable[[], Mapping[str, int]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        totals = self._read()
        simple = {
            "queued": ("crawl_frontier_queued_urls", "URLs queued in the partitions this instance owns"),
            "inflight": ("crawl_frontier_inflight_jobs", "jobs leased to workers and not yet answered"),
            "hosts_due": ("crawl_frontier_scheduled_queues", "queues in the due-time heap"),
            "partitions": ("crawl_frontier_partitions", "partitions this instance owns"),
            "partitions_unserved": (
                "crawl_frontier_partitions_unserved",
                "partitions assigned to this instance that it cannot serve (see status)",
            ),
            "gates_active": ("crawl_frontier_gates_active", "scopes held by a server gate right now"),
            "topic_partitions": (
                "crawl_frontier_topic_partitions",
                "partitions of the frontier's topics (topics.partitions): every one must be served by an instance",
            ),
        }
        for key, (name, doc) in simple.items():
            yield GaugeMetricFamily(name, doc, value=totals.get(key, 0))
        budgets = GaugeMetricFamily(
            "crawl_frontier_budget_scopes",
            "scopes of the owned partitions with a budget not told (learned), and those whose budget is spent "
            "until their period turns (spent)",
            labels=["state"],
        )
        for state in ("learned", "spent"):
            budgets.add_metric([state], totals.get(f"budget_{state}", 0))
        yield budgets
        events = GaugeMetricFamily(
            "crawl_frontier_partition_events",
            "cumulative events of the owned partitions (stored with each partition, so they move with it)",
            labels=["event"],
        )
        for event in ("ingested", "duplicates", "dispatched", "completed", "retried", "returned", "lost", "disallowed",
                      "dropped", "revisits", "forgotten", "recrawls", "skipped", "robots_fetched",
                      "sitemaps_found"):  # fmt: skip
            events.add_metric([event], totals.get(event, 0))
        yield events


class _Crawls(Collector):
    """Per-crawl gauges read at scrape time: the busiest crawls by name, the rest as ``other``."""

    def __init__(self, read: Callable[[], list[CrawlStatus]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows = shown(self._read())
        urls = GaugeMetricFamily("crawl_frontier_crawl_urls", "a crawl's URLs in the owned partitions, by state",
                                 labels=["crawl", "state"])  # fmt: skip
        for row in rows:
            for state in ("queued", "inflight", "completed", "fetched", "failed", "disallowed", "dropped", "revisits"):
                urls.add_metric([row.crawl, state], getattr(row, state))
        yield urls
        workers = GaugeMetricFamily("crawl_frontier_crawl_workers", "members of a crawl's worker group (-1: not known)",
                                    labels=["crawl"])  # fmt: skip
        for row in rows:
            workers.add_metric([row.crawl], row.workers)
        yield workers
        paused = GaugeMetricFamily("crawl_frontier_crawl_paused", "1 while the crawl is paused (crawl pause)",
                                   labels=["crawl"])  # fmt: skip
        for row in rows:
            paused.add_metric([row.crawl], int(row.paused))
        yield paused


class FrontierMetrics:
    def __init__(
        self, totals: Callable[[], Mapping[str, int]], crawls: Callable[[], list[CrawlStatus]] | None = None
    ) -> None:
        self.registry = CollectorRegistry()
        self.jobs = Counter("crawl_frontier_jobs_dispatched", "fetch jobs sent to workers by this process",
                            ["kind"], registry=self.registry)  # fmt: skip
        self.delay_changes = Counter("crawl_frontier_delay_changes", "scope delay or gate changes, by cause class",
                                     ["cause"], registry=self.registry)  # fmt: skip
        self.feedback = Counter("crawl_frontier_feedback", "worker results applied, by fetch class", ["class"],
                                registry=self.registry)  # fmt: skip
        self.lag = Gauge("crawl_frontier_consumer_lag", "records not yet consumed in the owned partitions",
                         ["topic"], registry=self.registry)  # fmt: skip
        # the event loop (frontier.observability.loop): dispatch, input and answers share it
        self.loop_late = Histogram("crawl_frontier_loop_late_seconds", "how late the event loop ran a timer "
                                   "(asked every 10 ms): dispatch, input and answers waited that long",
                                   buckets=LOOP_BUCKETS, registry=self.registry)  # fmt: skip
        self.loop_busy = Histogram("crawl_frontier_loop_busy_seconds", "CPU time of the event loop's thread "
                                   "between two looks at it (10 ms apart when nothing holds it): the part of a "
                                   "stall the frontier's own code caused", buckets=LOOP_BUCKETS,
                                   registry=self.registry)  # fmt: skip
        self.loop_late_max = Gauge("crawl_frontier_loop_late_max_seconds",
                                   "the largest crawl_frontier_loop_late_seconds of the last 10 to 20 s",
                                   registry=self.registry)  # fmt: skip
        self.loop_busy_max = Gauge("crawl_frontier_loop_busy_max_seconds",
                                   "the largest crawl_frontier_loop_busy_seconds of the last 10 to 20 s",
                                   registry=self.registry)  # fmt: skip
        self.lost = Counter("crawl_frontier_leases_lost", "leases that reached their deadline without feedback "
                            "in this process's partitions (each URL queued again)",
                            registry=self.registry)  # fmt: skip
        self.registry.register(_Totals(totals))
        if crawls is not None:
            self.registry.register(_Crawls(crawls))
        _process_metrics(self.registry)
        for c in CAUSES:
            self.delay_changes.labels(c)
        for kind in ("page", "robots"):
            self.jobs.labels(kind)
        for cls in FETCH_CLASSES:
            self.feedback.labels(cls)
        self._lost_seen: dict[int, int] = {}  # partition -> its stored lost count when last looked at here
        # scopes whose delay a budget changed here (the budget gauge reads their states), oldest first
        self.budgeted: OrderedDict[str, None] = OrderedDict()

    def count_lost(self, partitions: Mapping[int, int]) -> None:
        """Each owned partition's stored count of lost leases (``{partition: count}``, at every
        status snapshot and scrape) into this process's counter: what a partition lost since this
        instance last looked at it. A partition that just came here starts from its count (its
        earlier losses were counted where they happened)."""
        for p, n in partitions.items():
            before = self._lost_seen.get(p)
            if before is not None and n > before:
                self.lost.inc(n - before)
            self._lost_seen[p] = n
        for p in [p for p in self._lost_seen if p not in partitions]:
            del self._lost_seen[p]

    def note_budget(self, scope: str) -> None:
        """A budget changed ``scope``'s delay: count it in the budget gauge while it has a budget
        (at most ``MAX_BUDGET_SCOPES``: beyond, new ones are not counted)."""
        if scope in self.budgeted:
            self.budgeted.move_to_end(scope)
        elif len(self.budgeted) < MAX_BUDGET_SCOPES:
            self.budgeted[scope] = None


class WorkerMetrics:
    def __init__(self, crawl: str = DEFAULT_CRAWL) -> None:
        self.registry = CollectorRegistry()
        self.fetches = Counter("crawl_worker_fetches", "fetches finished, by class (2xx … 5xx, 429, error, expired)",
                               ["class", "kind"], registry=self.registry)  # fmt: skip
        self.latency = Histogram("crawl_worker_fetch_latency_seconds", "request sent → response headers",
                                 buckets=LATENCY_BUCKETS, registry=self.registry)  # fmt: skip
        self.inflight = Gauge("crawl_worker_inflight", "fetches in progress", registry=self.registry)
        self.held = Gauge("crawl_worker_held_jobs", "jobs received and waiting for their slot (not_before)",
                          registry=self.registry)  # fmt: skip
        # (labelled with the crawl this worker serves: one value per worker)
        self.lag = Gauge("crawl_worker_consumer_lag", "jobs of its crawl's jobs topic not yet consumed by this worker",
                         ["crawl"], registry=self.registry).labels(crawl)  # fmt: skip
        self.unpublished = Counter("crawl_worker_follow_ups_unpublished",
                                   "follow-ups (links, redirects, a spider's requests) Kafka did not take: lost, "
                                   "their job reported as an error", registry=self.registry)  # fmt: skip
        self.hosts = HostWatch()
        self.registry.register(_Hosts(self.hosts))
        _process_metrics(self.registry)
        for cls in FETCH_CLASSES:
            self.fetches.labels(cls, "page")

    def observe(self, kind: str, outcome: str, status: int, latency: float, host: str = "") -> None:
        self.fetches.labels(fetch_class(outcome, status), kind).inc()
        if latency > 0:
            self.latency.observe(latency)
        if host and outcome in ("fetched", "error"):  # an answer, or none: not a job skipped or handed back
            self.hosts.answer(host, kind, refusal(outcome, status), time.monotonic())


def lag(consumer: Any, partitions: list[Any]) -> int:
    """Sum of (high watermark - position) over ``partitions`` (cached watermarks: no broker call)."""
    total = 0
    for tp in consumer.position(partitions):
        if tp.offset < 0:
            continue
        _, high = consumer.get_watermark_offsets(tp, cached=True)
        if high >= 0:
            total += max(0, high - tp.offset)
    return total

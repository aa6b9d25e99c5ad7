"""A worker's Prometheus metrics (docs/METRICS.md): its fetches by class, latency, jobs in flight
and held, its consumer lag, and the hosts it sees refusing it (:class:`HostWatch`, counted and
never named: no label carries a host, URL or scope)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from frontier.core.lru import LRU
from frontier.observability.process import FETCH_CLASSES, LATENCY_BUCKETS, fetch_class, process_metrics
from topics.schemas import DEFAULT_CRAWL
from workers.api.clock import SYSTEM

SIGNALS = ("limit", "outage")  # why a host refuses: 429 (a limit), or 5xx / no answer (an outage)
REFUSING_RUN = 3  # refusals in a run before its host counts as refusing
REFUSING_STALE = 3900.0  # a run not answered for this long is forgotten (a gate holds a host up to 1 h)
ROBOTS_WINDOW = 900.0  # hosts counted by their latest robots.txt fetch over this many seconds
MAX_WATCHED_HOSTS = 10_000  # hosts each of a worker's two tables keeps (the least recently answered go first)


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
        self._runs: LRU[str, _Run] = LRU(size)  # least recently answered first
        self._robots: LRU[str, tuple[float, bool]] = LRU(size)
        self._lock = threading.Lock()

    def answer(self, host: str, kind: str, signal: str | None, now: float) -> None:
        with self._lock:
            if kind == "robots":
                self._robots.put(host, (now, signal is not None))
            run = self._runs.peek(host)
            if signal is None:
                if run is not None:
                    run.ok += 1
                    if run.ok > run.limit + run.outage:
                        del self._runs[host]
                return
            if run is None:
                run = _Run(since=now, last=now)
                self._runs.put(host, run)
            else:
                self._runs.get(host)  # (read: now the most recently answered)
            run.last = now
            if signal == "limit":
                run.limit += 1
            else:
                run.outage += 1

    def refusing(self, now: float) -> dict[str, int]:
        """Hosts refusing now, by signal (runs not answered for ``REFUSING_STALE`` are dropped)."""
        counts = dict.fromkeys(SIGNALS, 0)
        with self._lock:
            while (oldest := self._runs.oldest()) is not None and now - oldest[1].last >= REFUSING_STALE:
                del self._runs[oldest[0]]
            for run in self._runs.values():
                if run.limit + run.outage >= REFUSING_RUN:
                    counts["limit" if run.limit >= run.outage else "outage"] += 1
        return counts

    def robots(self, now: float) -> dict[str, int]:
        """Hosts by their latest robots.txt fetch of the last ``ROBOTS_WINDOW`` seconds."""
        counts = {"failing": 0, "answered": 0}
        with self._lock:
            while (first := self._robots.oldest()) is not None and now - first[1][0] >= ROBOTS_WINDOW:
                del self._robots[first[0]]
            for _, failed in self._robots.values():
                counts["failing" if failed else "answered"] += 1
        return counts


class _Hosts(Collector):
    def __init__(self, hosts: HostWatch, clock: Callable[[], float]) -> None:
        self._hosts = hosts
        self._clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self._clock()
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


class WorkerMetrics:
    def __init__(self, crawl: str = DEFAULT_CRAWL, clock: Callable[[], float] = SYSTEM.monotonic) -> None:
        self._clock = clock  # monotonic: when hosts answered
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
        self.registry.register(_Hosts(self.hosts, clock))
        process_metrics(self.registry)
        # each (class, kind)'s counter, looked up once (labels() checks and locks at every call)
        self._fetched: dict[tuple[str, str], Counter] = {}
        for cls in FETCH_CLASSES:
            self.fetches.labels(cls, "page")

    def observe(self, kind: str, outcome: str, status: int, latency: float, host: str = "") -> None:
        key = (fetch_class(outcome, status), kind)
        counter = self._fetched.get(key)
        if counter is None:  # (a few classes times the job kinds)
            counter = self._fetched[key] = self.fetches.labels(*key)
        counter.inc()
        if latency > 0:
            self.latency.observe(latency)
        if host and outcome in ("fetched", "error"):  # an answer, or none: not a job skipped or handed back
            self.hosts.answer(host, kind, refusal(outcome, status), self._clock())


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

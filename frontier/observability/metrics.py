"""Prometheus metrics of the frontier service (documented in docs/METRICS.md; a worker's are in
:mod:`workers.api.metrics`, what both share in :mod:`frontier.observability.process`).

Label values are bounded by construction: status classes, event kinds, cause classes and topic
roles are fixed sets. No label ever carries a host, URL or scope name (millions of them). The one
label that carries a name is ``crawl``: the busiest :data:`~frontier.client.crawls.SHOWN_CRAWLS`
crawls by name, the others added up as ``other``, whatever their number (and on a worker, the one
crawl it serves). What is known per host or scope is counted here, never named: the scopes whose
budget is spent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from frontier.client.crawls import shown
from frontier.core.causes import CAUSES  # the classes of delay changes: the cause label
from frontier.core.lru import LRU
from frontier.observability.process import FETCH_CLASSES, process_metrics
from topics.schemas import CrawlStatus

MAX_BUDGET_SCOPES = 10_000  # scopes a frontier instance follows for the budget gauge (beyond: not counted)
LOOP_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


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
        process_metrics(self.registry)
        for c in CAUSES:
            self.delay_changes.labels(c)
        for kind in ("page", "robots"):
            self.jobs.labels(kind)
        for cls in FETCH_CLASSES:
            self.feedback.labels(cls)
        self._lost_seen: dict[int, int] = {}  # partition -> its stored lost count when last looked at here
        # scopes whose delay a budget changed here (the budget gauge reads their states), oldest first
        self.budgeted: LRU[str, None] = LRU(MAX_BUDGET_SCOPES)

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
            self.budgeted.get(scope)  # (now the most recent)
        elif len(self.budgeted) < MAX_BUDGET_SCOPES:
            self.budgeted.put(scope, None)

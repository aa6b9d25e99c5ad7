"""Prometheus metrics of the frontier and the workers (documented in docs/METRICS.md).

Label values are bounded by construction: status classes, event kinds, cause classes and topic
roles are fixed sets. No label ever carries a host, URL or scope name (millions of them). The one
label that carries a name is ``crawl``: the busiest :data:`~frontier.observability.crawls.SHOWN_CRAWLS`
crawls by name, the others added up as ``other``, whatever their number.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from frontier.core.causes import CAUSES  # the classes of delay changes: the cause label
from frontier.observability.crawls import shown
from topics.schemas import CrawlStatus

FETCH_CLASSES = ("2xx", "3xx", "4xx", "429", "5xx", "error", "expired", "disallowed", "skipped")
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def fetch_class(outcome: str, status: int) -> str:
    if outcome in ("expired", "disallowed", "skipped"):
        return outcome
    if outcome == "error" or status <= 0:
        return "error"
    if status == 429:
        return "429"
    return f"{min(max(status // 100, 2), 5)}xx"


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
        }
        for key, (name, doc) in simple.items():
            yield GaugeMetricFamily(name, doc, value=totals.get(key, 0))
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
        self.registry.register(_Totals(totals))
        if crawls is not None:
            self.registry.register(_Crawls(crawls))
        for c in CAUSES:
            self.delay_changes.labels(c)
        for kind in ("page", "robots"):
            self.jobs.labels(kind)


class WorkerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.fetches = Counter("crawl_worker_fetches", "fetches finished, by class (2xx … 5xx, 429, error, expired)",
                               ["class", "kind"], registry=self.registry)  # fmt: skip
        self.latency = Histogram("crawl_worker_fetch_latency_seconds", "request sent → response headers",
                                 buckets=LATENCY_BUCKETS, registry=self.registry)  # fmt: skip
        self.inflight = Gauge("crawl_worker_inflight", "fetches in progress", registry=self.registry)
        self.held = Gauge("crawl_worker_held_jobs", "jobs received and waiting for their slot (not_before)",
                          registry=self.registry)  # fmt: skip
        self.lag = Gauge("crawl_worker_consumer_lag", "jobs on crawl.jobs not yet consumed by this worker",
                         registry=self.registry)  # fmt: skip
        self.unpublished = Counter("crawl_worker_follow_ups_unpublished",
                                   "follow-ups (links, redirects, a spider's requests) Kafka did not take: lost, "
                                   "their job reported as an error", registry=self.registry)  # fmt: skip
        for cls in FETCH_CLASSES:
            self.fetches.labels(cls, "page")

    def observe(self, kind: str, outcome: str, status: int, latency: float) -> None:
        self.fetches.labels(fetch_class(outcome, status), kind).inc()
        if latency > 0:
            self.latency.observe(latency)


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

"""A frontier instance's snapshot on ``crawl.frontier.status``: its totals, its busiest scopes
(:class:`ScopeStatus`) and its crawls (:class:`CrawlStatus`).
"""

from __future__ import annotations

import msgspec

from topics.schemas.versions import SCHEMA_VERSION


class ScopeStatus(msgspec.Struct, kw_only=True):
    scope: str
    queued: int
    inflight: int
    delay: float
    concurrency: int
    gate_until: float
    backoff: float
    reason: str  # why it is not dispatching now ("ready" when it is)
    wait_until: float | None = None
    sent: int = 0  # requests sent to this scope, ever (rates come from two snapshots)
    limit: float = 0.0  # the limit learned from the server's signals, requests/s (0: none learned)
    cause: str = ""  # why the delay is what it is (its last change), e.g. "limit ≈ 4.80 req/s from 429"


MAX_STATUS_CRAWLS = 1000  # crawl rows in one Status at most (the busiest): it must fit its topic


class CrawlStatus(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One crawl as one frontier instance sees it (its partitions' part): readers add the
    instances' rows up (``frontier.client.crawls.crawl_rows``). Fields at their default
    are left out, so an instance's snapshot stays small with many crawls."""

    crawl: str
    queued: int = 0  # URLs queued
    inflight: int = 0  # jobs leased (in a worker's hands, or on their way)
    ingested: int = 0  # URLs queued, ever (new, recrawled)
    dispatched: int = 0  # jobs sent, ever
    completed: int = 0  # URLs whose fate is decided: fetched, failed, skipped, disallowed
    fetched: int = 0
    failed: int = 0  # ended in an error (network, robots.txt unreachable, leases lost)
    disallowed: int = 0
    dropped: int = 0  # queued URLs removed by a drop
    over_limit: int = 0  # URLs not queued: the crawl's per-host limit was reached
    revisits: int = 0  # fetched URLs waiting for their revisit
    next_revisit: float | None = None  # the earliest of them is due then (None: none)
    paused: bool = False
    per_host: int = 0  # at most this many URLs queued per host (0: no limit)
    workers: int = -1  # members of the crawl's worker group (-1: not known yet)
    pages_per_s: float = 0.0


class Status(msgspec.Struct, kw_only=True):
    """One frontier instance's latest view, on ``crawl.frontier.status`` keyed by instance id."""

    v: int = SCHEMA_VERSION
    instance: str
    at: float
    partitions: list[int]
    totals: dict[str, int]
    scopes: list[ScopeStatus]
    # assigned to the instance but not served (a store that cannot be opened, a fenced writer): why
    unserved: dict[int, str] = msgspec.field(default_factory=dict)
    crawls: list[CrawlStatus] = msgspec.field(default_factory=list)  # the crawls these partitions know (busiest first)
    crawls_cut: int = 0  # crawls left out of ``crawls`` (more than MAX_STATUS_CRAWLS): their counts are not known here

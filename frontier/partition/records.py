"""The partition's records and results: the stored ``Lease`` and ``Stats``, what a call hands
back (``Dispatch``, ``Report``, ``Sweep``), the ``Refused`` error, the hooks' types, and the
JSON codecs of stored values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

import msgspec

from frontier.core import policy
from frontier.core.causes import Cause
from frontier.core.control import Override
from frontier.core.robots import RobotsRecord
from topics.schemas import EncodedJob, Job, Page, Submission, UrlItem

Changelog = Callable[[bytes, bytes | None], None]
# (scope, old delay, new delay, cause text, cause class, gate until): whenever a scope's delay or gate changes
ChangeHook = Callable[[str, float, float, str, Cause, float], None]

REPORT_KINDS = ("disallowed", "error")  # report leases: a final page to publish, no fetch


class Refused(ValueError):
    """A command the partition will not apply; ``str(exc)`` is the reason (it goes to crawl.rejected)."""


ItemT = TypeVar("ItemT", UrlItem, msgspec.Raw)


class Lease(msgspec.Struct, Generic[ItemT], kw_only=True):
    """A stored lease: read as ``Lease[UrlItem]``, written as ``Lease[msgspec.Raw]`` with the
    item's bytes as they were queued (not encoded again)."""

    qkey: bytes  # where the URL sat in its queue (re-queued there if the job comes back); b"" for robots
    item: ItemT
    deadline: float
    scopes: list[str]
    kind: str = "page"  # page | robots | disallowed | error (the last two: a report, see leases.py)
    dispatched_at: float = 0.0  # the send time scheduled, by the frontier's clock
    error: str = ""  # reports: why the URL ends without a fetch
    site: str = ""  # robots: the origin whose robots.txt this is (the URL may be a redirect hop)
    held_until: float = 0.0  # in a URLFrontier client's hands until then (feedback "held"); 0: not handed out
    # a URL handed out by GetURLs: its hand-out deadline passed then, and its host's slot was
    # released (its send taken as then) while the URL stays held until ``held_until``; 0: not yet
    released_at: float = 0.0


class Stats(msgspec.Struct, kw_only=True):
    """Cumulative counters of one partition, stored with it so totals survive a move to another
    instance (per-process counters would drop whatever the previous owner counted)."""

    ingested: int = 0
    duplicates: int = 0
    dispatched: int = 0
    completed: int = 0
    retried: int = 0
    returned: int = 0  # jobs handed back unfetched (expired at the worker)
    lost: int = 0  # leases that expired with no feedback
    stale_feedback: int = 0
    disallowed: int = 0
    robots_fetched: int = 0
    sitemaps_found: int = 0  # sitemaps submitted from robots.txt Sitemap: lines (discover_sitemaps)
    fetched: int = 0  # pages with a response (any status) as the final outcome
    failed: int = 0  # pages that ended in a network error after their retries
    dropped: int = 0  # queued URLs removed by an operator's drop
    revisits: int = 0  # URLs re-queued because their revisit interval passed
    forgotten: int = 0  # seen entries removed: aged out (seen_retention) or by a forget submission
    recrawls: int = 0  # URLs queued again by a recrawl submission although seen
    skipped: int = 0  # URLs a worker declined without a request (feedback outcome "skipped")


class CrawlRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A crawl in one partition (``K<crawl>``, changelogged): the commands it was given here and
    its counters, which move with the partition like :class:`Stats`."""

    paused: bool = False
    per_host: int = 0  # URLs of the crawl queued per host, at most (0: no limit)
    generation: int = 0  # its seen set's generation: a drop with forget starts a new one
    ingested: int = 0
    duplicates: int = 0
    dispatched: int = 0  # page jobs sent
    completed: int = 0  # URLs whose fate is decided (fetched, failed, skipped, disallowed)
    fetched: int = 0
    failed: int = 0
    skipped: int = 0
    disallowed: int = 0
    dropped: int = 0
    over_limit: int = 0  # URLs not queued: per_host reached
    revisits: int = 0  # V entries of the crawl (fetched URLs waiting for their revisit)
    # jobs in flight when the crawl was dropped (lease id → the drop forgot the seen set): they
    # finish, but their URLs are not queued again, and after a forgetting drop they leave the
    # crawl's new seen set alone (at most max_inflight per partition)
    dropped_leases: dict[str, bool] = msgspec.field(default_factory=dict)


class Sweep(NamedTuple):
    """What one call of :meth:`PartitionFrontier.sweep_seen` did."""

    looked: int  # seen entries looked at (at most the call's limit)
    forgotten: int  # of them, deleted (aged out)


@dataclass(frozen=True)
class Report:
    """A URL that ends without a fetch: publish ``page``, then call ``reported(lease)``."""

    lease: str
    page: Page


@dataclass
class Dispatch:
    """What a dispatch round hands the service. Each job is kept as it goes on its topic: its
    record (the item's queued bytes spliced in) and its route, ``(crawl, host, kind)``: its topic,
    its key and its count. :attr:`jobs` decodes them (tests, in-process callers): a round makes no
    :class:`Job` object."""

    records: list[bytes] = field(default_factory=list)  # each job encoded
    routes: list[tuple[str, str, str]] = field(default_factory=list)  # records[i]'s (crawl, host, kind)
    reports: list[Report] = field(default_factory=list)  # final pages of URLs never fetched
    # new URLs the round found (a site's sitemaps, from its robots.txt): published on crawl.urls, in the
    # round's transaction, to go through intake like any submission
    submissions: list[Submission] = field(default_factory=list)
    _jobs: list[Job] = field(default_factory=list, repr=False, compare=False)

    def add(self, record: EncodedJob, crawl: str, host: str) -> None:
        self.records.append(encoder.encode(record))
        self.routes.append((crawl, host, record.kind))

    @property
    def jobs(self) -> list[Job]:
        """The jobs, decoded from their records (once)."""
        if len(self._jobs) != len(self.records):
            self._jobs = [job_dec.decode(record) for record in self.records]
        return self._jobs

    @property
    def disallowed(self) -> list[Page]:
        """The pages of URLs disallowed by robots.txt."""
        return [r.page for r in self.reports if r.page.outcome == "disallowed"]


encoder = msgspec.json.Encoder()
item_dec = msgspec.json.Decoder(UrlItem)
job_dec = msgspec.json.Decoder(Job)
lease_dec = msgspec.json.Decoder(Lease[UrlItem])
lease_raw_dec = msgspec.json.Decoder(Lease[msgspec.Raw])
override_dec = msgspec.json.Decoder(Override)
state_dec = msgspec.json.Decoder(policy.ScopeState)
robots_dec = msgspec.json.Decoder(RobotsRecord)
stats_dec = msgspec.json.Decoder(Stats)
crawl_dec = msgspec.json.Decoder(CrawlRecord)

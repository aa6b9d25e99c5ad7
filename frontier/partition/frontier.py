"""``PartitionFrontier``: one partition's frontier, which owns the parts beside it and wires them
together, with the entry points the service drives (``ingest`` URLs, ``dispatch`` what may be
sent now, ``feedback``, ``expire_leases``, commands, the gateway's queries, ``rebuild`` after a
restore) and the counters' save.

Writes are ordered so that a crash between any two of them loses nothing: a URL is queued
before it is marked seen, a lease is written before its queue entry is deleted, a re-queued
entry is written before its lease is deleted. The worst case after a crash is a URL fetched
twice (at least once), never a URL dropped.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, KeysView, Sequence

import msgspec

from frontier.config import FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core.control import Override
from frontier.core.kv import KV
from frontier.partition.commands import Commands
from frontier.partition.counts import QueueCounts
from frontier.partition.crawls import Crawls
from frontier.partition.dispatch import Dispatcher
from frontier.partition.keys import STATS_KEY, QueueId, input_key, queue_id
from frontier.partition.leases import Leases
from frontier.partition.listing import Listing
from frontier.partition.queues import Queues
from frontier.partition.recorded import Recorded, Walk
from frontier.partition.records import ChangeHook, Changelog, Dispatch, Stats, Sweep, encoder, stats_dec
from frontier.partition.reports import LeaseIds, Reports
from frontier.partition.revisits import Revisits
from frontier.partition.robots import RobotsCache
from frontier.partition.scopes import Scopes
from frontier.partition.seen import SEEN_OPEN, SWEEP_BATCH, SeenSet, read_seen, seen_value
from frontier.partition.store import Store
from frontier.partition.visibility import Visibility
from topics.schemas import ControlCommand, CrawlStatus, Feedback, Query, Reply, ScopeStatus, UrlItem


class PartitionFrontier:
    """One frontier partition: the seen set, per-scope-set priority queues, robots.txt, leases and
    dispatch, over a :class:`~frontier.core.kv.KV`; every write also goes to ``changelog``."""

    def __init__(
        self,
        partition: int,
        kv: KV,
        settings: FrontierConfig,
        throttle: ThrottleConfig,
        changelog: Changelog,
        user_agent: str = "kafka-crawl-frontier",
        on_change: ChangeHook | None = None,
        rng: random.Random | None = None,
        stats: Stats | None = None,
    ) -> None:
        self.partition = partition
        self.kv = kv
        self.settings = settings
        self.throttle = throttle
        self.changelog = changelog
        self.user_agent = user_agent
        self._on_change = on_change
        self.rng = rng if rng is not None else random.Random()
        self._assemble(stats if stats is not None else Stats(), Stats())

    def _assemble(self, stats: Stats, saved: Stats) -> None:
        """Make the parts, empty (in memory: ``rebuild`` loads them from the store), in their
        dependency order (see the package's doc); ``saved``: the counters as stored."""
        p, settings = self.partition, self.settings
        self.stats = stats
        self._saved_stats = saved
        self.refused: list[tuple[int, str]] = []  # items of the last ingest left out, and why (rejected)
        self._inputs: dict[str, int] = {}  # input role → offset applied up to (cache of I<role>)
        self.store = store = Store(self.kv, self.changelog)
        self.crawls = crawls = Crawls(p, store, settings)
        self.seen = seen = SeenSet(store, crawls, settings, stats)
        self.queues = queues = Queues(store, crawls)
        self.scopes = scopes = Scopes(p, store, settings, self.throttle, queues.waiters, self._on_change)
        self.robots = robots = RobotsCache(store, settings, scopes, stats, self.user_agent)
        self.revisits = revisits = Revisits(store, crawls, seen, queues, scopes, stats)
        self.recorded = recorded = Recorded(store, crawls, seen, revisits, stats)
        self.lease_ids = ids = LeaseIds()
        self.reports = reports = Reports(store, ids, seen, crawls)
        self.leases = leases = Leases(store, settings, stats, self.rng, crawls, seen, queues, scopes, robots,
                                      revisits, recorded, ids, reports)  # fmt: skip
        self.commands = commands = Commands(store, stats, crawls, seen, queues, scopes, revisits)
        self.listing = Listing(p, store, settings, crawls, seen, queues, leases, commands)
        self.visibility = Visibility(store, settings, crawls, queues, scopes, robots, revisits, leases)
        self.dispatcher = Dispatcher(store, settings, stats, crawls, queues, scopes, robots, revisits, recorded,
                                     reports, leases)  # fmt: skip

    @property
    def on_change(self) -> ChangeHook | None:
        """The hook told of every change of a scope's delay or gate (``Scopes.apply``)."""
        return self._on_change

    @on_change.setter
    def on_change(self, hook: ChangeHook | None) -> None:
        self._on_change = self.scopes.on_change = hook

    @property
    def inflight(self) -> int:
        """Jobs in flight (leased, not closed)."""
        return self.leases.inflight

    # -- intake -----------------------------------------------------------------------------------
    def ingest(self, items: Iterable[UrlItem], now: float, encoded: Sequence[bytes] = ()) -> int:
        """Queue every URL not seen before (or seen and not open, with ``recrawl``); apply
        ``forget`` items; return how many were queued. ``encoded[i]``, when given, is ``items[i]``
        as the router encoded it: queued as it is (the item is not encoded again on its way). An
        item of a new crawl past ``frontier.max_crawls`` is left out: its index and the reason are
        in ``refused`` afterwards."""
        accepted = 0
        self.refused = []
        crawls, seen, queues, store, kv, stats = self.crawls, self.seen, self.queues, self.store, self.kv, self.stats
        for i, item in enumerate(items):
            if refused := crawls.refused(item.crawl):
                self.refused.append((i, refused))  # the service puts it on crawl.rejected
                continue
            if item.key and item.refetch_at is not None:
                self.recorded.known(item, now)  # a URLFrontier client's update: decided, not queued
                continue
            key = seen.key(item)
            if item.forget:
                seen.forget(key)
                continue
            raw = kv.get(key)
            if raw is not None:
                if not item.recrawl or read_seen(raw)[0] == SEEN_OPEN:
                    stats.duplicates += 1  # (a recrawl of an open URL: it is queued or in flight)
                    crawls.record(item.crawl).duplicates += 1
                    continue
                stats.recrawls += 1  # its V entry, if any, is dropped when due (no longer named)
            if len(crawls) and self._over_limit(item):
                crawls.record(item.crawl).over_limit += 1  # not marked seen: submitted later, it may be queued
                continue
            raw = encoded[i] if encoded else None
            if item.recrawl:
                item = msgspec.structs.replace(item, recrawl=False)  # a command, not part of the queued URL
                raw = None
            qid = queue_id(self.scopes.scopes_of(item), item.crawl)  # one string object per queue
            queues.enqueue(queues.qkey(qid, item, now), item, now, raw)
            store.put(key, seen_value(SEEN_OPEN, now))
            if item.key:
                self.recorded.record_discovered(item, now)
            crawls.record(item.crawl).ingested += 1
            accepted += 1
        stats.ingested += accepted
        return accepted

    def _over_limit(self, item: UrlItem) -> bool:
        record = self.crawls.get(item.crawl)
        return (record is not None and record.per_host > 0
                and self.queues.queued_in(item.crawl, item.host) >= record.per_host)  # fmt: skip

    # -- dispatch ---------------------------------------------------------------------------------
    def dispatch(self, now: float, limit: int = 1000) -> Dispatch:
        """Lease the jobs that may be sent at ``now``; report URLs robots.txt disallows."""
        return self.dispatcher.dispatch(now, limit)

    def next_wakeup(self) -> float | None:
        """The earliest time something may happen without new input."""
        return self.dispatcher.next_wakeup()

    # -- results, commands, questions (each a part's) -----------------------------------------------
    def feedback(self, fb: Feedback, now: float) -> bool:
        """Apply one worker result; return False for stale feedback (lease already closed)."""
        return self.leases.feedback(fb, now)

    def hold(self, lease_id: str, until: float, release: float = 0.0) -> bool:
        """A client took the job until ``until`` (``Leases.hold``)."""
        return self.leases.hold(lease_id, until, release)

    def expire_leases(self, now: float) -> int:
        """Re-queue URLs whose lease deadline passed without feedback (at least once)."""
        return self.leases.expire(now)

    def reported(self, lease_id: str) -> None:
        """The report's page is on crawl.pages: forget the report lease."""
        self.reports.reported(lease_id)

    def control(self, cmd: ControlCommand, now: float) -> int:
        """Apply a scope (or crawl) command; return the queued URLs it dropped (drop) or 0."""
        return self.commands.control(cmd, now)

    def crawl_control(self, cmd: ControlCommand, now: float) -> int:
        """Apply a crawl command here; return the queued URLs it dropped (drop) or 0."""
        return self.commands.crawl_control(cmd, now)

    def answer(self, query: Query, now: float) -> Reply:
        """The answer to a reading query, computed at once (``Listing.answer``)."""
        return self.listing.answer(query, now)

    def walk(self, query: Query, now: float) -> Walk:
        """A reading query's answer, to compute a slice at a time (``Listing.walk``)."""
        return self.listing.walk(query, now)

    def change(self, query: Query, now: float) -> Reply:
        """A deletion or a hold (``Listing.change``)."""
        return self.listing.change(query, now)

    def sweep_due(self, now: float) -> Sweep:
        """Forget aged-out seen entries, a bounded slice every ``SWEEP_INTERVAL`` (``SeenSet``)."""
        return self.seen.sweep_due(now)

    def sweep_seen(self, now: float, limit: int = SWEEP_BATCH) -> Sweep:
        return self.seen.sweep_seen(now, limit)

    # -- crawls and scopes --------------------------------------------------------------------------
    def set_idle_crawls(self, idle: Iterable[str], now: float) -> None:
        """The crawls that have no worker now (the service watches the workers' groups): their
        queues wait, out of the scheduler, until a worker comes."""
        if self.crawls.set_idle(idle):
            self.queues.unpark(self.crawls.waits, now)

    def set_served_crawls(self, served: Iterable[str] | None, now: float) -> None:
        """The crawls that have a worker now (None: every crawl): the others wait, out of the
        scheduler, until a worker comes."""
        if self.crawls.set_served(served):
            self.queues.unpark(self.crawls.waits, now)

    def crawl_names(self) -> KeysView[str]:
        """The crawls this partition has a record of (every crawl that queued a URL here)."""
        return self.crawls.names()

    def held_reason(self, crawl: str) -> str | None:
        """Why the crawl's URLs wait (None: they do not)."""
        return self.crawls.held_reason(crawl)

    def new_crawl_refused(self, name: str) -> str:
        """Why a record of crawl ``name`` may not make the crawl here ("" when it may)."""
        return self.crawls.refused(name)

    def scopes_of(self, item: UrlItem) -> list[str]:
        return self.scopes.scopes_of(item)

    def scope_settings(self, scope: str) -> ScopeSettings:
        return self.scopes.scope_settings(scope)

    def overrides(self) -> dict[str, Override]:
        return self.scopes.overrides()

    def scope_rows(self, now: float, top: int = 20) -> list[ScopeStatus]:
        return self.visibility.scope_rows(now, top)

    def scope_row(self, scope: str, now: float, queued: int | None = None, qid: QueueId | None = None) -> ScopeStatus:
        return self.visibility.scope_row(scope, now, queued, qid)

    def crawl_rows(self, now: float) -> list[CrawlStatus]:
        return self.visibility.crawl_rows(now)

    def queued_hosts(self) -> int:
        return self.queues.queued_hosts()

    def queued(self) -> int:
        return self.queues.queued()

    # -- recovery -------------------------------------------------------------------------------
    def rebuild(self, now: float, counts: QueueCounts | None = None) -> None:
        """Rebuild the in-memory parts (heap, counters, lease index) from the store; ``counts``:
        its queues' entries counted ahead (a standby copy's), else counted here."""
        raw = self.kv.get(STATS_KEY)
        stats = stats_dec.decode(raw) if raw is not None else Stats()
        self._assemble(stats, msgspec.structs.replace(stats))
        self.scopes.load()
        self.crawls.load()
        if not len(self.crawls):  # a store from before crawls (its revisits never counted), or a new one
            self.revisits.count()
        self.crawls.rehold()
        self.revisits.load()
        top = self.leases.load()  # the highest queue sequence in use: new places come after it
        self.queues.load(now, top, counts)

    def applied_input(self, role: str) -> int:
        """The offset of the last record of input ``role`` applied here (-1: none)."""
        offset = self._inputs.get(role)
        if offset is None:
            raw = self.kv.get(input_key(role))
            offset = self._inputs[role] = int(raw) if raw is not None else -1
        return offset

    def note_input(self, role: str, offset: int) -> None:
        """Record that input ``role`` is applied up to ``offset`` (with the changes it caused)."""
        if offset > self.applied_input(role):
            self._inputs[role] = offset
            self.store.put(input_key(role), str(offset).encode())

    def save_stats(self) -> None:
        """Store the counters if they changed (the service calls this once per batch of events)."""
        if self.stats != self._saved_stats:
            self.store.put(STATS_KEY, encoder.encode(self.stats))
            self._saved_stats = msgspec.structs.replace(self.stats)
        self.crawls.save()

"""Leases, as the part :class:`Leases`: a job in flight (``L<lease>``) from its dispatch to its
feedback or its expiry (report leases, the final pages of URLs that end without a fetch, are
``reports.py``'s). The service publishes jobs only after the changelog records of the same round
are acknowledged, so a job in a worker's hands always has a recorded lease.

Interface: ``lease`` (dispatch's), ``feedback``, ``hold``/``hold_in_turn`` (a client's
hand-out), ``expire``, ``end`` (a lease closed with no result), ``next_deadline``, ``inflight``,
``crawl_inflight``, ``load``. Owns: the ``L`` keys of jobs, the deadlines' heap, the counts in
flight, and each open job lease as stored (so a result needs no read of the store). Depends on: the
store, the settings, ``Crawls``, ``SeenSet``, ``Queues``, ``Scopes``,
``RobotsCache``, ``Revisits``, ``Recorded``, ``LeaseIds`` and ``Reports``, and ``Stats``.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter

import msgspec

from frontier.config import FrontierConfig
from frontier.core import policy
from frontier.core.caps import capped_until
from frontier.core.retries import in_outage, retries_left
from frontier.core.robots import origin
from frontier.partition.crawls import Crawls
from frontier.partition.keys import LEASE, lease_key, lease_of, queue_id, queue_of, queue_prefix, queue_seq, scope_queue
from frontier.partition.queues import Queues
from frontier.partition.recorded import Recorded
from frontier.partition.records import REPORT_KINDS, Dispatch, Lease, Stats, encoder, lease_dec, lease_raw_dec
from frontier.partition.reports import LeaseIds, Reports
from frontier.partition.revisits import Revisits, learned
from frontier.partition.robots import RobotsCache
from frontier.partition.scopes import Scopes
from frontier.partition.seen import SeenSet
from frontier.partition.store import Store
from topics.schemas import CRAWLS_VERSION, DEFAULT_CRAWL, SCHEMA_VERSION, EncodedJob, Feedback, UrlItem


class Leases:
    """The jobs of one partition in flight."""

    def __init__(self, store: Store, settings: FrontierConfig, stats: Stats,
                 rng: random.Random, crawls: Crawls, seen: SeenSet, queues: Queues, scopes: Scopes,
                 robots: RobotsCache, revisits: Revisits, recorded: Recorded, ids: LeaseIds,
                 reports: Reports) -> None:  # fmt: skip
        self._store = store
        self._kv = store.kv
        self._settings = settings
        self._stats = stats
        self._rng = rng
        self._crawls = crawls
        self._seen = seen
        self._queues = queues
        self._scopes = scopes
        self._robots = robots
        self._revisits = revisits
        self._recorded = recorded
        self._ids = ids
        self._reports = reports
        self._deadlines: list[tuple[float, str]] = []  # (deadline, lease id), lazily pruned
        # every open job lease (page, robots): id → the lease as stored, decoded, or None when it was
        # written again since (a client's hold: read it from the store). At most the leases in flight
        # (max_inflight): a result or an expiry finds its lease without a read and a decode
        self._open: dict[str, Lease[UrlItem] | None] = {}
        self.inflight = 0
        self._crawl_inflight: Counter[str] = Counter()  # crawl → jobs in flight

    def next_deadline(self) -> float | None:
        """The earliest deadline of a lease (it may have been closed since: lazily pruned)."""
        return self._deadlines[0][0] if self._deadlines else None

    def crawl_inflight(self, crawl: str) -> int:
        return self._crawl_inflight.get(crawl, 0)

    def lease(
        self,
        out: Dispatch,
        item: UrlItem,
        raw: bytes,
        qkey: bytes,
        scopes: list[str],
        now: float,
        kind: str = "page",
        not_before: float = 0.0,
        site: str = "",
    ) -> None:
        """Lease ``item`` (``raw``: its encoding, spliced into the lease and the job as it is) and
        add its job to ``out``."""
        lease_id = self._ids.new()
        not_before = max(now, not_before)
        settings = self._settings
        expires_at = not_before + settings.job_ttl
        deadline = expires_at + settings.fetch_timeout + settings.lease_grace
        lease = Lease(qkey=qkey, item=msgspec.Raw(raw), deadline=deadline, scopes=scopes, kind=kind,
                      dispatched_at=not_before, site=site)  # fmt: skip
        self._store.put(lease_key(lease_id), encoder.encode(lease))
        self._open[lease_id] = Lease(qkey=qkey, item=item, deadline=deadline, scopes=scopes, kind=kind,
                                     dispatched_at=not_before, site=site)  # fmt: skip
        if qkey:
            self._store.delete(qkey)
        # the gap this send was timed with (before the send changes the state: the last request of
        # a budget's turn test ends the test, and the state after it has the slowed-down delay,
        # which would hold that request back at the worker)
        sent = policy.Sent(not_before, u=self._rng.random(), cost=item.cost if kind == "page" else 0.0)
        host_state, min_gap, floor = self._scopes.send(scopes, sent, now)
        heapq.heappush(self._deadlines, (deadline, lease_id))
        self.inflight += 1
        crawl_inflight = self._crawl_inflight
        crawl_inflight[item.crawl] = crawl_inflight.get(item.crawl, 0) + 1
        self._stats.dispatched += 1
        if kind == "page":
            self._crawls.record(item.crawl).dispatched += 1
        job = EncodedJob(v=SCHEMA_VERSION if item.crawl == DEFAULT_CRAWL else CRAWLS_VERSION, lease=lease_id, kind=kind,
                         not_before=not_before, expires_at=expires_at, min_gap=min_gap, floor=floor,
                         timeout=settings.fetch_timeout, item=msgspec.Raw(raw),
                         retries_left=self._retries_left(item, host_state, now) if kind == "page" else 0)  # fmt: skip
        out.add(job, item.crawl, item.host)

    def _retries_left(self, item: UrlItem, host: policy.ScopeState, now: float) -> int:
        s = self._settings
        return retries_left(item.attempts, s.max_retries, host.failing_since, now, s.retry_give_up)

    def feedback(self, fb: Feedback, now: float) -> bool:
        """Apply one worker result; return False for stale feedback (lease already closed)."""
        key = lease_key(fb.lease)
        lease = self._open.get(fb.lease)
        if lease is None:  # (held since it went out, or not a job's lease: as stored)
            raw = self._kv.get(key)
            lease = lease_dec.decode(raw) if raw is not None else None
        stats = self._stats
        if lease is None or lease.kind in REPORT_KINDS:
            stats.stale_feedback += 1
            self._scopes.late(fb, now)
            return False
        item = lease.item
        if fb.outcome == "held":  # in a client's hands until then: the lease lasts as long
            self.hold(fb.lease, capped_until(fb.held_until, now, self._settings.hold_max))
            return True
        if fb.outcome == "expired" and lease.held_until > now:
            stats.stale_feedback += 1  # its job read again (a gateway restarted): the client still has it
            return False
        dropped = self._crawls.dropped_lease(item.crawl, fb.lease) if lease.kind == "page" else None
        if lease.kind == "robots":
            if fb.outcome != "expired":
                self._robots.store(lease.site or origin(item.url), item, fb, now)
        elif dropped is not None:
            self._end_dropped(item, fb.lease, fb.outcome, now, forgotten=dropped)
        elif fb.outcome == "expired":
            self._queues.enqueue_back(lease.qkey, item, now)  # back to where it was
            stats.returned += 1
        elif fb.outcome == "retry":
            # a failure while the whole host was already failing is the host's, not the URL's
            counted = not in_outage(self._scopes.state(lease.scopes[0]).failing_since, lease.dispatched_at)
            retry = msgspec.structs.replace(item, attempts=item.attempts + int(counted))
            queues = self._queues
            queues.enqueue(queues.qkey(queue_id(lease.scopes, item.crawl), retry, now), retry, now)
            stats.retried += 1
        else:
            stats.completed += 1
            crawl = self._crawls.record(item.crawl)
            crawl.completed += 1
            if fb.outcome == "error":
                stats.failed += 1
                crawl.failed += 1
            elif fb.outcome == "skipped":
                stats.skipped += 1  # a worker declined it: done, never fetched
                crawl.skipped += 1
            else:
                stats.fetched += 1
                crawl.fetched += 1
            if item.key and self._recorded.decided_while_leased(item):
                pass  # a client's known update came first: its decision stands
            elif item.revisit > 0:
                self._revisits.schedule(learned(item, fb), now)
            else:
                self._seen.settle(item, now)  # before the lease goes: a crash between leaves it leased
        # (a lease whose slot its hand-out deadline released: a late result, the slot not freed again)
        event = policy.Done(sent_at=fb.sent_at, done_at=fb.done_at, dispatched_at=lease.dispatched_at, status=fb.status,
                            latency=fb.latency, error=fb.error, headers=fb.headers, adjust=item.adjust,
                            outcome=fb.outcome, late=lease.released_at > 0)  # fmt: skip
        apply = self._scopes.apply
        for scope in lease.scopes:
            apply(scope, event, now)
        self._store.delete(key)
        self._open.pop(fb.lease, None)
        self._closed(lease, now)
        return True

    # -- a client's hand-out ------------------------------------------------------------------------
    def hold(self, lease_id: str, until: float, release: float = 0.0) -> bool:
        """A client took the job (a URLFrontier GetURLs; feedback ``held``): the lease lasts until
        ``until`` (its delay_requestable), then the URL is queued again (:meth:`expire`).
        ``release``: the hand-out deadline, before ``until``: then the host's slot is released,
        the send taken as then (the client must have fetched it by that time), while the URL stays
        held; 0 (or not before ``until``): the lease keeps the slot to its end. False: no such
        lease open (a result came first)."""
        key = lease_key(lease_id)
        raw = self._kv.get(key)
        if raw is None:
            return False
        held = lease_raw_dec.decode(raw)
        if held.kind != "page":
            return False
        held.held_until = until
        held.deadline = release if 0 < release < until and not held.released_at else until
        self._store.put(key, encoder.encode(held))
        self._open[lease_id] = None  # (as stored now)
        heapq.heappush(self._deadlines, (held.deadline, lease_id))
        return True

    def hold_in_turn(self, lease_id: str, until: float, now: float) -> bool:
        """A client is about to take the job (GetURLs): held as :meth:`hold`, unless a URL of its
        queue now comes before it (due earlier, or of a higher priority: a client's known URL
        due long ago that arrived after the job went out). Then the job goes back to its place
        and its slot is free, so the queue's first URL is the one handed out next (False)."""
        key = lease_key(lease_id)
        raw = self._kv.get(key)
        if raw is None:
            return False
        lease = lease_dec.decode(raw)
        if lease.held_until:
            return False  # in a client's hands already (a job a restarted gateway read again): never twice
        # (a lease of a dropped crawl is not queued again: it ends as its drop said, when it expires)
        if (lease.kind == "page" and lease.qkey and not lease.held_until
                and self._crawls.dropped_lease(lease.item.crawl, lease_id) is None):  # fmt: skip
            head = self._kv.first(queue_prefix(queue_of(lease.qkey)))
            if head is not None and head[0] < lease.qkey:
                self._queues.enqueue_back(lease.qkey, lease.item, now)
                self._stats.returned += 1
                self.end(key, lease, now)
                return False
        return self.hold(lease_id, until, release=now + self._settings.fetch_timeout)

    def end(self, key: bytes, lease: Lease[UrlItem], now: float, sent_at: float = 0.0) -> None:
        """Close a lease with no result and no signal (a client's time over, its URL deleted): its
        scopes' slots are free again, as for a job handed back unfetched (``sent_at``: the host's
        send taken as then, capped at ``now``). A slot its hand-out deadline released is not freed again."""
        if not lease.released_at:
            self._free_slot(lease, sent_at, now)
        self._store.delete(key)
        self._open.pop(lease_of(key), None)
        self._closed(lease, now)

    def _free_slot(self, lease: Lease[UrlItem], sent_at: float, now: float) -> None:
        event = policy.Done(sent_at=sent_at, dispatched_at=lease.dispatched_at, adjust=False, outcome="expired")
        for scope in lease.scopes:
            self._scopes.apply(scope, event, now)

    def _release(self, key: bytes, lease_id: str, raw: bytes, lease: Lease[UrlItem], now: float) -> None:
        """A URL handed out reached its hand-out deadline (``lease.deadline``) without its client's
        update (lost with a gateway, or late): its host's slot is released, the send taken as at the
        deadline (the latest moment the client may fetch it: the host's next URL keeps its delay from
        there), and the URL stays held until its ``held_until`` (a late update still decides it)."""
        at = lease.deadline
        self._free_slot(lease, at, now)
        held = lease_raw_dec.decode(raw)
        held.released_at = at
        held.deadline = held.held_until
        self._store.put(key, encoder.encode(held))
        self._open[lease_id] = None  # (as stored now)
        heapq.heappush(self._deadlines, (held.deadline, lease_id))
        self._wake_scopes(lease, now)

    # -- closing ------------------------------------------------------------------------------------
    def _closed(self, lease: Lease[UrlItem], now: float) -> None:
        self.inflight -= 1
        self._crawl_inflight[lease.item.crawl] -= 1
        if lease.kind == "robots":
            site = lease.site or origin(lease.item.url)
            self._robots.fetched(site)
            self._queues.waiters.wake(f"robots:{site}", now)
        self._wake_scopes(lease, now)

    def _wake_scopes(self, lease: Lease[UrlItem], now: float) -> None:
        """The lease's scopes have a slot free: their queues are looked at again."""
        queues = self._queues
        for scope in lease.scopes:
            queues.waiters.wake(scope, now)
        qid = queue_id(lease.scopes, lease.item.crawl)
        if not self._crawls.waits(lease.item.crawl):
            queues.scheduler.schedule(qid, now)
        queues.scheduler.schedule(scope_queue(lease.scopes[0]), now)  # the host's own queue (it registers no waiters)

    def expire(self, now: float) -> int:
        """Re-queue URLs whose lease deadline passed without feedback (at least once)."""
        expired = 0
        stats = self._stats
        while self._deadlines and self._deadlines[0][0] <= now:
            _, lease_id = heapq.heappop(self._deadlines)
            if lease_id not in self._open:
                continue  # feedback already closed it
            key = lease_key(lease_id)
            raw = self._kv.get(key)
            if raw is None:
                self._open.pop(lease_id, None)
                continue
            lease = lease_dec.decode(raw)
            if lease.deadline > now:
                heapq.heappush(self._deadlines, (lease.deadline, lease_id))  # held longer since (a client's hold)
                continue
            if lease.held_until > now and not lease.released_at:  # its hand-out deadline: the slot goes
                self._release(key, lease_id, raw, lease, now)
                continue
            dropped = self._crawls.dropped_lease(lease.item.crawl, lease_id) if lease.kind == "page" else None
            if lease.held_until and dropped is None:  # its client did not answer in time: handed out again
                self._queues.enqueue_back(lease.qkey, lease.item, now)
                stats.returned += 1
                self.end(key, lease, now, sent_at=lease.deadline)  # (sent by its deadline at the latest)
                expired += 1
                continue
            if dropped is not None:
                self._end_dropped(lease.item, lease_id, "lost", now, forgotten=dropped)
            elif lease.kind == "page" and lease.item.key and self._recorded.decided_while_leased(lease.item):
                pass  # a client's update decided it while it was out (done, or due later): not queued again
            elif lease.kind == "page":
                # A lease can be lost again and again (a URL whose fetch kills its worker, a worker
                # that never answers): count it as an attempt, and end with an error page.
                item = msgspec.structs.replace(lease.item, attempts=lease.item.attempts + 1)
                if item.attempts > self._settings.max_retries:
                    error = f"no result from a worker after {item.attempts} leases"
                    self._reports.report(item, encoder.encode(item), b"", lease.scopes, now, "error", error)
                    stats.completed += 1
                    stats.failed += 1
                else:
                    self._queues.enqueue_back(lease.qkey, item, now)
                    self._seen.reopen(item, now)
            for scope in lease.scopes if not lease.released_at else ():
                self._scopes.apply(scope, policy.Lost(), now)
            self._store.delete(key)
            self._open.pop(lease_id, None)
            self._closed(lease, now)
            stats.lost += 1
            expired += 1
        return expired

    # -- dropped crawls ----------------------------------------------------------------------------
    def _end_dropped(self, item: UrlItem, lease_id: str, outcome: str, now: float, forgotten: bool) -> None:
        """The result of a job whose crawl was dropped while it was in flight: counted, never
        queued again (a retry, a hand-back or a lost lease ends it), and after a forgetting drop
        nothing written to the crawl's new seen set."""
        record = self._crawls.record(item.crawl)
        record.dropped_leases.pop(lease_id, None)
        stats = self._stats
        if outcome in ("fetched", "error", "skipped"):
            record.completed += 1
            stats.completed += 1
            if outcome == "fetched":
                record.fetched += 1
                stats.fetched += 1
            elif outcome == "error":
                record.failed += 1
                stats.failed += 1
            else:
                record.skipped += 1
                stats.skipped += 1
        else:
            record.dropped += 1
            stats.dropped += 1
        if not forgotten:
            self._seen.settle(item, now)

    def load(self) -> int:
        """The stored leases: in flight (their deadlines, counts, robots.txt fetches) or reports
        still to publish (``rebuild``); returns the highest queue sequence they hold."""
        top = 0
        for key, value in self._kv.scan(LEASE):
            lease = lease_dec.decode(value)
            if lease.qkey:
                top = max(top, queue_seq(lease.qkey))
            if lease.kind in REPORT_KINDS:
                self._reports.restore(lease_of(key))  # its page may never have gone out
                continue
            heapq.heappush(self._deadlines, (lease.deadline, lease_of(key)))
            self._open[lease_of(key)] = lease
            self.inflight += 1
            self._crawl_inflight[lease.item.crawl] += 1
            if self._crawls.get(lease.item.crawl) is None:
                self._crawls.record(lease.item.crawl)
            if lease.kind == "robots":
                self._robots.fetching(lease.site or origin(lease.item.url))
        return top

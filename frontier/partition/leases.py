"""Leases: a job in flight (``L<lease>``) from its dispatch to its feedback or its expiry, and
*report* leases, the final pages of URLs that end without a fetch.

A URL that ends here without a fetch (disallowed by robots.txt, robots.txt unreachable for
too long, leases lost too often) is kept as a *report* lease until its page is on
``crawl.pages``: :meth:`Leases.reported` removes it once the page is acknowledged, and a restart
reports it again (see ``FrontierService``). The service also publishes jobs and reports only
after the changelog records of the same round are acknowledged, so a job in a worker's hands
always has a recorded lease.
"""

from __future__ import annotations

import heapq
from typing import Any

import msgspec

from frontier.core import policy
from frontier.core.caps import capped_until
from frontier.core.retries import in_outage, retries_left
from frontier.core.robots import origin
from frontier.partition.keys import lease_key, queue_id, queue_of, queue_prefix, scope_queue
from frontier.partition.records import REPORT_KINDS, Dispatch, Lease, Report, encoder, lease_dec, lease_raw_dec
from frontier.partition.revisits import Revisits, learned
from frontier.partition.robots import Robots
from topics.schemas import (
    CRAWLS_VERSION,
    DEFAULT_CRAWL,
    SCHEMA_VERSION,
    EncodedJob,
    Feedback,
    Job,
    Page,
    UrlItem,
)


class Leases(Robots, Revisits):
    def _new_lease_id(self) -> str:
        self._lease_seq += 1
        return f"{self._lease_prefix}{self._lease_seq:x}"

    def _lease(
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
        lease_id = self._new_lease_id()
        not_before = max(now, not_before)
        expires_at = not_before + self.settings.job_ttl
        deadline = expires_at + self.settings.fetch_timeout + self.settings.lease_grace
        lease = Lease(qkey=qkey, item=msgspec.Raw(raw), deadline=deadline, scopes=scopes, kind=kind,
                      dispatched_at=not_before, site=site)  # fmt: skip
        self._put(lease_key(lease_id), encoder.encode(lease))
        if qkey:
            self._delete(qkey)
        # the gap this send was timed with (before the send changes the state: the last request of
        # a budget's turn test ends the test, and the state after it has the slowed-down delay,
        # which would hold that request back at the worker)
        host_state, host_settings = self._state(scopes[0]), self.scope_settings(scopes[0])
        u = self.rng.random()
        for scope in scopes:
            self._apply(scope, policy.Sent(not_before, u=u, cost=item.cost if kind == "page" else 0.0), now)
        heapq.heappush(self._leases, (deadline, lease_id))
        self.inflight += 1
        self._crawl_inflight[item.crawl] += 1
        self.stats.dispatched += 1
        if kind == "page":
            self._crawl(item.crawl).dispatched += 1
        terms: dict[str, Any] = {
            "v": SCHEMA_VERSION if item.crawl == DEFAULT_CRAWL else CRAWLS_VERSION,
            "lease": lease_id,
            "kind": kind,
            "not_before": not_before,
            "expires_at": expires_at,
            "min_gap": policy.delay(host_state, host_settings),
            "floor": policy.floor(host_state, host_settings),
            "timeout": self.settings.fetch_timeout,
            "retries_left": self._retries_left(item, host_state, now) if kind == "page" else 0,
        }
        out.add(Job(item=item, **terms), EncodedJob(item=msgspec.Raw(raw), **terms))

    def _retries_left(self, item: UrlItem, host: policy.ScopeState, now: float) -> int:
        s = self.settings
        return retries_left(item.attempts, s.max_retries, host.failing_since, now, s.retry_give_up)

    def feedback(self, fb: Feedback, now: float) -> bool:
        """Apply one worker result; return False for stale feedback (lease already closed)."""
        key = lease_key(fb.lease)
        raw = self.kv.get(key)
        lease = lease_dec.decode(raw) if raw is not None else None
        if lease is None or lease.kind in REPORT_KINDS:
            self.stats.stale_feedback += 1
            self._late(fb, now)
            return False
        item = lease.item
        if fb.outcome == "held":  # in a client's hands until then: the lease lasts as long
            self.hold(fb.lease, capped_until(fb.held_until, now, self.settings.hold_max))
            return True
        if fb.outcome == "expired" and lease.held_until > now:
            self.stats.stale_feedback += 1  # its job read again (a gateway restarted): the client still has it
            return False
        dropped = self._dropped_lease(item.crawl, fb.lease) if lease.kind == "page" else None
        if lease.kind == "robots":
            if fb.outcome != "expired":
                self._store_robots(lease.site or origin(item.url), item, fb, now)
        elif dropped is not None:
            self._end_dropped(item, fb.lease, fb.outcome, now, forgotten=dropped)
        elif fb.outcome == "expired":
            self._enqueue_back(lease.qkey, item, now)  # back to where it was
            self.stats.returned += 1
        elif fb.outcome == "retry":
            # a failure while the whole host was already failing is the host's, not the URL's
            counted = not in_outage(self._state(lease.scopes[0]).failing_since, lease.dispatched_at)
            retry = msgspec.structs.replace(item, attempts=item.attempts + int(counted))
            self._enqueue(self._qkey(queue_id(lease.scopes, item.crawl), retry, now), retry, now)
            self.stats.retried += 1
        else:
            self.stats.completed += 1
            crawl = self._crawl(item.crawl)
            crawl.completed += 1
            if fb.outcome == "error":
                self.stats.failed += 1
                crawl.failed += 1
            elif fb.outcome == "skipped":
                self.stats.skipped += 1  # a worker declined it: done, never fetched
                crawl.skipped += 1
            else:
                self.stats.fetched += 1
                crawl.fetched += 1
            if item.key and self._decided_while_leased(item):
                pass  # a client's known update came first: its decision stands
            elif item.revisit > 0:
                self._schedule_revisit(learned(item, fb), now)
            else:
                self._settle(item, now)  # before the lease goes: a crash between leaves it leased
        # (a lease whose slot its hand-out deadline released: a late result, the slot not freed again)
        event = policy.Done(sent_at=fb.sent_at, done_at=fb.done_at, dispatched_at=lease.dispatched_at, status=fb.status,
                            latency=fb.latency, error=fb.error, headers=fb.headers, adjust=item.adjust,
                            outcome=fb.outcome, late=lease.released_at > 0)  # fmt: skip
        for scope in lease.scopes:
            self._apply(scope, event, now)
        self._delete(key)
        self._closed(lease, now)
        return True

    def hold(self, lease_id: str, until: float, release: float = 0.0) -> bool:
        """A client took the job (a URLFrontier GetURLs; feedback ``held``): the lease lasts until
        ``until`` (its delay_requestable), then the URL is queued again (:meth:`expire_leases`).
        ``release``: the hand-out deadline, before ``until``: then the host's slot is released,
        the send taken as then (the client must have fetched it by that time), while the URL stays
        held; 0 (or not before ``until``): the lease keeps the slot to its end. False: no such
        lease open (a result came first)."""
        key = lease_key(lease_id)
        raw = self.kv.get(key)
        if raw is None:
            return False
        held = lease_raw_dec.decode(raw)
        if held.kind != "page":
            return False
        held.held_until = until
        held.deadline = release if 0 < release < until and not held.released_at else until
        self._put(key, encoder.encode(held))
        heapq.heappush(self._leases, (held.deadline, lease_id))
        return True

    def hold_in_turn(self, lease_id: str, until: float, now: float) -> bool:
        """A client is about to take the job (GetURLs): held as :meth:`hold`, unless a URL of its
        queue now comes before it (due earlier, or of a higher priority: a client's known URL
        due long ago that arrived after the job went out). Then the job goes back to its place
        and its slot is free, so the queue's first URL is the one handed out next (False)."""
        key = lease_key(lease_id)
        raw = self.kv.get(key)
        if raw is None:
            return False
        lease = lease_dec.decode(raw)
        if lease.held_until:
            return False  # in a client's hands already (a job a restarted gateway read again): never twice
        # (a lease of a dropped crawl is not queued again: it ends as its drop said, when it expires)
        if (lease.kind == "page" and lease.qkey and not lease.held_until
                and self._dropped_lease(lease.item.crawl, lease_id) is None):  # fmt: skip
            head = self.kv.first(queue_prefix(queue_of(lease.qkey)))
            if head is not None and head[0] < lease.qkey:
                self._enqueue_back(lease.qkey, lease.item, now)
                self.stats.returned += 1
                self._end_lease(key, lease, now)
                return False
        return self.hold(lease_id, until, release=now + self.settings.fetch_timeout)

    def _end_lease(self, key: bytes, lease: Lease[UrlItem], now: float, sent_at: float = 0.0) -> None:
        """Close a lease with no result and no signal (a client's time over, its URL deleted): its
        scopes' slots are free again, as for a job handed back unfetched (``sent_at``: the host's
        send taken as then, capped at ``now``). A slot its hand-out deadline released is not freed again."""
        if not lease.released_at:
            self._free_slot(lease, sent_at, now)
        self._delete(key)
        self._closed(lease, now)

    def _free_slot(self, lease: Lease[UrlItem], sent_at: float, now: float) -> None:
        event = policy.Done(sent_at=sent_at, dispatched_at=lease.dispatched_at, adjust=False, outcome="expired")
        for scope in lease.scopes:
            self._apply(scope, event, now)

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
        self._put(key, encoder.encode(held))
        heapq.heappush(self._leases, (held.deadline, lease_id))
        self._wake_scopes(lease, now)

    def _decided_while_leased(self, item: UrlItem) -> bool:  # Recorded's
        return False

    def _late(self, fb: Feedback, now: float) -> None:
        """A result whose lease was already closed (expired, lost): the slot was freed then, but
        a request really went out and what the server answered (a gate, a 429, an outage) still
        applies to the host, so its throttling part is applied (named scopes are not known any more)."""
        if fb.outcome == "expired" or fb.sent_at <= 0 or not fb.host:
            return
        scopes = [fb.host]
        if fb.ip:
            scopes.append(f"ip:{fb.ip}")
        if fb.domain and fb.domain != fb.host and fb.domain in self.throttle.scopes:
            scopes.append(fb.domain)
        event = policy.Done(sent_at=fb.sent_at, status=fb.status, latency=fb.latency, error=fb.error,
                            headers=fb.headers, adjust=False, outcome=fb.outcome, late=True)  # fmt: skip
        for scope in scopes:
            self._apply(scope, event, now)

    def _closed(self, lease: Lease[UrlItem], now: float) -> None:
        self.inflight -= 1
        self._crawl_inflight[lease.item.crawl] -= 1
        if lease.kind == "robots":
            site = lease.site or origin(lease.item.url)
            self._robots_pending.discard(site)
            self._wake(f"robots:{site}", now)
        self._wake_scopes(lease, now)

    def _wake_scopes(self, lease: Lease[UrlItem], now: float) -> None:
        """The lease's scopes have a slot free: their queues are looked at again."""
        for scope in lease.scopes:
            self._wake(scope, now)
        qid = queue_id(lease.scopes, lease.item.crawl)
        if not self._waits(lease.item.crawl):
            self._scheduler.schedule(qid, now)
        self._scheduler.schedule(scope_queue(lease.scopes[0]), now)  # the host's own queue (it registers no waiters)

    def expire_leases(self, now: float) -> int:
        """Re-queue URLs whose lease deadline passed without feedback (at least once)."""
        expired = 0
        while self._leases and self._leases[0][0] <= now:
            _, lease_id = heapq.heappop(self._leases)
            key = lease_key(lease_id)
            raw = self.kv.get(key)
            if raw is None:
                continue  # feedback already closed it
            lease = lease_dec.decode(raw)
            if lease.deadline > now:
                heapq.heappush(self._leases, (lease.deadline, lease_id))  # held longer since (a client's hold)
                continue
            if lease.held_until > now and not lease.released_at:  # its hand-out deadline: the slot goes
                self._release(key, lease_id, raw, lease, now)
                continue
            dropped = self._dropped_lease(lease.item.crawl, lease_id) if lease.kind == "page" else None
            if lease.held_until and dropped is None:  # its client did not answer in time: handed out again
                self._enqueue_back(lease.qkey, lease.item, now)
                self.stats.returned += 1
                self._end_lease(key, lease, now, sent_at=lease.deadline)  # (sent by its deadline at the latest)
                expired += 1
                continue
            if dropped is not None:
                self._end_dropped(lease.item, lease_id, "lost", now, forgotten=dropped)
            elif lease.kind == "page" and lease.item.key and self._decided_while_leased(lease.item):
                pass  # a client's update decided it while it was out (done, or due later): not queued again
            elif lease.kind == "page":
                # A lease can be lost again and again (a URL whose fetch kills its worker, a worker
                # that never answers): count it as an attempt, and end with an error page.
                item = msgspec.structs.replace(lease.item, attempts=lease.item.attempts + 1)
                if item.attempts > self.settings.max_retries:
                    error = f"no result from a worker after {item.attempts} leases"
                    self._report(item, encoder.encode(item), b"", lease.scopes, now, "error", error)
                    self.stats.completed += 1
                    self.stats.failed += 1
                else:
                    self._enqueue_back(lease.qkey, item, now)
                    self._reopen(item, now)
            for scope in lease.scopes if not lease.released_at else ():
                self._apply(scope, policy.Lost(), now)
            self._delete(key)
            self._closed(lease, now)
            self.stats.lost += 1
            expired += 1
        return expired

    # -- reports: URLs that end without a fetch -----------------------------------------------------
    def _report(
        self, item: UrlItem, raw: bytes, qkey: bytes, scopes: list[str], now: float, kind: str, error: str
    ) -> None:
        """Replace a queue entry by a report lease; its page goes out with the next dispatch."""
        lease_id = self._new_lease_id()
        lease = Lease(qkey=qkey, item=msgspec.Raw(raw), deadline=now, scopes=scopes, kind=kind, error=error)
        self._put(lease_key(lease_id), encoder.encode(lease))  # written before the entry goes
        self._settle(item, now)  # its fate is decided now (the report lease holds it until published)
        crawl = self._crawl(item.crawl)
        crawl.completed += 1
        if kind == "disallowed":
            crawl.disallowed += 1
        else:
            crawl.failed += 1
        if qkey:
            self._delete(qkey)
        self._unreported.append(lease_id)

    @staticmethod
    def _report_page(lease: Lease[UrlItem], now: float) -> Page:
        return Page(url=lease.item.url, outcome=lease.kind, error=lease.error, meta=lease.item.meta, fetched_at=now,
                    crawl=lease.item.crawl)  # fmt: skip

    def _report_pending(self, out: Dispatch, now: float) -> None:
        """Hand out the pages of new report leases, and of restored ones (a previous owner may
        not have published them)."""
        pending, self._unreported = self._unreported, []
        for lease_id in pending:
            raw = self.kv.get(lease_key(lease_id))
            if raw is not None:
                out.reports.append(Report(lease_id, self._report_page(lease_dec.decode(raw), now)))

    def reported(self, lease_id: str) -> None:
        """The report's page is on crawl.pages: forget the report lease."""
        key = lease_key(lease_id)
        if self.kv.get(key) is not None:
            self._delete(key)

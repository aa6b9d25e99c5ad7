"""``PartitionFrontier``: one partition's frontier, assembled from the mixins beside it, with the
three entry points the service drives (``ingest`` URLs, ``dispatch`` what may be sent now,
``rebuild`` after a restore) and the counters' save.

Writes are ordered so that a crash between any two of them loses nothing: a URL is queued
before it is marked seen, a lease is written before its queue entry is deleted, a re-queued
entry is written before its lease is deleted. The worst case after a crash is a URL fetched
twice (at least once), never a URL dropped.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

import msgspec

from frontier.core.robots import origin, robots_url
from frontier.partition.keys import (
    CRAWL,
    LEASE,
    OVERRIDE,
    QUEUE,
    REVISIT,
    STATS_KEY,
    QueueId,
    crawl_of,
    input_key,
    is_multi,
    lease_of,
    override_of,
    queue_base,
    queue_crawl,
    queue_id,
    queue_of,
    queue_prefix,
    queue_scopes,
    queue_seq,
    revisit_due_ms,
    seen_key,
)
from frontier.partition.recorded import Recorded
from frontier.partition.records import (
    REPORT_KINDS,
    Dispatch,
    Stats,
    crawl_dec,
    encoder,
    item_dec,
    lease_dec,
    override_dec,
    stats_dec,
)
from frontier.partition.seen import SEEN_OPEN, read_seen, seen_value
from frontier.partition.visibility import Visibility
from topics.schemas import DEFAULT_CRAWL, UrlItem


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds:.0f} s"


class PartitionFrontier(Recorded, Visibility):
    """One frontier partition: the seen set, per-scope-set priority queues, robots.txt, leases and
    dispatch, over a :class:`~frontier.core.kv.KV`; every write also goes to ``changelog``."""

    def ingest(self, items: Iterable[UrlItem], now: float, encoded: Sequence[bytes] = ()) -> int:
        """Queue every URL not seen before (or seen and not open, with ``recrawl``); apply
        ``forget`` items; return how many were queued. ``encoded[i]``, when given, is ``items[i]``
        as the router encoded it: queued as it is (the item is not encoded again on its way). An
        item of a new crawl past ``frontier.max_crawls`` is left out: its index and the reason are
        in ``refused`` afterwards."""
        accepted = 0
        self.refused = []
        for i, item in enumerate(items):
            if refused := self.new_crawl_refused(item.crawl):
                self.refused.append((i, refused))  # the service puts it on crawl.rejected
                continue
            if item.key and item.refetch_at is not None:
                self._known(item, now)  # a URLFrontier client's update: decided, not queued
                continue
            key = seen_key(self._fingerprint(item))
            if item.forget:
                self._forget_seen(key)
                continue
            raw = self.kv.get(key)
            if raw is not None:
                if not item.recrawl or read_seen(raw)[0] == SEEN_OPEN:
                    self.stats.duplicates += 1  # (a recrawl of an open URL: it is queued or in flight)
                    self._crawl(item.crawl).duplicates += 1
                    continue
                self.stats.recrawls += 1  # its V entry, if any, is dropped when due (no longer named)
            if self._crawls and self._over_limit(item):
                self._crawl(item.crawl).over_limit += 1  # not marked seen: submitted later, it may be queued
                continue
            raw = encoded[i] if encoded else None
            if item.recrawl:
                item = msgspec.structs.replace(item, recrawl=False)  # a command, not part of the queued URL
                raw = None
            qid = queue_id(self.scopes_of(item), item.crawl)  # one string object per queue
            self._enqueue(self._qkey(qid, item, now), item, now, raw)
            self._put(key, seen_value(SEEN_OPEN, now))
            if item.key:
                self._record_discovered(item, now)
            self._crawl(item.crawl).ingested += 1
            accepted += 1
        self.stats.ingested += accepted
        return accepted

    def dispatch(self, now: float, limit: int = 1000) -> Dispatch:
        """Lease the jobs that may be sent at ``now``; report URLs robots.txt disallows."""
        out = Dispatch()
        if self._next_revisit is not None and self._next_revisit <= now:
            self._requeue_revisits(now)
        while len(out.jobs) < limit and self.inflight < self.settings.max_inflight:
            due = self._scheduler.pop_due(now)
            if due is None:
                break
            qid = QueueId(due)
            if (self._held or self.served_crawls is not None) and self._waits(crawl := queue_crawl(qid)):
                self._parked[crawl].add(qid)  # until its crawl is resumed, or has a worker
                continue
            group = self._groups.get(queue_base(qid)) if self._groups else None
            if not group:
                self._serve(qid, now, out)
                continue
            # other crawls queue URLs of these scopes: the turn goes to one of them, and the queue
            # popped follows it (the same scopes decide the same: sent, due later, or waiting)
            chosen = self._choose(qid, group)
            if chosen != qid:
                self._scheduler.discard(chosen)  # served now: where it goes next is what serving it says
            self._serve(chosen, now, out)
            if chosen != qid:
                self._follow(qid, chosen, now)
        if self._unreported:
            self._report_pending(out, now)
        return out

    def _serve(self, qid: QueueId, now: float, out: Dispatch) -> None:
        """Give ``qid`` its turn: lease its head if every scope allows it now, or report it (robots.txt),
        or reschedule it (or leave it waiting as a waiter)."""
        head = self.kv.first(queue_prefix(qid))
        if head is None:
            self._forget_queue(qid)
            return  # no work left: the queue leaves the heap
        qkey, raw = head
        item = item_dec.decode(raw)
        if item.key and self._stale_entry(item):  # a client decided it since it was queued
            self._delete(qkey)
            self._dequeued(qid)
            self._decided_by_client(item)
            self._scheduler.schedule(qid, now)
            return
        scopes = queue_scopes(qid)
        if self.settings.robots_obey:
            site = origin(item.url)
            rules = self._robots(site, now)
            if rules is None:
                self._need_robots(qid, item, scopes, site, now, out)
                return
            if rules.unavailable and not self._robots_given_up(rules):
                self._scheduler.schedule(qid, self._robots_due(rules))
                return
            if item.discover_sitemaps and not rules.unavailable:
                self._discover_sitemaps(site, item, rules, out)
            if item.agent and not rules.unavailable:
                self._agent_delay(site, item.host, rules, item.agent, now)
            if rules.unavailable or not rules.allowed(item.url, item.agent):
                if rules.unavailable:
                    rec = rules.record
                    error = f"robots.txt unreachable for {_duration(now - rec.failing_since)}"
                    error += f" ({rec.failures} attempts, last: {rec.error or rec.status})"
                    self._report(item, raw, qkey, scopes, now, "error", error)
                    self.stats.failed += 1
                else:
                    self._report(item, raw, qkey, scopes, now, "disallowed", "disallowed by robots.txt")
                    self.stats.disallowed += 1
                self._dequeued(qid)
                self._scheduler.schedule(qid, now)
                return
        elif item.discover_sitemaps:
            self._discover_sitemaps(origin(item.url), item, None, out)
        decision = self._decide(scopes, now, item.cost, qid=qid)
        if decision.at is None:
            return  # waits for feedback on a full scope (registered as a waiter)
        if decision.at > now + self.settings.dispatch_lead:
            self._scheduler.schedule(qid, decision.at - self.settings.dispatch_lead)
            return
        # Due now or within the lead: send it ahead with not_before = its slot, so Kafka
        # transit is off the critical path; the worker holds it until then.
        self._lease(out, item, raw, qkey, scopes, now, not_before=max(now, decision.at))
        self._dequeued(qid)
        self._scheduler.schedule(qid, now)
        if self._groups:
            self._took_turn(qid)

    def _follow(self, qid: QueueId, chosen: QueueId, now: float) -> None:
        """``qid`` lost its turn to ``chosen`` (its scopes'): it goes when ``chosen`` goes next, or,
        when ``chosen`` waits for a response, waits for one of its scopes too."""
        if self._queued.get(qid, 0) <= 0:
            self._forget_queue(qid)
            return
        at = self._scheduler.scheduled_at(chosen)
        if at is not None or chosen not in self._queued:
            self._scheduler.schedule(qid, now if at is None else at)
            return
        for scope in queue_scopes(qid):  # chosen waits as a waiter: woken by the next response of its scopes
            self._waiters[scope].add(qid)

    def _need_robots(
        self, qid: QueueId, item: UrlItem, scopes: list[str], site: str, now: float, out: Dispatch
    ) -> None:
        host = scopes[0]
        if site in self._robots_pending:
            self._waiters[f"robots:{site}"].add(qid)  # woken when that robots.txt lease closes
            return
        decision = self._decide(scopes, now, 0.0, qid=qid)  # the robots.txt request goes through the same throttling
        if decision.at is None:
            return
        if decision.at > now + self.settings.dispatch_lead:
            self._scheduler.schedule(qid, decision.at - self.settings.dispatch_lead)
            return
        # robots.txt redirects are followed one hop per job, each through the same throttling
        hop = self._robots_record(site)
        url = hop.redirect if hop is not None and hop.redirect else robots_url(item.url)
        # ip: the feedback's partition; crawl: the job goes to the workers of the crawl that waits for it
        robots_item = UrlItem(url=url, host=host, domain=item.domain, ip=item.ip, meta={}, crawl=item.crawl)
        self._robots_pending.add(site)
        self._lease(out, robots_item, encoder.encode(robots_item), b"", scopes, now, kind="robots",
                    not_before=max(now, decision.at), site=site)  # fmt: skip

    def next_wakeup(self) -> float | None:
        """The earliest time something may happen without new input."""
        lease = self._leases[0][0] if self._leases else None
        # at max_inflight nothing can go out before a lease closes (feedback wakes the loop)
        due = self._scheduler.next_time() if self.inflight < self.settings.max_inflight else None
        times = [t for t in (due, lease, self._next_revisit) if t is not None]
        return min(times) if times else None

    # -- recovery -------------------------------------------------------------------------------
    def rebuild(self, now: float) -> None:
        """Rebuild the in-memory heap, counters and lease index from the store."""
        self.__post_init__()
        raw = self.kv.get(STATS_KEY)
        self.stats = stats_dec.decode(raw) if raw is not None else Stats()
        self._saved_stats = msgspec.structs.replace(self.stats)
        for key, value in self.kv.scan(OVERRIDE):
            self._overrides[override_of(key)] = override_dec.decode(value)
        for key, value in self.kv.scan(CRAWL):
            self._crawls[crawl_of(key)] = crawl_dec.decode(value)
        if not self._crawls:  # a store from before crawls (its revisits never counted), or a new one
            self._count_revisits()
        self._held = self._held_crawls()
        head = self.kv.first(REVISIT)
        self._next_revisit = revisit_due_ms(head[0]) / 1000 if head is not None else None
        top = 0  # the highest queue sequence in use (queued or leased): new places come after it
        for key, value in self.kv.scan(LEASE):
            lease = lease_dec.decode(value)
            if lease.qkey:
                top = max(top, queue_seq(lease.qkey))
            if lease.kind in REPORT_KINDS:
                self._unreported.append(lease_of(key))  # its page may never have gone out
                continue
            heapq.heappush(self._leases, (lease.deadline, lease_of(key)))
            self.inflight += 1
            self._crawl_inflight[lease.item.crawl] += 1
            if lease.item.crawl not in self._crawls:
                self._crawl(lease.item.crawl)
            if lease.kind == "robots":
                self._robots_pending.add(lease.site or origin(lease.item.url))
        for key, _ in self.kv.scan(QUEUE):
            self._queued[queue_of(key)] += 1
            top = max(top, queue_seq(key))
        # (a previous owner whose clock ran ahead gave places this instance's clock has not reached)
        self._seq = top & ~1
        for qid, n in self._queued.items():
            crawl = queue_crawl(qid)
            self._crawl_queued[crawl] += n
            if crawl not in self._crawls:  # a store written before crawls: the default crawl has no record
                self._crawl(crawl)
            if self._waits(crawl):
                self._parked[crawl].add(qid)
            else:
                self._scheduler.schedule(qid, now)
            if is_multi(qid):
                self._index_queue(qid)

    def _count_revisits(self) -> None:
        """Each crawl's waiting revisits, counted from the store once (records written before
        crawls did not count them; the crawl records count them from then on)."""
        counts: dict[str, int] = {}
        for _, raw in self.kv.scan(REVISIT):
            crawl = item_dec.decode(raw).crawl if b'"crawl":' in raw else DEFAULT_CRAWL
            counts[crawl] = counts.get(crawl, 0) + 1
        for name in set(counts) | {n for n, r in self._crawls.items() if r.revisits}:
            if self._crawls.get(name) is None or self._crawls[name].revisits != counts.get(name, 0):
                self._crawl(name).revisits = counts.get(name, 0)

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
            self._put(input_key(role), str(offset).encode())

    def save_stats(self) -> None:
        """Store the counters if they changed (the service calls this once per batch of events)."""
        if self.stats != self._saved_stats:
            self._put(STATS_KEY, encoder.encode(self.stats))
            self._saved_stats = msgspec.structs.replace(self.stats)
        if self._crawls_dirty:
            self._save_crawls()

"""Crawls: named streams of work that share one politeness (issue 20).

Every URL belongs to a crawl (``UrlItem.crawl``, ``default`` when not named). A crawl has its
own seen set (``SeenSet._fingerprint``: one URL is crawled once in each crawl), its own queues
(a queue id names its crawl, ``keys.queue_id``) and its own workers (the service sends its jobs
to the crawl's jobs topic), but no politeness of its own: scope states, gates, robots.txt and
quotas are per scope, shared by every crawl. When several crawls queue URLs of the same scopes,
the scopes' turns are shared out (:meth:`Crawls._choose`): the highest priority first, and
round robin among equals, so the host sees one client at its own rate, whatever the number of
crawls.

A crawl *waits* while it is paused here (``crawl pause``) or has no worker connected (the
service says which crawls have one, ``set_served_crawls``, or which have none,
``set_idle_crawls``): its queues are put aside (``_parked``), out of the scheduler, and come back
when it is released. A crawl the service has not answered for yet waits too. Its record
(``K<crawl>``: commands, counters, the seen set's generation) is changelogged and moves with
the partition.
"""

from __future__ import annotations

from collections.abc import Iterable

from frontier.partition.keys import (
    LEASE,
    REVISIT,
    QueueId,
    crawl_key,
    entry_priority,
    lease_of,
    queue_base,
    queue_crawl,
    queue_prefix,
    revisit_due_ms,
    revisit_seen_key,
    seen_key,
)
from frontier.partition.queues import Queues
from frontier.partition.records import Refused, encoder, item_dec, lease_dec
from topics.schemas import DEFAULT_CRAWL, ControlCommand, CrawlStatus, UrlItem

REVISIT_LOOK = 500  # V entries a status snapshot looks at, at most, for each crawl's next revisit


class Crawls(Queues):
    # -- held crawls ------------------------------------------------------------------------------
    def set_idle_crawls(self, idle: Iterable[str], now: float) -> None:
        """The crawls that have no worker now (the service watches the workers' groups): their
        queues wait, out of the scheduler, until a worker comes."""
        idle = frozenset(idle)
        if idle != self.idle_crawls:
            self.idle_crawls = idle
            self._hold_changed(now)

    def set_served_crawls(self, served: Iterable[str] | None, now: float) -> None:
        """The crawls that have a worker now (None: every crawl): the others wait, out of the
        scheduler, until a worker comes."""
        served = frozenset(served) if served is not None else None
        if served != self.served_crawls:
            self.served_crawls = served
            self._hold_changed(now)

    def _held_crawls(self) -> frozenset[str]:
        """The crawls paused here, or said to have no worker."""
        return frozenset({name for name, r in self._crawls.items() if r.paused} | self.idle_crawls)

    def _hold_changed(self, now: float) -> None:
        self._held = self._held_crawls()
        for crawl in [c for c in self._parked if not self._waits(c)]:
            for qid in self._parked.pop(crawl):
                if qid in self._queued:
                    self._scheduler.schedule(qid, now)

    def crawl_names(self) -> Iterable[str]:
        """The crawls this partition has a record of (every crawl that queued a URL here)."""
        return self._crawls.keys()

    def held_reason(self, crawl: str) -> str | None:
        """Why the crawl's URLs wait (None: they do not)."""
        if not self._waits(crawl):
            return None
        record = self._crawls.get(crawl)
        if record is not None and record.paused:
            return f"crawl {crawl!r} paused"
        return f"crawl {crawl!r} has no worker"

    # -- turns --------------------------------------------------------------------------------------
    def _choose(self, qid: QueueId, group: set[QueueId]) -> QueueId:
        """The queue that takes this turn of ``qid``'s scopes: among the crawls' queues of the
        same scopes that are not held, the highest priority at the head, then the one served
        longest ago (round robin: :meth:`_took_turn` stamps a queue when it sends)."""
        live = [q for q in (queue_base(qid), *group) if self._queued.get(q, 0) > 0 and not self._waits(queue_crawl(q))]
        if len(live) < 2:
            return qid  # nothing to share (one crawl alone on these scopes): no look at the heads
        best: tuple[int, int] | None = None
        chosen = qid
        for q in live:
            head = self.kv.first(queue_prefix(q))
            if head is None:
                continue
            rank = (entry_priority(head[0]), -self._served.get(q, -1))
            if best is None or rank > best:
                best, chosen = rank, q
        return chosen

    def _took_turn(self, qid: QueueId) -> None:
        """``qid`` sent one of its URLs (or reported one): the next turn of its scopes goes to
        another crawl's queue first, when one waits."""
        self._turn += 1
        self._served[qid] = self._turn

    # -- limits -------------------------------------------------------------------------------------
    def _queued_in(self, crawl: str, host: str) -> int:
        """URLs of ``crawl`` queued for ``host`` (O(the host's queues))."""
        n = sum(self._queued[q] for q in self._multi.get(host, ()) if queue_crawl(q) == crawl)
        if crawl == DEFAULT_CRAWL:
            n += self._queued.get(QueueId(host), 0)
        return n

    def _over_limit(self, item: UrlItem) -> bool:
        record = self._crawls.get(item.crawl)
        return record is not None and record.per_host > 0 and self._queued_in(item.crawl, item.host) >= record.per_host

    # -- commands -------------------------------------------------------------------------------------
    def crawl_control(self, cmd: ControlCommand, now: float) -> int:
        """Apply a crawl command here; return the queued URLs it dropped (drop) or 0."""
        if refused := self.new_crawl_refused(cmd.crawl):
            raise Refused(refused)
        record = self._crawl(cmd.crawl)
        if cmd.action == "pause":
            record.paused = True
        elif cmd.action == "resume":
            record.paused = False
        elif cmd.action == "limit":
            record.per_host = cmd.per_host or 0
        elif cmd.action == "drop":
            return self._drop_crawl(cmd.crawl, now, cmd.forget)
        self._hold_changed(now)
        return 0

    def _drop_crawl(self, crawl: str, now: float, forget: bool) -> int:
        """Remove the crawl's queued URLs and waiting revisits (their seen entries: done, or with
        ``forget`` deleted, and the crawl's seen set starts a new generation). Jobs in flight
        finish."""
        record = self._crawl(crawl)
        dropped = 0
        for qid in [q for q in self._queued if queue_crawl(q) == crawl]:
            for key, raw in list(self.kv.scan(queue_prefix(qid))):
                self._end_seen(item_dec.decode(raw), now, forget)  # before the entry goes
                self._delete(key)
                dropped += 1
            self._forget_queue(qid)
        self._crawl_queued.pop(crawl, None)
        self._parked.pop(crawl, None)
        for key, raw in list(self.kv.scan(REVISIT)):
            if b'"crawl":' not in raw and crawl != DEFAULT_CRAWL:
                continue
            item = item_dec.decode(raw)
            if item.crawl != crawl:
                continue
            if forget:
                self._delete(revisit_seen_key(key))
            self._delete(key)
            record.revisits = max(0, record.revisits - 1)
        for key, raw in list(self.kv.scan(LEASE)):  # in flight: they finish, and do not come back
            lease = lease_dec.decode(raw)
            if lease.item.crawl == crawl and lease.kind == "page":
                record.dropped_leases[lease_of(key)] = forget
                if forget:  # its entry of this generation goes now; its result writes none
                    self._delete(seen_key(self._fingerprint(lease.item)))
        if forget:
            record.generation += 1
            self.stats.forgotten += dropped
        record.dropped += dropped
        self.stats.dropped += dropped
        return dropped

    def _dropped_lease(self, crawl: str, lease_id: str) -> bool | None:
        """Whether a lease was in flight when its crawl was dropped (the value: that drop forgot
        the seen set; None: it was not)."""
        record = self._crawls.get(crawl)
        if record is None or not record.dropped_leases:
            return None
        return record.dropped_leases.get(lease_id)

    def _end_dropped(self, item: UrlItem, lease_id: str, outcome: str, now: float, forgotten: bool) -> None:
        """The result of a job whose crawl was dropped while it was in flight: counted, never
        queued again (a retry, a hand-back or a lost lease ends it), and after a forgetting drop
        nothing written to the crawl's new seen set."""
        record = self._crawl(item.crawl)
        record.dropped_leases.pop(lease_id, None)
        if outcome in ("fetched", "error", "skipped"):
            record.completed += 1
            self.stats.completed += 1
            if outcome == "fetched":
                record.fetched += 1
                self.stats.fetched += 1
            elif outcome == "error":
                record.failed += 1
                self.stats.failed += 1
            else:
                record.skipped += 1
                self.stats.skipped += 1
        else:
            record.dropped += 1
            self.stats.dropped += 1
        if not forgotten:
            self._settle(item, now)

    def _end_seen(self, item: UrlItem, now: float, forget: bool) -> None:
        if forget:
            self._delete(seen_key(self._fingerprint(item)))
        else:
            self._settle(item, now)

    # -- what an operator sees ----------------------------------------------------------------------
    def crawl_rows(self, now: float) -> list[CrawlStatus]:
        """Every crawl this partition has a record of, with its counts here."""
        due = self._next_revisits()
        rows = []
        for name, r in self._crawls.items():
            rows.append(CrawlStatus(
                crawl=name, queued=self._crawl_queued.get(name, 0), inflight=self._crawl_inflight.get(name, 0),
                ingested=r.ingested, dispatched=r.dispatched, completed=r.completed, fetched=r.fetched,
                failed=r.failed, disallowed=r.disallowed, dropped=r.dropped, over_limit=r.over_limit,
                revisits=r.revisits, next_revisit=due.get(name), paused=r.paused, per_host=r.per_host,
            ))  # fmt: skip
        return rows

    def _next_revisits(self) -> dict[str, float]:
        """Each crawl's earliest revisit (at most REVISIT_LOOK entries looked at: a crawl not met by
        then is given the last time looked at, a lower bound)."""
        waiting = {name for name, r in self._crawls.items() if r.revisits > 0}
        found: dict[str, float] = {}
        last = None
        for n, (key, raw) in enumerate(self.kv.scan(REVISIT)):
            last = revisit_due_ms(key) / 1000
            if n >= REVISIT_LOOK:
                break
            crawl = item_dec.decode(raw).crawl if b'"crawl":' in raw else DEFAULT_CRAWL
            found.setdefault(crawl, last)
            if waiting <= found.keys():
                return found
        for name in waiting - found.keys():
            if last is not None:
                found[name] = last
        return found

    def _save_crawls(self) -> None:
        for name in self._crawls_dirty:
            record = self._crawls.get(name)
            if record is not None:
                self._put(crawl_key(name), encoder.encode(record))
        self._crawls_dirty.clear()

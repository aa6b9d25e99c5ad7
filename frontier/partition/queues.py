"""The queues, as the part :class:`Queues`: one queue per set of scopes (and crawl), its entries
in the store (``Q<queue>\\x00<prio><seq>``), its count, its due time in the scheduler, the index
of multi-scope queues by scope, the crawls' groups of queues of the same scopes (whose turns are
shared out), the queues put aside while their crawl waits, and the queues waiting for a scope's
free slot (:class:`Waiters`).

Scopes: a job belongs to its host's scope, to its registrable domain's scope when that domain
has settings of its own, and to any named scopes it was submitted with (``"api"``, qualified by
the registrable domain, since scopes live in the domain's partition). Jobs with the same set of
scopes share one queue, so a job waiting for a slow scope never holds up one that is not in it.

Interface: ``qkey``/``qkey_due`` (a new entry's place), ``enqueue``/``enqueue_back``,
``dequeued``, ``forget`` (a queue leaves), ``index``, ``choose``/``took_turn`` (turns between
crawls), ``park``/``unpark``, ``wake_covered``, ``remove_if``, ``emptied``, ``forget_crawl``,
the counts (``count``, ``of_crawl``, ``of_scope``, ``largest``, ``queued_in``, ``crawl_queued``),
``load``. ``scheduler``, ``groups`` and ``heads`` (the queues' first entries kept in memory,
:class:`~frontier.partition.heads.Heads`) are read by the dispatch loop (its hot path), ``waiters``
is handed to ``Scopes`` (a full scope registers its waiting queues). Depends on: the store and
``Crawls`` (whether a crawl waits).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable

from frontier.core.control import covers
from frontier.core.scheduler import Scheduler
from frontier.partition.counts import QueueCounts
from frontier.partition.crawls import Crawls
from frontier.partition.heads import Heads
from frontier.partition.keys import (
    CRAWL_SEP,
    SEP,
    QueueId,
    entry_priority,
    is_multi,
    queue_base,
    queue_crawl,
    queue_key,
    queue_of,
    queue_prefix,
    queue_scopes,
    queue_seq,
)
from frontier.partition.largest import Largest
from frontier.partition.records import encoder, item_dec
from frontier.partition.store import Store
from topics.schemas import DEFAULT_CRAWL, UrlItem

_LOW = 2**20 - 1  # the sequence's bits under the millisecond
_TRIES = 64  # free due-time places looked for in one millisecond before a key goes to the tail


class Waiters:
    """Queues waiting for a key's next free slot: a scope, or ``robots:<origin>`` (its robots.txt
    lease). A host's own queue needs no entry: every lease that closes on a host reschedules that
    host's queue (``Leases.wake_scopes``)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self._waiting: dict[str, set[QueueId]] = defaultdict(set)

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, key: str, qid: QueueId) -> None:
        self._waiting[key].add(qid)

    def wake(self, key: str, now: float) -> None:
        """The key has a slot free: its waiting queues are due now."""
        for qid in self._waiting.pop(key, ()):
            self._scheduler.schedule(qid, now)


class Queues:
    """Every queue of one partition: entries, counts, schedule, indexes."""

    def __init__(self, store: Store, crawls: Crawls) -> None:
        self._store = store
        self._kv = store.kv
        self._crawls = crawls
        self.scheduler = Scheduler()  # queue ids by due time
        self.waiters = Waiters(self.scheduler)
        self._queued: Counter[QueueId] = Counter()  # queue id → URLs queued
        self._crawl_queued: Counter[str] = Counter()  # crawl → URLs queued
        # scope → the multi-scope queue ids in _queued that contain it, so that a watched scope's
        # row costs O(its queues); a single-scope queue is _queued[scope] itself
        self._multi: dict[str, set[QueueId]] = {}
        self.groups: dict[QueueId, set[QueueId]] = {}  # default crawl's queue id → other crawls' queues of its scopes
        self._served: dict[QueueId, int] = {}  # queue → the turn it was last chosen at (round robin)
        # the crawls' queues whose head priority a turn must read: a URL of another priority than
        # the default came in, or they were loaded (``index`` from ``load``). Every other crawl
        # queue's entries are all of the default priority, so a turn among such queues reads no
        # head (few: sparse). The default crawl's queue of the scopes is always read (not tracked)
        self._ranked: set[QueueId] = set()
        # the queues' first entries, key and value, as in the store (bounded): a turn between
        # crawls and a send read a head from memory, told of every entry in and out
        self.heads = Heads(self._kv)
        self._largest = Largest(self._queued)  # the busiest queues, kept as they grow (status)
        self._turn = 0
        self._parked: dict[str, set[QueueId]] = defaultdict(set)  # waiting crawl → its queues put aside
        self._seq = 0  # queue sequence: monotonic (FIFO within a priority), see qkey
        self._due_low = 0  # where the next due-time key looks for a free place (qkey_due)

    # -- places -----------------------------------------------------------------------------------
    def qkey(self, qid: QueueId, item: UrlItem, now: float) -> bytes:
        # FIFO within a priority: the sequence is milliseconds since the epoch times 2**20, plus
        # a counter. It never goes back within a process, survives restarts (the clock moved on),
        # and stays within 64 bits until the year 2500 (no wrap that would flip the order). It is
        # even: odd sequences are the due-time keys (qkey_due), so the two never meet.
        self._seq = max(self._seq + 2, int(max(0.0, now) * 1000) << 20) & ~1
        return queue_key(qid, item.priority, self._seq)

    def qkey_due(self, qid: QueueId, item: UrlItem, due: float) -> bytes:
        """A key that sorts ``item`` by the time it became due (a revisit, a client's known URL):
        before the URLs queued since, after those queued before. Its sequence is the due
        millisecond times 2**20 plus an odd number not in use there (queued: looked up; leased:
        a lease coming back to a place taken meanwhile moves, :meth:`enqueue_back`)."""
        base = int(max(0.0, due) * 1000) << 20
        for _ in range(_TRIES):
            self._due_low = (self._due_low + 2) & _LOW
            qkey = queue_key(qid, item.priority, base | self._due_low | 1)
            if self._kv.get(qkey) is None:
                return qkey
        # that millisecond is crowded: after everything queued, at a place not in use (after a
        # restart the monotonic sequence may start at a millisecond some entries already have)
        qkey = self.qkey(qid, item, due)
        while self._kv.get(qkey) is not None:
            qkey = self.qkey(qid, item, due)
        return qkey

    # -- entering and leaving ---------------------------------------------------------------------
    def enqueue_back(self, qkey: bytes, item: UrlItem, now: float) -> None:
        """A leased URL back at the place it had (its order kept), or at a free place in the
        same millisecond when another key took that place while it was out (a due-time key; or,
        after a restart or a takeover by an instance whose clock is behind, a monotonic one)."""
        if self._kv.get(qkey) is not None:
            qkey = self.qkey_due(queue_of(qkey), item, (queue_seq(qkey) >> 20) / 1000)
        self.enqueue(qkey, item, now)

    def enqueue(self, qkey: bytes, item: UrlItem, now: float, raw: bytes | None = None) -> None:
        """Queue ``item`` at ``qkey``; ``raw``: its encoding when the caller has it."""
        qid = queue_of(qkey)
        value = encoder.encode(item) if raw is None else raw
        self._store.put(qkey, value)
        before = self._queued.get(qid)
        if before is None and is_multi(qid):
            self._index(qid)
        self.heads.entered(qid, qkey, value, before or 0)
        if priority := entry_priority(qkey):
            if priority > 0 and before and is_multi(qid) and qid not in self._ranked:
                # every entry of a queue known here (indexed) held the default priority: this one
                # sorts before them all, its new head, kept for the turns that now read it
                self.heads.first(qid, qkey, value)
            self._ranked.add(qid)
        self._queued[qid] = count = (before or 0) + 1
        self._largest.grew(qid, count)
        self._crawl_queued[item.crawl] += 1
        if self._crawls.waits(item.crawl):
            self._parked[item.crawl].add(qid)  # waits for its crawl's resume, or a worker
        else:
            self.scheduler.schedule(qid, min(now, self.scheduler.scheduled_at(qid) or now))

    def dequeued(self, qid: QueueId, qkey: bytes | None = None) -> None:
        """One URL left ``qid`` (leased, or reported): its entry ``qkey``, when the caller knows it."""
        if qkey is None:
            self.heads.drop(qid)  # read again at its next use
        else:
            self.heads.left(qid, qkey)
        self._queued[qid] -= 1
        self._crawl_queued[queue_crawl(qid)] -= 1

    def index(self, qid: QueueId) -> None:
        """A multi-scope (or another crawl's) queue id entered the counts from the store: index it
        under each of its scopes, and a crawl's queue in the group of its scopes' queues. Its
        entries' priorities are not known: a turn reads its head."""
        self._index(qid)
        self._ranked.add(qid)

    def _index(self, qid: QueueId) -> None:
        for scope in queue_scopes(qid):
            self._multi.setdefault(scope, set()).add(qid)
        if CRAWL_SEP in qid:
            self.groups.setdefault(queue_base(qid), set()).add(qid)

    def forget(self, qid: QueueId) -> None:
        """Remove ``qid`` from the counts and from the indexes (the one way out of them)."""
        if self._queued.pop(qid, None) is not None and is_multi(qid):
            for scope in queue_scopes(qid):
                queues = self._multi.get(scope)
                if queues is not None:
                    queues.discard(qid)
                    if not queues:
                        del self._multi[scope]
            if CRAWL_SEP in qid:
                base = queue_base(qid)
                group = self.groups.get(base)
                if group is not None:
                    group.discard(qid)
                    if not group:
                        del self.groups[base]
        self._served.pop(qid, None)
        self._ranked.discard(qid)
        self.heads.drop(qid)

    def emptied(self, qid: QueueId, n: int) -> None:
        """``n`` entries of ``qid`` were removed, the last ones: the queue leaves."""
        self._crawl_queued[queue_crawl(qid)] -= n
        self.forget(qid)

    def forget_crawl(self, crawl: str) -> None:
        """The crawl's queues were all removed (each :meth:`forget`): its count and parked set go."""
        self._crawl_queued.pop(crawl, None)
        self._parked.pop(crawl, None)

    def remove_if(self, qid: QueueId, gone: Callable[[UrlItem], bool], now: float) -> None:
        """Remove the queued entries of ``qid`` that are ``gone``."""
        for qkey, raw in list(self._kv.scan(queue_prefix(qid))):
            if gone(item_dec.decode(raw)):
                self._store.delete(qkey)
                self.dequeued(qid, qkey)
        if self._queued.get(qid, 0) <= 0:
            self.forget(qid)
        else:
            self.scheduler.schedule(qid, now)

    # -- schedule ---------------------------------------------------------------------------------
    def park(self, crawl: str, qid: QueueId) -> None:
        """Put ``qid`` aside until its crawl no longer waits."""
        self._parked[crawl].add(qid)

    def unpark(self, waits: Callable[[str], bool], now: float) -> None:
        """The queues of the crawls that no longer wait are due now."""
        for crawl in [c for c in self._parked if not waits(c)]:
            for qid in self._parked.pop(crawl):
                if qid in self._queued:
                    self.scheduler.schedule(qid, now)

    def wake_covered(self, name: str, now: float) -> None:
        """Every queue with a scope ``name`` covers is looked at again (an override changed)."""
        for qid in list(self._queued):
            if any(covers(name, scope) for scope in queue_scopes(qid)):
                self.scheduler.schedule(qid, now)

    def choose(self, qid: QueueId, group: set[QueueId]) -> QueueId:
        """The queue that takes this turn of ``qid``'s scopes: among the crawls' queues of the
        same scopes that are not held, the highest priority at the head, then the one served
        longest ago (round robin: :meth:`took_turn` stamps a queue when it sends). No head is read
        when every live queue holds URLs of the default priority only (the common case); else the
        heads are read from memory (:class:`Heads`; a seek only for one not kept), and the chosen
        one is there for its send."""
        waits = self._crawls.waits
        base = queue_base(qid)
        live = [q for q in (base, *group) if self._queued.get(q, 0) > 0 and not waits(queue_crawl(q))]
        if len(live) < 2:
            return qid  # nothing to share (one crawl alone on these scopes): no look at the heads
        served, ranked = self._served, self._ranked
        if live[0] != base and ranked.isdisjoint(live):  # every head of the default priority: no read
            turn = min(served.get(q, -1) for q in live)
            return next(q for q in live if served.get(q, -1) == turn)  # the first served longest ago
        best: tuple[int, int] | None = None
        chosen = qid
        head_of = self.heads.head
        for q in live:
            if q in ranked or q == base:  # (any other holds URLs of the default priority only)
                head = head_of(q)
                if head is None:
                    continue
                rank = (entry_priority(head[0]), -served.get(q, -1))
            else:
                rank = (0, -served.get(q, -1))
            if best is None or rank > best:
                best, chosen = rank, q
        return chosen

    def took_turn(self, qid: QueueId) -> None:
        """``qid`` sent one of its URLs (or reported one): the next turn of its scopes goes to
        another crawl's queue first, when one waits."""
        self._turn += 1
        self._served[qid] = self._turn

    # -- counts -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Queues counted (queued, or emptied and not popped yet)."""
        return len(self._queued)

    def count(self, qid: QueueId) -> int:
        """URLs queued in ``qid`` (0: none, or no such queue)."""
        return self._queued.get(qid, 0)

    def has(self, qid: QueueId) -> bool:
        """Whether ``qid`` is counted (queued, or emptied and not popped yet)."""
        return qid in self._queued

    def ids(self) -> list[QueueId]:
        return list(self._queued)

    def of_crawl(self, crawl: str) -> list[QueueId]:
        return [q for q in self._queued if queue_crawl(q) == crawl]

    def of_scope(self, scope: str, own: QueueId) -> list[tuple[int, QueueId]]:
        """``(count, queue)`` of each queue of ``scope``: the multi-scope queues the index lists
        for it, and its own queue ``own`` when counted (O(its queues), never a scan)."""
        mine = [(self._queued[q], q) for q in self._multi.get(scope, ())]
        if own in self._queued:
            mine.append((self._queued[own], own))
        return mine

    def largest(self, n: int) -> list[tuple[QueueId, int]]:
        """The ``n`` largest queues and their counts (:class:`Largest`: the queues that grew since
        the last ranking, most of the time; a C-level scan of every queue otherwise)."""
        return self._largest.largest(n)

    def queued_in(self, crawl: str, host: str) -> int:
        """URLs of ``crawl`` queued for ``host`` (O(the host's queues))."""
        n = sum(self._queued[q] for q in self._multi.get(host, ()) if queue_crawl(q) == crawl)
        if crawl == DEFAULT_CRAWL:
            n += self._queued.get(QueueId(host), 0)
        return n

    def crawl_queued(self, crawl: str) -> int:
        return self._crawl_queued.get(crawl, 0)

    def queued_hosts(self) -> int:
        return len(self.scheduler)

    def queued(self) -> int:
        """URLs queued (the crawls' counts added up: O(crawls), not O(queues), at every status snapshot)."""
        return sum(self._crawl_queued.values())

    # -- the store --------------------------------------------------------------------------------
    def counted(self) -> QueueCounts:
        """The queues' counts as they stand, the store's (``load`` takes them again, e.g. when a
        partition closed here is opened again on the same store)."""
        made = QueueCounts()
        made.counts = {qid: n for qid, n in self._queued.items() if n > 0}
        # every even sequence stored (qkey's: a new key must not meet one) is at most this; an odd
        # one (qkey_due's) may be above it, but a new key never takes an odd one, and sorts after
        # it when its due time has passed
        made.top = self._seq
        return made

    def load(self, now: float, top: int, counts: QueueCounts | None = None) -> None:
        """Count the stored entries and schedule (or park) their queues (``rebuild``); ``top``:
        the highest sequence the leases use. ``counts``: the entries of each queue as counted
        ahead (a standby copy's, :mod:`frontier.partition.counts`), else counted here (a walk of
        every entry). Crawls queued without a record get one."""
        if counts is None:
            counts = QueueCounts.scan(self._kv)
        self._queued.update(counts.counts)
        top = max(top, counts.top)
        # (a previous owner whose clock ran ahead gave places this instance's clock has not reached)
        self._seq = top & ~1
        # taken a crawl at a time: the default crawl's queues (most often all, a million at 1M hosts
        # over a few partitions) by one filter and one sum, without a call per queue
        queued = self._queued
        default = [q for q in queued if CRAWL_SEP not in q]
        of_crawl: dict[str, list[QueueId]] = {DEFAULT_CRAWL: default} if default else {}
        if len(default) < len(queued):
            for qid in queued:
                if CRAWL_SEP in qid:
                    of_crawl.setdefault(queue_crawl(qid), []).append(qid)
        due: list[QueueId] = []
        for crawl, qids in of_crawl.items():
            self._crawl_queued[crawl] += sum(map(queued.__getitem__, qids))
            if self._crawls.get(crawl) is None:  # a store written before crawls: the default crawl has no record
                self._crawls.record(crawl)
            if self._crawls.waits(crawl):
                self._parked[crawl].update(qids)
            else:
                due += qids
        for qid in [q for q in queued if SEP in q or CRAWL_SEP in q]:  # (is_multi)
            self.index(qid)
        self.scheduler.schedule_many(due, now)

"""The queues: one per set of scopes, its entries in the store (``Q<queue>\\x00<prio><seq>``),
its count in ``_queued``, its due time in the scheduler, and the index of multi-scope queues by
scope (``_multi``). Entering and leaving a queue goes through here, and an operator's drop.

Scopes: a job belongs to its host's scope, to its registrable domain's scope when that domain
has settings of its own, and to any named scopes it was submitted with (``"api"``, qualified by
the registrable domain, since scopes live in the domain's partition). Jobs with the same set of
scopes share one queue, so a job waiting for a slow scope never holds up one that is not in it.
"""

from __future__ import annotations

from frontier.core.control import covers
from frontier.partition.keys import (
    CRAWL_SEP,
    QueueId,
    is_multi,
    queue_base,
    queue_crawl,
    queue_key,
    queue_of,
    queue_prefix,
    queue_scopes,
    queue_seq,
)
from frontier.partition.records import encoder, item_dec
from frontier.partition.seen import SeenSet
from topics.schemas import UrlItem

_LOW = 2**20 - 1  # the sequence's bits under the millisecond
_TRIES = 64  # free due-time places looked for in one millisecond before a key goes to the tail


class Queues(SeenSet):
    def _qkey(self, qid: QueueId, item: UrlItem, now: float) -> bytes:
        # FIFO within a priority: the sequence is milliseconds since the epoch times 2**20, plus
        # a counter. It never goes back within a process, survives restarts (the clock moved on),
        # and stays within 64 bits until the year 2500 (no wrap that would flip the order). It is
        # even: odd sequences are the due-time keys (_qkey_due), so the two never meet.
        self._seq = max(self._seq + 2, int(max(0.0, now) * 1000) << 20) & ~1
        return queue_key(qid, item.priority, self._seq)

    def _qkey_due(self, qid: QueueId, item: UrlItem, due: float) -> bytes:
        """A key that sorts ``item`` by the time it became due (a revisit, a client's known URL):
        before the URLs queued since, after those queued before. Its sequence is the due
        millisecond times 2**20 plus an odd number not in use there (queued: looked up; leased:
        a lease coming back to a place taken meanwhile moves, :meth:`_enqueue_back`)."""
        base = int(max(0.0, due) * 1000) << 20
        for _ in range(_TRIES):
            self._due_low = (self._due_low + 2) & _LOW
            qkey = queue_key(qid, item.priority, base | self._due_low | 1)
            if self.kv.get(qkey) is None:
                return qkey
        # that millisecond is crowded: after everything queued, at a place not in use (after a
        # restart the monotonic sequence may start at a millisecond some entries already have)
        qkey = self._qkey(qid, item, due)
        while self.kv.get(qkey) is not None:
            qkey = self._qkey(qid, item, due)
        return qkey

    def _enqueue_back(self, qkey: bytes, item: UrlItem, now: float) -> None:
        """A leased URL back at the place it had (its order kept), or at a free place in the
        same millisecond when another key took that place while it was out (a due-time key; or,
        after a restart or a takeover by an instance whose clock is behind, a monotonic one)."""
        if self.kv.get(qkey) is not None:
            qkey = self._qkey_due(queue_of(qkey), item, (queue_seq(qkey) >> 20) / 1000)
        self._enqueue(qkey, item, now)

    def _enqueue(self, qkey: bytes, item: UrlItem, now: float, raw: bytes | None = None) -> None:
        """Queue ``item`` at ``qkey``; ``raw``: its encoding when the caller has it."""
        qid = queue_of(qkey)
        self._put(qkey, encoder.encode(item) if raw is None else raw)
        if is_multi(qid) and qid not in self._queued:
            self._index_queue(qid)
        self._queued[qid] += 1
        self._crawl_queued[item.crawl] += 1
        if self._waits(item.crawl):
            self._parked[item.crawl].add(qid)  # waits for its crawl's resume, or a worker
        else:
            self._scheduler.schedule(qid, min(now, self._scheduler.scheduled_at(qid) or now))

    def _dequeued(self, qid: QueueId) -> None:
        """One URL left ``qid`` (leased, or reported)."""
        self._queued[qid] -= 1
        self._crawl_queued[queue_crawl(qid)] -= 1

    def _index_queue(self, qid: QueueId) -> None:
        """A multi-scope (or another crawl's) queue id entered ``_queued``: index it under each of
        its scopes, and a crawl's queue in the group of its scopes' queues."""
        for scope in queue_scopes(qid):
            self._multi.setdefault(scope, set()).add(qid)
        if CRAWL_SEP in qid:
            self._groups.setdefault(queue_base(qid), set()).add(qid)

    def _forget_queue(self, qid: QueueId) -> None:
        """Remove ``qid`` from ``_queued`` and from the scope index (the one way out of both)."""
        if self._queued.pop(qid, None) is not None and is_multi(qid):
            for scope in queue_scopes(qid):
                queues = self._multi.get(scope)
                if queues is not None:
                    queues.discard(qid)
                    if not queues:
                        del self._multi[scope]
            if CRAWL_SEP in qid:
                base = queue_base(qid)
                group = self._groups.get(base)
                if group is not None:
                    group.discard(qid)
                    if not group:
                        del self._groups[base]
        self._served.pop(qid, None)

    def _wake(self, key: str, now: float) -> None:
        for qid in self._waiters.pop(key, ()):
            self._scheduler.schedule(qid, now)

    def _drop(self, name: str, now: float) -> int:
        """Remove every queued URL of the queues with a scope ``name`` covers; return how many."""
        dropped = 0
        for qid in list(self._queued):
            if not any(covers(name, scope) for scope in queue_scopes(qid)):
                continue
            n = 0
            for key, raw in list(self.kv.scan(queue_prefix(qid))):
                item = item_dec.decode(raw)
                self._settle(item, now)  # before the entry goes (a crash: still queued)
                self._delete(key)
                n += 1
            self._crawl_queued[queue_crawl(qid)] -= n
            self._crawl(queue_crawl(qid)).dropped += n
            dropped += n
            self._forget_queue(qid)
        self.stats.dropped += dropped
        return dropped

    def queued_hosts(self) -> int:
        return len(self._scheduler)

    def queued(self) -> int:
        return sum(self._queued.values())

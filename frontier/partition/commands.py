"""Operators' commands, as the part :class:`Commands`: a scope's (pause, resume, delay,
concurrency, block, drop) and a crawl's (pause, resume, limit, drop with or without forget).

Interface: ``control``, ``crawl_control``, ``drop`` (a scope's queued URLs), ``drop_crawl`` (a
crawl's queued URLs, revisits and the fate of its jobs in flight; also the gateway's deletion of
a crawl). Owns nothing of its own: the changes go through the parts. Depends on: the store,
``Crawls``, ``SeenSet``, ``Queues``, ``Scopes``, ``Revisits`` and the partition's ``Stats``.
"""

from __future__ import annotations

from frontier.core.control import covers
from frontier.partition.crawls import Crawls
from frontier.partition.keys import LEASE, lease_of, queue_crawl, queue_prefix, queue_scopes
from frontier.partition.queues import Queues
from frontier.partition.records import Refused, Stats, item_dec, lease_dec
from frontier.partition.revisits import Revisits
from frontier.partition.scopes import Scopes
from frontier.partition.seen import SeenSet
from frontier.partition.store import Store
from topics.schemas import ControlCommand, UrlItem


class Commands:
    """What an operator's command does to one partition."""

    def __init__(self, store: Store, stats: Stats, crawls: Crawls, seen: SeenSet, queues: Queues, scopes: Scopes,
                 revisits: Revisits) -> None:  # fmt: skip
        self._store = store
        self._kv = store.kv
        self._stats = stats
        self._crawls = crawls
        self._seen = seen
        self._queues = queues
        self._scopes = scopes
        self._revisits = revisits

    def control(self, cmd: ControlCommand, now: float) -> int:
        """Apply a scope (or crawl) command; return the queued URLs it dropped (drop) or 0."""
        if cmd.crawl:
            return self.crawl_control(cmd, now)
        if cmd.action == "drop":
            return self.drop(cmd.scope, now)
        self._scopes.set_override(cmd, now)
        self._queues.wake_covered(cmd.scope, now)  # anything may dispatch sooner now: look at its queues again
        return 0

    def drop(self, name: str, now: float) -> int:
        """Remove every queued URL of the queues with a scope ``name`` covers; return how many."""
        dropped = 0
        for qid in self._queues.ids():
            if not any(covers(name, scope) for scope in queue_scopes(qid)):
                continue
            n = 0
            for key, raw in list(self._kv.scan(queue_prefix(qid))):
                item = item_dec.decode(raw)
                self._seen.settle(item, now)  # before the entry goes (a crash: still queued)
                self._store.delete(key)
                n += 1
            self._queues.emptied(qid, n)
            self._crawls.record(queue_crawl(qid)).dropped += n
            dropped += n
        self._stats.dropped += dropped
        return dropped

    def crawl_control(self, cmd: ControlCommand, now: float) -> int:
        """Apply a crawl command here; return the queued URLs it dropped (drop) or 0."""
        if refused := self._crawls.refused(cmd.crawl):
            raise Refused(refused)
        record = self._crawls.record(cmd.crawl)
        if cmd.action == "pause":
            record.paused = True
        elif cmd.action == "resume":
            record.paused = False
        elif cmd.action == "limit":
            record.per_host = cmd.per_host or 0
        elif cmd.action == "drop":
            return self.drop_crawl(cmd.crawl, now, cmd.forget)
        self._crawls.rehold()
        self._queues.unpark(self._crawls.waits, now)
        return 0

    def drop_crawl(self, crawl: str, now: float, forget: bool) -> int:
        """Remove the crawl's queued URLs and waiting revisits (their seen entries: done, or with
        ``forget`` deleted, and the crawl's seen set starts a new generation). Jobs in flight
        finish, and do not come back (``Leases`` ends them as the crawl's record says)."""
        record = self._crawls.record(crawl)
        dropped = 0
        for qid in self._queues.of_crawl(crawl):
            for key, raw in list(self._kv.scan(queue_prefix(qid))):
                self._end_seen(item_dec.decode(raw), now, forget)  # before the entry goes
                self._store.delete(key)
                dropped += 1
            self._queues.forget(qid)
        self._queues.forget_crawl(crawl)
        self._revisits.drop_crawl(crawl, record, forget)
        for key, raw in list(self._kv.scan(LEASE)):  # in flight: they finish, and do not come back
            lease = lease_dec.decode(raw)
            if lease.item.crawl == crawl and lease.kind == "page":
                record.dropped_leases[lease_of(key)] = forget
                if forget:  # its entry of this generation goes now; its result writes none
                    self._store.delete(self._seen.key(lease.item))
        if forget:
            record.generation += 1
            self._stats.forgotten += dropped
        record.dropped += dropped
        self._stats.dropped += dropped
        return dropped

    def _end_seen(self, item: UrlItem, now: float, forget: bool) -> None:
        if forget:
            self._store.delete(self._seen.key(item))
        else:
            self._seen.settle(item, now)

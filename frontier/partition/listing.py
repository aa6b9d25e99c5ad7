"""The answers to the gateway's queries (:class:`~topics.schemas.Query`) about recorded URLs, as
the part :class:`Listing`: the reading questions (count, stats, a page of URLs or of queue keys,
a URL's status, the crawls) as walks computed a slice at a time (:class:`~frontier.partition.
recorded.Walk`, see ``recorded.py``), and the changes (a hold of leases handed out, deletions of
a queue's URLs, a whole crawl's, or those first recorded before a time), applied at once.

Interface: ``answer``, ``walk``, ``change``. Owns nothing of its own: it reads the ``U`` and
``L`` keys and removes through the parts. Depends on: the store, ``Crawls``, ``SeenSet``,
``Queues`` (removed entries), ``Leases`` (holds, ended leases) and ``Commands`` (a crawl's drop).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from frontier.config import FrontierConfig
from frontier.core.caps import capped_until
from frontier.core.kv import Cursor
from frontier.partition.commands import Commands
from frontier.partition.crawls import Crawls
from frontier.partition.keys import LEASE, lease_of, record_key, record_prefix, records_after, split_record_key
from frontier.partition.leases import Leases
from frontier.partition.queues import Queues
from frontier.partition.recorded import REPLY_BUDGET, Steps, Walk, record_dec
from frontier.partition.records import lease_dec
from frontier.partition.seen import SeenSet
from frontier.partition.store import Store
from topics.schemas import MAX_QUERY_LIMIT, Query, Reply, UrlItem, UrlRecord, encode


class Listing:
    """What a URLFrontier client asks of one partition's recorded URLs."""

    def __init__(self, partition: int, store: Store, settings: FrontierConfig, crawls: Crawls, seen: SeenSet,
                 queues: Queues, leases: Leases, commands: Commands) -> None:  # fmt: skip
        self._partition = partition
        self._store = store
        self._kv = store.kv
        self._settings = settings
        self._crawls = crawls
        self._seen = seen
        self._queues = queues
        self._leases = leases
        self._commands = commands

    def answer(self, query: Query, now: float) -> Reply:
        """The answer to a reading query (every kind but the deletions), computed at once."""
        return self.walk(query, now).finish()

    def walk(self, query: Query, now: float) -> Walk:
        """A reading query's answer, to compute a slice at a time (:class:`Walk`), from the records
        as they are now. A status or crawls question is answered here (a lookup per crawl)."""
        reply = Reply(id=query.id, partition=self._partition)
        if query.kind == "stats":
            records, leases = self._kv.cursor(record_prefix(query.crawl, query.key or None)), self._kv.cursor(LEASE)
            steps = self._stats(query.crawl, query.key or None, now, records, leases, reply)
            return Walk(reply, steps, (records, leases))
        if query.kind == "count":
            records = self._kv.cursor(record_prefix(query.crawl, query.key or None))
            return Walk(reply, self._count(records, reply), (records,))
        if query.kind == "urls":
            after = query.after.encode("utf-8", "surrogateescape") if query.after else b""
            records = self._kv.cursor(record_prefix(query.crawl, query.key or None), after)
            page: list[msgspec.Raw] = []
            return Walk(reply, self._list_urls(query, records, reply, page), (records,), page)
        if query.kind == "queues":
            records = self._kv.cursor(record_prefix(query.crawl), records_after(query.crawl, query.after)
                                     if query.after else b"")  # fmt: skip
            return Walk(reply, self._list_queues(query, records, reply), (records,))
        if query.kind == "status":
            raw = self._kv.get(record_key(query.crawl, query.key, query.url))
            if raw is not None:
                reply.urls = [self._url_record(record_key(query.crawl, query.key, query.url), raw)]
        elif query.kind == "crawls":
            reply.crawls = sorted(c for c in list(self._crawls.names()) if self._kv.first(record_prefix(c)) is not None)
        return Walk(reply)

    def change(self, query: Query, now: float) -> Reply:
        """A deletion (the queue's URLs, ``key``, the whole crawl's, or with ``purge`` those first
        recorded before ``until``) or a hold (leases handed out to a client until ``until``)."""
        if query.kind == "hold":
            until = capped_until(query.until, now, self._settings.hold_max)
            held = [lease for lease in query.leases if self._leases.hold_in_turn(lease, until, now)]
            return Reply(id=query.id, partition=self._partition, counts={"held": len(held)}, leases=held)
        if query.kind == "delete_crawl":
            removed = self._delete_crawl(query.crawl, now)
        elif query.kind == "purge":  # recorded before ``until``
            removed = self._remove(query.crawl, query.key or None, now, before=query.until)
        else:
            removed = self._remove(query.crawl, query.key, now)
        return Reply(id=query.id, partition=self._partition, counts={"removed": removed})

    def _stats(self, crawl: str, key: str | None, now: float, records: Cursor, leases: Cursor, reply: Reply) -> Steps:
        """size (URLs not done), completed, in_process (handed out to a client, or in a native
        worker's hands) and queues (keys with a URL not done or in process). A key's records are
        together (key order), so the keys are counted without keeping them; the leases' keys
        (bounded by the URLs in flight) are kept."""
        budget = yield
        in_process = 0
        leased: set[str] = set()  # the keys of URLs in process
        while (entry := leases.next()) is not None:
            lease = lease_dec.decode(entry[1])
            if budget.spend():
                budget = yield
            if lease.kind != "page" or lease.item.crawl != crawl or (key is not None and lease.item.key != key):
                continue
            if lease.item.key and lease.held_until <= now:
                continue  # a client's URL not in its hands (not handed out yet, or its time is over)
            in_process += 1
            if lease.item.key:
                leased.add(lease.item.key)
        size = completed = queues = 0
        last = ""  # the last key counted among the queues
        while (entry := records.next()) is not None:
            rkey, raw = entry
            if budget.spend():
                budget = yield
            if record_dec.decode(raw).refetch_at == 0:
                completed += 1
                continue
            size += 1
            qkey = split_record_key(rkey)[1]
            if qkey != last:
                queues += 1
                last = qkey
                leased.discard(qkey)  # counted here already
        reply.counts = {"size": size, "in_process": in_process, "queues": queues + len(leased),
                        "completed": completed}  # fmt: skip

    @staticmethod
    def _count(records: Cursor, reply: Reply) -> Steps:
        budget = yield
        count = 0
        while records.next() is not None:
            count += 1
            if budget.spend():
                budget = yield
        reply.counts = {"count": count}

    def _url_record(self, rkey: bytes, raw: bytes) -> UrlRecord:
        crawl, key, url = split_record_key(rkey)
        record = record_dec.decode(raw)
        refetch = record.created if record.refetch_at < 0 else record.refetch_at
        return UrlRecord(url=url, key=key, crawl=crawl, meta=record.meta, refetch_at=refetch,
                         created=record.created)  # fmt: skip

    def _list_urls(self, query: Query, records: Cursor, reply: Reply, page: list[msgspec.Raw]) -> Steps:
        """A page of records from the cursor (made after ``query.after``), each encoded into
        ``page``: up to ``limit`` records or ``REPLY_BUDGET`` bytes; ``more`` is the last one's key
        when more follow."""
        budget = yield
        limit = min(query.limit or MAX_QUERY_LIMIT, MAX_QUERY_LIMIT)
        used = 0
        while (entry := records.next()) is not None:
            rkey, raw = entry
            if len(page) >= limit or used > REPLY_BUDGET:
                return  # reply.more: the last one sent
            record = encode(self._url_record(rkey, raw))
            page.append(msgspec.Raw(record))
            reply.more = rkey.decode("utf-8", "surrogateescape")
            used += len(record)
            if budget.spend():
                budget = yield
        reply.more = ""

    def _list_queues(self, query: Query, records: Cursor, reply: Reply) -> Steps:
        """A page of the crawl's queue keys in order from the cursor (made past ``query.after``'s
        records): those with a URL not done (all with ``inactive``), up to ``limit`` keys or
        ``REPLY_BUDGET`` bytes; ``more`` is the last key when more follow. A key taken, the cursor
        skips its other records; a key with none of its URLs due is read through."""
        budget = yield
        limit = min(query.limit or MAX_QUERY_LIMIT, MAX_QUERY_LIMIT)
        used = 0
        while (entry := records.next()) is not None:
            rkey, raw = entry
            if budget.spend():
                budget = yield
            if not query.inactive and record_dec.decode(raw).refetch_at == 0:
                continue
            key = split_record_key(rkey)[1]
            if len(reply.queues) >= limit or used > REPLY_BUDGET:
                reply.more = reply.queues[-1]
                return
            reply.queues.append(key)
            used += len(key)
            records.seek(records_after(query.crawl, key))
        reply.more = ""

    def _remove(self, crawl: str, key: str | None, now: float, before: float | None = None) -> int:
        """Remove the crawl's recorded URLs (of ``key``; first recorded before ``before``), queued,
        waiting for a revisit or in flight, and forget them (a later put adds them again)."""
        urls: set[str] = set()
        for rkey, raw in list(self._kv.scan(record_prefix(crawl, key))):
            record = record_dec.decode(raw)
            if before is not None and record.created >= before:
                continue
            url = split_record_key(rkey)[2]
            item = UrlItem(url=url, host="", domain="", canonical=record.canonical, crawl=crawl)
            skey = self._seen.key(item)
            if self._kv.get(skey) is not None:
                self._store.delete(skey)  # a revisit's V entry is dropped when due (no longer named)
            self._store.delete(rkey)
            urls.add(url)

        def gone(item: UrlItem) -> bool:
            return (key is None or item.key == key) and (before is None or item.url in urls)

        for qid in self._queues.of_crawl(crawl):
            self._queues.remove_if(qid, gone, now)
        self._end_leases(crawl, gone, now)
        return len(urls)

    def _end_leases(self, crawl: str, gone: Callable[[UrlItem], bool], now: float) -> None:
        """The removed URLs in flight end now (their host's slot too): a result that comes later
        is a late one (its server signals still count), and nothing brings them back."""
        record = self._crawls.get(crawl)
        for lkey, raw in list(self._kv.scan(LEASE)):
            lease = lease_dec.decode(raw)
            if lease.kind != "page" or lease.item.crawl != crawl or not gone(lease.item):
                continue
            skey = self._seen.key(lease.item)
            if self._kv.get(skey) is not None:
                self._store.delete(skey)
            if record is not None:
                record.dropped_leases.pop(lease_of(lkey), None)
            self._leases.end(lkey, lease, now)

    def _delete_crawl(self, crawl: str, now: float) -> int:
        recorded = 0
        for rkey, _ in list(self._kv.scan(record_prefix(crawl))):
            self._store.delete(rkey)
            recorded += 1
        dropped = self._commands.drop_crawl(crawl, now, forget=True) if crawl in self._crawls.names() else 0
        self._end_leases(crawl, lambda item: True, now)
        return max(recorded, dropped)

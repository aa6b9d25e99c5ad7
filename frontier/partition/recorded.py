"""Recorded URLs: what a URLFrontier client put, kept so that it can be listed, counted, looked up
and deleted by queue key (the URLFrontier API, ``workers/urlfrontier``), and the answers to the
gateway's queries (:class:`~topics.schemas.Query`).

A URL submitted with a ``key`` is recorded under its crawl, key and URL (``keys.record_key``) with its metadata,
when it is due (a discovered URL: when it was queued; a known one: its ``refetch_at``, 0 = never
again) and when it was first recorded. The seen set, queues, revisits and leases work as for any
URL; a *known* URL (``refetch_at`` set) is not queued but decided: done (0), or due for a revisit
at that time. A queued entry whose URL was decided since (a known update while it waited) is
dropped when it comes to the head of its queue. Counting and listing scan the crawl's records:
O(records of the crawl) per question.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from frontier.core.caps import capped_until
from frontier.partition.keys import (
    LEASE,
    QueueId,
    lease_of,
    queue_crawl,
    queue_prefix,
    record_key,
    record_prefix,
    revisit_key,
    seen_key,
    split_record_key,
)
from frontier.partition.leases import Leases
from frontier.partition.records import encoder, item_dec, lease_dec
from frontier.partition.seen import SEEN_DONE, SEEN_OPEN, SEEN_REVISIT, read_seen, seen_value
from topics.schemas import MAX_QUERY_LIMIT, Query, Reply, UrlItem, UrlRecord

REPLY_BUDGET = 256 * 1024  # bytes of URL records or keys in one reply at most (the topic allows 4 MiB)


class ApiRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A recorded URL's value."""

    meta: dict[str, object] = msgspec.field(default_factory=dict)
    refetch_at: float = -1.0  # -1: discovered (due when queued, ``created``); 0: never again; else due then
    created: float = 0.0
    canonical: str = ""  # the URL's canonical form when it differs (its seen entry's)


_record_dec = msgspec.json.Decoder(ApiRecord)
_record_enc = msgspec.json.Encoder()


class Recorded(Leases):
    # -- writes ---------------------------------------------------------------------------------
    def _record_discovered(self, item: UrlItem, now: float) -> None:
        """A discovered URL was queued: record it (a known record of the URL is left as it is)."""
        rkey = record_key(item.crawl, item.key, item.url)
        if self.kv.get(rkey) is None:
            self._put(rkey, _record_enc.encode(ApiRecord(meta=item.meta, created=now, canonical=item.canonical)))

    def _known(self, item: UrlItem, now: float) -> None:
        """A known URL (a client's update): its record replaced (metadata, due time), and the URL
        done (``refetch_at`` 0) or due for a revisit then. One in flight stays so: its result
        leaves this decision as it is (:meth:`_decided_while_leased`)."""
        assert item.refetch_at is not None
        rkey = record_key(item.crawl, item.key, item.url)
        old = self.kv.get(rkey)
        created = _record_dec.decode(old).created if old is not None else now
        record = ApiRecord(meta=item.meta, refetch_at=item.refetch_at, created=created, canonical=item.canonical)
        self._put(rkey, _record_enc.encode(record))
        self._crawl(item.crawl)  # the crawl is known here (listed) even with nothing queued
        if item.refetch_at == 0:
            self._settle(item, now)
        else:
            self._revisit_at(item, item.refetch_at, now)

    def _revisit_at(self, item: UrlItem, due: float, now: float) -> None:
        fingerprint = self._fingerprint(item)
        due_ms = int(due * 1000)
        fresh = msgspec.structs.replace(item, attempts=0, redirects=0, refetch_at=None, recrawl=False)
        self._put(revisit_key(due_ms, fingerprint), encoder.encode(fresh))
        self._put(seen_key(fingerprint), seen_value(SEEN_REVISIT, now, due_ms))
        self._crawl(item.crawl).revisits += 1
        if self._next_revisit is None or due < self._next_revisit:
            self._next_revisit = due

    def _decided_while_leased(self, item: UrlItem) -> bool:
        """Whether a recorded URL's fate was decided (a known update) while it was in flight: its
        result then leaves the seen entry as the update set it."""
        if not item.key:
            return False
        raw = self.kv.get(seen_key(self._fingerprint(item)))
        return raw is not None and read_seen(raw)[0] in (SEEN_DONE, SEEN_REVISIT) and self._recorded_known(item)

    def _recorded_known(self, item: UrlItem) -> bool:
        raw = self.kv.get(record_key(item.crawl, item.key, item.url))
        return raw is not None and _record_dec.decode(raw).refetch_at >= 0

    def _decided_by_client(self, item: UrlItem) -> None:
        """A queued URL its client decided since (a known update: done, or due later) leaves its
        queue: this round of it is done, as a result would have made it."""
        self.stats.completed += 1
        self._crawl(item.crawl).completed += 1

    def _stale_entry(self, item: UrlItem) -> bool:
        """A queued recorded URL decided since it was queued (its seen entry is no longer open)."""
        if not item.key:
            return False
        raw = self.kv.get(seen_key(self._fingerprint(item)))
        return raw is not None and read_seen(raw)[0] != SEEN_OPEN

    # -- the gateway's questions ----------------------------------------------------------------
    def answer(self, query: Query, now: float) -> Reply:
        """The answer to a reading query (every kind but the deletions)."""
        reply = Reply(id=query.id, partition=self.partition)
        if query.kind == "stats":
            reply.counts = self._stats(query.crawl, query.key or None, now)
        elif query.kind == "count":
            reply.counts = {"count": sum(1 for _ in self.kv.scan(record_prefix(query.crawl, query.key or None)))}
        elif query.kind == "status":
            raw = self.kv.get(record_key(query.crawl, query.key, query.url))
            if raw is not None:
                reply.urls = [self._url_record(record_key(query.crawl, query.key, query.url), raw)]
        elif query.kind == "urls":
            self._list_urls(query, reply)
        elif query.kind == "queues":
            self._list_queues(query, reply, now)
        elif query.kind == "crawls":
            reply.crawls = sorted(c for c in list(self._crawls) if self.kv.first(record_prefix(c)) is not None)
        return reply

    def change(self, query: Query, now: float) -> Reply:
        """A deletion (the queue's URLs, ``key``, the whole crawl's, or with ``purge`` those first
        recorded before ``until``) or a hold (leases handed out to a client until ``until``)."""
        if query.kind == "hold":
            until = capped_until(query.until, now, self.settings.hold_max)
            held = [lease for lease in query.leases if self.hold_in_turn(lease, until, now)]
            return Reply(id=query.id, partition=self.partition, counts={"held": len(held)}, leases=held)
        if query.kind == "delete_crawl":
            removed = self._delete_crawl(query.crawl, now)
        elif query.kind == "purge":  # recorded before ``until``
            removed = self._remove(query.crawl, query.key or None, now, before=query.until)
        else:
            removed = self._remove(query.crawl, query.key, now)
        return Reply(id=query.id, partition=self.partition, counts={"removed": removed})

    def _stats(self, crawl: str, key: str | None, now: float) -> dict[str, int]:
        size = completed = 0
        active: set[str] = set()
        for rkey, raw in self.kv.scan(record_prefix(crawl, key)):
            record = _record_dec.decode(raw)
            if record.refetch_at == 0:
                completed += 1
                continue
            size += 1
            active.add(split_record_key(rkey)[1])
        in_process = 0
        for _, raw in self.kv.scan(LEASE):
            lease = lease_dec.decode(raw)
            if lease.kind != "page" or lease.item.crawl != crawl or (key is not None and lease.item.key != key):
                continue
            if lease.item.key and lease.held_until <= now:
                continue  # a client's URL not in its hands (not handed out yet, or its time is over)
            in_process += 1
            if lease.item.key:
                active.add(lease.item.key)
        return {"size": size, "in_process": in_process, "queues": len(active), "completed": completed}

    def _url_record(self, rkey: bytes, raw: bytes) -> UrlRecord:
        crawl, key, url = split_record_key(rkey)
        record = _record_dec.decode(raw)
        refetch = record.created if record.refetch_at < 0 else record.refetch_at
        return UrlRecord(url=url, key=key, crawl=crawl, meta=dict(record.meta), refetch_at=refetch,
                         created=record.created)  # fmt: skip

    def _list_urls(self, query: Query, reply: Reply) -> None:
        limit = min(query.limit or MAX_QUERY_LIMIT, MAX_QUERY_LIMIT)
        after = query.after.encode("utf-8", "surrogateescape") if query.after else b""
        used = 0
        for rkey, raw in self.kv.scan(record_prefix(query.crawl, query.key or None)):
            if after and rkey <= after:
                continue
            if len(reply.urls) >= limit or used > REPLY_BUDGET:
                return  # reply.more: the last one sent
            reply.urls.append(self._url_record(rkey, raw))
            reply.more = rkey.decode("utf-8", "surrogateescape")
            used += len(rkey) + len(raw)
        reply.more = ""

    def _list_queues(self, query: Query, reply: Reply, now: float) -> None:
        limit = min(query.limit or MAX_QUERY_LIMIT, MAX_QUERY_LIMIT)
        keys: dict[str, bool] = {}
        for rkey, raw in self.kv.scan(record_prefix(query.crawl)):
            key = split_record_key(rkey)[1]
            if key <= query.after and query.after:
                continue
            keys[key] = keys.get(key, False) or _record_dec.decode(raw).refetch_at != 0
        names = sorted(k for k, active in keys.items() if active or query.inactive)
        reply.queues = names[:limit]
        reply.more = reply.queues[-1] if len(names) > limit else ""

    def _remove(self, crawl: str, key: str | None, now: float, before: float | None = None) -> int:
        """Remove the crawl's recorded URLs (of ``key``; first recorded before ``before``), queued,
        waiting for a revisit or in flight, and forget them (a later put adds them again)."""
        urls: set[str] = set()
        for rkey, raw in list(self.kv.scan(record_prefix(crawl, key))):
            record = _record_dec.decode(raw)
            if before is not None and record.created >= before:
                continue
            url = split_record_key(rkey)[2]
            item = UrlItem(url=url, host="", domain="", canonical=record.canonical, crawl=crawl)
            skey = seen_key(self._fingerprint(item))
            if self.kv.get(skey) is not None:
                self._delete(skey)  # a revisit's V entry is dropped when due (no longer named)
            self._delete(rkey)
            urls.add(url)

        def gone(item: UrlItem) -> bool:
            return (key is None or item.key == key) and (before is None or item.url in urls)

        for qid in [q for q in self._queued if queue_crawl(q) == crawl]:
            self._drop_entries(qid, gone, now)
        self._end_leases(crawl, gone, now)
        return len(urls)

    def _end_leases(self, crawl: str, gone: Callable[[UrlItem], bool], now: float) -> None:
        """The removed URLs in flight end now (their host's slot too): a result that comes later
        is a late one (its server signals still count), and nothing brings them back."""
        record = self._crawls.get(crawl)
        for lkey, raw in list(self.kv.scan(LEASE)):
            lease = lease_dec.decode(raw)
            if lease.kind != "page" or lease.item.crawl != crawl or not gone(lease.item):
                continue
            skey = seen_key(self._fingerprint(lease.item))
            if self.kv.get(skey) is not None:
                self._delete(skey)
            if record is not None:
                record.dropped_leases.pop(lease_of(lkey), None)
            self._end_lease(lkey, lease, now)

    def _drop_entries(self, qid: QueueId, gone: Callable[[UrlItem], bool], now: float) -> None:
        """Remove the queued entries of ``qid`` that are ``gone``."""
        for qkey, raw in list(self.kv.scan(queue_prefix(qid))):
            if gone(item_dec.decode(raw)):
                self._delete(qkey)
                self._dequeued(qid)
        if self._queued.get(qid, 0) <= 0:
            self._forget_queue(qid)
        else:
            self._scheduler.schedule(qid, now)

    def _leased_urls(self, crawl: str) -> set[str]:
        urls: set[str] = set()
        for _, raw in self.kv.scan(LEASE):
            lease = lease_dec.decode(raw)
            if lease.kind == "page" and lease.item.crawl == crawl:
                urls.add(lease.item.url)
        return urls

    def _delete_crawl(self, crawl: str, now: float) -> int:
        recorded = 0
        for rkey, _ in list(self.kv.scan(record_prefix(crawl))):
            self._delete(rkey)
            recorded += 1
        dropped = self._drop_crawl(crawl, now, forget=True) if crawl in self._crawls else 0
        self._end_leases(crawl, lambda item: True, now)
        return max(recorded, dropped)

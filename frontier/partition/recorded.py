"""Recorded URLs: what a URLFrontier client put, kept so that it can be listed, counted, looked up
and deleted by queue key (the URLFrontier API, ``workers/urlfrontier``), and the answers to the
gateway's queries (:class:`~topics.schemas.Query`).

A URL submitted with a ``key`` is recorded under its crawl, key and URL (``keys.record_key``) with its metadata,
when it is due (a discovered URL: when it was queued; a known one: its ``refetch_at``, 0 = never
again) and when it was first recorded. The seen set, queues, revisits and leases work as for any
URL; a *known* URL (``refetch_at`` set) is not queued but decided: done (0), or due for a revisit
at that time. A queued entry whose URL was decided since (a known update while it waited) is
dropped when it comes to the head of its queue.

The reading questions (count, stats, a page of URLs or of queue keys) are walks
(:class:`Walk`): each reads its records through cursors made when it came (so its answer is the
state at that moment, exact, whatever is written meanwhile) and is computed a slice at a time,
each slice within a :class:`Budget` of records and time, so that the service answers it between
dispatch rounds (``frontier.service.service``) and no question holds the event loop longer than
a slice. A page resumes from its cursor's key (a seek), so listing N records in pages of P reads
N records in all, not N²/P; a page of queue keys reads one record per key it gives (a seek past
the key's other records) and keeps no more keys than it gives. Counting and stats still read
every record of the crawl (or of the key), a slice at a time. The deletions write as they read
and are applied at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import cast

import msgspec

from frontier.core.caps import capped_until
from frontier.core.kv import Cursor
from frontier.partition.keys import (
    LEASE,
    QueueId,
    lease_of,
    queue_crawl,
    queue_prefix,
    record_key,
    record_prefix,
    records_after,
    revisit_key,
    seen_key,
    split_record_key,
)
from frontier.partition.leases import Leases
from frontier.partition.records import encoder, item_dec, lease_dec
from frontier.partition.seen import SEEN_DONE, SEEN_OPEN, SEEN_REVISIT, read_seen, seen_value
from topics.schemas import MAX_QUERY_LIMIT, Query, Reply, UrlItem, UrlRecord, encode

REPLY_BUDGET = 256 * 1024  # bytes of URL records or keys in one reply at most (the topic allows 4 MiB)
SLICE_SECONDS = 0.002  # a walk's slice ends once it has run this long...
SLICE_RECORDS = 4096  # ...or read this many records


class Budget:
    """What one slice of a walk may spend: ``records`` records read, and ``seconds`` by ``clock``
    (injected; None: no time limit). The clock is read every 16 records."""

    __slots__ = ("_clock", "_deadline", "left")

    def __init__(self, clock: Callable[[], float] | None = None, seconds: float = SLICE_SECONDS,
                 records: int = SLICE_RECORDS) -> None:  # fmt: skip
        self._clock = clock
        self._deadline = clock() + seconds if clock is not None else math.inf
        self.left = records

    def spend(self) -> bool:
        """One record read: whether the slice is over."""
        self.left -= 1
        if self.left <= 0:
            return True
        return self._clock is not None and self.left & 15 == 0 and self._clock() >= self._deadline


UNBOUNDED = 1 << 62  # records: a budget that never ends a slice

Steps = Generator[None, Budget, None]  # a walk's body: yields when its budget is spent, sent the next one


class Walk:
    """A reading question's answer computed a slice at a time: :meth:`step` runs one slice within
    its budget and says whether the answer is complete (:meth:`encoded` as it goes on the topic,
    :attr:`reply` decoded). The cursors it reads were made when the question came; :meth:`close`
    lets them go (done, or given up).

    A page's URL records are encoded as they are read (``page``) and wait as bytes: a thousand
    records kept as objects until the page is sent made Python's collector run about once a page,
    and its full collections, which hold the frontier process for 60-90 ms, every few minutes of
    a listing (measured)."""

    def __init__(self, reply: Reply, steps: Steps | None = None, cursors: tuple[Cursor, ...] = (),
                 page: list[msgspec.Raw] | None = None) -> None:  # fmt: skip
        self._reply = reply
        self._page = page if page is not None else []
        self._steps = steps
        self._cursors = cursors
        if steps is not None:
            next(steps)  # to its first yield: it waits for a budget there

    @property
    def reply(self) -> Reply:
        """The answer with its URL records decoded (in-process callers, tests)."""
        if self._page and not self._reply.urls:
            self._reply.urls = [_url_record_dec.decode(raw) for raw in self._page]
        return self._reply

    def encoded(self) -> bytes:
        """The answer as it goes on ``crawl.replies``: ``encode(reply)``, its URL records written
        as they were encoded when read (msgspec writes a ``Raw`` as it is)."""
        if not self._page:
            return encode(self._reply)
        return encode(msgspec.structs.replace(self._reply, urls=cast("list[UrlRecord]", self._page)))

    def step(self, budget: Budget) -> bool:
        """One slice; True once the reply is complete (the cursors are then closed)."""
        if self._steps is None:
            return True
        try:
            self._steps.send(budget)
        except StopIteration:
            self.close()
            return True
        except BaseException:
            self.close()
            raise
        return False

    def finish(self) -> Reply:
        """The whole answer at once (unit tests; small questions)."""
        while not self.step(Budget(records=UNBOUNDED)):
            pass
        return self.reply

    def close(self) -> None:
        if self._steps is not None:
            self._steps.close()
            self._steps = None
        for cursor in self._cursors:
            cursor.close()
        self._cursors = ()


class ApiRecord(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    """A recorded URL's value (not tracked by the garbage collector, as ``UrlRecord``)."""

    meta: dict[str, object] = msgspec.field(default_factory=dict)
    refetch_at: float = -1.0  # -1: discovered (due when queued, ``created``); 0: never again; else due then
    created: float = 0.0
    canonical: str = ""  # the URL's canonical form when it differs (its seen entry's)


_record_dec = msgspec.json.Decoder(ApiRecord)
_record_enc = msgspec.json.Encoder()
_url_record_dec = msgspec.json.Decoder(UrlRecord)


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
        """The answer to a reading query (every kind but the deletions), computed at once."""
        return self.walk(query, now).finish()

    def walk(self, query: Query, now: float) -> Walk:
        """A reading query's answer, to compute a slice at a time (:class:`Walk`), from the records
        as they are now. A status or crawls question is answered here (a lookup per crawl)."""
        reply = Reply(id=query.id, partition=self.partition)
        if query.kind == "stats":
            records, leases = self.kv.cursor(record_prefix(query.crawl, query.key or None)), self.kv.cursor(LEASE)
            steps = self._stats(query.crawl, query.key or None, now, records, leases, reply)
            return Walk(reply, steps, (records, leases))
        if query.kind == "count":
            records = self.kv.cursor(record_prefix(query.crawl, query.key or None))
            return Walk(reply, self._count(records, reply), (records,))
        if query.kind == "urls":
            after = query.after.encode("utf-8", "surrogateescape") if query.after else b""
            records = self.kv.cursor(record_prefix(query.crawl, query.key or None), after)
            page: list[msgspec.Raw] = []
            return Walk(reply, self._list_urls(query, records, reply, page), (records,), page)
        if query.kind == "queues":
            records = self.kv.cursor(record_prefix(query.crawl), records_after(query.crawl, query.after)
                                     if query.after else b"")  # fmt: skip
            return Walk(reply, self._list_queues(query, records, reply), (records,))
        if query.kind == "status":
            raw = self.kv.get(record_key(query.crawl, query.key, query.url))
            if raw is not None:
                reply.urls = [self._url_record(record_key(query.crawl, query.key, query.url), raw)]
        elif query.kind == "crawls":
            reply.crawls = sorted(c for c in list(self._crawls) if self.kv.first(record_prefix(c)) is not None)
        return Walk(reply)

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
            if _record_dec.decode(raw).refetch_at == 0:
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
        record = _record_dec.decode(raw)
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
            if not query.inactive and _record_dec.decode(raw).refetch_at == 0:
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

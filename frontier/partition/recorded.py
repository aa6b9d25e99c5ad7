"""Recorded URLs: what a URLFrontier client put, kept so that it can be listed, counted, looked up
and deleted by queue key (the URLFrontier API, ``workers/urlfrontier``), as the part
:class:`Recorded`, and the machinery the answers to the gateway's queries
(:class:`~topics.schemas.Query`, ``listing.py``) are computed with: :class:`Walk`, :class:`Budget`.

A URL submitted with a ``key`` is recorded under its crawl, key and URL (``keys.record_key``) with its metadata,
when it is due (a discovered URL: when it was queued; a known one: its ``refetch_at``, 0 = never
again) and when it was first recorded. The seen set, queues, revisits and leases work as for any
URL; a *known* URL (``refetch_at`` set) is not queued but decided: done (0), or due for a revisit
at that time. A queued entry whose URL was decided since (a known update while it waited) is
dropped when it comes to the head of its queue.

``Recorded``'s interface: ``record_discovered``, ``known``, ``decided_while_leased``,
``stale_entry``, ``decided_by_client``. Owns: the ``U`` keys' writes. Depends on: the store,
``Crawls``, ``SeenSet``, ``Revisits`` and the partition's ``Stats``.

The reading questions (count, stats, a page of URLs or of queue keys) are walks
(:class:`Walk`, ``listing.py``): each reads its records through cursors made when it came (so its answer is the
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

from frontier.core.kv import Cursor
from frontier.partition.crawls import Crawls
from frontier.partition.keys import record_key
from frontier.partition.records import Stats
from frontier.partition.revisits import Revisits
from frontier.partition.seen import SEEN_DONE, SEEN_OPEN, SEEN_REVISIT, SeenSet
from frontier.partition.store import Store
from topics.schemas import Reply, UrlItem, UrlRecord, encode

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
            self._reply.urls = [url_record_dec.decode(raw) for raw in self._page]
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


record_dec = msgspec.json.Decoder(ApiRecord)
record_enc = msgspec.json.Encoder()
url_record_dec = msgspec.json.Decoder(UrlRecord)


class Recorded:
    """The recorded URLs' writes, and what the dispatch and the results ask of them."""

    def __init__(self, store: Store, crawls: Crawls, seen: SeenSet, revisits: Revisits, stats: Stats) -> None:
        self._store = store
        self._kv = store.kv
        self._crawls = crawls
        self._seen = seen
        self._revisits = revisits
        self._stats = stats

    def record_discovered(self, item: UrlItem, now: float) -> None:
        """A discovered URL was queued: record it (a known record of the URL is left as it is)."""
        rkey = record_key(item.crawl, item.key, item.url)
        if self._kv.get(rkey) is None:
            self._store.put(rkey, record_enc.encode(ApiRecord(meta=item.meta, created=now, canonical=item.canonical)))

    def known(self, item: UrlItem, now: float) -> None:
        """A known URL (a client's update): its record replaced (metadata, due time), and the URL
        done (``refetch_at`` 0) or due for a revisit then. One in flight stays so: its result
        leaves this decision as it is (:meth:`decided_while_leased`)."""
        assert item.refetch_at is not None
        rkey = record_key(item.crawl, item.key, item.url)
        old = self._kv.get(rkey)
        created = record_dec.decode(old).created if old is not None else now
        record = ApiRecord(meta=item.meta, refetch_at=item.refetch_at, created=created, canonical=item.canonical)
        self._store.put(rkey, record_enc.encode(record))
        self._crawls.record(item.crawl)  # the crawl is known here (listed) even with nothing queued
        if item.refetch_at == 0:
            self._seen.settle(item, now)
        else:
            self._revisits.revisit_at(item, item.refetch_at, now)

    def decided_while_leased(self, item: UrlItem) -> bool:
        """Whether a recorded URL's fate was decided (a known update) while it was in flight: its
        result then leaves the seen entry as the update set it."""
        if not item.key:
            return False
        return self._seen.state(item) in (SEEN_DONE, SEEN_REVISIT) and self._recorded_known(item)

    def _recorded_known(self, item: UrlItem) -> bool:
        raw = self._kv.get(record_key(item.crawl, item.key, item.url))
        return raw is not None and record_dec.decode(raw).refetch_at >= 0

    def decided_by_client(self, item: UrlItem) -> None:
        """A queued URL its client decided since (a known update: done, or due later) leaves its
        queue: this round of it is done, as a result would have made it."""
        self._stats.completed += 1
        self._crawls.record(item.crawl).completed += 1

    def stale_entry(self, item: UrlItem) -> bool:
        """A queued recorded URL decided since it was queued (its seen entry is no longer open)."""
        if not item.key:
            return False
        state = self._seen.state(item)
        return state is not None and state != SEEN_OPEN

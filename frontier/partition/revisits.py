"""Revisits, as the part :class:`Revisits`: a fetched URL with a revisit interval waits in
``V<due ms><fingerprint>`` and is queued again when due, unless its seen entry no longer names
that ``V`` entry (forgotten, or re-queued by a recrawl since: see ``seen.py``), so no URL ever has
two revisit chains.

Interface: ``schedule`` (after a fetch), ``revisit_at`` (a client's known URL), ``requeue`` (the
due ones, from dispatch), ``next_due`` (read by dispatch and ``next_wakeup``), ``drop_crawl``,
``next_by_crawl`` (status), ``load``/``count``. Owns: the ``V`` keys and ``next_due``. Depends on:
the store, ``Crawls`` (their revisit counts), ``SeenSet``, ``Queues`` and ``Scopes`` (a due URL's
queue) and the partition's ``Stats``."""

from __future__ import annotations

import msgspec

from frontier.core import revisit
from frontier.partition.crawls import Crawls
from frontier.partition.keys import REVISIT, queue_id, revisit_due_ms, revisit_key, revisit_seen_key, seen_key
from frontier.partition.queues import Queues
from frontier.partition.records import CrawlRecord, Stats, encoder, item_dec
from frontier.partition.scopes import Scopes
from frontier.partition.seen import SEEN_LEGACY, SEEN_OPEN, SEEN_REVISIT, SeenSet, read_seen, seen_value
from frontier.partition.store import Store
from topics.schemas import DEFAULT_CRAWL, Feedback, UrlItem

REVISIT_LOOK = 500  # V entries a status snapshot looks at, at most, for each crawl's next revisit


def learned(item: UrlItem, fb: Feedback) -> UrlItem:
    """``item`` as its fetch left it for the next revisit: the validators the worker sent back
    (kept, bounded, in its ``V`` entry: changelogged), and an adaptive interval moved by what the
    fetch found (frontier.core.revisit). A fetch that judged nothing (an error) changes nothing."""
    if not fb.validators:
        return item
    interval = item.revisit
    if item.revisit_max > 0:
        lo, hi = item.revisit_min, item.revisit_max
        if not item.validators:  # the first fetch: the page's age, when it says, sets the interval
            age = revisit.age_of(fb.validators.get("last-modified", ""), fb.sent_at or fb.done_at)
            interval = revisit.first_interval(lo, hi, age) if age is not None else interval
        else:
            interval = revisit.next_interval(item.revisit, lo, hi, changed=not fb.unchanged)
    validators = {k: v[: revisit.MAX_VALIDATOR_CHARS] for k, v in list(fb.validators.items())[:3]}
    return msgspec.structs.replace(item, revisit=interval, validators=validators)


class Revisits:
    """The URLs of one partition waiting for their revisit."""

    def __init__(self, store: Store, crawls: Crawls, seen: SeenSet, queues: Queues, scopes: Scopes,
                 stats: Stats) -> None:  # fmt: skip
        self._store = store
        self._kv = store.kv
        self._crawls = crawls
        self._seen = seen
        self._queues = queues
        self._scopes = scopes
        self._stats = stats
        self.next_due: float | None = None  # the earliest V entry's due time (None: none)

    def schedule(self, item: UrlItem, now: float) -> None:
        """The URL waits in ``V`` until it is due; its seen entry (a *revisit*) keeps the last fetch
        time and names that ``V`` entry. ``V`` is written first: a seen entry never names a
        missing one (a ``V`` entry no seen entry names is dropped when due)."""
        fingerprint = self._seen.fingerprint(item)
        due_ms = int((now + item.revisit) * 1000)
        fresh = msgspec.structs.replace(item, attempts=0, redirects=0)
        self._store.put(revisit_key(due_ms, fingerprint), encoder.encode(fresh))
        self._store.put(seen_key(fingerprint), seen_value(SEEN_REVISIT, now, due_ms))
        self._crawls.record(item.crawl).revisits += 1
        due = due_ms / 1000
        if self.next_due is None or due < self.next_due:
            self.next_due = due

    def revisit_at(self, item: UrlItem, due: float, now: float) -> None:
        """A client's known URL due at ``due``: as :meth:`schedule`, at that time."""
        fingerprint = self._seen.fingerprint(item)
        due_ms = int(due * 1000)
        fresh = msgspec.structs.replace(item, attempts=0, redirects=0, refetch_at=None, recrawl=False)
        self._store.put(revisit_key(due_ms, fingerprint), encoder.encode(fresh))
        self._store.put(seen_key(fingerprint), seen_value(SEEN_REVISIT, now, due_ms))
        self._crawls.record(item.crawl).revisits += 1
        if self.next_due is None or due < self.next_due:
            self.next_due = due

    def requeue(self, now: float, limit: int = 1000) -> None:
        """Queue the URLs due at ``now`` (``limit`` at most) again."""
        self.next_due = None
        for n, (key, raw) in enumerate(self._kv.scan(REVISIT)):
            due_ms = revisit_due_ms(key)
            due = due_ms / 1000
            if due > now or n >= limit:
                self.next_due = max(due, now)
                return
            entry_key = revisit_seen_key(key)
            seen = self._kv.get(entry_key)
            state, _, named = read_seen(seen) if seen is not None else (SEEN_LEGACY, -1.0, -1)
            item = item_dec.decode(raw)
            crawl = self._crawls.record(item.crawl)
            crawl.revisits = max(0, crawl.revisits - 1)
            if state != SEEN_REVISIT or named not in (-1, due_ms):
                self._store.delete(key)  # forgotten, or re-queued by a recrawl since: this chain ends here
                continue
            qid = queue_id(self._scopes.scopes_of(item), item.crawl)
            # in the order they became due (a client's known URL may be due long before it came):
            # queued before the V entry goes
            self._queues.enqueue(self._queues.qkey_due(qid, item, due), item, now, raw)
            self._store.put(entry_key, seen_value(SEEN_OPEN, now))
            self._store.delete(key)
            self._stats.revisits += 1

    def drop_crawl(self, crawl: str, record: CrawlRecord, forget: bool) -> None:
        """Remove the crawl's waiting revisits (with ``forget``, their seen entries too)."""
        for key, raw in list(self._kv.scan(REVISIT)):
            if b'"crawl":' not in raw and crawl != DEFAULT_CRAWL:
                continue
            item = item_dec.decode(raw)
            if item.crawl != crawl:
                continue
            if forget:
                self._store.delete(revisit_seen_key(key))
            self._store.delete(key)
            record.revisits = max(0, record.revisits - 1)

    def next_by_crawl(self, waiting: set[str]) -> dict[str, float]:
        """The earliest revisit of each crawl in ``waiting`` (at most REVISIT_LOOK entries looked
        at: a crawl not met by then is given the last time looked at, a lower bound)."""
        found: dict[str, float] = {}
        last = None
        for n, (key, raw) in enumerate(self._kv.scan(REVISIT)):
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

    def load(self) -> None:
        """The earliest due time, from the store (``rebuild``)."""
        head = self._kv.first(REVISIT)
        self.next_due = revisit_due_ms(head[0]) / 1000 if head is not None else None

    def count(self) -> None:
        """Each crawl's waiting revisits, counted from the store once (records written before
        crawls did not count them; the crawl records count them from then on)."""
        counts: dict[str, int] = {}
        for _, raw in self._kv.scan(REVISIT):
            crawl = item_dec.decode(raw).crawl if b'"crawl":' in raw else DEFAULT_CRAWL
            counts[crawl] = counts.get(crawl, 0) + 1
        for name in set(counts) | {n for n, r in self._crawls.items() if r.revisits}:
            record = self._crawls.get(name)
            if record is None or record.revisits != counts.get(name, 0):
                self._crawls.record(name).revisits = counts.get(name, 0)

"""Crawls: named streams of work that share one politeness (issue 20), and the part that keeps
their records, :class:`Crawls`.

Every URL belongs to a crawl (``UrlItem.crawl``, ``default`` when not named). A crawl has its
own seen set (``SeenSet.fingerprint``: one URL is crawled once in each crawl), its own queues
(a queue id names its crawl, ``keys.queue_id``) and its own workers (the service sends its jobs
to the crawl's jobs topic), but no politeness of its own: scope states, gates, robots.txt and
quotas are per scope, shared by every crawl. When several crawls queue URLs of the same scopes,
the scopes' turns are shared out (``Queues.choose``): the highest priority first, and round
robin among equals, so the host sees one client at its own rate, whatever the number of crawls.

A crawl *waits* while it is paused here (``crawl pause``) or has no worker connected (the
service says which crawls have one, ``set_served``, or which have none, ``set_idle``): its
queues are put aside (``Queues.park``), out of the scheduler, and come back when it is released
(the frontier wires the two: ``Queues.unpark(crawls.waits)``). A crawl the service has not
answered for yet waits too. Its record (``K<crawl>``: commands, counters, the seen set's
generation) is changelogged and moves with the partition.

Interface: ``record`` (made when it first appears, marked to be saved), ``get``, ``names``,
``items``, ``generation``, ``refused`` (``frontier.max_crawls``), ``waits``, ``held_reason``,
``set_idle``/``set_served``/``rehold`` (which crawls wait), ``dropped_lease``, ``load``, ``save``.
Owns: the records, which of them changed, and ``held``/``idle``/``served`` (read by dispatch).
Depends on: the store only.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, KeysView

from frontier.config import FrontierConfig
from frontier.partition.keys import CRAWL, crawl_key, crawl_of
from frontier.partition.records import CrawlRecord, crawl_dec, encoder
from frontier.partition.store import Store
from topics.schemas import DEFAULT_CRAWL


class Crawls:
    """The crawls' records in one partition, and which crawls wait."""

    def __init__(self, partition: int, store: Store, settings: FrontierConfig) -> None:
        self._partition = partition
        self._store = store
        self._settings = settings
        self._records: dict[str, CrawlRecord] = {}
        self._dirty: set[str] = set()
        self.held: frozenset[str] = frozenset()  # crawls paused here, or without a worker
        self.idle: frozenset[str] = frozenset()  # crawls with no worker (the service says)
        # the crawls that have a worker (the service says; None: every crawl, as without a service):
        # any other crawl waits, a new one too until the service has seen its workers
        self.served: frozenset[str] | None = None

    def __len__(self) -> int:
        return len(self._records)

    def refused(self, name: str) -> str:
        """Why a record of crawl ``name`` may not make the crawl here ("" when it may): a partition
        keeps at most ``frontier.max_crawls`` crawls (each a changelogged record, in every
        partition), so a producer naming a new crawl per record cannot grow them without end."""
        if name in self._records or name == DEFAULT_CRAWL or len(self._records) < self._settings.max_crawls:
            return ""
        return (f"too many crawls: partition {self._partition} has {len(self._records)} (frontier.max_crawls); "
                f"crawl {name[:64]!r} not made (drop finished crawls with --forget, or raise the setting)")  # fmt: skip

    def record(self, name: str) -> CrawlRecord:
        """The crawl's record here (made when it first appears), marked to be saved with the
        counters (:meth:`save`): callers change it."""
        record = self._records.get(name)
        if record is None:
            record = self._records[name] = CrawlRecord()
        self._dirty.add(name)
        return record

    def get(self, name: str) -> CrawlRecord | None:
        """The crawl's record, None when it has none (not made, not marked)."""
        return self._records.get(name)

    def names(self) -> KeysView[str]:
        """The crawls this partition has a record of (every crawl that queued a URL here)."""
        return self._records.keys()

    def items(self) -> ItemsView[str, CrawlRecord]:
        return self._records.items()

    def generation(self, crawl: str) -> int:
        record = self._records.get(crawl)
        return record.generation if record is not None else 0

    # -- held crawls ------------------------------------------------------------------------------
    def waits(self, crawl: str) -> bool:
        """Whether the crawl's URLs wait (paused here, or no worker for it)."""
        return crawl in self.held or (self.served is not None and crawl not in self.served)

    def set_idle(self, idle: Iterable[str]) -> bool:
        """The crawls that have no worker now; whether that changed (then :meth:`rehold` ran)."""
        idle = frozenset(idle)
        if idle == self.idle:
            return False
        self.idle = idle
        self.rehold()
        return True

    def set_served(self, served: Iterable[str] | None) -> bool:
        """The crawls that have a worker now (None: every crawl); whether that changed."""
        served = frozenset(served) if served is not None else None
        if served == self.served:
            return False
        self.served = served
        self.rehold()
        return True

    def rehold(self) -> None:
        """Recompute ``held``: the crawls paused here, or said to have no worker."""
        self.held = frozenset({name for name, r in self._records.items() if r.paused} | self.idle)

    def held_reason(self, crawl: str) -> str | None:
        """Why the crawl's URLs wait (None: they do not)."""
        if not self.waits(crawl):
            return None
        record = self._records.get(crawl)
        if record is not None and record.paused:
            return f"crawl {crawl!r} paused"
        return f"crawl {crawl!r} has no worker"

    def dropped_lease(self, crawl: str, lease_id: str) -> bool | None:
        """Whether a lease was in flight when its crawl was dropped (the value: that drop forgot
        the seen set; None: it was not)."""
        record = self._records.get(crawl)
        if record is None or not record.dropped_leases:
            return None
        return record.dropped_leases.get(lease_id)

    # -- the store --------------------------------------------------------------------------------
    def load(self) -> None:
        """The records as stored (``rebuild``)."""
        for key, value in self._store.kv.scan(CRAWL):
            self._records[crawl_of(key)] = crawl_dec.decode(value)

    def save(self) -> None:
        """Store the records changed since the last save."""
        for name in self._dirty:
            record = self._records.get(name)
            if record is not None:
                self._store.put(crawl_key(name), encoder.encode(record))
        self._dirty.clear()

"""Report leases, as the part :class:`Reports`, and the lease ids (:class:`LeaseIds`) they share
with the jobs' leases.

A URL that ends here without a fetch (disallowed by robots.txt, robots.txt unreachable for
too long, leases lost too often) is kept as a *report* lease (``L<lease>``, of a kind in
``REPORT_KINDS``) until its page is on ``crawl.pages``: :meth:`Reports.reported` removes it once
the page is acknowledged, and a restart reports it again (see ``FrontierService``). The service
publishes reports only after the changelog records of the same round are acknowledged.

Interface: ``report``, ``has_unreported``, ``report_pending`` (the pages, from dispatch),
``reported``, ``restore`` (a stored report lease, from ``Leases.load``). Owns: the report
leases not handed out yet. Depends on: the store, ``LeaseIds``, ``SeenSet`` and ``Crawls``.
"""

from __future__ import annotations

import os

import msgspec

from frontier.partition.crawls import Crawls
from frontier.partition.keys import lease_key
from frontier.partition.records import Dispatch, Lease, Report, encoder, lease_dec
from frontier.partition.seen import SeenSet
from frontier.partition.store import Store
from topics.schemas import Page, UrlItem


class LeaseIds:
    """Lease ids: 64 random bits per incarnation + a counter (unique without uuid4's cost)."""

    def __init__(self) -> None:
        self.prefix = os.urandom(8).hex()
        self._seq = 0

    def new(self) -> str:
        self._seq += 1
        return f"{self.prefix}{self._seq:x}"


class Reports:
    """The report leases of one partition: URLs that end without a fetch."""

    def __init__(self, store: Store, ids: LeaseIds, seen: SeenSet, crawls: Crawls) -> None:
        self._store = store
        self._kv = store.kv
        self._ids = ids
        self._seen = seen
        self._crawls = crawls
        self._unreported: list[str] = []  # report leases whose page is not out yet

    def report(
        self, item: UrlItem, raw: bytes, qkey: bytes, scopes: list[str], now: float, kind: str, error: str
    ) -> None:
        """Replace a queue entry by a report lease; its page goes out with the next dispatch."""
        lease_id = self._ids.new()
        lease = Lease(qkey=qkey, item=msgspec.Raw(raw), deadline=now, scopes=scopes, kind=kind, error=error)
        self._store.put(lease_key(lease_id), encoder.encode(lease))  # written before the entry goes
        self._seen.settle(item, now)  # its fate is decided now (the report lease holds it until published)
        crawl = self._crawls.record(item.crawl)
        crawl.completed += 1
        if kind == "disallowed":
            crawl.disallowed += 1
        else:
            crawl.failed += 1
        if qkey:
            self._store.delete(qkey)
        self._unreported.append(lease_id)

    def has_unreported(self) -> bool:
        return bool(self._unreported)

    def report_pending(self, out: Dispatch, now: float) -> None:
        """Hand out the pages of new report leases, and of restored ones (a previous owner may
        not have published them)."""
        pending, self._unreported = self._unreported, []
        for lease_id in pending:
            raw = self._kv.get(lease_key(lease_id))
            if raw is not None:
                lease = lease_dec.decode(raw)
                out.reports.append(Report(lease_id, Page(
                    url=lease.item.url, outcome=lease.kind, error=lease.error, meta=lease.item.meta, fetched_at=now,
                    crawl=lease.item.crawl)))  # fmt: skip

    def reported(self, lease_id: str) -> None:
        """The report's page is on crawl.pages: forget the report lease."""
        key = lease_key(lease_id)
        if self._kv.get(key) is not None:
            self._store.delete(key)

    def restore(self, lease_id: str) -> None:
        """A stored report lease (a restart): its page may never have gone out."""
        self._unreported.append(lease_id)

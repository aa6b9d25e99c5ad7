"""Crawls as an operator sees them: every live instance's rows added up (``crawl_rows``), the
``crawl-frontier crawls`` table, the bounded set the live page and metrics show (the busiest
crawls and ``other``), and whether a crawl is done (:func:`busy`)."""

from __future__ import annotations

import time

import msgspec

from topics.schemas import CrawlStatus, Status

SHOWN_CRAWLS = 20  # crawls the live page and the metrics name; the rest are added up as "other"
OTHER = "other"


def crawl_rows(statuses: list[Status]) -> list[CrawlStatus]:
    """Each crawl over every instance's partitions: counts added up, the earliest revisit, paused
    where any partition holds it paused, the workers its group has; busiest first."""
    merged: dict[str, CrawlStatus] = {}
    for status in statuses:
        for row in status.crawls:
            m = merged.get(row.crawl)
            if m is None:
                merged[row.crawl] = msgspec.structs.replace(row)
                continue
            # (each field by name: a frontier adds up its partitions' rows at every status snapshot)
            m.queued += row.queued
            m.inflight += row.inflight
            m.ingested += row.ingested
            m.dispatched += row.dispatched
            m.completed += row.completed
            m.fetched += row.fetched
            m.failed += row.failed
            m.disallowed += row.disallowed
            m.dropped += row.dropped
            m.over_limit += row.over_limit
            m.revisits += row.revisits
            m.pages_per_s += row.pages_per_s
            m.paused = m.paused or row.paused
            m.per_host = max(m.per_host, row.per_host)
            m.workers = max(m.workers, row.workers)
            if row.next_revisit is not None and (m.next_revisit is None or row.next_revisit < m.next_revisit):
                m.next_revisit = row.next_revisit
    return sorted(merged.values(), key=lambda r: (-(r.queued + r.inflight), r.crawl))


def shown(rows: list[CrawlStatus], top: int = SHOWN_CRAWLS) -> list[CrawlStatus]:
    """The busiest ``top`` crawls and, when there are more, one ``other`` row adding up the rest
    (a bounded label set for metrics and the page, whatever the number of crawls)."""
    if len(rows) <= top:
        return rows
    rest = rows[top:]
    other = CrawlStatus(crawl=OTHER, workers=-1)
    for row in rest:
        for name in ("queued", "inflight", "ingested", "dispatched", "completed", "fetched", "failed",
                     "disallowed", "dropped", "over_limit", "revisits"):  # fmt: skip
            setattr(other, name, getattr(other, name) + getattr(row, name))
        other.pages_per_s += row.pages_per_s
    return [*rows[:top], other]


def busy(row: CrawlStatus | None, now: float, window: float = 0.0) -> str:
    """What keeps the crawl from being done ("" when nothing does): URLs queued or leased, or a
    revisit due within ``window`` seconds."""
    if row is None:
        return ""
    parts = []
    if row.queued:
        parts.append(f"{row.queued} queued")
    if row.inflight:
        parts.append(f"{row.inflight} in flight")
    if row.next_revisit is not None and row.next_revisit <= now + window:
        parts.append(f"{row.revisits} revisit(s), the next in {max(0.0, row.next_revisit - now):.0f} s")
    return ", ".join(parts)


def workers_text(n: int) -> str:
    return "?" if n < 0 else str(n)


def state(row: CrawlStatus) -> str:
    if row.paused:
        return "paused"
    if row.workers == 0 and (row.queued or row.inflight):
        return "no worker"
    if row.queued or row.inflight:
        return "crawling"
    return "idle"


def render_crawls(statuses: list[Status], now: float | None = None, only: str | None = None) -> str:
    now = time.time() if now is None else now
    if not statuses:
        return "no live frontier instance has published status (is a frontier running?)"
    rows = crawl_rows(statuses)
    if only is not None:
        rows = [r for r in rows if r.crawl == only]
        if not rows:
            return f"crawl {only!r}: no frontier instance knows it (nothing submitted in it yet)"
    lines = [f"{'crawl':<24} {'state':<9} {'queued':>8} {'infl':>5} {'done':>8} {'fetched':>8} {'errors':>7} "
             f"{'disallow':>8} {'pages/s':>7} {'workers':>7}  notes"]  # fmt: skip
    for r in rows:
        notes = []
        if r.per_host:
            notes.append(f"at most {r.per_host} queued per host ({r.over_limit} over)")
        if r.revisits:
            nxt = f", next in {max(0.0, r.next_revisit - now):.0f} s" if r.next_revisit is not None else ""
            notes.append(f"{r.revisits} revisits waiting{nxt}")
        if r.dropped:
            notes.append(f"{r.dropped} dropped")
        lines.append(f"{r.crawl[:24]:<24} {state(r):<9} {r.queued:>8} {r.inflight:>5} {r.completed:>8} {r.fetched:>8} "
                     f"{r.failed:>7} {r.disallowed:>8} {r.pages_per_s:>7.1f} {workers_text(r.workers):>7}  "
                     f"{'; '.join(notes)}")  # fmt: skip
    return "\n".join(lines)

"""When is a crawl finished? :func:`wait_done` (``FrontierClient.wait_done``, ``crawl-frontier
crawls --wait``): nothing of it queued, leased, on its way in or due for a revisit soon, as
snapshots covering every partition report it, and still so after the input topics were drained."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from frontier.client.crawls import busy, crawl_rows
from frontier.client.feed import caught_up
from frontier.config import Config
from topics.schemas import CrawlStatus

if TYPE_CHECKING:
    from frontier.client.client import FrontierClient


@dataclass(frozen=True)
class CrawlDone:
    """What :meth:`FrontierClient.wait_done` found: ``done``, else what is ``left`` (a sentence)
    and the crawl's last counts (``row``; None when no instance reported)."""

    crawl: str
    done: bool
    row: CrawlStatus | None
    left: str


def router_group_of(cfg: Config) -> str:
    """The routers' consumer group (as ``frontier.service.app.router_group``)."""
    return f"{cfg.frontier.app_id}-router"


def _same(a: CrawlStatus, b: CrawlStatus) -> bool:
    """Nothing entered or left the crawl between the two views."""
    return (a.ingested, a.dispatched, a.completed) == (b.ingested, b.dispatched, b.completed)


def wait_done(client: FrontierClient, name: str, timeout: float, window: float) -> CrawlDone:
    """Block until the crawl ``name`` is finished (see :meth:`FrontierClient.wait_done`); a
    :class:`CrawlDone` whose ``done`` is False, with what is left, when ``timeout`` came first."""
    topics = client.topics
    deadline = time.monotonic() + timeout
    left = "no frontier instance has reported yet"
    while True:
        first, why = _settled(client, name, window)
        if first is not None and not why:
            asked = time.time()
            # anything submitted (or followed) before now is routed, then applied...
            drained = caught_up(
                client.kafka, router_group_of(client.config), topics.urls, topics.partitions, deadline
            ) and caught_up(client.kafka, client.config.frontier.app_id, topics.bydomain, topics.partitions, deadline)
            # ...and a snapshot taken since then still shows nothing, and nothing new
            after, why = _settled(client, name, window, since=asked, deadline=deadline) if drained else (None, "")
            if after is not None and not why and _same(first, after):
                return CrawlDone(name, True, after, "")
            left = why or ("input still on its way" if not drained else "it moved meanwhile")
        elif why:
            left = why
        if time.monotonic() >= deadline:
            return CrawlDone(name, False, first, left)
        time.sleep(0.5)


def _settled(
    client: FrontierClient, name: str, window: float, since: float = 0.0, deadline: float | None = None
) -> tuple[CrawlStatus | None, str]:
    """The crawl's row from snapshots that cover every partition (taken after ``since``, waited
    for until ``deadline``) and what keeps it from being done; (None, why) without such a view."""
    while True:
        statuses = client.statuses()
        covered = sorted(p for s in statuses for p in s.partitions)
        fresh = bool(statuses) and all(s.at > since for s in statuses)
        if covered == list(range(client.topics.partitions)) and fresh:
            row = next((r for r in crawl_rows(statuses) if r.crawl == name), None)
            if row is None and any(s.crawls_cut for s in statuses):
                return None, "not in the status snapshots (too many crawls reported)"
            return row or CrawlStatus(crawl=name), busy(row, time.time(), window)
        if deadline is None or time.monotonic() >= deadline:
            missing = client.topics.partitions - len(set(covered))
            return None, f"{missing} partition(s) not reported by a live instance" if missing else "waiting"
        time.sleep(0.3)

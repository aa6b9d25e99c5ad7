"""The crawls a frontier instance serves, as the broker sees them: each crawl's jobs topic (made
when the crawl first appears) and how many workers its group has. A crawl without a worker is
*idle*: its partitions hold its URLs queued (``PartitionFrontier.set_idle_crawls``) instead of
leasing jobs nobody takes, whose leases would expire and count as lost attempts.

A thread of its own asks the broker every :data:`LOOK_EVERY` seconds (admin requests block); the
dispatch loop hands it the crawls its partitions know and reads its last answer, never waiting.
Until the broker has answered for a crawl, the default crawl is taken as served (as before
crawls) and any other as idle. When the answers stop (a broker down in a cluster makes every
group listing fail), they are not trusted past :data:`STALE`: every crawl whose jobs topic exists
is served again, as before crawls (a job nobody takes comes back through its lease), rather than
held on an answer that may have been given during the failure itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka.admin import AdminClient

from topics.admin import create_crawl_jobs, group_members
from topics.catalog import Topics, workers_group
from topics.kafka import Connection, Kafka
from topics.schemas import DEFAULT_CRAWL

log = logging.getLogger("frontier")

LOOK_EVERY = 2.0  # seconds between two looks at the crawls' topics and groups
STALE = 15.0  # seconds after which the last answer about the crawls' workers is not trusted
MAX_CRAWL_TOPICS = 1000  # jobs topics one instance makes, at most (each is a topic of N partitions)


class CrawlDirectory:
    def __init__(self, kafka: Connection, topics: Topics, app_id: str) -> None:
        self.kafka = kafka
        self.topics = topics
        self.app_id = app_id
        self.crawls: frozenset[str] = frozenset({DEFAULT_CRAWL})  # set by the dispatch loop
        self.workers: dict[str, int] = {}  # crawl → members of its workers' group (its last answer)
        self._made: set[str] = set()  # crawls whose jobs topic exists
        # crawls whose jobs topic has the frontier's partition count (its last look): their jobs go to
        # the partition of the dispatching one's number (docs/PROTOCOL.md), any other's by murmur2
        self.copartitioned: frozenset[str] = frozenset()
        self._uneven: set[str] = set()  # crawls whose jobs topic was said to have another count
        self._answered_at: float | None = None  # monotonic time of the last answer about the groups
        self._admin: AdminClient | None = None  # one client for the process's life (made by the thread)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="crawl-directory", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def know(self, crawls: frozenset[str]) -> None:
        """The crawls the partitions hold now (from the dispatch loop); a new one is looked at at once."""
        if not crawls <= self.crawls:
            self.crawls = self.crawls | crawls
            self._wake.set()

    def served(self) -> frozenset[str]:
        """The crawls whose jobs a worker would take now (any other crawl waits, a new one too)."""
        workers, made, at = self.workers, self._made, self._answered_at
        if at is not None and time.monotonic() - at > STALE:  # no answer for a while: as before crawls
            return frozenset(c for c in self.crawls if c == DEFAULT_CRAWL or c in made)
        return frozenset(c for c in self.crawls if self._served(c, workers, made))

    @staticmethod
    def _served(crawl: str, workers: dict[str, int], made: set[str]) -> bool:
        n = workers.get(crawl)
        if n is None:
            return crawl == DEFAULT_CRAWL  # not answered yet: as before crawls for the default one
        return n > 0 and (crawl == DEFAULT_CRAWL or crawl in made)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.look()
            except Exception as exc:  # noqa: BLE001 - the broker may be away: keep the last answer, ask again
                log.warning("crawls' topics and workers not looked at: %s", exc)
            self._wake.wait(LOOK_EVERY)
            self._wake.clear()

    def look(self) -> None:
        """Make the missing jobs topics, then count each crawl's workers (blocking: the thread's)."""
        if self._admin is None:
            self._admin = Kafka.of(self.kafka).admin()
        crawls = sorted(self.crawls)
        missing = [c for c in crawls if c != DEFAULT_CRAWL and c not in self._made]
        if missing:
            room = max(0, MAX_CRAWL_TOPICS - len(self._made))
            if room < len(missing):
                log.warning("%d crawls have no jobs topic and this instance makes %d at most: their URLs wait",
                            len(missing) - room, MAX_CRAWL_TOPICS)  # fmt: skip
            made = missing[:room]
            for name in create_crawl_jobs(self.kafka, self.topics, made, admin=self._admin):
                log.info("created %s", name)
            self._made.update(made)
        self.copartitioned = self._copartitioned(self._admin.list_topics(timeout=10).topics, crawls)
        groups = {workers_group(self.app_id, c): c for c in crawls}
        answered = group_members(self._admin, list(groups))
        self.workers = {**self.workers, **{groups[g]: n for g, n in answered.items()}}
        self._answered_at = time.monotonic()

    def _copartitioned(self, listed: Mapping[str, Any], crawls: list[str]) -> frozenset[str]:
        """The ``crawls`` whose jobs topic, in the broker's ``listed`` topics, has the frontier's
        partition count; one made by other means with another count is said once (its jobs then go
        by murmur2 of the host: each transaction touches more of its partitions)."""
        n, together = self.topics.partitions, set()
        for crawl in crawls:
            topic = listed.get(self.topics.jobs_of(crawl))
            if topic is None:
                continue
            if len(topic.partitions) == n:
                together.add(crawl)
            elif crawl not in self._uneven:
                self._uneven.add(crawl)
                log.warning("%s has %d partitions, not the frontier's %d: its jobs go by murmur2 of the host",
                            self.topics.jobs_of(crawl), len(topic.partitions), n)  # fmt: skip
        return frozenset(together)

"""The topics of a crawl, as code: each owns its name, key, partitioning and cleanup policy.

Names take an optional prefix (``<prefix>crawl.urls``) so that several crawls, or several test
runs, can share one broker. ``create_all`` is idempotent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic


@dataclass(frozen=True)
class TopicSpec:
    base: str
    key: str
    doc: str
    compacted: bool = False
    internal: bool = False
    partitions: int | None = None  # None: the crawl's partition count


URLS = TopicSpec("crawl.urls", "none (any)", "user input: URL strings or JSON submissions")
BYDOMAIN = TopicSpec(
    "crawl.urls.bydomain", "partition chosen by murmur2(registrable domain)", "router → frontier", internal=True
)
JOBS = TopicSpec("crawl.jobs", "host", "frontier → workers: leased fetch jobs")
FEEDBACK = TopicSpec("crawl.feedback", "registrable domain (murmur2)", "workers → frontier: fetch results")
PAGES = TopicSpec("crawl.pages", "url", "output: fetched pages")
REJECTED = TopicSpec("crawl.rejected", "none", "input that could not be accepted, with the reason")
CONTROL = TopicSpec(
    "crawl.control", "registrable domain (murmur2)", "operators → frontier: pause/resume/drop/set a scope"
)
STATE = TopicSpec(
    "crawl.frontier.state", "state key", "changelog of the frontier's RocksDB state", compacted=True, internal=True
)
STATUS = TopicSpec(
    "crawl.frontier.status", "frontier instance id", "latest status snapshot of each frontier instance",
    compacted=True, internal=True, partitions=1,
)  # fmt: skip

ALL: tuple[TopicSpec, ...] = (URLS, BYDOMAIN, JOBS, FEEDBACK, PAGES, REJECTED, CONTROL, STATE, STATUS)
# Topics whose partition numbers must agree: a domain's URLs, feedback and state live in one partition.
COPARTITIONED: tuple[TopicSpec, ...] = (BYDOMAIN, FEEDBACK, CONTROL, STATE)


@dataclass(frozen=True)
class Topics:
    """Resolved topic names for one crawl."""

    prefix: str = ""
    partitions: int = 8
    replication: int = 1

    def name(self, spec: TopicSpec) -> str:
        return f"{self.prefix}{spec.base}"

    @property
    def urls(self) -> str:
        return self.name(URLS)

    @property
    def bydomain(self) -> str:
        return self.name(BYDOMAIN)

    @property
    def jobs(self) -> str:
        return self.name(JOBS)

    @property
    def feedback(self) -> str:
        return self.name(FEEDBACK)

    @property
    def pages(self) -> str:
        return self.name(PAGES)

    @property
    def rejected(self) -> str:
        return self.name(REJECTED)

    @property
    def control(self) -> str:
        return self.name(CONTROL)

    @property
    def state(self) -> str:
        return self.name(STATE)

    @property
    def status(self) -> str:
        return self.name(STATUS)


def create_all(admin_conf: dict[str, str], topics: Topics, timeout: float = 30.0) -> list[str]:
    """Create every missing topic; return the names created. Existing topics are left alone,
    but a co-partitioned topic with the wrong partition count is an error."""
    conf: dict[str, Any] = dict(admin_conf)
    admin = AdminClient(conf)
    existing = admin.list_topics(timeout=timeout).topics
    for spec in COPARTITIONED:
        md = existing.get(topics.name(spec))
        if md is not None and len(md.partitions) != topics.partitions:
            raise RuntimeError(
                f"topic {topics.name(spec)} has {len(md.partitions)} partitions, expected {topics.partitions}: "
                "co-partitioned topics must agree"
            )
    new = []
    for spec in ALL:
        name = topics.name(spec)
        if name in existing:
            continue
        config = {"cleanup.policy": "compact" if spec.compacted else "delete"}
        if spec.base in (PAGES.base,):
            config["max.message.bytes"] = str(16 * 1024 * 1024)
        partitions = spec.partitions or topics.partitions
        new.append(NewTopic(name, num_partitions=partitions, replication_factor=topics.replication, config=config))
    created = []
    if new:
        for name, fut in admin.create_topics(new, operation_timeout=timeout).items():
            try:
                fut.result()
                created.append(name)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
    return created

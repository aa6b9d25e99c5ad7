"""Topics on a broker: create every topic of a crawl (idempotent) and check or raise their record
size limits (``max.message.bytes``). The specs themselves are ``topics.catalog``. Its admin
clients come from ``topics.kafka`` like every other client (the one module of ``topics`` that may
import it)."""

from __future__ import annotations

import time
import warnings

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, not in __all__
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from confluent_kafka.cimpl import NewTopic

from topics.catalog import ALL, COPARTITIONED, JOBS, Topics, TopicSpec, needed_bytes
from topics.kafka import Connection, Kafka


def create_all(kafka: Connection, topics: Topics, timeout: float = 30.0) -> list[str]:
    """Create every missing topic; return the names created. Existing topics are left alone,
    but a co-partitioned topic with the wrong partition count is an error."""
    admin = Kafka.of(kafka).admin()
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
        config = {
            "cleanup.policy": "compact" if spec.compacted else "delete",
            "max.message.bytes": str(spec.max_message_bytes),
        }
        partitions = spec.partitions or topics.partitions
        new.append(NewTopic(name, num_partitions=partitions, replication_factor=topics.replication, config=config))
    return _create(admin, new, timeout)


def _create(admin: AdminClient, new: list[NewTopic], timeout: float) -> list[str]:
    """Create ``new`` topics; return the names created (one made meanwhile by another process is
    not an error: every creator is idempotent)."""
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


def create_crawl_jobs(
    kafka: Connection, topics: Topics, crawls: list[str], timeout: float = 30.0, admin: AdminClient | None = None
) -> list[str]:
    """Create the jobs topics of these crawls that are missing (the limits and retention of
    ``crawl.jobs``: :data:`~topics.catalog.JOBS`, the crawl's partition count); return the names
    created. Idempotent: several frontier instances and workers may ask at once. ``admin``: a
    client to reuse (a long-lived process keeps one)."""
    admin = admin if admin is not None else Kafka.of(kafka).admin()
    existing = admin.list_topics(timeout=timeout).topics
    config = {"cleanup.policy": "delete", "max.message.bytes": str(JOBS.max_message_bytes)}
    names = sorted({topics.jobs_of(crawl) for crawl in crawls} - set(existing))
    new = [NewTopic(n, num_partitions=topics.partitions, replication_factor=topics.replication, config=config)
           for n in names]  # fmt: skip
    return _create(admin, new, timeout)


def group_members(admin: AdminClient, groups: list[str], timeout: float = 10.0) -> dict[str, int]:
    """How many members each of these consumer groups has now (0: none, or no such group).

    Through librdkafka's ListGroups + DescribeGroups of every broker (``list_groups``), not the
    Admin API's ``describe_consumer_groups``: that one aborts the whole process (an assertion in
    librdkafka's coordinator requests, confluentinc/librdkafka#4605, #5397) when a broker drops
    the connection meanwhile, which a broker restart does. Raises KafkaException when the
    brokers do not answer."""
    if not groups:
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the legacy call is the safe one (above)
        listed = admin.list_groups(timeout=timeout)
    members: dict[str, int] = {str(g.id): len(g.members) for g in listed}
    return {group: members.get(group, 0) for group in groups}


class TopicLimitError(RuntimeError):
    """Existing topics refuse records the crawl produces (or are missing); one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def check_limits(
    kafka: Connection, topics: Topics, max_body_bytes: int | None = None, timeout: float = 30.0
) -> list[str]:
    """Read every crawl topic's ``max.message.bytes`` from the brokers; return one clear line per
    topic that is missing or whose limit is below the largest record the crawl produces on it
    (an empty list: all is well). ``max_body_bytes`` is the workers' ``worker.max_body_bytes``
    (None: the largest the configuration allows)."""
    problems, _ = _limits(Kafka.of(kafka).admin(), topics, max_body_bytes, timeout)
    return problems


def raise_limits(
    kafka: Connection, topics: Topics, max_body_bytes: int | None = None, timeout: float = 30.0
) -> list[str]:
    """Raise ``max.message.bytes`` of every existing topic whose limit is below what the crawl
    produces to the value a new topic gets (never lowers one); return the names changed."""
    admin = Kafka.of(kafka).admin()
    _, low = _limits(admin, topics, max_body_bytes, timeout)
    if not low:
        return []
    entry = "max.message.bytes"
    resources = [
        ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
            ConfigEntry(entry, str(value), incremental_operation=AlterConfigOpType.SET)])
        for name, value in low.items()
    ]  # fmt: skip
    for future in admin.incremental_alter_configs(resources, request_timeout=timeout).values():
        future.result()
    deadline = time.monotonic() + timeout  # until every broker reports the new limits
    while set(_limits(admin, topics, max_body_bytes, timeout, settle=0)[1]) & set(low):
        if time.monotonic() >= deadline:
            raise TopicLimitError([f"{name}: max.message.bytes raised, but not reported yet" for name in sorted(low)])
        time.sleep(0.2)
    return sorted(low)


def _limits(
    admin: AdminClient, topics: Topics, max_body_bytes: int | None, timeout: float, settle: float = 5.0
) -> tuple[list[str], dict[str, int]]:
    """(problems, {topic whose limit is too low: the limit it should have}). Topics created a
    moment ago may not be in every broker's metadata yet: missing or unreadable topics are
    looked up again for up to ``settle`` seconds before they count as problems."""
    deadline = time.monotonic() + settle
    while True:
        problems, low, unsure = _limits_once(admin, topics, max_body_bytes, timeout)
        if not unsure or time.monotonic() >= deadline:
            return sorted(problems), low
        time.sleep(0.2)


def _limits_once(
    admin: AdminClient, topics: Topics, max_body_bytes: int | None, timeout: float
) -> tuple[list[str], dict[str, int], bool]:
    existing = admin.list_topics(timeout=timeout).topics
    problems: list[str] = []
    low: dict[str, int] = {}
    unsure = False
    specs: dict[str, TopicSpec] = {}
    for spec in ALL:
        name = topics.name(spec)
        if name in existing:
            specs[name] = spec
        else:
            unsure = True
            problems.append(f"{name}: missing (run `crawl-frontier topics create`)")
    if not specs:
        return problems, low, unsure
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in specs]
    for resource, future in admin.describe_configs(resources, request_timeout=timeout).items():
        name = resource.name
        spec = specs[name]
        try:
            entry = future.result().get("max.message.bytes")
        except KafkaException as exc:
            unsure = True
            problems.append(f"{name}: its configuration could not be read: {exc}")
            continue
        if entry is None or entry.value is None:
            problems.append(f"{name}: max.message.bytes not reported by the broker")
            continue
        limit = int(entry.value)
        need = needed_bytes(spec, max_body_bytes)
        if limit < need:
            low[name] = max(need, spec.max_message_bytes)
            problems.append(
                f"{name}: max.message.bytes is {limit}, below the {need} bytes the crawl may put in one record; "
                f"records that large would be refused. Raise it: `crawl-frontier topics create --raise-limits`, "
                f"or kafka-configs.sh --alter --entity-type topics --entity-name {name} "
                f"--add-config max.message.bytes={low[name]}"
            )
    return problems, low, unsure


def ensure_limits(kafka: Connection, topics: Topics, max_body_bytes: int | None = None, timeout: float = 30.0) -> None:
    """:func:`check_limits`, raising :class:`TopicLimitError` with every problem if there is one."""
    problems = check_limits(kafka, topics, max_body_bytes, timeout)
    if problems:
        raise TopicLimitError(problems)

"""Durable per-partition state: open a partition's RocksDB, restore it from the changelog topic,
and close it cleanly so the next owner knows how far the local copy can be trusted.

Recovery rule: the local database is trusted only up to a marker of the changelog offset it is
complete up to, and only newer changelog records are replayed: the clean close's, a standby copy's
(see ``frontier.service.standby``), or, after a crash, the committed marker: an owned partition's
store is written only with transactions that committed, each in one batch with its marker,
through RocksDB's write-ahead log (``frontier.service.pending``), so nothing that was never
acknowledged by Kafka is in it. A store with no marker (a crash during a restore) is wiped and the
partition rebuilt from the whole (compacted) changelog. (Writes without the log, a restore's, are
flushed before the first logged batch: a crash never keeps a marker without what came before it.)

A local copy also records *when* it was complete (the clean close, or the last time a standby
copy had caught up). Replaying only the tail is right only while the tail still holds every
tombstone written since: compaction removes a tombstone ``delete.retention.ms`` (24 h by
default) after it was written, and a copy older than that would keep deleted leases, pauses and
queued URLs forever. So is a tail that no longer starts right after the copy's offset (the low
watermark moved past it). Either way the copy is wiped and the partition rebuilt
(:func:`restore_plan`, pure, decides).
"""

from __future__ import annotations

import ctypes
import logging
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, KafkaError, Message, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

from frontier.core.kv import KV
from frontier.partition.counts import QueueCounts
from frontier.partition.keys import (
    CLEAN_AT_KEY,
    CLEAN_KEY,
    COMMITTED_AT_KEY,
    COMMITTED_KEY,
    MARKER_KEYS,
    STANDBY_AT_KEY,
    STANDBY_KEY,
)
from frontier.service.pending import Pending
from frontier.service.pending import encode_time as encode_time  # (the standby copies' too)
from frontier.service.rocks import RocksKV
from topics.kafka import Connection, Kafka, watermarks

log = logging.getLogger(__name__)

DEFAULT_DELETE_RETENTION = 24 * 3600.0  # Kafka's delete.retention.ms default, in seconds
MAX_MARGIN = 600.0  # a copy is trusted only this much (or 10 % of the retention) short of it


def db_path(state_dir: str | Path, app_id: str, partition: int) -> Path:
    return Path(state_dir) / app_id / f"p{partition}"


@dataclass(frozen=True, slots=True)
class LocalCopy:
    """What a local store says about itself: complete up to changelog ``offset``, and holding
    every changelog record written before wall-clock time ``at`` (None: not recorded)."""

    offset: int
    at: float | None


@dataclass(frozen=True, slots=True)
class Plan:
    trust: bool  # replay only the changelog after the copy's offset; else wipe and rebuild
    reason: str


def restore_plan(
    offset: int | None,
    closed_at: float | None,
    now: float,
    retention: float,
    low: int,
    high: int | None = None,
) -> Plan:
    """Whether a local copy complete up to changelog ``offset`` as of ``closed_at`` may be
    completed by replaying the tail alone, at wall-clock time ``now``.

    ``retention`` is the changelog's ``delete.retention.ms`` in seconds; ``low`` (and ``high``,
    when known) are the partition's current watermarks. Pure: no clock, no Kafka.
    """
    if offset is None:
        return Plan(False, "no clean, standby or committed marker")
    if closed_at is None or not math.isfinite(closed_at):
        return Plan(False, "the copy's close time is not recorded")
    if not math.isfinite(now) or not math.isfinite(retention):
        return Plan(False, "no usable clock or retention")
    if low > offset + 1:
        return Plan(False, f"the changelog now starts at offset {low}, after the copy's {offset} + 1")
    if high is not None and high < offset + 1:
        return Plan(False, f"the changelog ends at offset {high - 1}, before the copy's {offset}")
    margin = min(max(retention, 0.0) * 0.1, MAX_MARGIN)
    age = now - closed_at
    if age < -margin:
        return Plan(False, f"the copy's close time is {-age:.0f}s in the future (the clock moved back)")
    if age > retention - margin:
        return Plan(False, f"the copy is {age:.0f}s old, tombstones are kept {retention:.0f}s")
    return Plan(True, f"clean at offset {offset}, {max(age, 0.0):.0f}s old")


def local_copy(kv: KV) -> LocalCopy | None:
    """The clean marker (or else the standby marker, or else the committed marker of the last
    transaction written: a store left by a crash) of a store, None if it has none. (Each says the
    store holds the changelog up to its offset: written after, or with, what it covers.)"""
    markers = ((CLEAN_KEY, CLEAN_AT_KEY), (STANDBY_KEY, STANDBY_AT_KEY), (COMMITTED_KEY, COMMITTED_AT_KEY))
    for offset_key, at_key in markers:
        raw = kv.get(offset_key)
        if raw is None:
            continue
        try:
            offset = int(raw)
        except ValueError:
            return None
        at_raw = kv.get(at_key)
        at: float | None = None
        if at_raw is not None:
            try:
                at = float(at_raw)
            except ValueError:
                at = None
        return LocalCopy(offset, at)
    return None


def delete_retention(client_conf: Connection, topic: str, timeout: float = 10.0) -> float:
    """The topic's ``delete.retention.ms`` in seconds; 24 h (Kafka's default) if unreadable."""
    try:
        admin = Kafka.of(client_conf).admin()
        resource = ConfigResource(ResourceType.TOPIC, topic)
        futures = admin.describe_configs([resource], request_timeout=timeout)
        entries = futures[resource].result(timeout=timeout + 5)
        return int(entries["delete.retention.ms"].value) / 1000.0
    except Exception as exc:  # noqa: BLE001 — any failure means "assume the default"
        log.warning("delete.retention.ms of %s not readable (%s): assuming 24 h", topic, exc)
        return DEFAULT_DELETE_RETENTION


def open_partition(
    path: Path,
    client_conf: Connection,
    topic: str,
    partition: int,
    now: float | None = None,
    retention: float | None = None,
    counts: QueueCounts | None = None,
) -> tuple[RocksKV, int, int]:
    """Open (and restore) one partition's store. Returns the store, the number of records replayed
    and the offset of the last changelog record the store now holds (-1: none).

    ``counts``: the queues' entries counted ahead in this store (a standby copy's, at its
    ``offset``): brought up to date with the tail replayed, or dropped when the store is not
    trusted up to that offset (wiped and rebuilt, or another copy).

    ``now`` is the wall-clock time (default: ``time.time()``), ``retention`` the changelog's
    ``delete.retention.ms`` in seconds (default: read from the topic). Blocking: call it from a thread.

    A rebuild from nothing is written as a bulk load (``RocksKV.bulk``: no compaction until the
    whole changelog is in, then one), a tail as it comes.
    """
    start: int = OFFSET_BEGINNING
    if path.exists():
        kv = RocksKV(path)
        copy = local_copy(kv)
        if copy is None:
            plan = Plan(False, "no clean, standby or committed marker")
        else:
            low, high = changelog_watermarks(client_conf, topic, partition)
            if retention is None:
                retention = delete_retention(client_conf, topic)
            plan = restore_plan(copy.offset, copy.at, time.time() if now is None else now, retention, low, high)
        if copy is not None and plan.trust:
            start = copy.offset + 1
            for key in (*MARKER_KEYS, COMMITTED_KEY, COMMITTED_AT_KEY):  # "dirty" until the restore ends
                kv.delete(key)
        else:
            log.info("partition %d: local state not trusted (%s), rebuilding from the changelog", partition,
                     plan.reason)  # fmt: skip
            kv.close()
            RocksKV.destroy(path)
            kv = RocksKV(path)
    else:
        kv = RocksKV(path)
    if counts is not None and start != counts.offset + 1:
        counts.drop()
    if counts is None or not counts.usable:
        # from nothing: written in bulk, compacted once at the end (nothing reads the store meanwhile)
        with kv.bulk() if start == OFFSET_BEGINNING else nullcontext():
            replayed, applied = replay(kv, client_conf, topic, partition, start)
    else:
        replayed, applied = replay(kv, client_conf, topic, partition, start, counts)
        counts.settle(kv)  # the queues the tail changed, counted again
    # Complete up to ``applied`` (the writer fenced every other owner first: nothing else is written
    # meanwhile), made durable before the owned partition's first logged batch.
    kv.put(COMMITTED_AT_KEY, encode_time(time.time() if now is None else now))
    kv.put(COMMITTED_KEY, str(applied).encode())
    kv.flush()
    if replayed:
        release_free_memory()
    return kv, replayed, applied


def _malloc_trim() -> object:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc's (the process's own symbols)
    except (AttributeError, OSError):
        return None  # another C library: nothing to call


_trim = _malloc_trim()


def release_free_memory() -> bool:
    """Give the pages the C allocator holds free back to the system (glibc's ``malloc_trim``;
    False where there is none). A restore frees what it went through (the consumer's fetched
    records, each batch's records and write batch, RocksDB's flush and compaction buffers) in
    pieces glibc keeps otherwise, so a process was larger after a rebuild than after its ingest
    (at 100,000 hosts 505 MiB against 353 on 2026-11-28). Blocking for a moment: called in the
    restore's thread (ctypes lets go of the GIL)."""
    if _trim is None:
        return False
    _trim(0)  # type: ignore[operator]
    return True


def replay(
    kv: RocksKV, client_conf: Connection, topic: str, partition: int, start: int, counts: QueueCounts | None = None
) -> tuple[int, int]:
    """Apply committed changelog records from ``start`` up to the current end of the partition;
    return how many, and the offset up to which the store is now complete (-1: an empty changelog).
    ``counts``: the store's queue counts, told of every record applied."""
    consumer = Kafka.of(client_conf).reader(
        "restore", {"enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"}
    )
    try:
        low, high = watermarks(consumer, topic, partition)
        first = low if start == OFFSET_BEGINNING else max(start, low)
        if first >= high:
            return 0, high - 1
        consumer.assign([TopicPartition(topic, partition, first)])
        count = 0
        last = high - 1
        while True:
            msgs: list[Message] = consumer.consume(10000, timeout=1.0)
            done = False
            # (comprehensions, a few C calls a record: a rebuild from nothing replays millions)
            good = [msg for msg in msgs if msg.error() is None]
            if len(good) < len(msgs):
                for msg in msgs:
                    err = msg.error()
                    if err is None:
                        continue
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"changelog restore of {topic}[{partition}] failed: {err}")
                    done = True  # reached the end of the changelog
            records = [(key, msg.value()) for msg in good if (key := msg.key()) is not None]
            if good and (good[-1].offset() or 0) >= last:  # (offsets only grow within the partition)
                done = True
            if records:  # one write per batch, in the changelog's order
                kv.write_many(records)
                count += len(records)
                if counts is not None:
                    for key, value in records:
                        counts.touched(key, value)
            if done:
                # read_committed: the end is the last stable offset (aborted records and transaction
                # markers are skipped, so the position says how far the store is complete)
                position = consumer.position([TopicPartition(topic, partition)])[0].offset
                return count, (position - 1 if position is not None and position >= 0 else high - 1)
    finally:
        consumer.close()


def close_partition(store: RocksKV | Pending, last_offset: int, now: float | None = None) -> None:
    """Mark the store clean at ``last_offset``, the offset of the last changelog record it holds
    (never the changelog's end at close, which may hold another owner's records), as of
    wall-clock time ``now`` (default: ``time.time()``), then close. (Of a :class:`Pending`, its
    RocksDB: every transaction it holds committed; a write not in one never goes to the changelog.)"""
    kv = store.rocks if isinstance(store, Pending) else store
    kv.put(CLEAN_AT_KEY, encode_time(time.time() if now is None else now))
    kv.put(CLEAN_KEY, str(last_offset).encode())
    kv.close()


def changelog_watermarks(client_conf: Connection, topic: str, partition: int) -> tuple[int, int]:
    """(low, high) offsets of the changelog partition."""
    consumer = Kafka.of(client_conf).reader("restore")
    try:
        return watermarks(consumer, topic, partition)
    finally:
        consumer.close()


def feedback_backlog_end(client_conf: Connection, topic: str, partition: int, group: str) -> int:
    """The offset of the last record of ``topic[partition]`` past ``group``'s committed offset
    (what the group will be given when it takes the partition), -1 when there is none."""
    consumer = Kafka.of(client_conf).reader("backlog", {"enable.auto.commit": False}, group=group)
    try:  # never subscribes: reads the group's offset without joining it
        low, high = watermarks(consumer, topic, partition)
        committed = consumer.committed([TopicPartition(topic, partition)], timeout=10)[0].offset
        start = committed if committed is not None and committed >= 0 else low
        return high - 1 if high > start else -1
    finally:
        consumer.close()


def changelog_end(client_conf: Connection, topic: str, partition: int) -> int:
    """The offset of the last record in the changelog partition (-1 when empty)."""
    return changelog_watermarks(client_conf, topic, partition)[1] - 1

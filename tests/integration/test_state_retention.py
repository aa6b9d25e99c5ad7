"""Stale local state must not resurrect deletes (issue 11 item 11), on a real broker.

A store closed cleanly and reopened after the changelog's tombstones were compacted away (or
after the changelog's head was deleted) must be rebuilt from the whole changelog, not completed
by replaying the tail: a deleted lease or pause would come back otherwise. The same holds for a
standby copy.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from frontier.demo.stack import wait_until
from frontier.partition.keys import STANDBY_AT_KEY, STANDBY_KEY
from frontier.service.restore import (
    changelog_end,
    close_partition,
    db_path,
    delete_retention,
    local_copy,
    open_partition,
)
from frontier.service.rocks import RocksKV
from frontier.service.standby import Standby

DAY = 24 * 3600.0
LEASE, PAUSE, SEEN = b"Lold-lease", b"Oexample.com", b"Sseen"


class Changelog:
    """One single-partition changelog topic of the test's own."""

    def __init__(self, bootstrap: str, config: dict[str, str]) -> None:
        self.client: dict[str, Any] = {"bootstrap.servers": bootstrap}
        self.topic = f"test.state.{uuid.uuid4().hex[:12]}"
        self.admin = AdminClient(self.client)
        futures = self.admin.create_topics([NewTopic(self.topic, 1, 1, config=config)], operation_timeout=30)
        for fut in futures.values():
            fut.result(timeout=60)
        self.producer = Producer({**self.client, "linger.ms": 0})

    def write(self, *records: tuple[bytes, bytes | None]) -> int:
        """Produce ``records`` to partition 0; return the offset of the last one."""
        offsets: list[int] = []

        def delivered(err: KafkaError | None, msg: Any) -> None:
            assert err is None, err
            offsets.append(msg.offset())

        for key, value in records:
            self.producer.produce(self.topic, value, key=key, partition=0, on_delivery=delivered)
        assert self.producer.flush(30) == 0
        return max(offsets)

    def contents(self) -> dict[bytes, list[bytes | None]]:
        """Every record now retained in the partition, by key (tombstones as None)."""
        consumer = Consumer({**self.client, "group.id": f"t-{uuid.uuid4().hex}", "enable.partition.eof": True,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
        out: dict[bytes, list[bytes | None]] = {}
        try:
            consumer.assign([TopicPartition(self.topic, 0, 0)])
            low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=10)
            if low >= high:
                return out
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                for msg in consumer.consume(1000, timeout=0.5):
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            return out
                        raise RuntimeError(str(err))
                    out.setdefault(msg.key() or b"", []).append(msg.value())
            raise TimeoutError("changelog not read to its end")
        finally:
            consumer.close()

    def delete_before(self, offset: int) -> None:
        """DeleteRecords: the partition's low watermark becomes ``offset``."""
        for fut in self.admin.delete_records([TopicPartition(self.topic, 0, offset)]).values():
            fut.result(timeout=30)

    def close(self) -> None:
        for fut in self.admin.delete_topics([self.topic], operation_timeout=30).values():
            fut.result(timeout=60)
        del self.producer, self.admin  # no client left retrying once the session's broker is gone


@pytest.fixture
def changelogs(bootstrap: str) -> Iterator[Any]:
    made: list[Changelog] = []

    def make(config: dict[str, str]) -> Changelog:
        made.append(Changelog(bootstrap, config))
        return made[-1]

    yield make
    for log in made:
        log.close()


def owned_then_closed(log: Changelog, path: Path, now: float | None = None) -> int:
    """An owner restores the partition (lease, pause, seen URL) and closes it cleanly; returns the clean offset."""
    log.write((LEASE, b"lease"), (PAUSE, b"paused"), (SEEN, b"seen"))
    kv, replayed, _ = open_partition(path, log.client, log.topic, 0)
    assert replayed == 3 and kv.get(LEASE) == b"lease"
    end = changelog_end(log.client, log.topic, 0)
    close_partition(kv, end, now=now)
    return end


def assert_no_resurrection(kv: RocksKV, seen: bytes | None = b"seen") -> None:
    try:
        assert kv.get(LEASE) is None, "a deleted lease came back"
        assert kv.get(PAUSE) is None, "a cleared pause came back"
        assert kv.get(SEEN) == seen
    finally:
        kv.close()


def test_tombstones_compacted_away_while_closed_do_not_resurrect(changelogs: Any, tmp_path: Path) -> None:
    """The real thing: the broker's cleaner removes the tombstones after delete.retention.ms."""
    log = changelogs({"cleanup.policy": "compact", "delete.retention.ms": "500", "segment.ms": "100",
                      "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"})  # fmt: skip
    assert delete_retention(log.client, log.topic) == 0.5
    path = tmp_path / "p0"
    owned_then_closed(log, path)
    log.write((LEASE, None), (PAUSE, None))  # another owner deletes the lease and the pause

    def tombstones_gone() -> bool:
        log.write((b"Sfiller", b"x"))  # rolls the segment, so the cleaner gets to the tombstones
        contents = log.contents()
        return LEASE not in contents and PAUSE not in contents

    wait_until(tombstones_gone, timeout=240, interval=1.0, what="the cleaner to remove the tombstones")
    kv, _, _ = open_partition(path, log.client, log.topic, 0)
    assert_no_resurrection(kv)


def test_a_changelog_head_deleted_while_closed_means_a_rebuild(changelogs: Any, tmp_path: Path) -> None:
    """The low watermark moved past the clean offset + 1: the tail alone misses the deletes."""
    log = changelogs({"cleanup.policy": "compact,delete", "retention.ms": "-1"})
    path = tmp_path / "p0"
    clean = owned_then_closed(log, path)
    log.write((LEASE, None), (PAUSE, None))
    last = log.write((b"Sother", b"x"))
    log.delete_before(last)
    assert last > clean + 1
    kv, replayed, _ = open_partition(path, log.client, log.topic, 0)
    assert replayed == 1 and kv.get(b"Sother") == b"x"  # rebuilt from the one record left
    assert_no_resurrection(kv, seen=None)  # the seen URL went with the deleted head


def test_a_store_closed_longer_ago_than_the_retention_is_rebuilt(changelogs: Any, tmp_path: Path) -> None:
    """An old close time (the injected clock) with the default 24 h retention read from the topic.
    The local copy holds a lease the compacted changelog has no record of at all (its put and its
    tombstone both compacted away): replaying the tail would keep it."""
    log = changelogs({"cleanup.policy": "compact"})
    assert delete_retention(log.client, log.topic) == DAY
    path = tmp_path / "p0"
    log.write((SEEN, b"seen"))
    kv, _, _ = open_partition(path, log.client, log.topic, 0)
    kv.put(LEASE, b"lease")  # written then; its put and tombstone are gone from the changelog
    kv.put(PAUSE, b"paused")
    now = time.time()
    close_partition(kv, changelog_end(log.client, log.topic, 0), now=now - 2 * DAY)
    log.write((b"Sother", b"x"))
    kv, _, _ = open_partition(path, log.client, log.topic, 0, now=now)
    assert kv.get(b"Sother") == b"x"
    assert_no_resurrection(kv)
    # a recent close: only the tail is replayed
    close_partition(RocksKV(path), changelog_end(log.client, log.topic, 0), now=now)
    log.write((b"Snewer", b"y"))
    kv, replayed, _ = open_partition(path, log.client, log.topic, 0, now=now + 3600)
    assert replayed == 1
    kv.close()


def standby_copy(standby: Standby, last: int) -> None:
    """Run ``standby`` on partition 0 until it holds ``last``, then release its copy."""
    try:
        standby.add(0)
        standby_caught_up(standby, last)
        standby.release(0)
    finally:
        standby.close()


def standby_caught_up(standby: Standby, offset: int) -> None:
    wait_until(lambda: (standby.applied(0) or -1) >= offset, timeout=60, what=f"the standby to apply offset {offset}")


def test_a_standby_copy_opened_from_a_stale_clean_store_is_rebuilt(changelogs: Any, tmp_path: Path) -> None:
    log = changelogs({"cleanup.policy": "compact,delete", "retention.ms": "-1"})
    state_dir, app = str(tmp_path / "state"), "app"
    path = db_path(state_dir, app, 0)
    clean = owned_then_closed(log, path)
    log.write((LEASE, None), (PAUSE, None))
    last = log.write((b"Sother", b"x"))
    log.delete_before(last)
    assert last > clean + 1
    standby_copy(Standby(log.client, log.topic, state_dir, app), last)
    kv = RocksKV(path)
    assert kv.get(b"Sother") == b"x"
    assert_no_resurrection(kv, seen=None)


def test_a_standby_copy_records_when_it_was_complete(changelogs: Any, tmp_path: Path) -> None:
    """The standby notes when it had caught up (the injected clock); taking over a copy whose
    time is older than the retention rebuilds it, a recent one replays only the tail."""
    log = changelogs({"cleanup.policy": "compact"})
    state_dir, app = str(tmp_path / "state"), "app"
    path = db_path(state_dir, app, 0)
    last = log.write((SEEN, b"seen"), (b"Sother", b"x"))
    fake_now = [1_900_000_000.0]
    standby_copy(Standby(log.client, log.topic, state_dir, app, clock=lambda: fake_now[0], probe_interval=0.0), last)
    kv = RocksKV(path)
    copy = local_copy(kv)
    assert copy is not None and copy.offset == last and copy.at == fake_now[0]
    assert kv.get(STANDBY_KEY) == str(last).encode() and kv.get(STANDBY_AT_KEY) is not None
    kv.put(LEASE, b"lease")  # stands for a key whose put and tombstone were compacted away
    kv.close()
    kv, replayed, _ = open_partition(path, log.client, log.topic, 0, now=fake_now[0] + 3600)
    assert replayed == 0 and kv.get(LEASE) == b"lease"  # recent: trusted (the lease is the test's plant)
    close_partition(kv, last, now=fake_now[0])
    # as a standby again, then taken over two days later
    standby = Standby(log.client, log.topic, state_dir, app, clock=lambda: fake_now[0], probe_interval=3600.0)
    try:
        standby.add(0)  # handled on the standby thread before the release that follows
        standby.release(0)
    finally:
        standby.close()
    kv, replayed, _ = open_partition(path, log.client, log.topic, 0, now=fake_now[0] + 2 * DAY)
    assert replayed == 2
    assert_no_resurrection(kv)

"""Queue counts made ahead of a takeover (issue 39): a standby copy counts its queues once it has
caught up and keeps the counts as it applies records, the open of the copy as the active store
brings them up to date with the tail it replays (or drops them when the copy is not the one
counted), and a partition loaded from them is the one a walk of every entry gives. The consumers
are faked (the real broker: tests/integration/test_restart.py, test_failures.py)."""

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from frontier.config import FrontierConfig, ThrottleConfig
from frontier.core.kv import MemoryKV
from frontier.core.scheduler import Scheduler
from frontier.core.urls import parse_input
from frontier.partition import PartitionFrontier
from frontier.partition.counts import QueueCounts
from frontier.partition.keys import STANDBY_AT_KEY, STANDBY_KEY, QueueId, queue_key
from frontier.service import restore
from frontier.service.restore import db_path
from frontier.service.rocks import RocksKV
from frontier.service.standby import Standby
from tests.fakes import FakeConsumer
from tests.test_state_replay import Changelog, Kafka
from tests.test_state_replay import Record as Logged
from tests.test_state_standby import Clock, Record

DAY = 24 * 3600.0


def test_schedule_many_gives_the_order_of_one_schedule_each() -> None:
    hosts = [f"h{i}" for i in random.Random(3).sample(range(500), 200)]
    one, many = Scheduler(), Scheduler()
    for s in (one, many):
        s.schedule("h7", 5.0)  # one already there, at the same time and at another
        s.schedule("h9", 1.0)
    for h in hosts:
        one.schedule(h, 5.0)
    many.schedule_many(hosts, 5.0)

    def drain(s: Scheduler) -> list[str]:
        return [h for h in iter(lambda: s.pop_due(10.0), None)]

    assert drain(many) == drain(one) and len(many) == 0


def key(host: str, seq: int) -> bytes:
    return queue_key(QueueId(host), 0, seq)


def test_counts_kept_as_records_come_equal_a_walk() -> None:
    kv = MemoryKV()
    for seq in range(6):
        kv.put(key(f"h{seq % 3}", seq), b"u")
    counts = QueueCounts.scan(kv)
    assert sorted(counts.counts.values()) == [2, 2, 2] and counts.top == 5
    changes: list[tuple[bytes, bytes | None]] = [(key("h0", 0), None), (key("h3", 40), b"u"), (key("h1", 1), None),
                                                 (key("h1", 4), None), (b"Sseen", b"x")]  # fmt: skip
    for k, v in changes:
        if v is None:
            kv.delete(k)
        else:
            kv.put(k, v)
        counts.touched(k, v)
    counts.settle(kv)
    assert counts.counts == QueueCounts.scan(kv).counts and counts.top == 40 and not counts.dirty


@pytest.fixture
def standby(tmp_path: Path) -> Iterator[tuple[Standby, Clock, Any]]:
    clock = Clock(1000.0)
    sb = Standby({"bootstrap.servers": "127.0.0.1:1"}, "state", str(tmp_path), "app", clock=clock, retention=DAY,
                 probe_interval=30.0)  # fmt: skip
    sb.close()  # its thread is not used: the steps are driven by hand below
    yield sb, clock, FakeConsumer()


def test_a_copy_handed_back_comes_with_its_queue_counts_at_its_offset(
    standby: tuple[Standby, Clock, Any], tmp_path: Path
) -> None:
    """Before, a partition taken over walked every queued URL of its store on the event loop
    (``Queues.load``); now the copy has counted them once, in the background, when it caught up."""
    sb, _clock, consumer = standby
    consumer.high = 4
    sb._open(consumer, 0)
    sb._apply([Record(0, n, key(f"h{n % 2}", n), b"u") for n in range(4)])  # type: ignore[misc]
    sb._probe(consumer, 0)  # caught up: counted
    sb._apply([Record(0, 4, key("h0", 0), None), Record(0, 5, key("h5", 9), b"u")])  # type: ignore[list-item]
    sb._close(consumer, 0, ask=False)  # handed back for a takeover
    counts = sb.counts(0)
    assert counts is not None and counts.offset == 5 and sb.counts(0) is None
    kv = RocksKV(db_path(str(tmp_path), "app", 0))
    try:
        assert counts.counts == QueueCounts.scan(kv).counts and counts.top == 9
    finally:
        kv.close()


def test_a_copy_closed_before_it_caught_up_hands_back_no_counts(standby: tuple[Standby, Clock, Any]) -> None:
    sb, _clock, consumer = standby
    consumer.high = 9
    sb._open(consumer, 0)
    sb._apply([Record(0, 0, key("h0", 1), b"u")])  # type: ignore[list-item]
    sb._close(consumer, 0, ask=False)
    assert sb.counts(0) is None


def open_with(
    path: Path, monkeypatch: pytest.MonkeyPatch, batches: list[list[Logged]], high: int, counts: QueueCounts
) -> RocksKV:
    log = Changelog(batches, high)
    monkeypatch.setattr(restore.Kafka, "of", staticmethod(lambda _conf: Kafka(log)))
    monkeypatch.setattr(restore, "watermarks", lambda _c, _t, _p: (0, log.high))
    monkeypatch.setattr(restore, "changelog_watermarks", lambda _c, _t, _p: (0, log.high))
    kv, _replayed, _applied = restore.open_partition(path, {}, "state", 0, now=1000.0, retention=DAY, counts=counts)
    return kv


@pytest.mark.parametrize("trusted", [True, False])
def test_an_open_brings_the_counts_up_to_date_or_drops_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trusted: bool
) -> None:
    path = tmp_path / "p0"
    kv = RocksKV(path)
    for n in range(4):
        kv.put(key(f"h{n % 2}", n), b"u")
    counts = QueueCounts.scan(kv)
    counts.offset = 3
    kv.put(STANDBY_KEY, b"3")  # a standby copy complete up to 3, recently or too long ago
    kv.put(STANDBY_AT_KEY, repr(999.0 if trusted else 1000.0 - 2 * DAY).encode())
    kv.close()
    tail = [Logged(key("h0", 0), None, 4), Logged(key("h7", 30), b"u", 5), Logged(None, None, 6, eof=True)]
    kv = open_with(path, monkeypatch, [tail], 6, counts)
    try:
        if trusted:
            assert counts.usable and counts.counts == QueueCounts.scan(kv).counts and counts.top == 30
        else:  # wiped and rebuilt from the changelog: not the store counted
            assert not counts.usable
    finally:
        kv.close()


def test_a_partition_loaded_from_counts_is_the_one_a_walk_loads() -> None:
    kv = MemoryKV()
    f = PartitionFrontier(0, kv, FrontierConfig(), ThrottleConfig(), lambda _k, _v: None)
    f.ingest([parse_input(f"http://d{i % 7}.test/p{i}".encode()) for i in range(50)], 100.0)
    counts = QueueCounts.scan(kv)
    walked = PartitionFrontier(0, kv, FrontierConfig(), ThrottleConfig(), lambda _k, _v: None)
    walked.rebuild(200.0)
    ahead = PartitionFrontier(0, kv, FrontierConfig(), ThrottleConfig(), lambda _k, _v: None)
    ahead.rebuild(200.0, counts)
    for g in (walked, ahead):
        assert g.queued() == 50 and g.queued_hosts() == 7
    assert walked.queues.largest(7) == ahead.queues.largest(7)
    assert walked.queues._seq == ahead.queues._seq
    pops = [[g.queues.scheduler.pop_due(300.0) for _ in range(8)] for g in (walked, ahead)]
    assert pops[0] == pops[1]


def test_the_counts_a_partition_closes_with_are_a_walks_of_its_store() -> None:
    kv = MemoryKV()
    f = PartitionFrontier(0, kv, FrontierConfig(robots_obey=False), ThrottleConfig(), lambda _k, _v: None)
    f.ingest([parse_input(f"http://d{i % 5}.test/p{i}".encode()) for i in range(30)], 100.0)
    assert f.dispatch(100.0).jobs  # some leased: their entries left the queues
    f.ingest([parse_input(b"http://d9.test/late")], 101.0)
    counted, walked = f.queues.counted(), QueueCounts.scan(kv)
    assert counted.counts == walked.counts and sum(counted.counts.values()) == f.queued()
    assert counted.top >= walked.top  # (no sequence given here is odd: the walk's highest is one of them)


def test_a_rocksdb_store_is_counted_from_its_keys_alone_as_a_walk_of_its_entries(tmp_path: Path) -> None:
    rocks, memory = RocksKV(tmp_path / "p0"), MemoryKV()
    try:
        rng = random.Random(5)
        entries = [(queue_key(QueueId(q), prio, seq), b"u") for q in ("a", "ab", "b", "crawl\x1ea", "h\x1fapi")
                   for prio in (0, 3, -2) for seq in rng.sample(range(2, 10**9), 4)]  # fmt: skip
        entries += [(b"P" + b"\xff" * 20, b"x"), (b"Sseen", b"x"), (b"R", b"x")]  # around the queue range
        for kv in (rocks, memory):
            for k, v in entries:
                kv.put(k, v)
        assert list(rocks.keys(b"Q")) == sorted(k for k, _ in entries if k[:1] == b"Q")
        assert list(rocks.keys(b"P\xff")) == [b"P" + b"\xff" * 20] and list(rocks.keys(b"\xff")) == []
        counted, walked = QueueCounts.scan(rocks), QueueCounts.scan(memory)
        assert counted.counts == walked.counts and len(counted.counts) == 5 and set(counted.counts.values()) == {12}
        assert counted.top == walked.top == max(int.from_bytes(k[-8:], "big") for k, _ in entries if k[:1] == b"Q")
    finally:
        rocks.close()

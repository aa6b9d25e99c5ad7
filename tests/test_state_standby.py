"""When a standby copy was complete (issue 11 item 11): the time recorded is one before which every
changelog record had been applied, also while the copy lags behind a busy changelog. The standby
thread's steps are driven here by hand against a fake consumer (the real broker:
tests/integration/test_state_retention.py)."""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from frontier.partition.keys import STANDBY_AT_KEY, STANDBY_KEY
from frontier.service.restore import LocalCopy, close_partition, db_path, local_copy
from frontier.service.rocks import RocksKV
from frontier.service.standby import RETENTION_TTL, Standby
from tests.fakes import FakeConsumer

DAY = 24 * 3600.0


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def standby(tmp_path: Path) -> Iterator[tuple[Standby, Clock, Any]]:
    clock = Clock(1000.0)
    sb = Standby({"bootstrap.servers": "127.0.0.1:1"}, "state", str(tmp_path), "app", clock=clock, retention=DAY,
                 probe_interval=30.0)  # fmt: skip
    sb.close()  # its thread is not used: the steps are driven by hand below
    yield sb, clock, FakeConsumer()


def stored(tmp_path: Path) -> LocalCopy | None:
    kv = RocksKV(db_path(str(tmp_path), "app", 0))
    try:
        return local_copy(kv)
    finally:
        kv.close()


def apply_upto(sb: Standby, offset: int) -> None:
    sb._applied[0] = offset  # what the thread's consume loop does per record


def test_a_lagging_copy_records_the_time_of_a_probe_it_has_caught_up_with(
    standby: tuple[Standby, Clock, Any], tmp_path: Path
) -> None:
    sb, clock, consumer = standby
    consumer.high = 10
    sb._open(consumer, 0)  # nothing local: from the start
    sb._probe(consumer, 0)  # t=1000: the changelog ends below 10
    assert sb._stores[0].get(STANDBY_AT_KEY) is None
    clock.t, consumer.high = 1010.0, 15
    apply_upto(sb, 5)
    sb._probe(consumer, 0)  # not there yet; no new question while one is pending
    assert sb._stores[0].get(STANDBY_AT_KEY) is None and consumer.asked == 1
    clock.t, consumer.high = 1040.0, 20
    apply_upto(sb, 9)
    sb._probe(consumer, 0)  # everything below 10 applied: complete as of 1000; asks again (below 20)
    assert sb._stores[0].get(STANDBY_AT_KEY) == repr(1000.0).encode() and consumer.asked == 2
    clock.t = 1100.0
    apply_upto(sb, 15)
    sb._close(consumer, 0)  # the final probe: still behind 20, so 1000 stays
    assert stored(tmp_path) == LocalCopy(15, 1000.0)


def test_a_caught_up_copy_records_each_probe_and_its_release(
    standby: tuple[Standby, Clock, Any], tmp_path: Path
) -> None:
    sb, clock, consumer = standby
    consumer.high = 3
    sb._open(consumer, 0)
    apply_upto(sb, 2)
    sb._probe(consumer, 0)
    assert sb._stores[0].get(STANDBY_AT_KEY) == repr(1000.0).encode()
    clock.t = 1010.0
    sb._probe(consumer, 0)  # not due yet
    assert sb._stores[0].get(STANDBY_AT_KEY) == repr(1000.0).encode()
    clock.t = 1031.0
    sb._probe(consumer, 0)
    assert sb._stores[0].get(STANDBY_AT_KEY) == repr(1031.0).encode()
    clock.t = 1040.0
    sb._close(consumer, 0)  # released for a takeover: complete as of now
    assert stored(tmp_path) == LocalCopy(2, 1040.0)


def test_a_copy_is_complete_past_the_transaction_marker_that_ends_the_changelog(
    standby: tuple[Standby, Clock, Any], tmp_path: Path
) -> None:
    """The changelog is written in transactions: its last offset is a commit marker, which a
    reader never receives. The copy is complete once its position is past it (before, it never
    counted as caught up, its time was never recorded, and the copy was rebuilt when it aged)."""
    sb, _clock, consumer = standby
    consumer.high = 6  # records 0-4, the commit marker at 5
    sb._open(consumer, 0)
    apply_upto(sb, 4)
    sb._probe(consumer, 0)
    assert sb._stores[0].get(STANDBY_AT_KEY) is None  # position unknown: not proven complete
    consumer.pos = 6
    sb._close(consumer, 0)
    assert stored(tmp_path) == LocalCopy(4, 1000.0)


def test_an_empty_changelog_is_complete_from_the_start(standby: tuple[Standby, Clock, Any], tmp_path: Path) -> None:
    sb, _clock, consumer = standby
    consumer.low = consumer.high = 7  # everything deleted
    sb._open(consumer, 0)
    sb._probe(consumer, 0)
    assert sb._stores[0].get(STANDBY_AT_KEY) == repr(1000.0).encode()
    assert sb._stores[0].get(STANDBY_KEY) is None  # nothing applied: a takeover replays from the start
    sb._close(consumer, 0)


@pytest.mark.parametrize(("age", "trusted"), [(3600.0, True), (2 * DAY, False)])
def test_a_clean_copy_becomes_a_standby_only_if_recent(
    standby: tuple[Standby, Clock, Any], tmp_path: Path, age: float, trusted: bool
) -> None:
    sb, clock, consumer = standby
    path = db_path(str(tmp_path), "app", 0)
    kv = RocksKV(path)
    kv.put(b"Lold", b"lease")
    close_partition(kv, 4, now=clock.t - age)
    consumer.high = 5
    sb._open(consumer, 0)
    start: Any = consumer.assigned[-1].offset
    assert (start == 5) is trusted
    assert (sb._stores[0].get(b"Lold") is not None) is trusted
    sb._close(consumer, 0)
    copy = stored(tmp_path)
    if trusted:
        assert copy == LocalCopy(4, clock.t)  # caught up (nothing after 4) at the release
    else:
        assert copy is None or copy.offset != 4


def test_a_caught_up_copy_handed_back_for_a_takeover_asks_the_broker_nothing(
    standby: tuple[Standby, Clock, Any], tmp_path: Path
) -> None:
    """Issue 39 (takeover): each copy handed back asked the broker for the changelog's end once
    more, one partition after another on the standby thread. A copy that caught up with a probe
    keeps that probe's time (every record written before it is in the copy) and asks nothing;
    one that never caught up is still asked (it has no time to keep)."""
    sb, clock, consumer = standby
    consumer.high = 3
    sb._open(consumer, 0)
    apply_upto(sb, 2)
    sb._probe(consumer, 0)
    asked = consumer.asked
    clock.t = 1020.0
    sb._close(consumer, 0, ask=False)
    assert consumer.asked == asked and stored(tmp_path) == LocalCopy(2, 1000.0)

    consumer.high = 9
    sb._open(consumer, 1)  # never probed
    asked = consumer.asked
    sb._close(consumer, 1, ask=False)
    assert consumer.asked == asked + 1


class Record:
    def __init__(self, p: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        self.p, self.offset_, self.key_, self.value_ = p, offset, key, value

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.offset_

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes | None:
        return self.value_


def test_a_poll_is_one_write_per_copy_with_the_offset_it_reaches(
    standby: tuple[Standby, Clock, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39: the standby thread wrote each record to RocksDB by itself, then the offset. Now
    a poll's records of one copy and the offset they reach are one write (a transaction's
    marker, keyless, moves the offset only), and a write that fails counts nothing applied."""
    sb, _clock, consumer = standby
    sb._open(consumer, 0)
    sb._open(consumer, 1)
    writes: list[tuple[int, list[tuple[bytes, bytes | None]]]] = []
    for p in (0, 1):
        write_many = sb._stores[p].write_many

        def spy(records: Any, p: int = p, write_many: Any = write_many) -> None:
            writes.append((p, list(records)))
            write_many(writes[-1][1])

        monkeypatch.setattr(sb._stores[p], "write_many", spy)
    sb._stores[0].put(b"Qgone", b"1")
    sb._apply([Record(0, 0, b"Qa", b"1"), Record(1, 0, b"Qb", b"2"), Record(0, 1, b"Qgone", None),  # type: ignore[list-item]
               Record(0, 2, None, None), Record(7, 0, b"Qx", b"3")])  # fmt: skip
    assert sorted(p for p, _ in writes) == [0, 1]  # one write per copy (partition 7 is not one here)
    assert dict(writes)[0] == [(b"Qa", b"1"), (b"Qgone", None), (STANDBY_KEY, b"2")]
    assert sb.applied(0) == 2 and sb.applied(1) == 0
    assert sb._stores[0].get(b"Qgone") is None and sb._stores[1].get(b"Qb") == b"2"

    def fail(_records: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(sb._stores[1], "write_many", fail)
    with pytest.raises(OSError):
        sb._apply([Record(1, 5, b"Qc", b"4")])  # type: ignore[list-item]
    assert sb.applied(1) == 0


def test_the_retention_read_ahead_is_handed_to_an_open_while_fresh(tmp_path: Path) -> None:
    """Issue 39 (takeover): each partition's open asked the broker for the changelog's
    delete.retention.ms (an admin client and a round trip a partition); the standby thread
    keeps it read, and an open takes it while it is fresh."""
    sb = Standby({"bootstrap.servers": "127.0.0.1:1"}, "state", str(tmp_path), "app")
    sb.close()
    assert sb.retention() is None  # never read: the open asks
    sb._retention_read = (3600.0, time.monotonic())
    assert sb.retention() == 3600.0
    sb._retention_read = (3600.0, time.monotonic() - RETENTION_TTL - 1)
    assert sb.retention() is None

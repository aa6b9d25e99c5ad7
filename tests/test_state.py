"""Stale local state must not resurrect deletes (issue 11 item 11): the restore decision, pure,
and open_partition around it with the changelog faked (the real broker: tests/integration/test_state_*)."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING

from frontier.core.kv import MemoryKV
from frontier.partition.keys import CLEAN_AT_KEY, CLEAN_KEY, MARKER_KEYS, STANDBY_AT_KEY, STANDBY_KEY
from frontier.service import restore as state
from frontier.service.restore import (
    DEFAULT_DELETE_RETENTION,
    LocalCopy,
    close_partition,
    local_copy,
    open_partition,
    restore_plan,
)
from frontier.service.rocks import RocksKV

DAY = 24 * 3600.0
T = 1_800_000_000.0  # the close time in these cases


@pytest.mark.parametrize(
    ("offset", "closed_at", "now", "retention", "low", "high", "trust"),
    [
        (41, T, T + 60, DAY, 0, 50, True),  # a restart a minute later: replay the tail
        (41, T, T + 3600, DAY, 0, None, True),  # high unknown
        (41, T, T + 20 * 3600, DAY, 0, 50, True),  # within the retention, less its margin
        (41, T, T + 25 * 3600, DAY, 0, 50, False),  # offline longer than tombstones are kept
        (41, T, T + DAY, DAY, 0, 50, False),  # exactly the retention: too late (margin)
        (41, T, T + DAY - 601, DAY, 0, 50, True),  # the margin is at most 10 minutes
        (41, T, T + DAY - 599, DAY, 0, 50, False),
        (41, T, T + 0.5, 1.0, 0, 50, True),  # a tiny retention: a 10 % margin
        (41, T, T + 0.95, 1.0, 0, 50, False),
        (41, T, T + 1.5, 1.0, 0, 50, False),
        (41, T, T, 0.0, 0, 50, True),  # no time passed at all
        (41, T, T + 0.001, 0.0, 0, 50, False),  # tombstones kept for no time at all
        (41, T, T + 60, DAY, 42, 50, True),  # the tail starts right after the copy
        (41, T, T + 60, DAY, 43, 50, False),  # records after the copy are gone (retention, DeleteRecords)
        (41, T, T + 60, DAY, 0, 42, True),  # nothing written since the close
        (41, T, T + 60, DAY, 0, 41, False),  # the changelog is behind the copy (recreated topic)
        (-1, T, T + 60, DAY, 0, 0, True),  # closed with an empty changelog
        (-1, T, T + 60, DAY, 1, 5, False),
        (None, T, T + 60, DAY, 0, 50, False),  # no marker: a crash
        (41, None, T + 60, DAY, 0, 50, False),  # a marker without its time (an older store)
        (41, float("nan"), T + 60, DAY, 0, 50, False),
        (41, T, float("nan"), DAY, 0, 50, False),
        (41, T, T + 60, float("inf"), 0, 50, False),
        (41, T + 3600, T, DAY, 0, 50, False),  # closed "in the future": the clock moved back
        (41, T + 10, T, DAY, 0, 50, True),  # ... within the margin
    ],
)
def test_restore_plan(
    offset: int | None, closed_at: float | None, now: float, retention: float, low: int, high: int | None, trust: bool
) -> None:
    plan = state.restore_plan(offset, closed_at, now, retention, low, high)
    assert plan.trust is trust, plan.reason
    assert plan.reason


def test_restore_plan_is_monotonic_in_age() -> None:
    """Once too old, older is too old as well."""
    verdicts = [restore_plan(10, T, T + age, DAY, 0, 20).trust for age in range(0, 3 * 86400, 600)]
    assert verdicts == sorted(verdicts, reverse=True) and verdicts[0] and not verdicts[-1]


def test_local_copy_reads_either_marker() -> None:
    kv = MemoryKV()
    assert local_copy(kv) is None
    kv.put(STANDBY_KEY, b"7")
    assert local_copy(kv) == LocalCopy(7, None)
    kv.put(STANDBY_AT_KEY, b"123.5")
    assert local_copy(kv) == LocalCopy(7, 123.5)
    kv.put(CLEAN_KEY, b"9")  # the clean marker wins, with its own time
    assert local_copy(kv) == LocalCopy(9, None)
    kv.put(CLEAN_AT_KEY, b"456.0")
    assert local_copy(kv) == LocalCopy(9, 456.0)
    kv.put(CLEAN_AT_KEY, b"garbage")
    assert local_copy(kv) == LocalCopy(9, None)
    kv.put(CLEAN_KEY, b"garbage")
    assert local_copy(kv) is None


def test_close_records_the_close_time(tmp_path: Path) -> None:
    kv = RocksKV(tmp_path / "p0")
    kv.put(b"Lx", b"lease")
    close_partition(kv, 41, now=T)
    kv = RocksKV(tmp_path / "p0")
    assert local_copy(kv) == LocalCopy(41, T)
    kv.close()


class FakeChangelog:
    """The changelog partition as open_partition sees it: watermarks and the retained records."""

    def __init__(self, records: list[tuple[int, bytes, bytes | None]], low: int = 0) -> None:
        self.records = records  # (offset, key, value) after compaction
        self.low = low
        self.high = max((o for o, _, _ in records), default=-1) + 1
        self.starts: list[int] = []
        self.bulk: list[bool] = []  # whether each replay wrote in a bulk load
        self.trims: list[int] = []  # the free memory released, after how many replays

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(state, "release_free_memory", lambda: self.trims.append(len(self.starts)) or True)
        monkeypatch.setattr(state, "changelog_watermarks", lambda *_: (self.low, self.high))
        monkeypatch.setattr(state, "delete_retention", lambda *_: DAY)
        monkeypatch.setattr(state, "replay", self.replay)

    def replay(self, kv: RocksKV, _conf: Any, _topic: str, _p: int, start: int) -> tuple[int, int]:
        self.starts.append(start)
        self.bulk.append(kv.loading)
        first = self.low if start == OFFSET_BEGINNING else max(start, self.low)
        n = 0
        for offset, key, value in self.records:
            if offset >= first:
                if value is None:
                    kv.delete(key)
                else:
                    kv.put(key, value)
                n += 1
        return n, self.high - 1


LEASE, PAUSE, QUEUED = b"Lold", b"Oexample.com", b"Qq\x00x"


@pytest.fixture
def closed_store(tmp_path: Path) -> Iterator[Path]:
    """A store closed cleanly at offset 2 (T) holding a lease, a pause and a queued URL."""
    path = tmp_path / "p0"
    kv = RocksKV(path)
    for key in (LEASE, PAUSE, QUEUED):
        kv.put(key, b"v")
    close_partition(kv, 2, now=T)
    yield path


def compacted_after_deletes() -> FakeChangelog:
    # Another owner deleted the lease and the pause (offsets 3, 4) and wrote on (5..9); compaction
    # then removed the puts at 0-2 and, delete.retention.ms later, the tombstones too.
    return FakeChangelog([(2, QUEUED, b"v"), *((o, b"Snew%d" % o, b"v") for o in range(5, 10))])


def test_a_store_offline_past_the_retention_is_rebuilt(closed_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = compacted_after_deletes()
    log.install(monkeypatch)
    kv, replayed, _ = open_partition(closed_store, {}, "state", 0, now=T + 2 * DAY)
    try:
        assert kv.get(LEASE) is None and kv.get(PAUSE) is None, "deletes resurrected"
        assert kv.get(QUEUED) == b"v" and kv.get(b"Snew9") == b"v"
        assert log.starts == [OFFSET_BEGINNING] and replayed == 6
        assert log.bulk == [True], "a rebuild from nothing is a bulk load"
        assert log.trims == [1], "the restore's free memory not released after it"
        assert not kv.loading
        assert all(kv.get(k) is None for k in MARKER_KEYS)
    finally:
        kv.close()


def test_a_recent_store_replays_only_the_tail(closed_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = FakeChangelog([(2, QUEUED, b"v"), (3, LEASE, None), (4, PAUSE, None), (5, b"Snew5", b"v")])
    log.install(monkeypatch)
    kv, replayed, _ = open_partition(closed_store, {}, "state", 0, now=T + 3600)
    try:
        assert log.starts == [3] and replayed == 3
        assert log.bulk == [False], "a tail is written as it comes (no compaction of the whole store after)"
        assert kv.get(LEASE) is None and kv.get(PAUSE) is None and kv.get(QUEUED) == b"v"
        assert all(kv.get(k) is None for k in MARKER_KEYS), "dirty until closed cleanly again"
    finally:
        kv.close()


def test_a_store_whose_tail_was_deleted_is_rebuilt(closed_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = FakeChangelog([(7, b"Snew7", b"v"), (8, b"Snew8", b"v")], low=7)  # offsets 3-6 gone
    log.install(monkeypatch)
    kv, _, _ = open_partition(closed_store, {}, "state", 0, now=T + 60)
    try:
        assert log.starts == [OFFSET_BEGINNING]
        assert kv.get(LEASE) is None and kv.get(PAUSE) is None and kv.get(QUEUED) is None
    finally:
        kv.close()


def test_a_store_without_its_close_time_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p0"
    kv = RocksKV(path)
    kv.put(LEASE, b"v")
    kv.put(CLEAN_KEY, b"2")  # as closed by an earlier version
    kv.close()
    log = compacted_after_deletes()
    log.install(monkeypatch)
    kv, _, _ = open_partition(path, {}, "state", 0, now=T)
    try:
        assert log.starts == [OFFSET_BEGINNING] and kv.get(LEASE) is None
    finally:
        kv.close()


def test_an_old_standby_copy_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p0"
    kv = RocksKV(path)
    kv.put(LEASE, b"v")
    kv.put(STANDBY_KEY, b"2")
    kv.put(STANDBY_AT_KEY, repr(T).encode())
    kv.close()
    log = compacted_after_deletes()
    log.install(monkeypatch)
    kv, _, _ = open_partition(path, {}, "state", 0, now=T + 2 * DAY)
    try:
        assert log.starts == [OFFSET_BEGINNING] and kv.get(LEASE) is None
    finally:
        kv.close()


def test_a_store_with_nothing_to_replay_releases_nothing(closed_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = FakeChangelog([(2, QUEUED, b"v")])
    log.install(monkeypatch)
    kv, replayed, _ = open_partition(closed_store, {}, "state", 0, now=T + 60)
    kv.close()
    assert replayed == 0 and log.trims == []


def test_free_memory_is_released_where_the_c_library_can() -> None:
    assert state.release_free_memory() is (state._trim is not None)


def test_default_retention_when_unreadable() -> None:
    conf = {"bootstrap.servers": "127.0.0.1:1", "socket.timeout.ms": 1000}
    assert state.delete_retention(conf, "no.such.topic", timeout=1.0) == DEFAULT_DELETE_RETENTION

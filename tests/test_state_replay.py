"""A restore's replay of the changelog (issue 39, takeover): the records of each consumed batch
go to RocksDB in one write, in the changelog's order (deletes included), and the store is
complete up to the consumer's position. The consumer is faked (the real broker:
tests/integration/test_restart.py)."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from frontier.service import restore
from frontier.service.rocks import RocksKV


@dataclass
class Record:
    key_: bytes | None
    value_: bytes | None
    offset_: int
    eof: bool = False

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes | None:
        return self.value_

    def offset(self) -> int:
        return self.offset_

    def error(self) -> Any:
        return KafkaError(KafkaError._PARTITION_EOF) if self.eof else None


class Changelog:
    """A read_committed consumer over batches of records (what ``consume`` returns, call by call)."""

    def __init__(self, batches: list[list[Record]], high: int) -> None:
        self.batches = batches
        self.high = high
        self.assigned: list[TopicPartition] = []
        self.closed = False

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned = tps

    def consume(self, n: int, timeout: float) -> list[Record]:
        return self.batches.pop(0) if self.batches else []

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.high) for tp in tps]

    def close(self) -> None:
        self.closed = True


class Kafka:
    def __init__(self, consumer: Changelog) -> None:
        self.consumer = consumer

    def reader(self, *_args: Any, **_kw: Any) -> Changelog:
        return self.consumer


@pytest.fixture
def kv(tmp_path: Path) -> Any:
    store = RocksKV(tmp_path / "p0")
    yield store
    store.close()


def run(kv: RocksKV, log: Changelog, monkeypatch: pytest.MonkeyPatch, low: int = 0) -> tuple[int, int]:
    monkeypatch.setattr(restore.Kafka, "of", staticmethod(lambda _conf: Kafka(log)))
    monkeypatch.setattr(restore, "watermarks", lambda _c, _t, _p: (low, log.high))
    return restore.replay(kv, {}, "state", 0, OFFSET_BEGINNING)


def test_each_batch_is_one_write_in_the_changelogs_order(kv: RocksKV, monkeypatch: pytest.MonkeyPatch) -> None:
    kv.put(b"Sold", b"1")
    writes: list[list[tuple[bytes, bytes | None]]] = []
    write_many = kv.write_many

    def spy(records: Any) -> None:
        writes.append(list(records))
        write_many(writes[-1])

    monkeypatch.setattr(kv, "write_many", spy)
    log = Changelog(
        [
            [Record(b"Qa", b"1", 0), Record(b"Qb", b"2", 1), Record(b"Sold", None, 2)],
            [Record(b"Qa", None, 3), Record(None, None, 4), Record(b"Qb", b"3", 5)],
            [Record(None, None, 6, eof=True)],
        ],
        high=6,
    )
    replayed, applied = run(kv, log, monkeypatch)
    assert len(writes) == 2  # one per consumed batch, not one per record
    assert [k for k, _ in writes[1]] == [b"Qa", b"Qb"]  # the keyless marker is not written
    assert replayed == 5 and applied == 5
    assert kv.get(b"Qa") is None and kv.get(b"Qb") == b"3" and kv.get(b"Sold") is None
    assert log.closed


def test_an_empty_changelog_replays_nothing(kv: RocksKV, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(kv, Changelog([], high=0), monkeypatch) == (0, -1)


def test_write_many_applies_puts_and_deletes_in_order(kv: RocksKV) -> None:
    kv.put(b"a", b"0")
    kv.write_many([(b"a", None), (b"b", b"1"), (b"b", b"2"), (b"c", b"3"), (b"c", None)])
    assert [kv.get(k) for k in (b"a", b"b", b"c")] == [None, b"2", None]

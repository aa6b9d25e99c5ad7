"""The write-back layer of an owned partition's store (frontier/service/pending.py): reads see the
writes of transactions not committed yet over RocksDB (get, first, scan, cursor, with tombstones
and older generations), a generation reaches RocksDB only once its transaction committed, in one
batch with its changelog marker, and never when the commit failed (fenced)."""

from __future__ import annotations

import bisect
import random
from pathlib import Path

import pytest

from frontier.core.kv import CursorClosed, MemoryKV
from frontier.partition.keys import COMMITTED_AT_KEY, COMMITTED_KEY
from frontier.service import pending
from frontier.service.pending import Pending
from frontier.service.rocks import RocksKV
from frontier.service.writer import PartitionWriter, WriteFailed
from tests.test_service_protocol import Recorder
from tests.test_writer import Fenced, until


@pytest.fixture
def rocks(tmp_path: Path) -> RocksKV:
    kv = RocksKV(tmp_path / "p0")
    yield kv  # type: ignore[misc]
    kv.close()


def test_reads_see_the_writes_not_committed_yet_and_rocksdb_gets_none(rocks: RocksKV) -> None:
    rocks.put(b"a", b"old")
    rocks.put(b"b", b"old")
    kv = Pending(rocks)
    kv.put(b"a", b"new")
    kv.delete(b"b")
    kv.put(b"c", b"new")
    assert (kv.get(b"a"), kv.get(b"b"), kv.get(b"c")) == (b"new", None, b"new")
    assert (rocks.get(b"a"), rocks.get(b"b"), rocks.get(b"c")) == (b"old", b"old", None)
    assert list(kv.scan(b"")) == [(b"a", b"new"), (b"c", b"new")]


def test_first_skips_deleted_heads_of_rocksdb_and_of_older_generations(rocks: RocksKV) -> None:
    for key in (b"q1", b"q2", b"q3", b"r1"):
        rocks.put(key, key)
    kv = Pending(rocks)
    kv.delete(b"q1")
    kv.seal()  # an older generation, in a transaction still committing
    assert kv.first(b"q") == (b"q2", b"q2")
    kv.delete(b"q2")
    assert kv.first(b"q") == (b"q3", b"q3")
    kv.put(b"q0", b"new")
    assert kv.first(b"q") == (b"q0", b"new")
    kv.delete(b"q0")
    kv.delete(b"q3")
    assert kv.first(b"q") is None and kv.first(b"r") == (b"r1", b"r1")
    kv.put(b"q9", b"late")
    assert kv.first(b"q") == (b"q9", b"late")


def test_a_cursor_sees_the_store_as_it_was_when_made(rocks: RocksKV) -> None:
    for key in (b"k1", b"k3", b"k5"):
        rocks.put(key, b"r")
    kv = Pending(rocks)
    kv.put(b"k2", b"p")
    kv.delete(b"k3")
    cursor = kv.cursor(b"k")
    kv.put(b"k4", b"after")  # after the cursor was made: not in its view
    kv.delete(b"k5")
    assert cursor.next() == (b"k1", b"r")
    assert cursor.next() == (b"k2", b"p")
    cursor.seek(b"k4")
    assert cursor.next() == (b"k5", b"r")
    assert cursor.next() is None
    cursor.close()


def test_closing_the_store_closes_its_cursors(tmp_path: Path) -> None:
    kv = Pending(RocksKV(tmp_path / "p0"))
    kv.put(b"k1", b"p")
    cursor = kv.cursor(b"k")
    kv.close()
    with pytest.raises(CursorClosed):
        cursor.next()


def test_a_cursor_seek_keeps_the_entry_it_read_ahead(rocks: RocksKV) -> None:
    for key in (b"k1", b"k5"):
        rocks.put(key, b"r")
    kv = Pending(rocks)
    kv.put(b"k2", b"p")
    cursor = kv.cursor(b"k")
    assert cursor.next() == (b"k1", b"r")
    cursor.seek(b"k3")  # k5 was read ahead from RocksDB: still to come
    assert cursor.next() == (b"k5", b"r")
    assert cursor.next() is None


@pytest.mark.parametrize("chunk", [2, 256])
def test_the_sorted_keys_in_chunks(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(pending, "CHUNK", chunk)
    rng = random.Random(chunk)
    index, model = pending.SortedKeys(), []
    for _ in range(300):
        key = b"%d" % rng.randrange(10_000)
        if key not in model:
            index.add(key)
            bisect.insort(model, key)
        probe = b"%d" % rng.randrange(10_000)
        assert list(index.since(probe)) == [k for k in model if k >= probe]
        assert list(index.since(probe, after=True)) == [k for k in model if k > probe]
    index.keep({k: None for k in model[::3]})
    assert list(index.since(b"")) == model[::3]


def test_committed_keys_leave_the_index_in_bulk_not_at_every_commit(
    rocks: RocksKV, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit leaves its keys in the sorted index (the reads skip them) until the index holds
    SLACK more keys than are pending: a commit costs what it wrote, not a pass over every pending
    key; a key written again while still in the index is there once."""
    monkeypatch.setattr(pending, "SLACK", 10)
    kv = Pending(rocks)
    for i in range(1, 8):
        kv.put(b"k%d" % i, b"v%d" % i)
    assert kv.first(b"k") == (b"k1", b"v1")  # (puts them in order)
    gen = kv.seal()
    kv.put(b"k0", b"held")  # pending throughout
    kv.committed([gen], 1)
    assert kv._keys.n == 7  # left: 7 + 1 <= 2 * 1 + SLACK
    expected = [(b"k0", b"held")] + [(b"k%d" % i, b"v%d" % i) for i in range(1, 8)]
    assert list(kv.scan(b"k")) == expected and kv.first(b"k") == (b"k0", b"held")
    kv.put(b"k3", b"again")  # committed, still in the index: not twice
    expected[3] = (b"k3", b"again")
    assert list(kv.scan(b"k")) == expected
    gen = kv.seal()
    for i in range(10, 20):
        kv.put(b"k%d" % i, b"w")
    assert len(list(kv.scan(b"k"))) == 18
    kv.committed([gen], 2)  # 18 indexed for 10 pending: under 2 * 10 + SLACK, kept
    assert kv._keys.n == 18
    gen = kv.seal()
    kv.put(b"k0", b"last")
    kv.committed([gen], 3)  # 1 pending: pruned
    assert kv._keys.n == 1 and next(iter(kv.scan(b"k"))) == (b"k0", b"last")
    kv.committed([kv.seal()], 4)
    assert kv._view == {} and not kv._keys and not kv._fresh


@pytest.mark.parametrize("seed", range(6))
def test_the_layer_reads_as_a_plain_store_through_seals_and_commits(
    rocks: RocksKV, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random writes, seals and commits: every read equals an in-memory store given the same writes."""
    monkeypatch.setattr(pending, "CHUNK", 2 if seed % 2 else 256)  # many chunks, and one
    monkeypatch.setattr(pending, "SLACK", 0 if seed % 3 else 4096)  # committed keys pruned often, or left
    rng = random.Random(seed)
    model, kv = MemoryKV(), Pending(rocks)
    keys = [bytes((p,)) + bytes((q,)) + b"%d" % n for p in b"kl" for q in b"abc" for n in range(6)]
    prefixes = [b"k", b"l", b"ka", b"kb", b"lc", b"kb1"]
    for key in keys[::3]:  # some already in RocksDB
        rocks.put(key, b"r" + key)
        model.put(key, b"r" + key)
    sealed: list[dict[bytes, bytes | None]] = []
    cursors = []
    for step in range(400):
        op = rng.random()
        key = rng.choice(keys)
        if op < 0.45:
            kv.put(key, b"%d" % step)
            model.put(key, b"%d" % step)
        elif op < 0.75:
            kv.delete(key)
            model.delete(key)
        elif op < 0.85:
            sealed.append(kv.seal())
        elif op < 0.93 and sealed:
            n = rng.randint(1, len(sealed))
            kv.committed(sealed[:n], step)
            del sealed[:n]
        elif len(cursors) < 4:
            prefix = rng.choice(prefixes)
            cursors.append((kv.cursor(prefix), model.cursor(prefix)))
        prefix = rng.choice(prefixes)
        assert kv.get(key) == model.get(key)
        assert kv.first(prefix) == model.first(prefix)
        after = rng.choice([b"", key])
        assert list(kv.scan(prefix, after)) == list(model.scan(prefix, after))
        if cursors and rng.random() < 0.5:
            ours, theirs = rng.choice(cursors)
            if rng.random() < 0.3:
                ours.seek(key)
                theirs.seek(key)
            assert ours.next() == theirs.next()
    kv.committed(sealed, 999)
    kv.committed([kv.seal()], 1000)
    assert list(rocks.scan(b"k")) + list(rocks.scan(b"l")) == list(model.scan(b"k")) + list(model.scan(b"l"))
    assert kv._view == {} and not kv._keys


def test_a_generation_is_written_only_with_its_commit_and_marker(rocks: RocksKV) -> None:
    kv = Pending(rocks, clock=lambda: 1234.5)
    kv.put(b"a", b"1")
    first = kv.seal()
    kv.put(b"a", b"2")  # the next transaction's
    kv.put(b"b", b"2")
    assert rocks.get(b"a") is None and rocks.get(COMMITTED_KEY) is None
    kv.committed([first], 7)
    assert rocks.get(b"a") == b"1" and rocks.get(b"b") is None
    assert (rocks.get(COMMITTED_KEY), rocks.get(COMMITTED_AT_KEY)) == (b"7", b"1234.5")
    assert kv.get(b"a") == b"2" and kv.get(b"b") == b"2"  # still pending: the newer values
    with pytest.raises(RuntimeError):
        kv.committed([{}], 8)  # not a sealed generation


async def test_the_writer_writes_the_store_once_its_transaction_committed(rocks: RocksKV) -> None:
    rec = Recorder()
    writer = PartitionWriter(rec, "state", 3, applied=1)
    writer.generations = kv = Pending(rocks)
    await writer.start()
    rec.hold.set()
    kv.put(b"k1", b"v1")
    writer.write("state", b"v1", b"k1", 3)
    writer.write("jobs", b"job", b"host")
    writer.commit()
    await until(lambda: writer._committing is not None)
    kv.put(b"k2", b"v2")  # during the commit: the next transaction's
    writer.write("state", b"v2", b"k2", 3)
    writer.commit()
    assert rocks.get(b"k1") is None and kv.get(b"k1") == b"v1"
    rec.hold.clear()
    await until(lambda: rocks.get(b"k2") is not None)
    assert rocks.get(b"k1") == b"v1" and rocks.get(COMMITTED_KEY) == b"4" == str(writer.applied).encode()
    assert await writer.close() == 4 and kv._view == {}


async def test_a_failed_commit_writes_nothing_to_the_store(rocks: RocksKV) -> None:
    failures: list[WriteFailed] = []
    writer = PartitionWriter(Fenced(), "state", 2, applied=10, on_failure=failures.append)
    writer.generations = kv = Pending(rocks)
    await writer.start()
    kv.put(b"k", b"zombie")
    writer.write("state", b"zombie", b"k", 2)
    writer.commit()
    await until(lambda: failures)
    assert await writer.close() is None
    assert rocks.get(b"k") is None and rocks.get(COMMITTED_KEY) is None
    assert list(rocks.scan(b"")) == []

"""RocksDB options of the partition stores: every database of the process shares one bounded
block cache (holding the index and filter blocks too) and one memtable budget, so RocksDB's memory
does not grow with the number of open partitions or with the data they hold."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from frontier.service.rocks import BLOCK_CACHE_BYTES, WRITE_BUFFER_BYTES, RocksKV, _shared_memory

KEYS = 100_000


def fill(put: Callable[[bytes, bytes], object], n: int = KEYS) -> None:
    for i in range(n):
        put(b"S%08d" % i, b"x" * 100)


def prop(db: Rdict, name: str) -> int:
    value = db.property_int_value(name)
    assert value is not None, name
    return int(value)


def test_every_database_uses_the_one_shared_bounded_block_cache(tmp_path: Path) -> None:
    cache, _ = _shared_memory()
    stores = [RocksKV(tmp_path / f"p{n}") for n in range(3)]
    try:
        for kv in stores:
            fill(kv.put)
            kv._db.flush()
            assert kv.get(b"S%08d" % 12_345) == b"x" * 100
        usages = {prop(kv._db, "rocksdb.block-cache-usage") for kv in stores}
        capacities = {prop(kv._db, "rocksdb.block-cache-capacity") for kv in stores}
        assert capacities == {BLOCK_CACHE_BYTES}
        assert len(usages) == 1 and 0 < usages.pop() <= BLOCK_CACHE_BYTES, "not one shared cache"
    finally:
        for kv in stores:
            kv.close()
    assert 0 < cache.get_usage() <= BLOCK_CACHE_BYTES


def test_index_and_filter_blocks_are_held_in_the_cache_not_by_the_table_readers(tmp_path: Path) -> None:
    """Compared with RocksDB's defaults on the same data: the table readers' own memory (index and
    filter blocks outside any cache, growing with the data) is what the shared cache takes over."""
    kv = RocksKV(tmp_path / "ours")
    default = Rdict(str(tmp_path / "default"), Options(raw_mode=True))
    try:
        fill(kv.put)
        kv._db.flush()
        fill(default.put)
        default.flush()
        ours = prop(kv._db, "rocksdb.estimate-table-readers-mem")
        theirs = prop(default, "rocksdb.estimate-table-readers-mem")
        assert theirs > 20_000 and ours * 4 < theirs, (ours, theirs)
    finally:
        kv.close()
        default.close()


def test_memtables_of_every_database_count_against_one_budget(tmp_path: Path) -> None:
    _, budget = _shared_memory()
    assert budget.enabled() and budget.get_buffer_size() == WRITE_BUFFER_BYTES
    before = budget.get_usage()
    kv = RocksKV(tmp_path / "p0")
    try:
        fill(kv.put, 20_000)  # ~2.5 MB, below one memtable: stays in memory, counted in the budget
        assert budget.get_usage() > before + 1_000_000
    finally:
        kv.close()


def test_the_store_keeps_its_data_across_a_reopen_with_these_options(tmp_path: Path) -> None:
    kv = RocksKV(tmp_path / "p0")
    fill(kv.put, 1000)
    kv.delete(b"S%08d" % 5)
    kv.close()
    kv = RocksKV(tmp_path / "p0")
    try:
        keys = [k for k, _ in kv.scan(b"S")]
        assert len(keys) == 999 and b"S%08d" % 5 not in keys and keys == sorted(keys)
        assert kv.first(b"S") == (b"S%08d" % 0, b"x" * 100)
    finally:
        kv.close()


def test_a_bulk_load_compacts_nothing_until_its_end_then_everything_once(tmp_path: Path) -> None:
    kv = RocksKV(tmp_path / "p0")
    files = 6  # more level-0 files than start a compaction (RocksDB's trigger: 4)
    try:
        with kv.bulk():
            assert kv.loading
            for f in range(files):
                kv.write_many((b"S%02d%06d" % (f, i), b"x" * 100) for i in range(1_000))
                kv._db.flush()
            assert kv.property("rocksdb.num-files-at-level0") == str(files), "compacted during the load"
        assert not kv.loading
        assert kv.property("rocksdb.num-files-at-level0") == "0", "not compacted at the end"
        assert kv.get(b"S05000999") == b"x" * 100 and sum(1 for _ in kv.scan(b"S")) == files * 1_000
        # compactions are on again: level-0 files past the trigger are compacted in the background
        for f in range(files):
            kv.write_many([(b"T%02d" % f, b"y")])
            kv._db.flush()
        deadline = time.monotonic() + 30
        while int(kv.property("rocksdb.num-files-at-level0") or 0) >= 4:
            assert time.monotonic() < deadline, "compactions still off after the bulk load"
            time.sleep(0.05)
    finally:
        kv.close()


def test_a_failed_bulk_load_turns_compactions_back_on_and_stops(tmp_path: Path) -> None:
    kv = RocksKV(tmp_path / "p0")
    try:
        with pytest.raises(RuntimeError), kv.bulk():
            for f in range(5):
                kv.write_many([(b"S%02d" % f, b"x")])
                kv._db.flush()
            raise RuntimeError("the changelog failed")
        assert not kv.loading
        deadline = time.monotonic() + 30
        while int(kv.property("rocksdb.num-files-at-level0") or 0) >= 4:
            assert time.monotonic() < deadline, "compactions still off after a failed bulk load"
            time.sleep(0.05)
    finally:
        kv.close()

"""RocksDB storage of the partitions (rocksdict, raw bytes, one database per partition), with the
contract of ``frontier.core.kv.KV``.

Memory: every RocksDB database of the process (the partitions it owns and its standby copies)
shares one block cache of ``BLOCK_CACHE_BYTES`` that also holds the index and filter blocks, and
one write-buffer budget of ``WRITE_BUFFER_BYTES`` for all memtables, so RocksDB's memory is
bounded however many partitions are open. (RocksDB's defaults give each database its own 32 MB
block cache and keep index and filter blocks outside any cache, growing with the data.)
"""

from __future__ import annotations

import shutil
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rocksdict import (
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteBufferManager,
    WriteOptions,
)

from frontier.core.kv import Cursor, CursorClosed

MEMTABLE_BYTES = 4 * 1024 * 1024  # per database; at most 2 of them (one being flushed)
BLOCK_CACHE_BYTES = 64 * 1024 * 1024  # shared by every database of the process
WRITE_BUFFER_BYTES = 32 * 1024 * 1024  # all memtables of the process together: flushed early beyond
BLOOM_BITS_PER_KEY = 10  # ~1 % false positives: a lookup of a URL never seen skips the files without it
L0_SLOWDOWN, L0_STOP = 20, 36  # level-0 files that slow down, then stop, writes (RocksDB's defaults)
# A bulk load (RocksKV.bulk): no compaction while it writes, and no level-0 limit meanwhile (the files
# wait for the one compaction at its end)
_BULK = {"disable_auto_compactions": "true", "level0_slowdown_writes_trigger": str(1 << 30),
         "level0_stop_writes_trigger": str(1 << 30)}  # fmt: skip
_NOT_BULK = {"disable_auto_compactions": "false", "level0_slowdown_writes_trigger": str(L0_SLOWDOWN),
             "level0_stop_writes_trigger": str(L0_STOP)}  # fmt: skip

_shared: tuple[Cache, WriteBufferManager] | None = None


def _shared_memory() -> tuple[Cache, WriteBufferManager]:
    """The process's block cache and write-buffer budget, created once (they must outlive every
    database that uses them: a module global does)."""
    global _shared
    if _shared is None:
        _shared = (Cache(BLOCK_CACHE_BYTES), WriteBufferManager(WRITE_BUFFER_BYTES, False))
    return _shared


def rocks_options() -> Options:
    """Options of every partition database: raw bytes, small memtables, the shared cache and budget."""
    cache, write_buffers = _shared_memory()
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    # Bounded memory per partition: small memtables flushed to disk early (RocksDB's 64 MB
    # default, times every owned partition, would dominate the frontier's RSS) ...
    opts.set_write_buffer_size(MEMTABLE_BYTES)
    opts.set_max_write_buffer_number(2)
    opts.set_level_zero_slowdown_writes_trigger(L0_SLOWDOWN)  # (named: a bulk load sets them back)
    opts.set_level_zero_stop_writes_trigger(L0_STOP)
    # ... and for all of them together.
    opts.set_write_buffer_manager(write_buffers)
    table = BlockBasedOptions()
    table.set_block_cache(cache)
    # Index and filter blocks live in the shared cache (bounded) instead of the heap (growing with
    # the data). Partitioned into 4 KiB pieces under a small pinned top level, so that a lookup
    # loads only the pieces it needs: whole per-file blocks (hundreds of KiB each) evicted by data
    # blocks and read again made ingest several times slower (measured).
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
    table.set_index_type(BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_metadata_block_size(4096)
    table.set_pin_top_level_index_and_filter(True)
    opts.set_block_based_table_factory(table)
    return opts


_BYTES = [bytes((b,)) for b in range(256)]  # each byte as a one-byte string


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key above every key starting with ``prefix`` (None: no such key, e.g. b"\\xff")."""
    last = prefix[-1] if prefix else 0xFF
    if last != 0xFF:  # (the common case, without a copy to change)
        return prefix[:-1] + _BYTES[last + 1]
    end = bytearray(prefix)
    while end and end[-1] == 0xFF:
        end.pop()
    if not end:
        return None
    end[-1] += 1
    return bytes(end)


def _cursor_options(prefix: bytes) -> ReadOptions:
    """Read options of a cursor: its iteration ends at the end of ``prefix``'s range, and the files
    its view kept alive are deleted by RocksDB's background threads when it closes (not in the
    caller's: a view held while the store flushed and compacted can free many)."""
    options = ReadOptions()
    bound = prefix_end(prefix)
    if bound is not None:
        options.set_iterate_upper_bound(bound)
    options.set_background_purge_on_iterator_cleanup(True)
    return options


class RocksCursor:
    """A cursor over one RocksDB iterator: the database as it was when the cursor was made (an
    iterator's implicit snapshot), bounded to its prefix, read one entry at a time."""

    def __init__(self, kv: RocksKV, db: Rdict, prefix: bytes, after: bytes) -> None:
        self._kv: RocksKV | None = kv
        self._prefix = prefix
        self._options = _cursor_options(prefix)  # kept as long as the iterator that uses it
        self._it: Any = db.iter(self._options)
        self._last = after  # entries after this one are still to come
        self.seek(after)

    def seek(self, after: bytes) -> None:
        if self._it is None:
            raise CursorClosed("cursor closed (its store was closed)")
        self._last = max(self._last, after)  # never back
        self._it.seek(max(self._last, self._prefix))

    def next(self) -> tuple[bytes, bytes] | None:
        it = self._it
        if it is None:
            raise CursorClosed("cursor closed (its store was closed)")
        while it.valid():
            key: bytes = it.key()
            if not key.startswith(self._prefix):
                return None
            value: bytes = it.value()
            it.next()
            if key != self._last:  # a seek lands on ``after`` itself when it is there
                self._last = key
                return key, value
        return None

    def close(self) -> None:
        """Let go of the iterator (and with it the database it keeps open)."""
        self._it = None
        if self._kv is not None:
            self._kv._cursors.discard(self)
            self._kv = None


class RocksKV:
    """A rocksdict database at ``path`` holding raw bytes."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = Rdict(str(path), rocks_options())
        # No write-ahead log by default (restores, standby copies, markers): the changelog topic is
        # the source of truth, and a crash keeps a prefix of these writes (flushed memtables, in
        # order), which the markers written after their records make safe. A cleanly closed database
        # is flushed on close. An owned partition's committed transactions go through the log
        # (``write_many(logged=True)``): a kill -9 of the process keeps them.
        write = WriteOptions()
        write.disable_wal = True  # type: ignore[method-assign,assignment]  # a property; the stub says method
        self._db.set_write_options(write)
        self._logged = WriteOptions()  # (the log written, not synced: what a killed process wrote stays)
        # Writes without the log since the last flush: a logged write after them would survive a crash
        # that loses them (the log is replayed over the flushed files), so they are flushed first.
        self._unlogged = False
        self._cursors: weakref.WeakSet[RocksCursor] = weakref.WeakSet()
        self.loading = False  # a bulk load under way (:meth:`bulk`)

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._db.get(key)
        return value

    def put(self, key: bytes, value: bytes) -> None:
        self._unlogged = True
        self._db[key] = value

    def delete(self, key: bytes) -> None:
        self._unlogged = True
        del self._db[key]

    def write_many(self, records: Iterable[tuple[bytes, bytes | None]], logged: bool = False) -> None:
        """Apply ``records`` in order (a value None deletes its key) as one atomic write: a
        restore's batch of changelog records costs one call into RocksDB, not one per record.
        ``logged``: through the write-ahead log, so that a kill -9 of the process keeps it (every
        write without the log before it is flushed first: a crash keeps a prefix of the writes)."""
        batch = WriteBatch(raw_mode=True)
        for key, value in records:
            if value is None:
                del batch[key]
            else:
                batch[key] = value
        if not logged:
            self._unlogged = True
            self._db.write(batch)
            return
        self.flush()
        self._db.write(batch, self._logged)

    def flush(self) -> None:
        """Make every write without the log so far durable (a memtable flush, waited for)."""
        if self._unlogged:
            self._db.flush(True)
            self._unlogged = False

    @contextmanager
    def bulk(self) -> Iterator[None]:
        """A bulk load: the writes inside (a rebuild from nothing, which nothing reads until it
        ends) go to level-0 files without any compaction, and once they are done, the whole store
        is compacted at once, in the caller's thread (RocksDB works without the GIL). Each record
        is then rewritten once, not again at every level as level 0 fills up: a partition's 2.5M
        changelog records (1M hosts over 8 partitions) cost about a quarter less CPU, and the
        store ends compacted (a walk of its queues reads no pile of level-0 files). On an error
        inside, compactions are turned back on and nothing more is done."""
        self._db.set_options(_BULK)
        self.loading = True
        try:
            yield
        finally:
            self.loading = False
            self._db.set_options(_NOT_BULK)
        self.flush()  # (after the options: the last memtable's file is compacted too)
        self._db.compact_range(None, None)

    def property(self, name: str) -> str | None:
        """A RocksDB property of the database (``rocksdb.num-files-at-level0``: for tests and probes)."""
        value: str | None = self._db.property_value(name)
        return value

    def scan(self, prefix: bytes, after: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        # Bounded to the prefix: without an upper bound, a seek into an emptied range walks every
        # deleted entry after it (until compaction), e.g. 0.9 ms per seek past 20,000 drained queues.
        # (``items``: one call into rocksdict an entry, not four; the options are this generator's as
        # long as the iteration they bound lasts)
        bound = prefix_end(prefix)
        options = ReadOptions()
        if bound is not None:
            options.set_iterate_upper_bound(bound)
        items: Iterator[tuple[bytes, bytes]] = self._db.items(from_key=max(after, prefix), read_opt=options)  # type: ignore[assignment]  # raw mode: bytes
        for key, value in items:
            if bound is None and not key.startswith(prefix):
                return
            if key != after:  # the seek lands on ``after`` itself when it is still there
                yield key, value

    def first(self, prefix: bytes) -> tuple[bytes, bytes] | None:
        """The first entry under ``prefix`` (``scan``'s first, one seek without a generator)."""
        # (the iterator is made here, not by a helper shared with scan: its ReadOptions must outlive
        # it, or the upper bound is read after it is freed; tests/test_store_scan.py fails then)
        bound = prefix_end(prefix)
        if bound is None:
            it = self._db.iter()
        else:
            options = ReadOptions()
            options.set_iterate_upper_bound(bound)
            it = self._db.iter(options)
        it.seek(prefix)
        if it.valid():
            key: bytes = it.key()
            if key.startswith(prefix):
                return key, it.value()
        return None

    def keys(self, prefix: bytes) -> Iterator[bytes]:
        """The keys under ``prefix``, in order, without their values (a count of the queues' entries,
        ``QueueCounts.scan``: half the CPU of ``scan``'s pairs, measured on 1.25M entries)."""
        options = ReadOptions()  # (kept by this generator's frame as long as the iteration runs)
        bound = prefix_end(prefix)
        if bound is not None:
            options.set_iterate_upper_bound(bound)
            yield from self._db.keys(from_key=prefix, read_opt=options)
            return
        key: bytes  # (raw mode: every key is bytes)
        for key in self._db.keys(from_key=prefix, read_opt=options):  # type: ignore[assignment]  # (0xff bytes alone)
            if not key.startswith(prefix):
                return
            yield key

    def cursor(self, prefix: bytes, after: bytes = b"") -> Cursor:
        cursor = RocksCursor(self, self._db, prefix, after)
        self._cursors.add(cursor)
        return cursor

    def close(self) -> None:
        for cursor in list(self._cursors):  # an open iterator would keep the database (and its lock)
            cursor.close()
        self._db.close()

    @staticmethod
    def destroy(path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

"""Key-value stores for one frontier partition: the contract, an in-memory implementation (for
unit tests) and a RocksDB one (rocksdict, raw bytes, one database per partition).

Keys are bytes and ordered bytewise; ``scan(prefix)`` yields in key order. Keys starting with
``META`` (``b"\\x00"``) are local bookkeeping and never go to the changelog.
"""

from __future__ import annotations

import bisect
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from rocksdict import Options, Rdict, WriteOptions

META = b"\x00"
MEMTABLE_BYTES = 4 * 1024 * 1024


class KV(Protocol):
    def get(self, key: bytes) -> bytes | None: ...
    def put(self, key: bytes, value: bytes) -> None: ...
    def delete(self, key: bytes) -> None: ...
    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]: ...
    def first(self, prefix: bytes) -> tuple[bytes, bytes] | None: ...
    def close(self) -> None: ...


class MemoryKV:
    """A sorted in-memory map with the KV contract."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self._data:
            bisect.insort(self._keys, key)
        self._data[key] = value

    def delete(self, key: bytes) -> None:
        if self._data.pop(key, None) is not None:
            del self._keys[bisect.bisect_left(self._keys, key)]

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        i = bisect.bisect_left(self._keys, prefix)
        for key in list(self._keys[i:]):
            if not key.startswith(prefix):
                return
            value = self._data.get(key)
            if value is not None:
                yield key, value

    def first(self, prefix: bytes) -> tuple[bytes, bytes] | None:
        return next(self.scan(prefix), None)

    def close(self) -> None:
        pass


class RocksKV:
    """A rocksdict database at ``path`` holding raw bytes."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        # Bounded memory per partition: small memtables flushed to disk early (RocksDB's 64 MB
        # default, times every owned partition, would dominate the frontier's RSS).
        opts.set_write_buffer_size(MEMTABLE_BYTES)
        opts.set_max_write_buffer_number(2)
        self.path = path
        self._db = Rdict(str(path), opts)
        # No write-ahead log: the changelog topic is the source of truth. A cleanly closed
        # database is flushed on close; after a crash the local copy is discarded anyway.
        write = WriteOptions()
        write.disable_wal = True  # type: ignore[method-assign,assignment]  # a property; the stub says method
        self._db.set_write_options(write)

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._db.get(key)
        return value

    def put(self, key: bytes, value: bytes) -> None:
        self._db[key] = value

    def delete(self, key: bytes) -> None:
        del self._db[key]

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        it = self._db.iter()
        it.seek(prefix)
        while it.valid():
            key = it.key()
            if not key.startswith(prefix):
                return
            yield key, it.value()
            it.next()

    def first(self, prefix: bytes) -> tuple[bytes, bytes] | None:
        return next(self.scan(prefix), None)

    def close(self) -> None:
        self._db.close()

    @staticmethod
    def destroy(path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

"""The key-value contract of one frontier partition, and an in-memory implementation (unit
tests, the simulator). The RocksDB implementation is ``frontier.service.rocks.RocksKV``.

Keys are bytes and ordered bytewise; ``scan(prefix)`` yields in key order. What the keys are
(the layout, including the local ``META`` keys) is ``frontier.partition.keys``.

A :class:`Cursor` reads a prefix a few entries at a time, e.g. across the slices of a long
question (``frontier.partition.recorded``): it sees the entries as they were when it was made,
whatever is written meanwhile (RocksDB: an iterator's implicit snapshot; here: the rest of its
range copied before the first write that would change it), and it resumes where it stopped, so
reading N entries in slices costs O(N), not a new scan per slice. Closing the store closes its
cursors (RocksDB: an open iterator keeps the database, and its lock, open).
"""

from __future__ import annotations

import bisect
import weakref
from collections.abc import Iterator
from typing import Protocol


class CursorClosed(RuntimeError):
    """The cursor was closed (its store was closed under it: the partition moved away)."""


class Cursor(Protocol):
    def next(self) -> tuple[bytes, bytes] | None:
        """The next entry under the cursor's prefix (None: no more)."""
        ...

    def seek(self, after: bytes) -> None:
        """Go on from the first entry after ``after`` (in the same view; never back before the
        last entry read)."""
        ...

    def close(self) -> None: ...


class KV(Protocol):
    def get(self, key: bytes) -> bytes | None: ...
    def put(self, key: bytes, value: bytes) -> None: ...
    def delete(self, key: bytes) -> None: ...
    def scan(self, prefix: bytes, after: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """The entries under ``prefix`` in key order; only those after ``after`` when given."""
        ...

    def first(self, prefix: bytes) -> tuple[bytes, bytes] | None: ...
    def cursor(self, prefix: bytes, after: bytes = b"") -> Cursor:
        """The entries under ``prefix`` (after ``after``) as they are now, read one at a time."""
        ...

    def close(self) -> None: ...


class _MemoryCursor:
    """A cursor over a :class:`MemoryKV`: reads the store itself (a bisection per entry) until a
    write would change the part of its range it has not read yet; that rest is copied first."""

    def __init__(self, kv: MemoryKV, prefix: bytes, after: bytes) -> None:
        self._kv: MemoryKV | None = kv
        self._prefix = prefix
        self._last = after  # entries after this one are still to come
        self._rest: list[bytes] | None = None  # the keys still to read as they were, once a write came...
        self._values: list[bytes] = []  # ...and their values
        self._at = 0  # the next entry of ``_rest``

    def _start(self, keys: list[bytes]) -> int:
        last = self._last
        return bisect.bisect_right(keys, last) if last >= self._prefix else bisect.bisect_left(keys, self._prefix)

    def before_write(self, key: bytes) -> None:
        """``key`` is about to change: if it is in the part still to read, keep that part as it is."""
        kv = self._kv
        if self._rest is not None or kv is None or not key.startswith(self._prefix) or key <= self._last:
            return
        rest: list[bytes] = []
        for k in kv._keys[self._start(kv._keys) :]:
            if not k.startswith(self._prefix):
                break
            rest.append(k)
        self._rest, self._values, self._at = rest, [kv._data[k] for k in rest], 0

    def next(self) -> tuple[bytes, bytes] | None:
        kv = self._kv
        if kv is None:
            raise CursorClosed("cursor closed")
        if self._rest is not None:
            if self._at >= len(self._rest):
                return None
            key, value = self._rest[self._at], self._values[self._at]
            self._at += 1
            self._last = key
            return key, value
        i = self._start(kv._keys)
        if i >= len(kv._keys) or not kv._keys[i].startswith(self._prefix):
            return None
        key = kv._keys[i]
        self._last = key
        return key, kv._data[key]

    def seek(self, after: bytes) -> None:
        if self._kv is None:
            raise CursorClosed("cursor closed")
        if self._rest is not None:
            self._at = max(self._at, bisect.bisect_right(self._rest, after))
        self._last = max(self._last, after)

    def close(self) -> None:
        if self._kv is not None:
            self._kv._cursors.discard(self)
        self._kv, self._rest, self._values = None, None, []


class MemoryKV:
    """A sorted in-memory map with the KV contract."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []
        self._cursors: weakref.WeakSet[_MemoryCursor] = weakref.WeakSet()

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def _changing(self, key: bytes) -> None:
        for cursor in list(self._cursors):
            cursor.before_write(key)

    def put(self, key: bytes, value: bytes) -> None:
        if self._cursors:
            self._changing(key)
        if key not in self._data:
            bisect.insort(self._keys, key)
        self._data[key] = value

    def delete(self, key: bytes) -> None:
        if self._cursors and key in self._data:
            self._changing(key)
        if self._data.pop(key, None) is not None:
            del self._keys[bisect.bisect_left(self._keys, key)]

    def scan(self, prefix: bytes, after: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        i = bisect.bisect_right(self._keys, after) if after >= prefix else bisect.bisect_left(self._keys, prefix)
        for key in list(self._keys[i:]):
            if not key.startswith(prefix):
                return
            value = self._data.get(key)
            if value is not None:
                yield key, value

    def first(self, prefix: bytes) -> tuple[bytes, bytes] | None:
        return next(self.scan(prefix), None)

    def cursor(self, prefix: bytes, after: bytes = b"") -> Cursor:
        cursor = _MemoryCursor(self, prefix, after)
        self._cursors.add(cursor)
        return cursor

    def close(self) -> None:
        for cursor in list(self._cursors):
            cursor.close()

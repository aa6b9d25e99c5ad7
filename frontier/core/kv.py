"""The key-value contract of one frontier partition, and an in-memory implementation (unit
tests, the simulator). The RocksDB implementation is ``frontier.service.rocks.RocksKV``.

Keys are bytes and ordered bytewise; ``scan(prefix)`` yields in key order. What the keys are
(the layout, including the local ``META`` keys) is ``frontier.partition.keys``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Protocol


class KV(Protocol):
    def get(self, key: bytes) -> bytes | None: ...
    def put(self, key: bytes, value: bytes) -> None: ...
    def delete(self, key: bytes) -> None: ...
    def scan(self, prefix: bytes, after: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """The entries under ``prefix`` in key order; only those after ``after`` when given."""
        ...

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

    def close(self) -> None:
        pass

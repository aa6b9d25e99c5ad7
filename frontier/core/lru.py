"""Bounded caches (pure): a map that keeps at most ``size`` entries, the least recently used out
first (:class:`LRU`), and one whose entries also expire (:class:`TtlCache`, time passed in).

The one helper for every bounded cache of the project: an ``OrderedDict`` with ``move_to_end``
and ``popitem(last=False)`` written again at each place drifts (one refreshes on read, one not;
one evicts before it inserts). Here reading with :meth:`LRU.get` refreshes an entry and
:meth:`LRU.peek` does not; :meth:`LRU.put` (or ``cache[key] = value``) makes the entry the most
recent and then drops the oldest beyond ``size``. Iteration goes oldest first, ``reversed`` newest
first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, ItemsView, Iterator, ValuesView
from typing import Generic, TypeVar, overload

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")


class LRU(Generic[K, V]):
    """At most ``size`` entries; adding one more drops the least recently used (put or read with
    :meth:`get`)."""

    __slots__ = ("_entries", "size")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("an LRU keeps at least one entry")
        self.size = size
        self._entries: OrderedDict[K, V] = OrderedDict()

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: D) -> V | D: ...
    def get(self, key: K, default: object = None) -> object:
        """The value of ``key`` (now the most recent entry), or ``default``."""
        try:
            value = self._entries[key]
        except KeyError:
            return default
        self._entries.move_to_end(key)
        return value

    @overload
    def peek(self, key: K) -> V | None: ...
    @overload
    def peek(self, key: K, default: D) -> V | D: ...
    def peek(self, key: K, default: object = None) -> object:
        """The value of ``key``, or ``default``, without refreshing it."""
        return self._entries.get(key, default)

    def __getitem__(self, key: K) -> V:
        """The value of ``key`` without refreshing it (as :meth:`peek`); KeyError when absent."""
        return self._entries[key]

    def put(self, key: K, value: V) -> None:
        """``key`` → ``value``, the most recent entry; the oldest beyond ``size`` are dropped."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    __setitem__ = put

    @overload
    def pop(self, key: K) -> V | None: ...
    @overload
    def pop(self, key: K, default: D) -> V | D: ...
    def pop(self, key: K, default: object = None) -> object:
        """Remove ``key``; its value, or ``default`` when it was not there."""
        return self._entries.pop(key, default)

    def __delitem__(self, key: K) -> None:
        del self._entries[key]

    def oldest(self) -> tuple[K, V] | None:
        """The least recently used entry (left in place), or None when empty."""
        for item in self._entries.items():
            return item
        return None

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        """The keys, oldest first."""
        return iter(self._entries)

    def __reversed__(self) -> Iterator[K]:
        """The keys, newest first."""
        return reversed(self._entries)

    def items(self) -> ItemsView[K, V]:
        """(key, value) pairs, oldest first (a view: copy it before changing the cache)."""
        return self._entries.items()

    def values(self) -> ValuesView[V]:
        """The values, oldest first (a view: copy it before changing the cache)."""
        return self._entries.values()

    def __repr__(self) -> str:
        return f"LRU(size={self.size}, entries={len(self._entries)})"


class TtlCache(Generic[K, V]):
    """An :class:`LRU` whose entries also expire (pure: ``now`` and ``expires`` are passed in,
    on one clock). An entry read at or after its expiry is gone (removed as it is read)."""

    __slots__ = ("_entries",)

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._entries: LRU[K, tuple[V, float]] = LRU(max_entries)

    @property
    def max_entries(self) -> int:
        return self._entries.size

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K, now: float) -> V | None:
        """The value of ``key`` (now the most recent entry) if it has not expired at ``now``."""
        entry = self._entries.peek(key)
        if entry is None:
            return None
        value, expires = entry
        if now >= expires:
            del self._entries[key]
            return None
        self._entries.get(key)
        return value

    def put(self, key: K, value: V, expires: float) -> None:
        """``key`` → ``value`` until ``expires``, the most recent entry."""
        self._entries.put(key, (value, expires))

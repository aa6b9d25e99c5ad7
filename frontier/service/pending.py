"""The write-back layer of an owned partition's store: its RocksDB holds committed transactions only.

:class:`Pending` has the :class:`~frontier.core.kv.KV` contract over the partition's
:class:`~frontier.service.rocks.RocksKV`. ``put`` and ``delete`` go to an in-memory *generation*
(key -> value, None a tombstone); reads see the generations over RocksDB (``get``: the newest
value of a key; ``first``, ``scan`` and ``cursor``: the generations' keys merged in order with
RocksDB's, tombstones hiding what RocksDB holds).

The generations follow the partition writer's transactions (:mod:`frontier.service.writer`):
when the writer puts the changelog records written since its last transaction into a new one, the
generation holding the same writes is sealed (:meth:`Pending.seal`); once that transaction
committed, the generation is written to RocksDB in one batch, through the write-ahead log,
together with the changelog offset it completes (the transaction's ACK marker) and the wall-clock
time (:meth:`Pending.committed`), then dropped from memory. A commit that fails writes nothing:
the partition is dropped, and its RocksDB holds exactly what was committed up to its marker, so a
restart after a kill -9 replays the changelog's tail only (``frontier.service.restore``). A
fenced instance's writes never reach its RocksDB.
"""

from __future__ import annotations

import bisect
import time
import weakref
from collections.abc import Callable, Iterator

from frontier.core.kv import Cursor, CursorClosed
from frontier.partition.keys import COMMITTED_AT_KEY, COMMITTED_KEY
from frontier.service.rocks import RocksKV, prefix_end

Generation = dict[bytes, bytes | None]


def encode_time(t: float) -> bytes:
    """A wall-clock time as a marker stores it."""
    return repr(float(t)).encode()


class PendingCursor:
    """A cursor over the pending writes (copied when it is made) merged with a RocksDB cursor
    (its iterator's snapshot, made at the same moment): the store as it was then."""

    def __init__(self, rocks: Cursor, pending: list[tuple[bytes, bytes | None]], after: bytes) -> None:
        self._rocks: Cursor | None = rocks
        self._pending = pending  # (key, value or None), sorted
        self._at = 0  # (``pending`` starts after ``after``)
        self._last = after
        self._head = rocks.next()  # RocksDB's next entry, read ahead

    def seek(self, after: bytes) -> None:
        if self._rocks is None:
            raise CursorClosed("cursor closed (its store was closed)")
        if after <= self._last:
            return  # never back
        self._last = after
        if self._head is not None and self._head[0] <= after:  # (a head after it was read ahead: kept)
            self._rocks.seek(after)
            self._head = self._rocks.next()
        pending, at = self._pending, self._at
        while at < len(pending) and pending[at][0] <= after:
            at += 1
        self._at = at

    def next(self) -> tuple[bytes, bytes] | None:
        rocks = self._rocks
        if rocks is None:
            raise CursorClosed("cursor closed (its store was closed)")
        pending = self._pending
        while True:
            head = self._head
            if self._at < len(pending):
                key, value = pending[self._at]
                if head is None or key <= head[0]:
                    self._at += 1
                    if head is not None and key == head[0]:
                        self._head = rocks.next()  # written since: the pending value wins
                    if value is None:
                        continue  # deleted
                    self._last = key
                    return key, value
            if head is None:
                return None
            self._head = rocks.next()
            self._last = head[0]
            return head

    def close(self) -> None:
        if self._rocks is not None:
            self._rocks.close()
        self._rocks, self._pending, self._head = None, [], None


class Pending:
    """An owned partition's KV: the writes of its transactions in memory until they committed
    (see the module's doc). Interface: the KV contract, :meth:`seal` and :meth:`committed` (the
    writer's hook), ``rocks`` (the RocksDB under it: closed with :meth:`close`)."""

    def __init__(self, rocks: RocksKV, clock: Callable[[], float] = time.time) -> None:
        self.rocks = rocks
        self._clock = clock
        self._open: Generation = {}  # written since the last seal
        self._sealed: list[Generation] = []  # in transactions not committed yet, oldest first
        self._view: Generation = {}  # every pending key's newest value (None: deleted)
        self._keys: list[bytes] = []  # the keys of ``_view``, sorted
        self._cursors: weakref.WeakSet[PendingCursor] = weakref.WeakSet()  # closed with the store

    # -- the writer's hook ------------------------------------------------------------------------
    def seal(self) -> Generation:
        """The writes since the last seal, for the transaction the writer is opening."""
        gen, self._open = self._open, {}
        self._sealed.append(gen)
        return gen

    def committed(self, gens: list[Generation], offset: int, at: float | None = None) -> None:
        """The transaction of ``gens`` (the oldest sealed ones) committed, closed by the changelog
        record at ``offset``: write them to RocksDB in one logged batch with the marker (``at``,
        default now: every changelog record up to ``offset`` was written before then), and drop
        them from memory."""
        n = len(gens)
        if n > len(self._sealed) or any(a is not b for a, b in zip(gens, self._sealed, strict=False)):
            raise RuntimeError("committed generations are not the oldest sealed ones")
        stamp = self._clock() if at is None else at
        batch = [item for gen in gens for item in gen.items()]
        batch += ((COMMITTED_KEY, str(offset).encode()), (COMMITTED_AT_KEY, encode_time(stamp)))
        self.rocks.write_many(batch, logged=True)
        del self._sealed[:n]
        view, newer = self._view, [*self._sealed, self._open]
        dropped = False
        for gen in gens:
            for key in gen:
                if key in view and not any(key in g for g in newer):
                    del view[key]
                    dropped = True
        if dropped:
            self._keys = [k for k in self._keys if k in view]

    # -- the KV contract --------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        view = self._view
        if key in view:
            return view[key]
        return self.rocks.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        view = self._view
        if key not in view:
            bisect.insort(self._keys, key)
        view[key] = value
        self._open[key] = value

    def delete(self, key: bytes) -> None:
        view = self._view
        if key not in view:
            bisect.insort(self._keys, key)
        view[key] = None
        self._open[key] = None

    def _pending(self, prefix: bytes, after: bytes) -> list[tuple[bytes, bytes | None]]:
        """The pending entries under ``prefix`` after ``after`` (tombstones too), in key order."""
        keys = self._keys
        if not keys:
            return []
        i = bisect.bisect_right(keys, after) if after >= prefix else bisect.bisect_left(keys, prefix)
        end = prefix_end(prefix)
        j = len(keys) if end is None else bisect.bisect_left(keys, end, i)
        view = self._view
        return [(k, view[k]) for k in keys[i:j]]

    def first(self, prefix: bytes) -> tuple[bytes, bytes] | None:
        keys = self._keys
        i = bisect.bisect_left(keys, prefix)
        if i == len(keys) or not keys[i].startswith(prefix):
            return self.rocks.first(prefix)  # nothing pending under the prefix
        view, n = self._view, len(keys)
        live = None  # the first pending key under the prefix with a value
        while i < n and (k := keys[i]).startswith(prefix):
            if view[k] is not None:
                live = k
                break
            i += 1
        for key, value in self.rocks.scan(prefix):
            if live is not None and live <= key:
                break
            if key not in view:
                return key, value
            # (pending and before the first live one: deleted)
        if live is None:
            return None
        found = view[live]
        assert found is not None
        return live, found

    def scan(self, prefix: bytes, after: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        pending = self._pending(prefix, after)
        if not pending:
            yield from self.rocks.scan(prefix, after)
            return
        at, n = 0, len(pending)
        for key, value in self.rocks.scan(prefix, after):
            while at < n and pending[at][0] <= key:
                pkey, pvalue = pending[at]
                at += 1
                if pvalue is not None:
                    yield pkey, pvalue
                if pkey == key:
                    break
            else:
                yield key, value
        for pkey, pvalue in pending[at:]:
            if pvalue is not None:
                yield pkey, pvalue

    def cursor(self, prefix: bytes, after: bytes = b"") -> Cursor:
        cursor = PendingCursor(self.rocks.cursor(prefix, after), self._pending(prefix, after), after)
        self._cursors.add(cursor)
        return cursor

    def close(self) -> None:
        """Close the RocksDB under it, and the cursors (what was not committed is dropped)."""
        for cursor in list(self._cursors):
            cursor.close()
        self.rocks.close()

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
import itertools
import time
import weakref
from collections.abc import Callable, Iterator

from frontier.core.kv import Cursor, CursorClosed
from frontier.partition.keys import COMMITTED_AT_KEY, COMMITTED_KEY
from frontier.service.rocks import RocksKV

Generation = dict[bytes, bytes | None]


def encode_time(t: float) -> bytes:
    """A wall-clock time as a marker stores it."""
    return repr(float(t)).encode()


CHUNK = 256  # keys per chunk of the sorted index (split at twice that): an insert moves at most a chunk
SLACK = 4096  # keys of committed writes left in the index (and the unordered lists) before they are pruned


class SortedKeys:
    """The pending keys in order, in chunks: an insert costs a bisection and the move of one
    chunk's tail, not of every key after it (a flat list of 20,000 keys: 80 KB moved per insert)."""

    def __init__(self) -> None:
        self._chunks: list[list[bytes]] = []
        self._maxes: list[bytes] = []  # each chunk's last key
        self.n = 0  # keys in the index

    def __bool__(self) -> bool:
        return bool(self._maxes)

    def add(self, key: bytes) -> None:
        """Insert ``key`` (nothing when it is in the index already)."""
        chunks, maxes = self._chunks, self._maxes
        i = bisect.bisect_left(maxes, key)
        if i == len(maxes):
            if not maxes:
                chunks.append([key])
                maxes.append(key)
                self.n += 1
                return
            i -= 1
            chunk = chunks[i]
            chunk.append(key)
            maxes[i] = key
        else:
            chunk = chunks[i]
            at = bisect.bisect_left(chunk, key)
            if at < len(chunk) and chunk[at] == key:
                return
            chunk.insert(at, key)
        self.n += 1
        if len(chunk) > 2 * CHUNK:
            chunks[i : i + 1] = [chunk[:CHUNK], chunk[CHUNK:]]
            maxes[i : i + 1] = [chunk[CHUNK - 1], chunk[-1]]

    def since(self, key: bytes, after: bool = False) -> Iterator[bytes]:
        """The keys from ``key`` on (after it, when ``after``), in order."""
        find = bisect.bisect_right if after else bisect.bisect_left
        chunks = self._chunks
        i = find(self._maxes, key)
        if i < len(chunks):
            chunk = chunks[i]
            yield from chunk[find(chunk, key) :]
            for m in range(i + 1, len(chunks)):
                yield from chunks[m]

    def keep(self, keys: Generation) -> None:
        """Drop the keys not in ``keys``."""
        kept = [k for chunk in self._chunks for k in chunk if k in keys]
        self._chunks = [kept[i : i + CHUNK] for i in range(0, len(kept), CHUNK)]
        self._maxes = [chunk[-1] for chunk in self._chunks]
        self.n = len(kept)


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
        # the keys of ``_view`` read in order since they were written, and the others by first byte
        # (ordered when read); both may hold keys committed since (not in ``_view``: skipped), pruned
        # once they hold SLACK more than ``_view`` (not at every commit: O(1) a write)
        self._keys = SortedKeys()
        self._fresh: dict[bytes, list[bytes]] = {}
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
        marker = ((COMMITTED_KEY, str(offset).encode()), (COMMITTED_AT_KEY, encode_time(stamp)))
        # (one pass over the generations' items as they are: no list of them built first)
        self.rocks.write_many(itertools.chain(*[gen.items() for gen in gens], marker), logged=True)
        del self._sealed[:n]
        view, newer, size = self._view, [*self._sealed, self._open], len(self._view)
        if len(newer) == 1 and len(self._open) < sum(map(len, gens)):
            # (the common case, the next transaction not sealed yet and smaller than the one that
            # committed: what stays pending is the open generation exactly, copied in one call)
            self._view = view = dict(self._open)
        elif len(newer) == 1:
            latest = self._open
            for gen in gens:
                for key in gen:
                    if key not in latest:
                        view.pop(key, None)
        else:
            for gen in gens:
                for key in gen:
                    if not any(key in g for g in newer):
                        view.pop(key, None)
        if not view:  # (nothing pending: both empty again, at no cost)
            if self._keys:
                self._keys = SortedKeys()
            self._fresh.clear()
        elif len(view) != size and self._keys.n + sum(map(len, self._fresh.values())) > 2 * len(view) + SLACK:
            self._keys.keep(view)
            for first, keys in self._fresh.items():
                self._fresh[first] = [k for k in keys if k in view]

    # -- the KV contract --------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        view = self._view
        if key in view:
            return view[key]
        return self.rocks.get(key)

    def _new(self, key: bytes) -> None:
        fresh = self._fresh.get(first := key[:1])
        if fresh is None:
            self._fresh[first] = [key]
        else:
            fresh.append(key)

    def put(self, key: bytes, value: bytes) -> None:
        view = self._view
        if key not in view:  # (``_new`` inline: the hot path of every write)
            fresh = self._fresh.get(first := key[:1])
            if fresh is None:
                self._fresh[first] = [key]
            else:
                fresh.append(key)
        view[key] = value
        self._open[key] = value

    def delete(self, key: bytes) -> None:
        view = self._view
        if key not in view:
            self._new(key)
        view[key] = None
        self._open[key] = None

    def _ordered(self, prefix: bytes) -> None:
        """Put the pending keys that may start with ``prefix`` in order (most keys written, e.g. a
        URL's seen mark, are never read in order before their transaction committed)."""
        fresh = self._fresh
        if not fresh:
            return
        if prefix:
            batches = [fresh.pop(prefix[:1])] if prefix[:1] in fresh else []
        else:
            batches = list(fresh.values())
            fresh.clear()
        add = self._keys.add
        for keys in batches:
            for key in sorted(keys):
                add(key)

    def _pending(self, prefix: bytes, after: bytes) -> list[tuple[bytes, bytes | None]]:
        """The pending entries under ``prefix`` after ``after`` (tombstones too), in key order."""
        self._ordered(prefix)
        if not self._keys:
            return []
        keys = self._keys.since(after, True) if after >= prefix else self._keys.since(prefix)
        view, out = self._view, []
        for k in keys:
            if not k.startswith(prefix):
                break
            if k in view:  # (else committed since)
                out.append((k, view[k]))
        return out

    def first(self, prefix: bytes) -> tuple[bytes, bytes] | None:
        self._ordered(prefix)
        keys = self._keys.since(prefix)
        k = next(keys, None)
        if k is None or not k.startswith(prefix):
            return self.rocks.first(prefix)  # nothing pending under the prefix
        view = self._view
        live = None  # the first pending key under the prefix with a value
        pending = False  # a key under the prefix still pending (not only keys committed since)
        while k is not None and k.startswith(prefix):
            if k in view:
                pending = True
                if view[k] is not None:
                    live = k
                    break
            k = next(keys, None)
        if not pending:
            return self.rocks.first(prefix)
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

"""The first entries of the queues, kept in memory: :class:`Heads`, a bounded cache over the
store's ``Q`` entries, so that a turn (``Queues.choose``) and a send (``Dispatcher._serve``) read
a queue's head without a seek in the common case (issue 39: a seek per head read was the largest
cost of dispatch with many crawls).

What a queue has in the cache is always exactly its first entries in the store, in key order,
key and value: ``Queues`` tells it of every entry that comes in (:meth:`Heads.entered`, with the
queue's count before) and of every one that goes (:meth:`Heads.left` with its key, or
:meth:`Heads.drop` when that is not known). A new entry before the last one kept goes in at its
place; one after is kept only when the cache holds the whole queue. A queue not in the cache is
read from the store at its next use (:meth:`Heads.head`: one seek, up to ``depth`` entries).

Bounded: at most ``limit`` entries over all queues (the oldest queue read in goes first), so the
frontier's memory does not grow with its hosts. Depends on: the store (read only).
"""

from __future__ import annotations

import bisect
import itertools
from collections import OrderedDict

from frontier.core.kv import KV
from frontier.partition.keys import QueueId, queue_prefix

HEAD_ENTRIES = 8192  # queue entries kept per partition (about 0.45 KB each with its key and value: ~3.5 MB at most)
HEAD_DEPTH = 4  # entries read per seek: a queue's next sends cost no seek either

Entry = tuple[bytes, bytes]


class Heads:
    """The first entries (key, value) of the queues used most recently, at most ``limit``."""

    __slots__ = ("_depth", "_kv", "_lists", "_n", "limit")

    def __init__(self, kv: KV, limit: int = HEAD_ENTRIES, depth: int = HEAD_DEPTH) -> None:
        self._kv = kv
        self.limit = limit
        self._depth = depth
        self._lists: OrderedDict[QueueId, list[Entry]] = OrderedDict()  # never an empty list
        self._n = 0  # entries over all the lists

    def __len__(self) -> int:
        """Entries kept."""
        return self._n

    def head(self, qid: QueueId) -> Entry | None:
        """The first entry of ``qid`` (None: the queue is empty), from memory or read from the store."""
        kept = self._lists.get(qid)
        if kept:
            return kept[0]
        read = list(itertools.islice(self._kv.scan(queue_prefix(qid)), self._depth))
        if not read:
            return None
        self._keep(qid, read)
        return read[0]

    def known(self, qid: QueueId) -> Entry | None:
        """The first entry of ``qid`` when it is in memory (no read)."""
        kept = self._lists.get(qid)
        return kept[0] if kept else None

    def entered(self, qid: QueueId, key: bytes, value: bytes, before: int) -> None:
        """``key`` was written to ``qid``, which held ``before`` entries until then."""
        kept = self._lists.get(qid)
        if kept is None:
            if before == 0 and self._n < self.limit:  # the only entry: its head, known without a read
                self._lists[qid] = [(key, value)]
                self._n += 1
            return
        if key <= kept[-1][0]:
            i = bisect.bisect_left(kept, (key,))
            if kept[i][0] == key:  # written again at its place: the new value
                kept[i] = (key, value)
                return
            kept.insert(i, (key, value))
            if len(kept) > self._depth:
                kept.pop()
                return
        elif len(kept) == before and len(kept) < self._depth:  # the whole queue is kept: it goes last
            kept.append((key, value))
        else:
            return
        self._n += 1
        if self._n > self.limit:
            self._evict(0)

    def first(self, qid: QueueId, key: bytes, value: bytes) -> None:
        """``key`` (just written, after :meth:`entered`) sorts before every other entry of ``qid``:
        its head, kept even when nothing of the queue was (the entries after it are read later)."""
        if qid not in self._lists:
            self._keep(qid, [(key, value)])

    def left(self, qid: QueueId, key: bytes) -> None:
        """``key`` of ``qid`` was deleted from the store."""
        kept = self._lists.get(qid)
        if not kept:
            return
        if kept[0][0] == key:
            del kept[0]
        else:
            i = bisect.bisect_left(kept, (key,))
            if i == len(kept) or kept[i][0] != key:
                return  # after the entries kept: they are still the first ones
            del kept[i]
        self._n -= 1
        if not kept:
            del self._lists[qid]

    def drop(self, qid: QueueId) -> None:
        """Forget what is kept of ``qid`` (read again at its next use)."""
        kept = self._lists.pop(qid, None)
        if kept:
            self._n -= len(kept)

    def _keep(self, qid: QueueId, entries: list[Entry]) -> None:
        self.drop(qid)
        self._evict(len(entries))
        self._lists[qid] = entries
        self._n += len(entries)

    def _evict(self, room: int) -> None:
        """Drop the queues read in first until ``room`` more entries fit."""
        lists = self._lists
        while lists and self._n + room > self.limit:
            self._n -= len(lists.popitem(last=False)[1])

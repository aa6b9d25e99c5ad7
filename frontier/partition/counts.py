"""Each queue's entry count in a store, made ahead of an open: :class:`QueueCounts`.

``Queues.load`` counts every queue entry (``Q`` keys) of a partition it opens: a walk of the whole
queue range, one step per queued URL (1.25M steps for a partition of 125,000 hosts of 10 URLs).
A standby copy (``frontier.service.standby``) walks its copy once, in the background, once it has
caught up, then keeps the counts as it applies changelog records: each record of a ``Q`` key
marks its queue *dirty* (:meth:`QueueCounts.touched`), and :meth:`QueueCounts.settle` counts the
dirty queues again (one bounded scan each). A partition taken over is then loaded from the
counts handed over with the copy (``Queues.load``): O(queues), with no walk of the entries.

The counts are those of one store at one changelog ``offset``; whoever hands them over checks
that the store opened is that copy, at that offset, and marks what it replays after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import groupby
from operator import itemgetter

from frontier.core.kv import KV
from frontier.partition.keys import QUEUE, QueueId, queue_of

_TAIL = 12  # a queue key ends with its priority (4 bytes) and sequence (8): keys.queue_key
_SEQ = 8
_prefix_of = itemgetter(slice(None, -_TAIL))  # a queue key's queue prefix, ``Q<queue>\x00``
_seq_of = itemgetter(slice(-_SEQ, None))  # its sequence, big-endian
_key_of = itemgetter(0)


def _keys(kv: KV, prefix: bytes) -> Iterator[bytes]:
    """The keys under ``prefix``: read alone where the store can (``RocksKV.keys``), else from ``scan``."""
    keys = getattr(kv, "keys", None)
    if callable(keys):
        found: Iterator[bytes] = keys(prefix)
        return found
    return map(_key_of, kv.scan(prefix))


class QueueCounts:
    """Queue id → entries, for one store (the ids as ``queue_of`` makes them: interned, the very
    objects the queues keep); ``top``: at least the highest sequence of any entry it has held;
    ``offset``: the changelog offset the store is complete up to (set by whoever hands the counts
    over); ``dirty``: the prefixes (``Q<queue>\\x00``) of the queues whose count is not known."""

    __slots__ = ("counts", "dirty", "offset", "top", "usable")

    def __init__(self) -> None:
        self.counts: dict[QueueId, int] = {}
        self.dirty: set[bytes] = set()
        self.top = 0
        self.offset = -1
        self.usable = True  # False: the store opened is not the one counted (dropped, rebuilt)

    def drop(self) -> None:
        """The store these counts were of is not the one opened: not to be used."""
        self.usable = False
        self.counts = {}
        self.dirty.clear()

    @classmethod
    def scan(cls, kv: KV) -> QueueCounts:
        """Count every queue entry of ``kv`` (the walk that the counts spare an open)."""
        made = cls()
        counts = made.counts
        top = b""
        # a queue's entries are contiguous: grouped by their prefix (``Q<queue>\x00``, cut in C),
        # counted by the group's length, the highest sequence found by comparing the keys'
        # big-endian tails (C calls only: a rebuild at 1M hosts walks 10M entries)
        for prefix, group in groupby(_keys(kv, QUEUE), _prefix_of):
            entries = list(group)
            counts[queue_of(prefix)] = len(entries)
            tail = max(map(_seq_of, entries))
            if tail > top:
                top = tail
        made.top = int.from_bytes(top, "big") if top else 0
        return made

    def touched(self, key: bytes, value: bytes | None) -> None:
        """A changelog record applied to the store (``value`` None: a delete): its queue, if it
        is a queue entry, is counted again at the next :meth:`settle`."""
        if key[:1] == QUEUE and len(key) > _TAIL:
            self.dirty.add(key[:-_TAIL])
            if value is not None:
                seq = int.from_bytes(key[-_SEQ:], "big")
                if seq > self.top:
                    self.top = seq

    def settle(self, kv: KV) -> None:
        """Count the dirty queues again in ``kv``."""
        counts = self.counts
        for prefix in self.dirty:
            n = sum(1 for _ in kv.scan(prefix))
            if n:
                counts[queue_of(prefix)] = n
            else:
                counts.pop(queue_of(prefix), None)
        self.dirty.clear()

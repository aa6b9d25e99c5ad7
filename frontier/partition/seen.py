"""The seen set: the stored form of a seen entry, its lifecycle, and the sweep that forgets old
ones, as the part :class:`SeenSet`.

Interface: ``key``/``fingerprint`` (an item's seen key in its crawl's current generation),
``settle`` (done), ``reopen`` (open again), ``forget`` (a forget submission), ``sweep_due`` and
``sweep_seen``. Owns: the ``S`` keys' lifecycle and the sweep's cursor. Depends on: the store,
``Crawls`` (the generation), the settings (``seen_retention``) and the partition's ``Stats``.

The seen set has a lifecycle (issue 13). A seen value is 5 bytes, a state and a stamp in whole
epoch seconds (13 for a revisit: plus the due time of its ``V`` entry, in ms):
- *open*: queued or in flight since the stamp. Never forgotten, so a URL is never queued twice
  because its seen entry aged out while it waited (a queue held by a long pause included).
- *done*: its fate was decided at the stamp (fetched, failed, disallowed, robots.txt given up,
  dropped by an operator). :meth:`SeenSet.sweep_seen` forgets it ``seen_retention``
  after the stamp: the tombstone goes to the changelog and compaction removes both, so the
  changelog (and a restore) holds about one retention window of URLs, not the crawl's life.
  Submitted again after that, the URL is crawled again. A duplicate does not refresh the stamp.
- *revisit*: waiting in ``V`` for its next fetch (a standing order, never forgotten by age).
  A ``V`` entry whose seen entry no longer names it (forgotten, or re-queued by a recrawl) is
  dropped when due instead of re-queued, so no URL ever has two revisit chains (``revisits.py``).
Values written before issue 13 are still read: ``b"1"`` (state unknown) is taken as *done* and
stamped with the time the sweep first meets it, so such an entry lives one more retention
from the upgrade (a URL still queued at the upgrade could then be queued twice if re-submitted
after that: fetched twice at worst); ``b"<float text>"`` (a revisit URL's last fetch) is a
*revisit* whose ``V`` entry is taken as valid whatever its due time.

``recrawl`` on a submission queues the URL again unless it is open (a duplicate then: it is
about to be fetched anyway); ``forget`` deletes a done or revisit entry (which also ends the
revisits) and leaves an open one alone (forget it after its page is out).
"""

from __future__ import annotations

import os
import struct

from frontier.config import FrontierConfig
from frontier.core.urls import seen_fingerprint
from frontier.partition.crawls import Crawls
from frontier.partition.keys import SEEN, SWEEP_SLICES, seen_key, seen_slice
from frontier.partition.records import Stats, Sweep
from frontier.partition.store import Store
from topics.schemas import UrlItem

# The seen set's lifecycle (see the module doc): a value is a state byte and a stamp.
SEEN_LEGACY, SEEN_OPEN, SEEN_DONE, SEEN_REVISIT = 0, 1, 2, 3
_SEEN_STAMP = struct.Struct(">BI")  # state, whole epoch seconds (unsigned: until 2106)
_SEEN_DUE = struct.Struct(">BIQ")  # revisit: state, last fetch, due time of its V entry (ms)
SWEEP_BATCH = 2_000  # seen entries a sweep call looks at, at most
SWEEP_INTERVAL = 10.0  # seconds between sweep calls of a partition (sweep_due): a pass over 1M entries takes
# under 2 h, far within any retention, and the sweep costs under 1 % of a core while ingesting (every
# second, opening up to 1,024 slices per partition cost ~10 % of the embedded router's ingest rate)
SWEEP_SLICES_PER_CALL = 1_024  # slices a call may open, at most (bounds a call over a sparse set)


def seen_value(state: int, now: float, due_ms: int = -1) -> bytes:
    """The stored form of a seen entry: ``state`` stamped at ``now`` (whole seconds)."""
    stamp = int(min(max(now, 0.0), 2**32 - 1))
    if state == SEEN_REVISIT and due_ms >= 0:
        return _SEEN_DUE.pack(state, stamp, min(due_ms, 2**64 - 1))
    return _SEEN_STAMP.pack(state, stamp)


def read_seen(value: bytes) -> tuple[int, float, int]:
    """``(state, stamp, due ms)`` of a stored seen value; due is -1 when not recorded.

    Values from before issue 13: ``b"1"`` is ``SEEN_LEGACY`` (no stamp); a float text (a revisit
    URL's last fetch) is ``SEEN_REVISIT`` with an unknown due time. Anything else unreadable is
    ``SEEN_LEGACY`` too (the sweep stamps it), never an exception.
    """
    if len(value) == _SEEN_STAMP.size and value[0] in (SEEN_OPEN, SEEN_DONE, SEEN_REVISIT):
        state, stamp = _SEEN_STAMP.unpack(value)
        return state, float(stamp), -1
    if len(value) == _SEEN_DUE.size and value[0] == SEEN_REVISIT:
        state, stamp, due = _SEEN_DUE.unpack(value)
        return state, float(stamp), due
    if value[:1].isdigit() and value != b"1":
        try:
            return SEEN_REVISIT, float(value), -1
        except ValueError:
            pass
    return SEEN_LEGACY, -1.0, -1


class SeenSet:
    """The seen set of one partition (every crawl's, each in its generation)."""

    def __init__(self, store: Store, crawls: Crawls, settings: FrontierConfig, stats: Stats) -> None:
        self._store = store
        self._kv = store.kv
        self._crawls = crawls
        self._settings = settings
        self._stats = stats
        # the sweep's cursor: a slice of the fingerprint space and the last key looked at in it.
        # Not stored: each incarnation starts at a random slice, so restarts still cover the whole
        # set (in expectation) instead of sweeping its beginning again and again.
        self._sweep_slice = int.from_bytes(os.urandom(2), "big") % SWEEP_SLICES
        self._sweep_after = b""
        self._swept_at: float | None = None  # when sweep_due last ran a sweep

    def fingerprint(self, item: UrlItem) -> bytes:
        """The item's seen-set digest in its crawl's current generation."""
        return seen_fingerprint(item, self._crawls.generation(item.crawl))

    def key(self, item: UrlItem) -> bytes:
        """The item's seen key (``S<fingerprint>``)."""
        return seen_key(self.fingerprint(item))

    def state(self, item: UrlItem) -> int | None:
        """The item's seen state (``SEEN_*``), None when it is not in the seen set."""
        raw = self._kv.get(self.key(item))
        return read_seen(raw)[0] if raw is not None else None

    def settle(self, item: UrlItem, now: float) -> None:
        """The URL's fate is decided (fetched, failed, disallowed, dropped): stamp its seen entry
        *done*; the retention counts from here."""
        self._store.put(self.key(item), seen_value(SEEN_DONE, now))

    def reopen(self, item: UrlItem, now: float) -> None:
        """A URL back in its queue after its lease was lost is *open* again. (A crash between the
        *done* stamp of a result and the deletion of its lease, which comes second, restores the
        lease with the URL already stamped done.)"""
        key = self.key(item)
        raw = self._kv.get(key)
        if raw is None or read_seen(raw)[0] != SEEN_OPEN:
            self._store.put(key, seen_value(SEEN_OPEN, now))

    def forget(self, key: bytes) -> None:
        """A forget submission: remove the entry unless it is open (queued or in flight)."""
        raw = self._kv.get(key)
        if raw is None or read_seen(raw)[0] == SEEN_OPEN:
            return
        self._store.delete(key)  # a revisit's V entry is dropped when due (no longer named)
        self._stats.forgotten += 1

    def sweep_due(self, now: float) -> Sweep:
        """Run :meth:`sweep_seen` if the last run is ``SWEEP_INTERVAL`` old (the service calls
        this on every dispatch round)."""
        if self._swept_at is not None and self._swept_at <= now < self._swept_at + SWEEP_INTERVAL:
            return Sweep(0, 0)
        self._swept_at = now
        return self.sweep_seen(now)

    def sweep_seen(self, now: float, limit: int = SWEEP_BATCH) -> Sweep:
        """Forget *done* seen entries stamped ``seen_retention`` or more before ``now``; return
        how many entries it looked at and forgot. Looks at ``limit`` entries at most, from a
        cursor that wraps around, and covers ``SWEEP_SLICES_PER_CALL`` slices at most (in one
        scan, two when it wraps): a full
        cycle over N entries takes at most ``N / limit + SWEEP_SLICES / SWEEP_SLICES_PER_CALL``
        calls. Entries written before issue 13 (``b"1"``) are stamped *done* at ``now`` when
        first met. Open and revisit entries are never forgotten by age. Pure: ``now`` is passed
        in. An entry lives from its stamp for the retention plus, at most, one cycle."""
        retention = self._settings.seen_retention
        if retention <= 0 or limit <= 0:
            return Sweep(0, 0)
        looked = forgotten = 0
        left = SWEEP_SLICES_PER_CALL  # slices this call may still open
        while left > 0 and looked < limit:
            # One scan over the slices from the cursor's on (resumed where the previous call stopped
            # in its slice), not one scan per slice: a sparse set costs a seek, not up to
            # SWEEP_SLICES_PER_CALL of them. Past the last slice, a second scan from the first.
            start, after = self._sweep_slice, self._sweep_after
            end = min(start + left, SWEEP_SLICES)  # the slices start .. end - 1
            for key, value in self._kv.scan(SEEN, after=after or seen_slice(start)):
                n = int.from_bytes(key[1:3], "big")  # its slice
                if n >= end:
                    break
                if looked >= limit:
                    self._stats.forgotten += forgotten
                    return Sweep(looked, forgotten)
                looked += 1
                self._sweep_slice, self._sweep_after = n, key
                state, stamp, _ = read_seen(value)
                if state == SEEN_DONE and now - stamp >= retention:
                    self._store.delete(key)
                    forgotten += 1
                elif state == SEEN_LEGACY:
                    self._store.put(key, seen_value(SEEN_DONE, now))
            left -= end - start
            self._sweep_slice, self._sweep_after = end % SWEEP_SLICES, b""
        self._stats.forgotten += forgotten
        return Sweep(looked, forgotten)

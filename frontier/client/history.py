"""What the live page charts: the latest snapshot per frontier instance and a bounded,
age-limited history per scope, fed with the status topic's records. Pure: no Kafka (see
:mod:`frontier.client.feed`), time injected.

Memory (:class:`StatusHistory`, the pure part; time is injected):

- a scope's history is at most :data:`HISTORY_POINTS` points no older than
  :data:`HISTORY_SECONDS`, kept in columns: 9 numbers as 8-byte floats and 2 two-byte codes into
  the scope's table of at most :data:`MAX_TEXTS` distinct reason/cause texts, each cut to
  :data:`TEXT_CHARS` characters (beyond that, a point's text reads :data:`OVERFLOW_TEXT`):
  76 B per point, 67 KiB of points per scope; 89 KiB per scope measured in the worst case
  (every text different and non-ASCII, every number distinct);
- at most :data:`HISTORY_SCOPES` scopes (least recently updated dropped first; a scope without a
  point in the window is dropped);
- ``latest`` keeps one snapshot per instance seen within :data:`INSTANCE_SECONDS`, at most
  :data:`MAX_INSTANCES` of them.

Bound: 500 scopes x 89 KiB = 44 MiB measured; :data:`HISTORY_BOUND_BYTES` (64 MiB) is the
bound stated and tested (``tests/test_web.py`` fills every scope with worst-case points under
tracemalloc), plus the instances' latest snapshots (each one status record, ~0.5 KB per row).
The history it replaced kept ~486 B per point for 2,000 scopes: up to ~834 MiB.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections.abc import Callable
from typing import Any

from frontier.client.status import LIVE_SECONDS, overview
from frontier.core.lru import LRU
from topics.schemas import SchemaError, ScopeStatus, Status, decode

HISTORY_SECONDS = 1800.0  # a scope's points are kept this long (30 min)
HISTORY_POINTS = 900  # per scope: 30 min at the default 2 s status interval
HISTORY_SCOPES = 500  # scopes with a history, least recently updated dropped first
MAX_TEXTS = 64  # distinct reason/cause texts kept per scope (within its window)
TEXT_CHARS = 120  # a reason or cause is cut to this many characters in the history
INSTANCE_SECONDS = 10 * LIVE_SECONDS  # an instance without a snapshot for this long is forgotten
MAX_INSTANCES = 1000  # instances in ``latest`` (the oldest snapshot goes first)
HISTORY_BOUND_BYTES = 64 * 1024 * 1024  # the histories' memory at the limits above (measured by tests)
OVERFLOW_TEXT = f"(more than {MAX_TEXTS} different texts in the window)"
_NUMS = 9  # per point: at, delay, gate_until, backoff, limit, sent, queued, inflight, concurrency
_CODES = 2  # per point: reason, cause


class _Series:
    """One scope's points, in columns (see the module docstring for their size)."""

    __slots__ = ("codes", "dropped", "nums", "text_codes", "texts")

    def __init__(self) -> None:
        self.nums = array("d")
        self.codes = array("H")
        self.texts: list[str] = [OVERFLOW_TEXT]
        self.text_codes: dict[str, int] = {OVERFLOW_TEXT: 0}
        self.dropped = 0  # points dropped since the text table was last compacted

    def __len__(self) -> int:
        return len(self.nums) // _NUMS

    def last_at(self) -> float:
        return self.nums[-_NUMS] if self.nums else float("-inf")

    def append(self, at: float, row: ScopeStatus) -> None:
        self.nums.extend((at, row.delay, row.gate_until, row.backoff, row.limit, row.sent, row.queued, row.inflight,
                          row.concurrency))  # fmt: skip
        self.codes.extend((self._code(row.reason), self._code(row.cause)))
        if len(self) > HISTORY_POINTS:
            self._drop(len(self) - HISTORY_POINTS)

    def drop_before(self, cutoff: float) -> None:
        n = 0
        while n < len(self) and self.nums[n * _NUMS] < cutoff:
            n += 1
        if n:
            self._drop(n)

    def _drop(self, n: int) -> None:
        del self.nums[: n * _NUMS]
        del self.codes[: n * _CODES]
        self.dropped += n

    def _code(self, text: str) -> int:
        text = text[:TEXT_CHARS]
        code = self.text_codes.get(text)
        if code is not None:
            return code
        if len(self.texts) >= MAX_TEXTS:
            if self.dropped >= HISTORY_POINTS // 8:  # else little could be freed: not O(points) per text
                self._compact()
            if len(self.texts) >= MAX_TEXTS:
                return 0
        self.texts.append(text)
        self.text_codes[text] = len(self.texts) - 1
        return len(self.texts) - 1

    def _compact(self) -> None:
        """Keep only the texts the kept points use (and the overflow text, code 0)."""
        used = sorted(set(self.codes) | {0})
        remap = {old: new for new, old in enumerate(used)}
        self.texts = [self.texts[old] for old in used]
        self.text_codes = {text: code for code, text in enumerate(self.texts)}
        self.codes = array("H", [remap[c] for c in self.codes])
        self.dropped = 0

    def points(self, since: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        prev: tuple[float, float] | None = None  # (at, sent)
        nums, codes, texts = self.nums, self.codes, self.texts
        for i in range(len(self)):
            at, delay, gate_until, backoff, limit, sent, queued, inflight, conc = nums[i * _NUMS : (i + 1) * _NUMS]
            if at < since:
                continue
            rate = None
            if prev is not None and at > prev[0] and sent >= prev[1]:
                rate = (sent - prev[1]) / (at - prev[0])
            out.append({"at": at, "delay": delay, "rate": rate, "queued": int(queued), "inflight": int(inflight),
                        "concurrency": int(conc), "gate_until": gate_until, "backoff": backoff,
                        "reason": texts[codes[i * _CODES]], "limit": limit,
                        "cause": texts[codes[i * _CODES + 1]]})  # fmt: skip
            prev = (at, sent)
        return out


class StatusHistory:
    """The latest snapshot per instance and a bounded, age-limited history per scope.

    Pure (no Kafka): fed with the status topic's records by :meth:`apply`; ``clock`` gives the
    current time (injected in tests)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.latest: LRU[bytes, Status] = LRU(MAX_INSTANCES)  # oldest snapshot first
        self.history: LRU[str, _Series] = LRU(HISTORY_SCOPES)  # least recently updated first
        self._pruned_at = float("-inf")

    def apply(self, key: bytes, value: bytes | None) -> None:
        """One record of the status topic: an instance's snapshot, or its tombstone."""
        with self._lock:
            if value is None:
                self.latest.pop(key, None)
                return
            try:
                status = decode(value, Status)
            except SchemaError:
                return
            now = self.clock()
            self.latest.put(key, status)
            if now - status.at <= HISTORY_SECONDS:
                for row in status.scopes:
                    self._add(row.scope, status.at, row)
            if now - self._pruned_at >= 1.0:
                self._prune(now)

    _apply = apply  # the name tests/test_status.py feeds

    def _add(self, scope: str, at: float, row: ScopeStatus) -> None:
        series = self.history.peek(scope)
        if series is None:
            series = _Series()
            self.history.put(scope, series)
        if at > series.last_at():
            series.append(at, row)
            self.history.get(scope)  # (read: now the most recently updated)

    def _prune(self, now: float) -> None:
        """Drop instances gone for INSTANCE_SECONDS, points older than HISTORY_SECONDS, and the
        scopes left without a point."""
        self._pruned_at = now
        for key in [k for k, s in self.latest.items() if now - s.at > INSTANCE_SECONDS]:
            del self.latest[key]
        cutoff = now - HISTORY_SECONDS
        for scope, series in list(self.history.items()):
            series.drop_before(cutoff)
            if not len(series):
                del self.history[scope]

    def prune(self) -> None:
        with self._lock:
            self._prune(self.clock())

    def live(self) -> list[Status]:
        now = self.clock()
        return [s for s in self.latest.values() if now - s.at <= LIVE_SECONDS]

    def overview_json(self, top: int) -> dict[str, Any]:
        with self._lock:
            return overview(self.live(), top).to_json()

    def history_json(self, scope: str) -> dict[str, Any]:
        with self._lock:
            series = self.history.peek(scope)
            points = series.points(self.clock() - HISTORY_SECONDS) if series is not None else []
        return {"scope": scope, "points": points}

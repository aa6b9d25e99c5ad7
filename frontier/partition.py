"""One frontier partition: the seen set, per-scope-set priority queues, robots.txt, leases and
dispatch.

Everything lives in a :class:`~frontier.core.kv.KV` (RocksDB in production); every write is also
handed to ``changelog(key, value_or_None)`` so that another instance can rebuild the partition.
Time is always passed in; nothing here reads the clock or talks to Kafka.

Scopes: a job belongs to its host's scope, to its registrable domain's scope when that domain
has settings of its own, and to any named scopes it was submitted with (``"api"``, qualified by
the registrable domain, since scopes live in the domain's partition). Jobs with the same set of
scopes share one queue, so a job waiting for a slow scope never holds up one that is not in it.
A job is dispatched only when every one of its scopes allows it, and the send is recorded on
all of them.

Key layout (bytes):
- ``S<fingerprint>``                   seen URL (canonical form), value: its state and stamp (see below)
- ``Q<queue>\\x00<prio><seq>``          queued URL (highest priority first, FIFO within), value: UrlItem
- ``H<scope>``                         the scope's policy state, value: ScopeState
- ``R<origin>``                        an origin's robots.txt answer (scheme://host[:port]), value: RobotsRecord
- ``L<lease>``                         a job in flight, or a result still to report, value: Lease
- ``C``                                the partition's counters, value: Stats (they move with it)
- ``O<name>``                          an operator's override of a scope name (pause, delay, concurrency)
- ``V<due ms><fingerprint>``           a fetched URL due for a revisit at ``due``, value: UrlItem

Writes are ordered so that a crash between any two of them loses nothing: a URL is queued
before it is marked seen, a lease is written before its queue entry is deleted, a re-queued
entry is written before its lease is deleted. The worst case after a crash is a URL fetched
twice (at least once), never a URL dropped.

A URL that ends here without a fetch (disallowed by robots.txt, robots.txt unreachable for
too long, leases lost too often) is kept as a *report* lease until its page is on
``crawl.pages``: :meth:`PartitionFrontier.reported` removes it once the page is acknowledged,
and a restart reports it again (see ``FrontierService``). The service also publishes jobs and
reports only after the changelog records of the same round are acknowledged, so a job in a
worker's hands always has a recorded lease.

The seen set has a lifecycle (issue 13). A seen value is 5 bytes, a state and a stamp in whole
epoch seconds (13 for a revisit: plus the due time of its ``V`` entry, in ms):
- *open*: queued or in flight since the stamp. Never forgotten, so a URL is never queued twice
  because its seen entry aged out while it waited (a queue held by a long pause included).
- *done*: its fate was decided at the stamp (fetched, failed, disallowed, robots.txt given up,
  dropped by an operator). :meth:`PartitionFrontier.sweep_seen` forgets it ``seen_retention``
  after the stamp: the tombstone goes to the changelog and compaction removes both, so the
  changelog (and a restore) holds about one retention window of URLs, not the crawl's life.
  Submitted again after that, the URL is crawled again. A duplicate does not refresh the stamp.
- *revisit*: waiting in ``V`` for its next fetch (a standing order, never forgotten by age).
  A ``V`` entry whose seen entry no longer names it (forgotten, or re-queued by a recrawl) is
  dropped when due instead of re-queued, so no URL ever has two revisit chains.
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

import heapq
import os
import random
import struct
import sys
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import NamedTuple
from urllib.parse import urljoin

import msgspec

from frontier.config import FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core import policy
from frontier.core.causes import Cause
from frontier.core.control import Override, covers, updated
from frontier.core.kv import KV
from frontier.core.robots import RobotsRecord, Rules, agent_token, origin, retry_after_failures, robots_url
from frontier.core.scheduler import Scheduler
from frontier.intake.urls import seen_fingerprint
from topics.schemas import ControlCommand, Feedback, Job, Page, ScopeStatus, UrlItem

Changelog = Callable[[bytes, bytes | None], None]
# (scope, old delay, new delay, cause text, cause class, gate until): whenever a scope's delay or gate changes
ChangeHook = Callable[[str, float, float, str, Cause, float], None]

_SEEN, _QUEUE, _STATE, _ROBOTS, _LEASE, _STATS = b"S", b"Q", b"H", b"R", b"L", b"C"
_OVERRIDE, _REVISIT = b"O", b"V"
_DUE = struct.Struct(">Q")
_PRIO = struct.Struct(">IQ")
_MAX_PRIO = 2**31 - 1
SEP = "\x1f"  # between the scopes of a queue id
ROBOTS_CACHE = 10_000
REPORT_KINDS = ("disallowed", "error")
MAX_ROBOTS_REDIRECTS = 5  # report leases: a final page to publish, no fetch
STATE_CACHE = 50_000  # scope states kept decoded in memory (bounded: RSS must not grow with domains)

# The seen set's lifecycle (see the module doc): a value is a state byte and a stamp.
SEEN_LEGACY, SEEN_OPEN, SEEN_DONE, SEEN_REVISIT = 0, 1, 2, 3
_SEEN_STAMP = struct.Struct(">BI")  # state, whole epoch seconds (unsigned: until 2106)
_SEEN_DUE = struct.Struct(">BIQ")  # revisit: state, last fetch, due time of its V entry (ms)
SWEEP_BATCH = 2_000  # seen entries a sweep call looks at, at most
SWEEP_INTERVAL = 1.0  # seconds between sweep calls of a partition (sweep_due)
SWEEP_SLICES = 1 << 16  # the sweep walks the seen set by the first two bytes of the fingerprint
SWEEP_SLICES_PER_CALL = 1_024  # slices a call may open, at most (bounds a call over a sparse set)
_SLICE = struct.Struct(">H")


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


MAX_OVERRIDES = 100_000  # operators' overrides per partition (kept in memory: ~0.2 KB each)


class Refused(ValueError):
    """A command the partition will not apply; ``str(exc)`` is the reason (it goes to crawl.rejected)."""


class Lease(msgspec.Struct, kw_only=True):
    qkey: bytes  # where the URL sat in its queue (re-queued there if the job comes back); b"" for robots
    item: UrlItem
    deadline: float
    scopes: list[str]
    kind: str = "page"  # page | robots | disallowed | error (the last two: a report, see the module doc)
    dispatched_at: float = 0.0  # the send time scheduled, by the frontier's clock
    error: str = ""  # reports: why the URL ends without a fetch
    site: str = ""  # robots: the origin whose robots.txt this is (the URL may be a redirect hop)


_enc = msgspec.json.Encoder()
_item_dec = msgspec.json.Decoder(UrlItem)
_lease_dec = msgspec.json.Decoder(Lease)
_override_dec = msgspec.json.Decoder(Override)
_state_dec = msgspec.json.Decoder(policy.ScopeState)
_robots_dec = msgspec.json.Decoder(RobotsRecord)


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds:.0f} s"


def _join(base: str, location: str) -> str:
    """An absolute http(s) redirect target, or "" when ``location`` is not one."""
    try:
        target = urljoin(base, location.strip())
    except ValueError:
        return ""
    return target if target.startswith(("http://", "https://")) and len(target) <= 2048 else ""


def queue_prefix(qid: str) -> bytes:
    return _QUEUE + qid.encode() + b"\x00"


class Stats(msgspec.Struct, kw_only=True):
    """Cumulative counters of one partition, stored with it so totals survive a move to another
    instance (per-process counters would drop whatever the previous owner counted)."""

    ingested: int = 0
    duplicates: int = 0
    dispatched: int = 0
    completed: int = 0
    retried: int = 0
    returned: int = 0  # jobs handed back unfetched (expired at the worker)
    lost: int = 0  # leases that expired with no feedback
    stale_feedback: int = 0
    disallowed: int = 0
    robots_fetched: int = 0
    fetched: int = 0  # pages with a response (any status) as the final outcome
    failed: int = 0  # pages that ended in a network error after their retries
    dropped: int = 0  # queued URLs removed by an operator's drop
    revisits: int = 0  # URLs re-queued because their revisit interval passed
    forgotten: int = 0  # seen entries removed: aged out (seen_retention) or by a forget submission
    recrawls: int = 0  # URLs queued again by a recrawl submission although seen


_stats_dec = msgspec.json.Decoder(Stats)


class Sweep(NamedTuple):
    """What one call of :meth:`PartitionFrontier.sweep_seen` did."""

    looked: int  # seen entries looked at (at most the call's limit)
    forgotten: int  # of them, deleted (aged out)


@dataclass(frozen=True)
class Report:
    """A URL that ends without a fetch: publish ``page``, then call ``reported(lease)``."""

    lease: str
    page: Page


@dataclass
class Dispatch:
    jobs: list[Job] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)  # final pages of URLs never fetched

    @property
    def disallowed(self) -> list[Page]:
        """The pages of URLs disallowed by robots.txt."""
        return [r.page for r in self.reports if r.page.outcome == "disallowed"]


@dataclass
class PartitionFrontier:
    partition: int
    kv: KV
    settings: FrontierConfig
    throttle: ThrottleConfig
    changelog: Changelog
    user_agent: str = "kafka-crawl-frontier"
    on_change: ChangeHook | None = None
    rng: random.Random = field(default_factory=random.Random)
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self) -> None:
        self._agent = agent_token(self.user_agent)
        self._scheduler = Scheduler()
        self._leases: list[tuple[float, str]] = []  # (deadline, lease id), lazily pruned
        # scope or robots:<origin> → blocked multi-scope queues. A host's own queue needs no entry:
        # every lease that closes on a host reschedules that host's queue (see _closed).
        self._waiters: dict[str, set[str]] = defaultdict(set)
        self._queued: Counter[str] = Counter()  # queue id → URLs queued
        # scope → the multi-scope queue ids (SEP-joined) in _queued that contain it, so that a
        # watched scope's row costs O(its queues); a single-scope queue is _queued[scope] itself
        self._multi: dict[str, set[str]] = {}
        self._robots_pending: set[str] = set()  # origins whose robots.txt is being fetched
        self._rules: OrderedDict[str, Rules] = OrderedDict()  # origin → rules (LRU over R<origin>)
        self._unreported: list[str] = []  # report leases whose page is not out yet
        self.inflight = 0
        self._seq = 0  # queue sequence: monotonic (FIFO within a priority), see _qkey
        # lease ids: 64 random bits per incarnation + a counter (unique without uuid4's cost)
        self._lease_prefix = os.urandom(8).hex()
        self._lease_seq = 0
        self._states: OrderedDict[str, policy.ScopeState] = OrderedDict()  # LRU cache over H<scope>
        self._saved_stats = Stats()
        # operators' overrides by name (at most MAX_OVERRIDES); a scope finds the ones covering it
        # by looking up its own dot-suffixes, so their number does not slow dispatch
        self._overrides: dict[str, Override] = {}
        self._next_revisit: float | None = None
        # the seen-set sweep's cursor: a slice of the fingerprint space and the last key looked at
        # in it. Not stored: each incarnation starts at a random slice, so restarts still cover
        # the whole set (in expectation) instead of sweeping its beginning again and again.
        self._sweep_slice = int.from_bytes(os.urandom(2), "big") % SWEEP_SLICES
        self._sweep_after = b""
        self._swept_at: float | None = None  # when sweep_due last ran a sweep

    # -- scopes -------------------------------------------------------------------------------
    def scopes_of(self, item: UrlItem) -> list[str]:
        """The host, its address ``ip:<address>`` (frontier.ip_scope: the router resolved it), the
        registrable domain when it has settings of its own, and the item's named scopes."""
        scopes = [item.host]
        if item.ip:
            scopes.append(f"ip:{item.ip}")
        if item.domain != item.host and item.domain in self.throttle.scopes:
            scopes.append(item.domain)
        scopes.extend(f"{item.domain}#{name}" for name in sorted(set(item.scopes)))
        return scopes

    def scope_settings(self, scope: str) -> ScopeSettings:
        s = self.throttle.for_scope(scope.rsplit("#", 1)[-1])
        if not self._overrides:
            return s
        delay = concurrency = None
        for _, o in self._covering(scope):  # most specific last: it wins
            delay = o.delay if o.delay is not None else delay
            concurrency = o.concurrency if o.concurrency is not None else concurrency
        if delay is not None:
            s = replace(s, delay=delay)
        if concurrency is not None:
            s = replace(s, concurrency=concurrency)
        return s

    def _covering(self, scope: str) -> list[tuple[str, Override]]:
        """The overrides that apply to ``scope`` (see :func:`frontier.core.control.covers`), least
        specific first: one lookup per dot-suffix of the scope, whatever their number."""
        labels = scope.split(".")
        found: list[tuple[str, Override]] = []
        for i in range(len(labels) - 1, -1, -1):
            name = ".".join(labels[i:])
            o = self._overrides.get(name)
            if o is not None:
                found.append((name, o))
        return found

    def _paused_by(self, scopes: list[str]) -> str | None:
        for scope in scopes:
            for name, o in self._covering(scope):
                if o.paused:
                    return name
        return None

    def _state(self, scope: str) -> policy.ScopeState:
        state = self._states.get(scope)
        if state is not None:
            self._states.move_to_end(scope)
            return state
        raw = self.kv.get(_STATE + scope.encode())
        state = _state_dec.decode(raw) if raw is not None else policy.ScopeState()
        self._cache_state(scope, state)
        return state

    def _cache_state(self, scope: str, state: policy.ScopeState) -> None:
        self._states[scope] = state
        self._states.move_to_end(scope)
        if len(self._states) > STATE_CACHE:
            self._states.popitem(last=False)

    def _apply(self, scope: str, event: policy.Event, now: float) -> None:
        s = self.scope_settings(scope)
        old = self._state(scope)
        new = policy.apply(old, event, now, s)
        self._put(_STATE + scope.encode(), _enc.encode(new))
        self._cache_state(scope, new)
        if self.on_change is not None:
            before, after = policy.delay(old, s), policy.delay(new, s)
            if abs(before - after) > 1e-9 or new.gate_until != old.gate_until:
                cause, kind = new.cause, new.cause_kind or Cause.OTHER
                if new.gate_until > max(old.gate_until, now):
                    cause, kind = f"gate until +{new.gate_until - now:.0f}s ({new.gate_cause})", Cause.GATE
                self.on_change(scope, before, after, cause, kind, new.gate_until)

    def _decide(self, scopes: list[str], now: float, cost: float, register: bool = True) -> policy.Decision:
        """All scopes must allow: the latest time wins; a scope that needs feedback blocks outright
        (and, with ``register``, a multi-scope queue waits on that scope's next free slot)."""
        if self._overrides:
            paused = self._paused_by(scopes)
            if paused is not None:
                return policy.Decision(None, f"paused ({paused})")  # resume reschedules its queues
        latest = policy.Decision(now, "ready")
        for scope in scopes:
            d = policy.decide(self._state(scope), now, self.scope_settings(scope), cost)
            if d.at is None:
                if register and len(scopes) > 1:
                    self._waiters[scope].add(SEP.join(scopes))
                return policy.Decision(None, f"{d.reason} ({scope})")
            if d.at > now and (latest.at is None or d.at > latest.at):
                latest = policy.Decision(d.at, f"{d.reason} ({scope})")
        return latest

    # -- recovery -------------------------------------------------------------------------------
    def rebuild(self, now: float) -> None:
        """Rebuild the in-memory heap, counters and lease index from the store."""
        self.__post_init__()
        raw = self.kv.get(_STATS)
        self.stats = _stats_dec.decode(raw) if raw is not None else Stats()
        self._saved_stats = msgspec.structs.replace(self.stats)
        for key, value in self.kv.scan(_OVERRIDE):
            self._overrides[key[1:].decode()] = _override_dec.decode(value)
        head = self.kv.first(_REVISIT)
        self._next_revisit = _DUE.unpack(head[0][1:9])[0] / 1000 if head is not None else None
        for key, value in self.kv.scan(_LEASE):
            lease = _lease_dec.decode(value)
            if lease.kind in REPORT_KINDS:
                self._unreported.append(key[1:].decode())  # its page may never have gone out
                continue
            heapq.heappush(self._leases, (lease.deadline, key[1:].decode()))
            self.inflight += 1
            if lease.kind == "robots":
                self._robots_pending.add(lease.site or origin(lease.item.url))
        for key, _ in self.kv.scan(_QUEUE):
            self._queued[sys.intern(key[1 : key.index(b"\x00")].decode())] += 1
        for qid in self._queued:
            self._scheduler.schedule(qid, now)
            if SEP in qid:
                self._index_queue(qid)

    def save_stats(self) -> None:
        """Store the counters if they changed (the service calls this once per batch of events)."""
        if self.stats != self._saved_stats:
            self._put(_STATS, _enc.encode(self.stats))
            self._saved_stats = msgspec.structs.replace(self.stats)

    # -- writes (store + changelog) -------------------------------------------------------------
    def _put(self, key: bytes, value: bytes) -> None:
        self.kv.put(key, value)
        self.changelog(key, value)

    def _delete(self, key: bytes) -> None:
        self.kv.delete(key)
        self.changelog(key, None)

    def _qkey(self, qid: str, item: UrlItem, now: float) -> bytes:
        # FIFO within a priority: the sequence is milliseconds since the epoch times 2**20, plus
        # a counter. It never goes back within a process, survives restarts (the clock moved on),
        # and stays within 64 bits until the year 2500 (no wrap that would flip the order).
        self._seq = max(self._seq + 1, int(max(0.0, now) * 1000) << 20)
        prio = _MAX_PRIO - max(-_MAX_PRIO, min(_MAX_PRIO, item.priority))
        return queue_prefix(qid) + _PRIO.pack(prio, min(self._seq, 2**64 - 1))

    def _enqueue(self, qkey: bytes, item: UrlItem, now: float) -> None:
        qid = sys.intern(qkey[1 : qkey.index(b"\x00")].decode())
        self._put(qkey, _enc.encode(item))
        if SEP in qid and qid not in self._queued:
            self._index_queue(qid)
        self._queued[qid] += 1
        self._scheduler.schedule(qid, min(now, self._scheduler.scheduled_at(qid) or now))

    def _index_queue(self, qid: str) -> None:
        """A multi-scope queue id entered ``_queued``: index it under each of its scopes."""
        for scope in qid.split(SEP):
            self._multi.setdefault(scope, set()).add(qid)

    def _forget_queue(self, qid: str) -> None:
        """Remove ``qid`` from ``_queued`` and from the scope index (the one way out of both)."""
        if self._queued.pop(qid, None) is not None and SEP in qid:
            for scope in qid.split(SEP):
                queues = self._multi.get(scope)
                if queues is not None:
                    queues.discard(qid)
                    if not queues:
                        del self._multi[scope]

    def _wake(self, key: str, now: float) -> None:
        for qid in self._waiters.pop(key, ()):
            self._scheduler.schedule(qid, now)

    # -- robots.txt -------------------------------------------------------------------------------
    def _robots(self, site: str, now: float) -> Rules | None:
        """The origin's current rules, or None when they must be (re)fetched first."""
        rules = self._rules.get(site)
        if rules is None:
            raw = self.kv.get(_ROBOTS + site.encode())
            if raw is None:
                return None
            rules = Rules(_robots_dec.decode(raw), self._agent)
            self._rules[site] = rules
            if len(self._rules) > ROBOTS_CACHE:
                self._rules.popitem(last=False)
        if rules.record.redirect:
            return None  # half way through its redirects: the next hop is fetched first
        return rules if now < self._robots_due(rules) else None

    def _robots_due(self, rules: Rules) -> float:
        """When the rules must be fetched again: after the TTL, or sooner (growing) after failures."""
        rec = rules.record
        if not rules.unavailable:
            return rec.fetched_at + self.settings.robots_ttl
        retry, most = self.settings.robots_retry, max(self.settings.robots_retry, self.settings.robots_retry_max)
        return rec.fetched_at + retry_after_failures(rec.failures, retry, most)

    def _robots_given_up(self, rules: Rules) -> bool:
        rec = rules.record
        return rules.unavailable and rec.fetched_at - rec.failing_since >= self.settings.robots_give_up

    # -- events -------------------------------------------------------------------------------------
    def ingest(self, items: Iterable[UrlItem], now: float) -> int:
        """Queue every URL not seen before (or seen and not open, with ``recrawl``); apply
        ``forget`` items; return how many were queued."""
        accepted = 0
        for item in items:
            seen_key = _SEEN + seen_fingerprint(item)
            if item.forget:
                self._forget_seen(seen_key)
                continue
            raw = self.kv.get(seen_key)
            if raw is not None:
                if not item.recrawl or read_seen(raw)[0] == SEEN_OPEN:
                    self.stats.duplicates += 1  # (a recrawl of an open URL: it is queued or in flight)
                    continue
                self.stats.recrawls += 1  # its V entry, if any, is dropped when due (no longer named)
            if item.recrawl:
                item = msgspec.structs.replace(item, recrawl=False)  # a command, not part of the queued URL
            qid = sys.intern(SEP.join(self.scopes_of(item)))  # one string object per queue
            self._enqueue(self._qkey(qid, item, now), item, now)
            self._put(seen_key, seen_value(SEEN_OPEN, now))
            accepted += 1
        self.stats.ingested += accepted
        return accepted

    def dispatch(self, now: float, limit: int = 1000) -> Dispatch:
        """Lease the jobs that may be sent at ``now``; report URLs robots.txt disallows."""
        out = Dispatch()
        if self._next_revisit is not None and self._next_revisit <= now:
            self._requeue_revisits(now)
        while len(out.jobs) < limit and self.inflight < self.settings.max_inflight:
            qid = self._scheduler.pop_due(now)
            if qid is None:
                break
            head = self.kv.first(queue_prefix(qid))
            if head is None:
                self._forget_queue(qid)
                continue  # no work left: the queue leaves the heap
            qkey, raw = head
            item = _item_dec.decode(raw)
            scopes = qid.split(SEP)
            if self.settings.robots_obey:
                site = origin(item.url)
                rules = self._robots(site, now)
                if rules is None:
                    self._need_robots(qid, item, scopes, site, now, out)
                    continue
                if rules.unavailable and not self._robots_given_up(rules):
                    self._scheduler.schedule(qid, self._robots_due(rules))
                    continue
                if rules.unavailable or not rules.allowed(item.url):
                    if rules.unavailable:
                        rec = rules.record
                        error = f"robots.txt unreachable for {_duration(now - rec.failing_since)}"
                        error += f" ({rec.failures} attempts, last: {rec.error or rec.status})"
                        self._report(item, qkey, scopes, now, "error", error)
                        self.stats.failed += 1
                    else:
                        self._report(item, qkey, scopes, now, "disallowed", "disallowed by robots.txt")
                        self.stats.disallowed += 1
                    self._queued[qid] -= 1
                    self._scheduler.schedule(qid, now)
                    continue
            decision = self._decide(scopes, now, item.cost)
            if decision.at is None:
                continue  # waits for feedback on a full scope (registered as a waiter)
            if decision.at > now + self.settings.dispatch_lead:
                self._scheduler.schedule(qid, decision.at - self.settings.dispatch_lead)
                continue
            # Due now or within the lead: send it ahead with not_before = its slot, so Kafka
            # transit is off the critical path; the worker holds it until then.
            out.jobs.append(self._lease(item, qkey, scopes, now, not_before=max(now, decision.at)))
            self._queued[qid] -= 1
            self._scheduler.schedule(qid, now)
        if self._unreported:
            self._report_pending(out, now)
        return out

    def _need_robots(self, qid: str, item: UrlItem, scopes: list[str], site: str, now: float, out: Dispatch) -> None:
        host = scopes[0]
        if site in self._robots_pending:
            self._waiters[f"robots:{site}"].add(qid)  # woken when that robots.txt lease closes
            return
        decision = self._decide(scopes, now, 0.0)  # the robots.txt request goes through the same throttling
        if decision.at is None:
            return
        if decision.at > now + self.settings.dispatch_lead:
            self._scheduler.schedule(qid, decision.at - self.settings.dispatch_lead)
            return
        # robots.txt redirects are followed one hop per job, each through the same throttling
        hop = self._robots_record(site)
        url = hop.redirect if hop is not None and hop.redirect else robots_url(item.url)
        robots_item = UrlItem(url=url, host=host, domain=item.domain, ip=item.ip, meta={})  # ip: feedback's partition
        self._robots_pending.add(site)
        job = self._lease(robots_item, b"", scopes, now, kind="robots", not_before=max(now, decision.at), site=site)
        out.jobs.append(job)

    # -- reports: URLs that end without a fetch -----------------------------------------------------
    def _report(self, item: UrlItem, qkey: bytes, scopes: list[str], now: float, kind: str, error: str) -> None:
        """Replace a queue entry by a report lease; its page goes out with the next dispatch."""
        self._lease_seq += 1
        lease_id = f"{self._lease_prefix}{self._lease_seq:x}"
        lease = Lease(qkey=qkey, item=item, deadline=now, scopes=scopes, kind=kind, error=error)
        self._put(_LEASE + lease_id.encode(), _enc.encode(lease))  # written before the entry goes
        self._settle(item, now)  # its fate is decided now (the report lease holds it until published)
        if qkey:
            self._delete(qkey)
        self._unreported.append(lease_id)

    @staticmethod
    def _report_page(lease: Lease, now: float) -> Page:
        return Page(url=lease.item.url, outcome=lease.kind, error=lease.error, meta=lease.item.meta, fetched_at=now)

    def _report_pending(self, out: Dispatch, now: float) -> None:
        """Hand out the pages of new report leases, and of restored ones (a previous owner may
        not have published them)."""
        pending, self._unreported = self._unreported, []
        for lease_id in pending:
            raw = self.kv.get(_LEASE + lease_id.encode())
            if raw is not None:
                out.reports.append(Report(lease_id, self._report_page(_lease_dec.decode(raw), now)))

    def reported(self, lease_id: str) -> None:
        """The report's page is on crawl.pages: forget the report lease."""
        key = _LEASE + lease_id.encode()
        if self.kv.get(key) is not None:
            self._delete(key)

    def _lease(
        self,
        item: UrlItem,
        qkey: bytes,
        scopes: list[str],
        now: float,
        kind: str = "page",
        not_before: float = 0.0,
        site: str = "",
    ) -> Job:
        self._lease_seq += 1
        lease_id = f"{self._lease_prefix}{self._lease_seq:x}"
        not_before = max(now, not_before)
        expires_at = not_before + self.settings.job_ttl
        deadline = expires_at + self.settings.fetch_timeout + self.settings.lease_grace
        lease = Lease(qkey=qkey, item=item, deadline=deadline, scopes=scopes, kind=kind, dispatched_at=not_before,
                      site=site)  # fmt: skip
        self._put(_LEASE + lease_id.encode(), _enc.encode(lease))
        if qkey:
            self._delete(qkey)
        u = self.rng.random()
        for scope in scopes:
            self._apply(scope, policy.Sent(not_before, u=u, cost=item.cost if kind == "page" else 0.0), now)
        heapq.heappush(self._leases, (deadline, lease_id))
        self.inflight += 1
        self.stats.dispatched += 1
        host_state, host_settings = self._state(scopes[0]), self.scope_settings(scopes[0])
        return Job(
            lease=lease_id,
            kind=kind,
            item=item,
            not_before=not_before,
            expires_at=expires_at,
            min_gap=policy.delay(host_state, host_settings),
            floor=policy.floor(host_state, host_settings),
            timeout=self.settings.fetch_timeout,
            retries_left=max(0, self.settings.max_retries - item.attempts) if kind == "page" else 0,
        )

    def feedback(self, fb: Feedback, now: float) -> bool:
        """Apply one worker result; return False for stale feedback (lease already closed)."""
        lease_key = _LEASE + fb.lease.encode()
        raw = self.kv.get(lease_key)
        lease = _lease_dec.decode(raw) if raw is not None else None
        if lease is None or lease.kind in REPORT_KINDS:
            self.stats.stale_feedback += 1
            self._late(fb, now)
            return False
        item = lease.item
        if lease.kind == "robots":
            if fb.outcome != "expired":
                self._store_robots(lease.site or origin(item.url), item, fb, now)
        elif fb.outcome == "expired":
            self._enqueue(lease.qkey, item, now)  # back to where it was
            self.stats.returned += 1
        elif fb.outcome == "retry":
            retry = msgspec.structs.replace(item, attempts=item.attempts + 1)
            self._enqueue(self._qkey(SEP.join(lease.scopes), retry, now), retry, now)
            self.stats.retried += 1
        else:
            self.stats.completed += 1
            if fb.outcome == "error":
                self.stats.failed += 1
            else:
                self.stats.fetched += 1
            if item.revisit > 0:
                self._schedule_revisit(item, now)
            else:
                self._settle(item, now)  # before the lease goes: a crash between leaves it leased
        event = policy.Done(sent_at=fb.sent_at, done_at=fb.done_at, dispatched_at=lease.dispatched_at, status=fb.status,
                            latency=fb.latency, error=fb.error, headers=fb.headers, adjust=item.adjust,
                            outcome=fb.outcome)  # fmt: skip
        for scope in lease.scopes:
            self._apply(scope, event, now)
        self._delete(lease_key)
        self._closed(lease, now)
        return True

    def _late(self, fb: Feedback, now: float) -> None:
        """A result whose lease was already closed (expired, lost): the slot was freed then, but
        a request really went out and what the server answered (a gate, a 429, an outage) still
        applies to the host, so its throttling part is applied (named scopes are not known any more)."""
        if fb.outcome == "expired" or fb.sent_at <= 0 or not fb.host:
            return
        scopes = [fb.host]
        if fb.ip:
            scopes.append(f"ip:{fb.ip}")
        if fb.domain and fb.domain != fb.host and fb.domain in self.throttle.scopes:
            scopes.append(fb.domain)
        event = policy.Done(sent_at=fb.sent_at, status=fb.status, latency=fb.latency, error=fb.error,
                            headers=fb.headers, adjust=False, outcome=fb.outcome, late=True)  # fmt: skip
        for scope in scopes:
            self._apply(scope, event, now)

    # -- recrawl ------------------------------------------------------------------------------------
    def _schedule_revisit(self, item: UrlItem, now: float) -> None:
        """The URL waits in ``V`` until it is due; its seen entry (a *revisit*) keeps the last fetch
        time and names that ``V`` entry. ``V`` is written first: a seen entry never names a
        missing one (a ``V`` entry no seen entry names is dropped when due)."""
        fingerprint = seen_fingerprint(item)
        due_ms = int((now + item.revisit) * 1000)
        fresh = msgspec.structs.replace(item, attempts=0, redirects=0)
        self._put(_REVISIT + _DUE.pack(due_ms) + fingerprint, _enc.encode(fresh))
        self._put(_SEEN + fingerprint, seen_value(SEEN_REVISIT, now, due_ms))
        due = due_ms / 1000
        if self._next_revisit is None or due < self._next_revisit:
            self._next_revisit = due

    def _requeue_revisits(self, now: float, limit: int = 1000) -> None:
        self._next_revisit = None
        for n, (key, raw) in enumerate(self.kv.scan(_REVISIT)):
            due_ms = _DUE.unpack(key[1:9])[0]
            due = due_ms / 1000
            if due > now or n >= limit:
                self._next_revisit = max(due, now)
                return
            seen_key = _SEEN + key[9:]
            seen = self.kv.get(seen_key)
            state, _, named = read_seen(seen) if seen is not None else (SEEN_LEGACY, -1.0, -1)
            if state != SEEN_REVISIT or named not in (-1, due_ms):
                self._delete(key)  # forgotten, or re-queued by a recrawl since: this chain ends here
                continue
            item = _item_dec.decode(raw)
            qid = sys.intern(SEP.join(self.scopes_of(item)))
            self._enqueue(self._qkey(qid, item, now), item, now)  # queued before the V entry goes
            self._put(seen_key, seen_value(SEEN_OPEN, now))
            self._delete(key)
            self.stats.revisits += 1

    # -- the seen set's lifecycle -------------------------------------------------------------------
    def _settle(self, item: UrlItem, now: float) -> None:
        """The URL's fate is decided (fetched, failed, disallowed, dropped): stamp its seen entry
        *done*; the retention counts from here."""
        self._put(_SEEN + seen_fingerprint(item), seen_value(SEEN_DONE, now))

    def _forget_seen(self, seen_key: bytes) -> None:
        """A forget submission: remove the entry unless it is open (queued or in flight)."""
        raw = self.kv.get(seen_key)
        if raw is None or read_seen(raw)[0] == SEEN_OPEN:
            return
        self._delete(seen_key)  # a revisit's V entry is dropped when due (no longer named)
        self.stats.forgotten += 1

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
        cursor that wraps around, and opens ``SWEEP_SLICES_PER_CALL`` slices at most: a full
        cycle over N entries takes at most ``N / limit + SWEEP_SLICES / SWEEP_SLICES_PER_CALL``
        calls. Entries written before issue 13 (``b"1"``) are stamped *done* at ``now`` when
        first met. Open and revisit entries are never forgotten by age. Pure: ``now`` is passed
        in. An entry lives from its stamp for the retention plus, at most, one cycle."""
        retention = self.settings.seen_retention
        if retention <= 0 or limit <= 0:
            return Sweep(0, 0)
        looked = forgotten = 0
        for _ in range(SWEEP_SLICES_PER_CALL):
            after = self._sweep_after
            for key, value in self.kv.scan(_SEEN + _SLICE.pack(self._sweep_slice)):
                if key <= after:
                    continue  # looked at by an earlier call (the slice is resumed, not restarted)
                if looked >= limit:
                    self.stats.forgotten += forgotten
                    return Sweep(looked, forgotten)
                looked += 1
                self._sweep_after = key
                state, stamp, _ = read_seen(value)
                if state == SEEN_DONE and now - stamp >= retention:
                    self._delete(key)
                    forgotten += 1
                elif state == SEEN_LEGACY:
                    self._put(key, seen_value(SEEN_DONE, now))
            self._sweep_slice = (self._sweep_slice + 1) % SWEEP_SLICES
            self._sweep_after = b""
            if looked >= limit:
                break
        self.stats.forgotten += forgotten
        return Sweep(looked, forgotten)

    # -- operators' commands ----------------------------------------------------------------------
    def control(self, cmd: ControlCommand, now: float) -> int:
        """Apply a scope command; return the queued URLs it dropped (drop) or 0."""
        name = cmd.scope
        if cmd.action == "drop":
            return self._drop(name, now)
        new = updated(self._overrides.get(name, Override()), cmd)
        if name not in self._overrides and not new.empty() and len(self._overrides) >= MAX_OVERRIDES:
            raise Refused(f"{len(self._overrides)} scope overrides in partition {self.partition} already "
                          f"(at most {MAX_OVERRIDES}): clear some first")  # fmt: skip
        if new.empty():
            self._overrides.pop(name, None)
            if self.kv.get(_OVERRIDE + name.encode()) is not None:
                self._delete(_OVERRIDE + name.encode())
        else:
            self._overrides[name] = new
            self._put(_OVERRIDE + name.encode(), _enc.encode(new))
        for qid in list(self._queued):  # anything may dispatch sooner now: look at its queues again
            if any(covers(name, scope) for scope in qid.split(SEP)):
                self._scheduler.schedule(qid, now)
        return 0

    def _drop(self, name: str, now: float) -> int:
        dropped = 0
        for qid in list(self._queued):
            if not any(covers(name, scope) for scope in qid.split(SEP)):
                continue
            for key, raw in list(self.kv.scan(queue_prefix(qid))):
                self._settle(_item_dec.decode(raw), now)  # before the entry goes (a crash: still queued)
                self._delete(key)
                dropped += 1
            self._forget_queue(qid)
        self.stats.dropped += dropped
        return dropped

    def overrides(self) -> dict[str, Override]:
        return dict(self._overrides)

    def _store_robots(self, site: str, item: UrlItem, fb: Feedback, now: float) -> None:
        host = item.host
        status = 0 if fb.error else fb.status
        record = RobotsRecord(status=status, body=fb.body, fetched_at=now, error=fb.error)
        location = fb.headers.get("location", "")
        if 300 <= status < 400 and location:
            before = self._robots_record(site)
            hops = before.hops + 1 if before is not None and before.redirect == item.url else 1
            target = _join(item.url, location)
            if hops <= MAX_ROBOTS_REDIRECTS and target:  # RFC 9309 §2.3.1.2: follow at least five
                record = RobotsRecord(status=status, fetched_at=now, redirect=target, hops=hops)
        rules = Rules(record, self._agent)
        if rules.unavailable:  # count consecutive failures: retries grow apart, and end (see _robots_given_up)
            before = self._robots_record(site)
            failing = before is not None and before.failures > 0
            record.failures = before.failures + 1 if failing and before else 1
            record.failing_since = before.failing_since if failing and before else now
        self._put(_ROBOTS + site.encode(), _enc.encode(record))
        self._rules[site] = rules
        self._rules.move_to_end(site)
        self.stats.robots_fetched += 1
        if not rules.unavailable and not record.redirect:
            self._apply(host, policy.Robots(rules.delay()), now)

    def _robots_record(self, site: str) -> RobotsRecord | None:
        rules = self._rules.get(site)
        if rules is not None:
            return rules.record
        raw = self.kv.get(_ROBOTS + site.encode())
        return _robots_dec.decode(raw) if raw is not None else None

    def _closed(self, lease: Lease, now: float) -> None:
        self.inflight -= 1
        if lease.kind == "robots":
            site = lease.site or origin(lease.item.url)
            self._robots_pending.discard(site)
            self._wake(f"robots:{site}", now)
        for scope in lease.scopes:
            self._wake(scope, now)
        self._scheduler.schedule(SEP.join(lease.scopes), now)
        self._scheduler.schedule(lease.scopes[0], now)  # the host's own queue (it registers no waiters)

    def expire_leases(self, now: float) -> int:
        """Re-queue URLs whose lease deadline passed without feedback (at least once)."""
        expired = 0
        while self._leases and self._leases[0][0] <= now:
            _, lease_id = heapq.heappop(self._leases)
            lease_key = _LEASE + lease_id.encode()
            raw = self.kv.get(lease_key)
            if raw is None:
                continue  # feedback already closed it
            lease = _lease_dec.decode(raw)
            if lease.kind == "page":
                # A lease can be lost again and again (a URL whose fetch kills its worker, a worker
                # that never answers): count it as an attempt, and end with an error page.
                item = msgspec.structs.replace(lease.item, attempts=lease.item.attempts + 1)
                if item.attempts > self.settings.max_retries:
                    error = f"no result from a worker after {item.attempts} leases"
                    self._report(item, b"", lease.scopes, now, "error", error)
                    self.stats.completed += 1
                    self.stats.failed += 1
                else:
                    self._enqueue(lease.qkey, item, now)
            for scope in lease.scopes:
                self._apply(scope, policy.Lost(), now)
            self._delete(lease_key)
            self._closed(lease, now)
            self.stats.lost += 1
            expired += 1
        return expired

    def next_wakeup(self) -> float | None:
        """The earliest time something may happen without new input."""
        lease = self._leases[0][0] if self._leases else None
        # at max_inflight nothing can go out before a lease closes (feedback wakes the loop)
        due = self._scheduler.next_time() if self.inflight < self.settings.max_inflight else None
        times = [t for t in (due, lease, self._next_revisit) if t is not None]
        return min(times) if times else None

    def queued_hosts(self) -> int:
        return len(self._scheduler)

    def queued(self) -> int:
        return sum(self._queued.values())

    # -- visibility -----------------------------------------------------------------------------
    def _explain(self, qid: str, now: float) -> tuple[str, float | None]:
        """Why ``qid`` is not dispatching now (no side effects: for status only)."""
        scopes = qid.split(SEP)
        paused = self._paused_by(scopes) if self._overrides else None
        if paused is not None:
            return f"paused ({paused})", None
        head = self.kv.first(queue_prefix(qid))
        if self.settings.robots_obey and head is not None:
            rules = self._robots(origin(_item_dec.decode(head[1]).url), now)
            if rules is None:
                return "robots.txt pending", None
            if rules.unavailable:
                failures = rules.record.failures
                return f"robots.txt unavailable ({failures} failure(s)): all disallowed until retry", (
                    self._robots_due(rules)
                )
        d = self._decide(scopes, now, 1.0, register=False)
        return d.reason, d.at

    def scope_rows(self, now: float, top: int = 20) -> list[ScopeStatus]:
        """Per scope, busiest first: queued, in flight, delay, gate, and why it is not dispatching."""
        # The largest queues only (C-level scan): the cost must not grow with Python work per queue,
        # there can be millions. A scope shared by many small queues may be under-counted.
        queued: Counter[str] = Counter()
        biggest: dict[str, tuple[int, str]] = {}  # scope → its largest queue
        for qid, n in heapq.nlargest(top * 4, self._queued.items(), key=itemgetter(1)):
            for scope in qid.split(SEP):
                queued[scope] += n
                if n > biggest.get(scope, (0, ""))[0]:
                    biggest[scope] = (n, qid)
        return [self.scope_row(scope, now, n, biggest.get(scope, (0, ""))[1]) for scope, n in queued.most_common(top)]

    def scope_row(self, scope: str, now: float, queued: int | None = None, qid: str = "") -> ScopeStatus:
        """One scope's status row (``queued`` counted over its queues when not given: its own
        queue and the multi-scope queues the index lists for it, O(its queues), never a scan)."""
        if queued is None:
            mine = [(self._queued[q], q) for q in self._multi.get(scope, ())]
            if scope in self._queued:
                mine.append((self._queued[scope], scope))
            queued = sum(n for n, _ in mine)
            qid = max(mine)[1] if mine else ""
        s = self.scope_settings(scope)
        st = policy.advance(self._state(scope), now, s)
        # an emptied queue (not popped yet) reads like no queue: nothing to explain, and no seek in the store
        reason, at = self._explain(qid, now) if qid and queued else ("ready", None)
        return ScopeStatus(scope=scope, queued=queued, inflight=st.inflight, delay=policy.delay(st, s),
                           concurrency=policy.concurrency(st, s), gate_until=st.gate_until, backoff=st.backoff,
                           reason=reason, wait_until=at, sent=st.sent_total,
                           limit=1 / st.limit if st.limit > 0 else 0.0, cause=st.cause)  # fmt: skip

"""One frontier partition: the seen set, per-host priority queues, leases and dispatch.

Everything lives in a :class:`~frontier.store.KV` (RocksDB in production); every write is also
handed to ``changelog(key, value_or_None)`` so that another instance can rebuild the partition.
Time is always passed in; nothing here reads the clock or talks to Kafka.

Key layout (bytes):
- ``S<fingerprint>``                   seen URL (canonical form), value: b"1"
- ``Q<host>\\x00<prio><seq>``           queued URL (highest priority first, FIFO within), value: UrlItem
- ``H<host>``                          the host's policy state, value: ScopeState
- ``L<lease>``                         a job in flight, value: Lease

Writes are ordered so that a crash between any two of them loses nothing: a URL is queued
before it is marked seen, a lease is written before its queue entry is deleted, a re-queued
entry is written before its lease is deleted. The worst case after a crash is a URL fetched
twice (at least once), never a URL dropped.
"""

from __future__ import annotations

import heapq
import struct
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import msgspec

from frontier import policy
from frontier.config import FrontierConfig, ThrottleConfig
from frontier.scheduler import Scheduler
from frontier.store import KV
from frontier.urls import url_fingerprint
from topics.schemas import Feedback, Job, UrlItem

Changelog = Callable[[bytes, bytes | None], None]

_SEEN, _QUEUE, _HOST, _LEASE = b"S", b"Q", b"H", b"L"
_PRIO = struct.Struct(">IQ")
_MAX_PRIO = 2**31 - 1


class Lease(msgspec.Struct, kw_only=True):
    qkey: bytes  # where the URL sat in its queue (re-queued there if the job comes back)
    item: UrlItem
    deadline: float


_item_enc = msgspec.json.Encoder()
_item_dec = msgspec.json.Decoder(UrlItem)
_lease_dec = msgspec.json.Decoder(Lease)
_state_dec = msgspec.json.Decoder(policy.ScopeState)


def queue_prefix(host: str) -> bytes:
    return _QUEUE + host.encode() + b"\x00"


@dataclass
class Stats:
    ingested: int = 0
    duplicates: int = 0
    dispatched: int = 0
    completed: int = 0
    retried: int = 0
    returned: int = 0  # jobs handed back unfetched (expired at the worker)
    lost: int = 0  # leases that expired with no feedback
    stale_feedback: int = 0


@dataclass
class PartitionFrontier:
    partition: int
    kv: KV
    settings: FrontierConfig
    throttle: ThrottleConfig
    changelog: Changelog
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self) -> None:
        self._scheduler = Scheduler()
        self._leases: list[tuple[float, str]] = []  # (deadline, lease id), lazily pruned
        self.inflight = 0
        self._seq = 0

    # -- recovery -------------------------------------------------------------------------
    def rebuild(self, now: float) -> None:
        """Rebuild the in-memory heap and lease index from the store (after open or restore)."""
        self._scheduler = Scheduler()
        self._leases = []
        self.inflight = 0
        for key, value in self.kv.scan(_LEASE):
            lease = _lease_dec.decode(value)
            heapq.heappush(self._leases, (lease.deadline, key[1:].decode()))
            self.inflight += 1
        last_host = None
        for key, _ in self.kv.scan(_QUEUE):
            host = key[1 : key.index(b"\x00")].decode()
            if host != last_host:
                self._reschedule(host, now)
                last_host = host

    # -- writes (store + changelog) -------------------------------------------------------
    def _put(self, key: bytes, value: bytes) -> None:
        self.kv.put(key, value)
        self.changelog(key, value)

    def _delete(self, key: bytes) -> None:
        self.kv.delete(key)
        self.changelog(key, None)

    def _state(self, host: str) -> policy.ScopeState:
        raw = self.kv.get(_HOST + host.encode())
        return _state_dec.decode(raw) if raw is not None else policy.ScopeState()

    def _set_state(self, host: str, state: policy.ScopeState) -> None:
        self._put(_HOST + host.encode(), _item_enc.encode(state))

    def _qkey(self, item: UrlItem, now: float) -> bytes:
        self._seq = (self._seq + 1) % 1_000_000
        prio = _MAX_PRIO - max(-_MAX_PRIO, min(_MAX_PRIO, item.priority))
        seq = int(now * 1_000_000) * 1_000_000 + self._seq
        return queue_prefix(item.host) + _PRIO.pack(prio, seq % 2**64)

    def _reschedule(self, host: str, now: float) -> None:
        decision = policy.decide(self._state(host), now, self.throttle.for_scope(host))
        if decision.at is None:
            self._scheduler.discard(host)  # only feedback or lease expiry can free it
        else:
            self._scheduler.schedule(host, decision.at)

    # -- events ---------------------------------------------------------------------------
    def ingest(self, items: Iterable[UrlItem], now: float) -> int:
        """Queue every URL not seen before; return how many were new."""
        accepted = 0
        touched: set[str] = set()
        for item in items:
            seen_key = _SEEN + url_fingerprint(item.url)
            if self.kv.get(seen_key) is not None:
                self.stats.duplicates += 1
                continue
            self._put(self._qkey(item, now), _item_enc.encode(item))
            self._put(seen_key, b"1")
            touched.add(item.host)
            accepted += 1
        for host in touched:
            if host not in self._scheduler:
                self._reschedule(host, now)
        self.stats.ingested += accepted
        return accepted

    def dispatch(self, now: float, limit: int = 1000) -> list[Job]:
        """Lease and return the jobs that may be sent at ``now``."""
        jobs: list[Job] = []
        while len(jobs) < limit and self.inflight < self.settings.max_inflight:
            host = self._scheduler.pop_due(now)
            if host is None:
                break
            settings = self.throttle.for_scope(host)
            state = self._state(host)
            decision = policy.decide(state, now, settings)
            if decision.at is None:
                continue
            if decision.at > now:
                self._scheduler.schedule(host, decision.at)
                continue
            head = self.kv.first(queue_prefix(host))
            if head is None:
                continue  # no work left: the host leaves the heap
            qkey, raw = head
            item = _item_dec.decode(raw)
            lease_id = uuid.uuid4().hex
            expires_at = now + self.settings.job_ttl
            deadline = expires_at + self.settings.fetch_timeout + self.settings.lease_grace
            self._put(_LEASE + lease_id.encode(), _item_enc.encode(Lease(qkey=qkey, item=item, deadline=deadline)))
            self._delete(qkey)
            state = policy.apply(state, policy.Sent(now), now, settings)
            self._set_state(host, state)
            heapq.heappush(self._leases, (deadline, lease_id))
            self.inflight += 1
            self.stats.dispatched += 1
            jobs.append(
                Job(
                    lease=lease_id,
                    item=item,
                    not_before=now,
                    expires_at=expires_at,
                    min_gap=settings.delay,
                    timeout=self.settings.fetch_timeout,
                    retries_left=max(0, self.settings.max_retries - item.attempts),
                )
            )
            self._reschedule(host, now)
        return jobs

    def feedback(self, fb: Feedback, now: float) -> bool:
        """Apply one worker result; return False for stale feedback (lease already closed)."""
        lease_key = _LEASE + fb.lease.encode()
        raw = self.kv.get(lease_key)
        if raw is None:
            self.stats.stale_feedback += 1
            return False
        lease = _lease_dec.decode(raw)
        host = lease.item.host
        if fb.outcome == "expired":
            self._put(lease.qkey, _item_enc.encode(lease.item))  # back to where it was
            self.stats.returned += 1
        elif fb.outcome == "retry":
            retry = msgspec.structs.replace(lease.item, attempts=lease.item.attempts + 1)
            self._put(self._qkey(retry, now), _item_enc.encode(retry))
            self.stats.retried += 1
        else:
            self.stats.completed += 1
        settings = self.throttle.for_scope(host)
        event = policy.Done(sent_at=fb.sent_at, status=fb.status, latency=fb.latency)
        self._set_state(host, policy.apply(self._state(host), event, now, settings))
        self._delete(lease_key)
        self.inflight -= 1
        self._reschedule(host, now)
        return True

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
            host = lease.item.host
            self._put(lease.qkey, _item_enc.encode(lease.item))
            settings = self.throttle.for_scope(host)
            self._set_state(host, policy.apply(self._state(host), policy.Lost(), now, settings))
            self._delete(lease_key)
            self.inflight -= 1
            self.stats.lost += 1
            expired += 1
            self._reschedule(host, now)
        return expired

    def next_wakeup(self) -> float | None:
        """The earliest time something may happen without new input."""
        times = [t for t in (self._scheduler.next_time(), self._leases[0][0] if self._leases else None) if t]
        return min(times) if times else None

    def queued_hosts(self) -> int:
        return len(self._scheduler)

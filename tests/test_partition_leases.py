"""The partition's ``Leases`` (and ``Reports``) on a ``MemoryKV``, with the parts they are given made
by hand (not through PartitionFrontier): a lease written before its queue entry goes, results,
expiry, a client's hold, report leases."""

import random
from dataclasses import dataclass

import msgspec

from frontier.config import AutoThrottleSettings, FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core.kv import MemoryKV
from frontier.partition.crawls import Crawls
from frontier.partition.keys import LEASE, QUEUE, lease_key, queue_id
from frontier.partition.leases import Leases
from frontier.partition.queues import Queues
from frontier.partition.recorded import Recorded
from frontier.partition.records import Dispatch, Stats, lease_dec
from frontier.partition.reports import LeaseIds, Reports
from frontier.partition.revisits import Revisits
from frontier.partition.robots import RobotsCache
from frontier.partition.scopes import Scopes
from frontier.partition.seen import SEEN_DONE, SEEN_OPEN, SeenSet
from frontier.partition.store import Store
from topics.schemas import Feedback, UrlItem

FIXED = AutoThrottleSettings(enabled=False)
THROTTLE = ThrottleConfig(default=ScopeSettings(delay=1.0, concurrency=1, autothrottle=FIXED))
SETTINGS = FrontierConfig(job_ttl=30.0, fetch_timeout=20.0, lease_grace=10.0, max_retries=1, robots_obey=False)


@dataclass
class Parts:
    kv: MemoryKV
    log: list[tuple[bytes, bytes | None]]
    stats: Stats
    crawls: Crawls
    seen: SeenSet
    queues: Queues
    scopes: Scopes
    reports: Reports
    leases: Leases


def make() -> Parts:
    kv, log, stats = MemoryKV(), [], Stats()
    store = Store(kv, lambda k, v: log.append((k, v)))
    crawls = Crawls(0, store, SETTINGS)
    seen = SeenSet(store, crawls, SETTINGS, stats)
    queues = Queues(store, crawls)
    scopes = Scopes(0, store, SETTINGS, THROTTLE, queues.waiters)
    robots = RobotsCache(store, SETTINGS, scopes, stats, "testbot")
    revisits = Revisits(store, crawls, seen, queues, scopes, stats)
    recorded = Recorded(store, crawls, seen, revisits, stats)
    ids = LeaseIds()
    reports = Reports(store, ids, seen, crawls)
    leases = Leases(store, SETTINGS, stats, random.Random(1), crawls, seen, queues, scopes, robots, revisits,
                    recorded, ids, reports)  # fmt: skip
    return Parts(kv, log, stats, crawls, seen, queues, scopes, reports, leases)


def url(n: int, revisit: float = 0.0) -> UrlItem:
    return UrlItem(url=f"http://a.test/{n}", host="a.test", domain="a.test", revisit=revisit)


def leased(p: Parts, item: UrlItem, now: float) -> str:
    """Queue ``item`` (marked open) and lease it, as dispatch does; its lease id."""
    qkey = p.queues.qkey(queue_id(["a.test"]), item, now)
    p.queues.enqueue(qkey, item, now)
    p.seen.reopen(item, now)
    head = p.kv.first(qkey)
    assert head is not None
    out = Dispatch()
    p.leases.lease(out, item, head[1], qkey, ["a.test"], now)
    p.queues.dequeued(queue_id(["a.test"]))
    [job] = out.jobs
    return job.lease


def test_a_lease_is_written_before_its_queue_entry_goes_and_counts_in_flight() -> None:
    p = make()
    lease_id = leased(p, url(1), 0.0)
    writes = [k[:1] for k, _ in p.log]
    assert writes.index(LEASE) < len(writes) - 1 - writes[::-1].index(QUEUE)  # L written, then Q deleted
    assert p.leases.inflight == 1 and p.leases.crawl_inflight("default") == 1
    assert not list(p.kv.scan(QUEUE)) and p.kv.get(lease_key(lease_id)) is not None
    assert p.scopes.state("a.test").inflight == 1 and p.stats.dispatched == 1
    assert p.leases.next_deadline() == 30.0 + 20.0 + 10.0


def test_a_result_settles_the_url_and_closes_the_lease() -> None:
    p = make()
    item = url(1)
    lease_id = leased(p, item, 0.0)
    fb = Feedback(lease=lease_id, host="a.test", domain="a.test", url=item.url, outcome="fetched", status=200)
    assert p.leases.feedback(fb, 1.0)
    assert p.seen.state(item) == SEEN_DONE and p.kv.get(lease_key(lease_id)) is None
    assert p.leases.inflight == 0 and p.scopes.state("a.test").inflight == 0 and p.stats.fetched == 1
    assert not p.leases.feedback(fb, 2.0) and p.stats.stale_feedback == 1  # its lease is closed


def test_a_result_and_a_closed_leases_deadline_read_no_lease_from_the_store() -> None:
    """Issue 39: an open job lease is kept as stored, decoded, in memory; the store is read for a
    lease only once it was written again (a client's hold)."""
    p = make()
    reads: list[bytes] = []
    get = p.kv.get
    p.kv.get = lambda key: reads.append(key) or get(key)  # type: ignore[method-assign]
    item = url(1)
    lease_id = leased(p, item, 0.0)
    fb = Feedback(lease=lease_id, host="a.test", domain="a.test", url=item.url, outcome="fetched", status=200)
    assert p.leases.feedback(fb, 1.0) and p.stats.fetched == 1
    assert p.leases.expire(1000.0) == 0  # its deadline passed: closed, nothing read
    assert not [key for key in reads if key[:1] == LEASE]
    held = leased(p, url(2), 2.0)
    assert p.leases.hold(held, 500.0)
    reads.clear()
    assert not p.leases.feedback(msgspec.structs.replace(fb, lease=held, outcome="expired"), 3.0)  # held: as stored
    assert reads == [lease_key(held)] and p.stats.stale_feedback == 1 and p.leases.inflight == 1


def test_a_lost_lease_is_queued_again_then_reported_past_max_retries() -> None:
    p = make()
    item = url(1)
    leased(p, item, 0.0)
    assert p.leases.expire(59.0) == 0 and p.leases.expire(60.0) == 1
    assert p.queues.count(queue_id(["a.test"])) == 1 and p.seen.state(item) == SEEN_OPEN and p.stats.lost == 1
    again = p.kv.first(QUEUE)
    assert again is not None and b'"attempts":1' in again[1]
    p.kv.delete(again[0])  # leased again by hand: the attempts it has
    p.queues.dequeued(queue_id(["a.test"]))
    retried = UrlItem(url=item.url, host="a.test", domain="a.test", attempts=1)
    leased(p, retried, 100.0)
    assert p.leases.expire(1000.0) == 1  # past max_retries (1): an error report instead
    assert p.reports.has_unreported() and p.seen.state(item) == SEEN_DONE
    out = Dispatch()
    p.reports.report_pending(out, 1000.0)
    [report] = out.reports
    assert report.page.outcome == "error" and not p.reports.has_unreported()
    p.reports.reported(report.lease)
    assert not list(p.kv.scan(LEASE))


def test_a_hold_keeps_the_lease_until_its_end() -> None:
    p = make()
    lease_id = leased(p, url(1), 0.0)
    assert p.leases.hold(lease_id, 500.0)
    raw = p.kv.get(lease_key(lease_id))
    assert raw is not None and lease_dec.decode(raw).held_until == 500.0
    assert p.leases.expire(100.0) == 0  # the lease's first deadline passed, the hold did not
    assert p.leases.expire(500.0) == 1 and p.queues.count(queue_id(["a.test"])) == 1 and p.stats.returned == 1


def test_a_fetched_revisit_url_waits_for_its_revisit() -> None:
    p = make()
    item = url(1, revisit=3600.0)
    lease_id = leased(p, item, 0.0)
    fb = Feedback(lease=lease_id, host="a.test", domain="a.test", url=item.url, outcome="fetched", status=200)
    p.leases.feedback(fb, 1.0)
    assert p.crawls.record("default").revisits == 1 and p.queues.count(queue_id(["a.test"])) == 0

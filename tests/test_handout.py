"""URLs handed out by the URLFrontier gateway (GetURLs) and what bounds their hold on a host:

- the **hand-out deadline**: a URL handed out keeps its host's slot at most
  ``frontier.fetch_timeout`` after the hold; then the slot is released (the host's send taken as
  at the deadline) while the URL itself stays held until the client's ``delay_requestable``. So a
  client's update lost with a gateway (``kill -9``) holds the host for the fetch timeout plus the
  host's delay, not for ``delay_requestable``;
- the **send time** of a URL handed out is the latest moment it could have been fetched: its
  update's arrival (the deadline, when none comes): a client that fetches late does not shorten
  the gap before the host's next URL;
- a job a restarted gateway reads again is not handed out a second time;
- a gateway stops within seconds (``Jobs.close``: jobs on their way when it stops are handed back).

Pure where it can be: a ``PartitionFrontier`` over a ``MemoryKV`` with fixed times; the stop
test runs the worker API's ``Jobs`` with in-memory stand-ins for Kafka.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import msgspec

from frontier.config import AutoThrottleSettings, Config, FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core.kv import MemoryKV
from frontier.core.urls import parse_input
from frontier.partition import PartitionFrontier
from frontier.partition.keys import lease_key
from frontier.partition.records import lease_dec
from tests.fakes import FakeConsumer, FakeMessage, FakeProducer
from topics.schemas import Feedback, Job, Query, UrlItem, encode
from workers.api import Jobs
from workers.api.leased import LeasedJob, Outcome
from workers.api.publishing import Publisher
from workers.urlfrontier.mapping import Signal
from workers.urlfrontier.pool import CrawlPool, Handed

FIXED = AutoThrottleSettings(enabled=False)
DELAY = 2.0
THROTTLE = ThrottleConfig(default=ScopeSettings(delay=DELAY, concurrency=1, autothrottle=FIXED, jitter=(0.0, 0.0)))
FETCH_TIMEOUT = 20.0  # the job's fetch timeout: the hand-out deadline
SETTINGS = FrontierConfig(job_ttl=30.0, fetch_timeout=FETCH_TIMEOUT, lease_grace=10.0, robots_obey=False,
                          dispatch_lead=0.0)  # fmt: skip
T0 = 1_000_000.0
HOLD = 300.0  # StormCrawler's archetype: delay_requestable = the topology's message timeout


def make(kv: MemoryKV | None = None) -> PartitionFrontier:
    return PartitionFrontier(0, kv if kv is not None else MemoryKV(), SETTINGS, THROTTLE, lambda k, v: None)


def item(url: str, refetch: float | None = None) -> UrlItem:
    doc: dict[str, Any] = {"url": url, "key": url.split("/")[2], "meta": {}}
    if refetch is not None:
        doc["refetch_at"] = refetch
    return parse_input(json.dumps(doc).encode())


def hold(f: PartitionFrontier, job: Job, now: float, until: float = 0.0) -> bool:
    reply = f.change(Query(id="q", reply_to="g", kind="hold", leases=[job.lease], until=until or now + HOLD), now)
    return reply.leases == [job.lease]


def report(f: PartitionFrontier, job: Job, now: float, sent_at: float) -> bool:
    """The client's update reached the gateway that handed the job out: its report."""
    it = job.item
    return f.feedback(Feedback(lease=job.lease, host=it.host, domain=it.domain, url=it.url, outcome="fetched",
                               status=200, sent_at=sent_at, done_at=sent_at), now)  # fmt: skip


def next_job(f: PartitionFrontier, start: float, end: float, step: float = 0.05) -> tuple[float, Job] | None:
    """The first job dispatched from ``start`` on, looking every ``step`` seconds (leases expired as
    the service does before each round): when, and which."""
    now = start
    while now <= end:
        f.expire_leases(now)
        out = f.dispatch(now).jobs
        if out:
            return now, out[0]
        now = round(now + step, 6)
    return None


def urls(n: int, host: str = "a.test") -> list[UrlItem]:
    return [item(f"http://{host}/{i}") for i in range(n)]


# -- the hand-out deadline ------------------------------------------------------------------------


def test_a_lost_update_holds_its_host_for_the_fetch_timeout_not_for_delay_requestable() -> None:
    """The gateway that handed a URL out is killed with its client's update: the host's next URL
    goes at the deadline plus the host's delay (before: after delay_requestable, 300 s)."""
    f = make()
    f.ingest(urls(3), T0)
    [first] = f.dispatch(T0).jobs
    assert hold(f, first, T0 + 0.5)
    # nothing comes back from the client: the update died with the gateway
    got = next_job(f, T0 + 0.5, T0 + 400)
    assert got is not None, "the host was never served again"
    at, second = got
    deadline = T0 + 0.5 + FETCH_TIMEOUT
    assert at == deadline + DELAY, f"the host's next URL went at +{at - T0:.2f} s, not at its deadline + delay"
    assert second.item.url != first.item.url, "the held URL itself is not handed out again before its hold ends"
    assert second.not_before >= deadline + DELAY


def test_the_held_url_stays_held_until_delay_requestable_then_comes_back() -> None:
    f = make()
    f.ingest(urls(1), T0)
    [job] = f.dispatch(T0).jobs
    assert hold(f, job, T0)
    assert next_job(f, T0, T0 + HOLD - 0.1, step=1.0) is None, "handed out again inside its hold"
    stats = f.answer(Query(id="s", reply_to="g", kind="stats"), T0 + 100).counts
    assert stats["in_process"] == 1, "released from its slot, the URL is still in its client's hands"
    got = next_job(f, T0 + HOLD - 0.1, T0 + HOLD + 5)
    assert got is not None and got[1].item.url == job.item.url
    assert f.stats.lost == 0 and f.inflight == 1  # (the new lease)


def test_the_slot_of_a_held_url_is_released_once() -> None:
    """Released at its deadline, ended at its hold: the host's in-flight count goes down once, so
    a host of concurrency 1 never has two URLs out, and none is left stuck."""
    f = make()
    f.ingest(urls(4), T0)
    [a] = f.dispatch(T0).jobs
    assert hold(f, a, T0, until=T0 + 60)
    got = next_job(f, T0, T0 + 60)
    assert got is not None
    at, b = got  # b's lease lasts to at + 30 + 20 + 10
    assert not f.dispatch(at + 0.1).jobs, "a second URL out beside the first one's successor"
    f.expire_leases(T0 + 61)  # a's hold ends: queued again, its slot not freed twice
    assert f.scopes.state(a.item.host).inflight == 1  # b's
    assert not f.dispatch(T0 + 61).jobs, "a host of concurrency 1 with two URLs out"
    assert report(f, b, T0 + 62, T0 + 62)
    assert f.scopes.state(b.item.host).inflight == 0
    got = next_job(f, T0 + 62, T0 + 70)
    assert got is not None and got[0] == T0 + 62 + DELAY


def test_an_update_after_the_deadline_is_a_late_result_its_send_time_still_counts() -> None:
    """The client's update comes after its deadline (the client fetched late, or its update took a
    detour): the slot was released already; the report closes the lease without freeing a slot the
    host's next URL holds, and its send time still times the host."""
    f = make()
    f.ingest(urls(3), T0)
    [a] = f.dispatch(T0).jobs
    assert hold(f, a, T0)
    at, b = next_job(f, T0, T0 + 60) or (0.0, a)
    assert at == T0 + FETCH_TIMEOUT + DELAY
    assert report(f, a, at + 1, at + 1)  # a's update, late: sent as late as it came
    host = f.scopes.state(a.item.host)
    assert host.inflight == 1, "the late update freed the slot b holds"
    assert host.last_sent >= at + 1
    assert report(f, b, at + 1.5, at)
    got = next_job(f, at + 1.5, at + 30)
    assert got is not None and got[0] >= at + 1 + DELAY, "the host's next URL within the delay of a's late send"


def test_a_client_reports_in_time_nothing_changes() -> None:
    f = make()
    f.ingest(urls(3), T0)
    [a] = f.dispatch(T0).jobs
    assert hold(f, a, T0)
    assert report(f, a, T0 + 0.3, T0 + 0.3)
    got = next_job(f, T0 + 0.3, T0 + 10)
    assert got is not None and got[0] == T0 + 0.3 + DELAY
    f.expire_leases(T0 + FETCH_TIMEOUT + 1)  # the deadline of a lease already closed: nothing
    assert f.scopes.state(a.item.host).inflight == 1  # the next URL's


def test_the_deadline_survives_a_restore_of_the_partition() -> None:
    """A partition taken over (or restarted) between the hold and its deadline keeps both times."""
    kv = MemoryKV()
    f = make(kv)
    f.ingest(urls(3), T0)
    [a] = f.dispatch(T0).jobs
    assert hold(f, a, T0, until=T0 + 60)
    lease = lease_dec.decode(kv.get(lease_key(a.lease)) or b"")
    assert lease.held_until == T0 + 60 and lease.deadline == T0 + FETCH_TIMEOUT
    g = make(kv)
    g.rebuild(T0 + 5)
    got = next_job(g, T0 + 5, T0 + 60)
    assert got is not None and got[0] == T0 + FETCH_TIMEOUT + DELAY
    h = make(kv)  # and again, released
    h.rebuild(T0 + 30)
    h.expire_leases(T0 + 61)
    assert h.scopes.state(a.item.host).inflight == 1, "released at the deadline and again at the hold's end"


def test_a_deleted_queue_frees_a_released_slot_once() -> None:
    f = make()
    f.ingest(urls(3), T0)
    [a] = f.dispatch(T0).jobs
    assert hold(f, a, T0)
    at, b = next_job(f, T0, T0 + 60) or (0.0, a)
    assert b.item.url != a.item.url
    f.change(Query(id="d", reply_to="g", kind="delete_queue", key="a.test"), at + 1)
    assert f.scopes.state(a.item.host).inflight == 0
    f.expire_leases(T0 + HOLD + 1)
    assert f.scopes.state(a.item.host).inflight == 0


def test_a_job_read_again_by_a_restarted_gateway_is_not_handed_out_twice() -> None:
    """A gateway killed after handing a URL out: its successor reads the job again (its offset was
    not committed). The lease is in a client's hands already: not held again, so not handed out."""
    f = make()
    f.ingest(urls(2), T0)
    [a] = f.dispatch(T0).jobs
    assert hold(f, a, T0)
    assert not hold(f, a, T0 + 8), "a URL in a client's hands handed out a second time"
    it = a.item  # the restarted gateway hands the job back: ignored, the client still has it
    assert not f.feedback(Feedback(lease=a.lease, host=it.host, domain=it.domain, url=it.url, outcome="expired"),
                          T0 + 8.1)  # fmt: skip
    lease = lease_dec.decode(f.kv.get(lease_key(a.lease)) or b"")
    assert lease.held_until == T0 + HOLD and lease.deadline == T0 + FETCH_TIMEOUT, "the hold was moved"


# -- the send time of a URL handed out --------------------------------------------------------------


def test_a_client_that_fetches_late_does_not_shorten_the_hosts_gap() -> None:
    """A client fetched its URL 5 s after the hand-out (its fetcher busy), its update right after:
    the host's next URL goes a delay after the update (the latest moment the URL could have been
    fetched), not at once (sent_at the hand-out time: the site saw two requests 0.05 s apart)."""
    f = make()
    f.ingest(urls(3), T0)
    [a] = f.dispatch(T0).jobs
    assert hold(f, a, T0)
    fetched = T0 + 5.0
    assert report(f, a, fetched + 0.05, sent_at=fetched + 0.05)  # as the gateway reports it (below)
    got = next_job(f, fetched + 0.05, T0 + 30)
    assert got is not None and got[0] >= fetched + DELAY, f"the next URL {got[0] - fetched:.2f} s after the fetch"


@dataclass
class HandedJob:
    """What the gateway's pool calls of a job handed out (a LeasedJob's report)."""

    url: str
    reported: bool = False
    outcome: Outcome | None = None

    async def finish(self, outcome: Outcome) -> None:
        self.outcome, self.reported = outcome, True


async def test_the_gateway_reports_a_url_handed_out_as_sent_when_its_update_came() -> None:
    pool = CrawlPool(Config(), "default", kafka=None)  # type: ignore[arg-type]  # (never started)
    job = HandedJob("http://a.test/1")
    handed_at = time.time() - 5.0  # handed out 5 s ago; the client fetched it just now
    pool.handed[job.url] = Handed(job, handed_at, handed_at + HOLD)  # type: ignore[arg-type]
    before = time.time()
    assert await pool.updated(job.url, Signal(status=200))
    assert job.outcome is not None and before <= job.outcome.sent_at <= time.time(), (
        f"reported as sent {before - job.outcome.sent_at if job.outcome else 0:.1f} s before its update came"
    )
    assert job.outcome.status == 200 and job.outcome.page is False


async def test_a_gateway_that_stops_lets_go_of_the_urls_in_clients_hands() -> None:
    """A crawl's pool closing with URLs in clients' hands lets each go here (the frontier keeps its
    lease until the hold ends) and closes at once. Found by the gateway's integration test: once
    ``let_go`` had moved to ``Jobs.endings``, the pool's call raised and the gateway hung at SIGTERM."""
    pool = CrawlPool(Config(), "default", kafka=None)  # type: ignore[arg-type]  # (never started)
    item = UrlItem(url="http://a.test/1", host="a.test", domain="a.test")
    job = Job(lease="l1", not_before=0.0, expires_at=time.time() + 60, item=item)
    leased = LeasedJob(pool.jobs.endings, job, ("crawl.jobs", 0, 0))
    pool.handed.put(leased.url, Handed(leased, time.time(), time.time() + HOLD))
    await asyncio.wait_for(pool.close(), 10)
    assert leased.reported and not pool.handed


# -- a gateway stops within seconds -----------------------------------------------------------------


async def test_jobs_on_their_way_when_a_gateway_stops_are_handed_back_within_seconds() -> None:
    """Found by the gateway's integration tests: SIGTERM took 25-90 s. The consumer's last poll
    started job tasks that reached the ready list after ``Jobs.close`` had cancelled the held ones
    and emptied it: nobody took them any more, and close waited for them until the fetch timeout
    (+ 5 s), then the consumer's revoke as long again. Their reports' done marks were never
    committed either (the poller that commits them had stopped)."""
    producer = FakeProducer()
    jobs = Jobs(Config(), concurrency=8, name="gateway", check_addresses=False)
    jobs.reporter.publisher = Publisher(producer, jobs.cfg.topics)  # type: ignore[arg-type]
    jobs._bind()
    consumer = FakeConsumer()
    jobs.consuming.consumer = consumer  # type: ignore[assignment]
    now = time.time()
    waiting = Job(lease="W", item=UrlItem(url="http://w.test/", host="w.test", domain="w.test"), not_before=now,
                  expires_at=now + 30, timeout=20)  # fmt: skip
    ready = msgspec.structs.replace(waiting, lease="R", item=UrlItem(url="http://r.test/", host="r.test",
                                                                     domain="r.test"))  # fmt: skip
    jobs.consuming.take(FakeMessage(encode(ready), offset_=3))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)  # in the ready list: nobody takes it (the gateway's pool has stopped taking)
    jobs.consuming.take(FakeMessage(encode(waiting), offset_=4))  # type: ignore[arg-type]  # the last poll's
    started = time.monotonic()
    await asyncio.wait_for(jobs.close(), 10)
    took = time.monotonic() - started
    assert took < 3, f"close took {took:.1f} s"
    print(f"closed in {took:.2f} s")
    assert sorted((fb.lease, fb.outcome) for fb in producer.feedback()) == [("R", "expired"), ("W", "expired")]
    assert consumer.commits and consumer.commits[-1] == [("crawl.jobs", 0, 5)], consumer.commits
    assert consumer.closed


class SlowBack:
    """A ready job whose hand-back waits for ``gate`` (its done mark: the consumer's next turn)."""

    def __init__(self, n: int, gate: asyncio.Event, started: list[int]) -> None:
        self.n, self.gate, self.started = n, gate, started
        self.reported = False

    async def release(self) -> None:
        self.started.append(self.n)
        await self.gate.wait()
        self.reported = True


async def test_ready_jobs_nobody_asks_for_go_back_together() -> None:
    """Issue 39, found by the gateway bench (--delay 0.05, a round's put phase longer than
    urlfrontier.unasked): 200 ready jobs went back one at a time, each waiting for its done mark's
    consumer turn (~50 ms), 7-10 s in all, while the pool took no new job and the client's GetURLs
    came back empty. Each hand-back now starts at once."""
    pool = CrawlPool(Config(), "default", kafka=None)  # type: ignore[arg-type]  # (never started)
    gate, started = asyncio.Event(), []
    jobs = [SlowBack(n, gate, started) for n in range(20)]
    pool.ready = list(jobs)  # type: ignore[arg-type]
    back = asyncio.ensure_future(pool._give_back_unasked())
    deadline = asyncio.get_running_loop().time() + 5
    while len(started) < len(jobs) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.001)
    assert sorted(started) == list(range(20)), f"{len(started)} of 20 hand-backs started before the first ended"
    gate.set()
    await asyncio.wait_for(back, 5)
    assert all(job.reported for job in jobs) and pool.ready == []

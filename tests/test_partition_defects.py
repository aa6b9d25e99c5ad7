"""Regression tests for review-found defects in one partition's logic (issue 11): lost leases that
come back forever, late results, report leases, clocks, queue order, capped Crawl-delay."""

from dataclasses import replace

import pytest

from frontier.client.status import render
from frontier.config import AutoThrottleSettings, FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core import policy
from frontier.core.kv import MemoryKV
from frontier.core.urls import parse_input
from frontier.partition import PartitionFrontier
from frontier.partition.keys import queue_prefix, scope_queue
from topics.schemas import Feedback, Job, Status

FIXED = AutoThrottleSettings(enabled=False)
POLITE = ScopeSettings(delay=1.0, concurrency=1, autothrottle=FIXED)
SETTINGS = FrontierConfig(max_retries=2, robots_obey=False, dispatch_lead=0.0)
ROBOTS = replace(SETTINGS, robots_obey=True)


class Log:
    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def __call__(self, key: bytes, value: bytes | None) -> None:
        self.records.append((key, value))

    def replay(self) -> MemoryKV:
        kv = MemoryKV()
        for key, value in self.records:
            kv.put(key, value) if value is not None else kv.delete(key)
        return kv


def make(settings: FrontierConfig = SETTINGS, log: Log | None = None, kv: MemoryKV | None = None) -> PartitionFrontier:
    return PartitionFrontier(0, kv or MemoryKV(), settings, ThrottleConfig(POLITE, {}), log or Log(), user_agent="t")


def result(job: Job, now: float, status: int = 200, headers: dict[str, str] | None = None, body: bytes = b"",
           outcome: str = "fetched") -> Feedback:  # fmt: skip
    i = job.item
    return Feedback(lease=job.lease, host=i.host, domain=i.domain, url=i.url, outcome=outcome, status=status,
                    latency=0.05, sent_at=now, headers=headers or {}, body=body)  # fmt: skip


def test_a_lease_lost_again_and_again_ends_with_an_error_page() -> None:
    """A URL whose fetch never reports (it kills its worker, say) must not come back forever."""
    f = make()
    f.ingest([parse_input(b"http://poison.test/x")], 0.0)
    now, leases, ended = 0.0, 0, []
    for _ in range(20):
        out = f.dispatch(now)
        leases += len(out.jobs)
        ended += [r.page for r in out.reports]
        if ended:
            break
        now = (f.next_wakeup() or now) + 0.01
        f.expire_leases(now)
    assert leases == 3  # the first lease and max_retries = 2 more
    [page] = ended
    assert page.url == "http://poison.test/x" and page.outcome == "error" and "3 leases" in page.error
    assert f.stats.lost == 3 and f.stats.failed == 1 and f.queued() == 0


def test_a_report_is_kept_until_its_page_is_out_and_survives_a_restart() -> None:
    log = Log()
    f = make(ROBOTS, log)
    f.ingest([parse_input(b"http://r.test/private/1")], 0.0)
    robots = f.dispatch(0.0).jobs[0]
    f.feedback(result(robots, 0.1, body=b"User-agent: *\nDisallow: /private\n"), 0.1)
    [report] = f.dispatch(2.0).reports
    assert report.page.outcome == "disallowed" and f.queued() == 0
    # the process dies before the page was acknowledged: the next owner reports it again
    g = make(ROBOTS, kv=log.replay())
    g.rebuild(3.0)
    [again] = g.dispatch(3.0).reports
    assert again.page.url == "http://r.test/private/1" and again.lease == report.lease
    # once the page is acknowledged, the report lease is deleted (in the changelog too)
    f.reported(report.lease)
    k = make(ROBOTS, kv=log.replay())
    k.rebuild(5.0)
    assert k.dispatch(5.0).reports == []


def test_a_late_result_still_brings_the_servers_gate() -> None:
    """The lease expired (the slot was freed), then the worker's 429 with Retry-After arrives:
    the gate must hold all the same, and inflight must not go below the truth."""
    f = make()
    f.ingest([parse_input(b"http://late.test/1"), parse_input(b"http://late.test/2")], 0.0)
    first = f.dispatch(0.0).jobs[0]
    f.expire_leases(100.0)  # lost: re-queued, slot freed
    again = f.dispatch(100.0).jobs[0]
    assert f.feedback(result(first, 100.5, status=429, headers={"retry-after": "120"}), 100.6) is False
    assert f.feedback(result(again, 100.7), 100.8) is True
    assert f.dispatch(150.0).jobs == []  # inside the server's 120 s
    row = f.scope_row("late.test", 150.0)
    assert row.gate_until == pytest.approx(100.6 + 120 * 1.02 + 0.02) and row.inflight == 0


def test_a_worker_clock_ahead_does_not_push_the_next_slot_into_the_future() -> None:
    s = replace(POLITE, concurrency=1)
    state = policy.apply(policy.ScopeState(), policy.Sent(10.0), 10.0, s)
    state = policy.apply(state, policy.Done(sent_at=3600.0, status=200, latency=0.1), 10.5, s)
    assert policy.decide(state, 11.5, s).reason == "ready"


def test_incidents_are_told_apart_by_the_frontiers_clock() -> None:
    """A worker 12 s behind: its sent_at for a request dispatched after the last backoff step
    looks older than that step. Compared on the frontier's dispatch time it is a new incident."""
    s = replace(POLITE, backoff=replace(POLITE.backoff, window=1000.0))
    state = policy.apply(policy.ScopeState(), policy.Sent(0.0), 0.0, s)
    state = policy.apply(state, policy.Done(sent_at=-12.0, dispatched_at=0.0, status=429), 0.1, s)
    first = state.backoff
    state = policy.apply(state, policy.Sent(5.0), 5.0, s)
    state = policy.apply(state, policy.Done(sent_at=-7.0, dispatched_at=5.0, status=429), 5.1, s)
    assert state.backoff > first  # a second incident: a second step


def test_queue_order_is_fifo_even_where_the_old_sequence_wrapped() -> None:
    """The old key was (µs * 10**6 + n) mod 2**64: it wrapped every ~5 h of epoch time, so a
    URL queued just after a wrap sorted before one queued just before it."""
    f = make()
    wrap = 2**64 / 1e12  # seconds at which the old sequence wrapped (once every ~5.1 hours)
    t0 = (int(1_790_000_000 / wrap) + 1) * wrap - 0.5  # half a second before a wrap in 2026
    f.ingest([parse_input(b"http://fifo.test/first")], t0)
    f.ingest([parse_input(b"http://fifo.test/second")], t0 + 1.0)
    keys = [k for k, _ in f.kv.scan(queue_prefix(scope_queue("fifo.test")))]
    first = f.kv.get(keys[0])
    assert first is not None and b"/first" in first


def test_a_crawl_delay_above_the_cap_says_so() -> None:
    changes: list[str] = []
    f = make(ROBOTS)
    f.on_change = lambda scope, old, new, cause, kind, gate: changes.append(cause)
    f.ingest([parse_input(b"http://slow.test/1")], 0.0)
    robots = f.dispatch(0.0).jobs[0]
    f.feedback(result(robots, 0.1, body=b"User-agent: *\nCrawl-delay: 600\n"), 0.1)
    assert any("600.00s" in c and "capped at 60.00s" in c for c in changes), changes


def test_robots_redirects_are_followed_one_throttled_hop_at_a_time() -> None:
    """A robots.txt behind two redirects: three requests, each a job of its own through the
    host's delay (the worker used to follow them back to back), then the rules apply."""
    f = make(ROBOTS)
    f.ingest([parse_input(b"http://hop.test/private/1"), parse_input(b"http://hop.test/ok")], 0.0)
    [first] = f.dispatch(0.0).jobs
    assert first.item.url == "http://hop.test/robots.txt"
    f.feedback(result(first, 0.1, status=301, headers={"location": "/r1.txt"}), 0.1)
    assert f.dispatch(0.5).jobs == []  # the host's 1 s delay holds for the next hop too
    [second] = f.dispatch(1.1).jobs
    assert second.kind == "robots" and second.item.url == "http://hop.test/r1.txt"
    f.feedback(result(second, 1.2, status=302, headers={"location": "http://hop.test/final.txt"}), 1.2)
    [third] = f.dispatch(2.2).jobs
    assert third.item.url == "http://hop.test/final.txt"
    f.feedback(result(third, 2.3, body=b"User-agent: *\nDisallow: /private\n"), 2.3)
    out = f.dispatch(3.3)
    assert [p.url for p in out.disallowed] == ["http://hop.test/private/1"]
    assert [j.item.url for j in out.jobs] == ["http://hop.test/ok"]


def test_status_shows_the_learned_limit_and_why_the_delay_is_what_it_is() -> None:
    f = make()
    f.ingest([parse_input(f"http://api.test/{n}".encode()) for n in range(30)], 0.0)
    now = 0.0
    for n in range(12):  # served every 1 s (the delay), then the server says 429
        [job] = f.dispatch(now).jobs
        status = 429 if n == 11 else 200
        f.feedback(result(job, now, status=status), now + 0.02)
        now += 1.0
    row = f.scope_row("api.test", now)
    assert row.limit == pytest.approx(1.0, rel=0.05)  # learned from the sending interval at the 429
    assert "limit ≈ 1.00 req/s from 429" in row.cause
    text = render([Status(instance="i", at=now, partitions=[0], totals={}, scopes=[row])], now=now)
    assert "1.00" in text and "limit ≈ 1.00 req/s from 429" in text

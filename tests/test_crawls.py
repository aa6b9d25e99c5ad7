"""Crawls on the partition layer (issue 20): the seen set per crawl, turns shared out between the
crawls of one host under ONE politeness, held (idle or paused) crawls, crawl commands (drop,
forget, per-host limit), bounded crawl names, per-crawl rows, and a rebuild of it all.

Pure: a ``PartitionFrontier`` over a ``MemoryKV``, an injected clock, workers simulated by
answering each job ``LATENCY`` after its send (:class:`Sim`); nothing sleeps, nothing talks to
Kafka. A dispatch that never returns fails its test (``_no_hang``) instead of hanging the run.
"""

from __future__ import annotations

import heapq
import json
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from types import FrameType
from typing import Any

import msgspec
import pytest

from frontier.config import AutoThrottleSettings, FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core.kv import MemoryKV
from frontier.core.urls import Rejection, parse_input, seen_fingerprint, url_fingerprint
from frontier.partition import PartitionFrontier
from frontier.partition.keys import QueueId
from frontier.partition.queues import Queues
from topics.schemas import (
    DEFAULT_CRAWL,
    MAX_CRAWL_CHARS,
    ControlCommand,
    CrawlStatus,
    Feedback,
    Job,
    UrlItem,
    valid_crawl,
)

DELAY = 1.0  # every host's fixed delay (autothrottle off): the gap between two sends to a host
LATENCY = 0.1  # a simulated worker answers this long after the send
FIXED = AutoThrottleSettings(enabled=False)
THROTTLE = ThrottleConfig(default=ScopeSettings(delay=DELAY, concurrency=1, autothrottle=FIXED))
SETTINGS = FrontierConfig(
    job_ttl=30.0, fetch_timeout=20.0, lease_grace=10.0, max_retries=1, robots_obey=False, dispatch_lead=0.0
)
HANG_SECONDS = 10  # a test taking longer than this is stuck in a loop (the tests take well under a second)
EPS = 1e-9


class Hung(Exception):
    """A test ran for HANG_SECONDS: a call (dispatch) never returned."""


@pytest.fixture(autouse=True)
def _no_hang() -> Iterator[None]:
    """Turn an endless loop inside the frontier into a failure of the test."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def hung(signum: int, frame: FrameType | None) -> None:
        raise Hung(f"still running after {HANG_SECONDS} s: a dispatch loops forever")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- helpers -----------------------------------------------------------------------------------------
class Log:
    """The changelog hook: every (key, value or None) in write order."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def __call__(self, key: bytes, value: bytes | None) -> None:
        self.records.append((key, value))

    def replay(self) -> MemoryKV:
        """A fresh store holding what a restore from this changelog gives."""
        kv = MemoryKV()
        for key, value in self.records:
            if value is None:
                kv.delete(key)
            else:
                kv.put(key, value)
        return kv


def make(kv: MemoryKV | None = None, log: Log | None = None) -> PartitionFrontier:
    return PartitionFrontier(0, kv if kv is not None else MemoryKV(), SETTINGS, THROTTLE, log or Log())


def sub(url: str, crawl: str | None = None, **fields: Any) -> UrlItem:
    """The item a submission gives (a JSON object, as on crawl.urls)."""
    doc: dict[str, Any] = {"url": url, **fields}
    if crawl is not None:
        doc["crawl"] = crawl
    return parse_input(json.dumps(doc).encode())


def subs(crawl: str | None, host: str, n: int, tag: str = "") -> list[UrlItem]:
    return [sub(f"http://{host}/{tag or crawl or 'default'}{i}", crawl) for i in range(n)]


def cmd(action: str, crawl: str, **kw: Any) -> ControlCommand:
    c = ControlCommand(action=action, crawl=crawl, **kw)
    c.validate()
    return c


def feedback_of(job: Job, outcome: str = "fetched") -> Feedback:
    i = job.item
    return Feedback(lease=job.lease, host=i.host, domain=i.domain, url=i.url, outcome=outcome, status=200,
                    sent_at=job.not_before, done_at=job.not_before + LATENCY, latency=LATENCY)  # fmt: skip


def rows(f: PartitionFrontier, now: float) -> dict[str, CrawlStatus]:
    return {r.crawl: r for r in f.crawl_rows(now)}


def crawls_of(jobs: list[Job]) -> list[str]:
    return [j.item.crawl for j in jobs]


@dataclass
class Sim:
    """Workers over simulated time: every job the frontier dispatches is answered (fetched)
    ``LATENCY`` after its ``not_before``; time jumps to the next thing that can happen."""

    f: PartitionFrontier
    now: float = 0.0
    jobs: list[Job] = field(default_factory=list)  # every job dispatched, in dispatch order
    answered: list[Job] = field(default_factory=list)
    pending: list[tuple[float, int, Job]] = field(default_factory=list)  # (answer time, n, job)
    max_steps: int = 20_000

    def run(self, until: float, want: int | None = None) -> list[Job]:
        """Dispatch and answer until ``until`` (or until ``want`` new jobs were dispatched); return
        the new jobs. ``now`` ends at ``until`` when nothing is left to do before it."""
        start = len(self.jobs)
        for _ in range(self.max_steps):
            self.answer()
            if want is not None and len(self.jobs) - start >= want:
                break
            assert self.f.expire_leases(self.now) == 0  # (prunes closed leases, as the service does)
            for job in self.f.dispatch(self.now).jobs:
                assert job.kind == "page", job
                self.jobs.append(job)
                heapq.heappush(self.pending, (job.not_before + LATENCY, len(self.jobs), job))
            times = [t for t in (self.f.next_wakeup(), self.pending[0][0] if self.pending else None) if t is not None]
            if not times or min(times) > until:
                self.now = max(self.now, until)
                self.answer()
                break
            self.now = max(min(times), self.now + 1e-3)
        else:
            raise AssertionError(f"no end after {self.max_steps} steps (now={self.now})")
        return self.jobs[start:]

    def answer(self) -> None:
        """Deliver the answers due by ``now``."""
        while self.pending and self.pending[0][0] <= self.now:
            _, _, job = heapq.heappop(self.pending)
            assert self.f.feedback(feedback_of(job), self.now), f"lease of {job.item.url} unknown"
            self.answered.append(job)

    def settle(self) -> None:
        """Answer every job in flight (time moves to the last answer)."""
        while self.pending:
            self.now = max(self.now, self.pending[0][0])
            self.answer()


def assert_polite(jobs: list[Job]) -> None:
    """ONE delay per host, whatever the crawls: the sends to a host are DELAY apart at least."""
    by_host: dict[str, list[float]] = {}
    for job in jobs:
        by_host.setdefault(job.item.host, []).append(job.not_before)
    for host, times in by_host.items():
        gaps = [b - a for a, b in pairwise(times)]
        assert all(g >= DELAY - EPS for g in gaps), (host, times)


def assert_round_robin(order: list[str], a: str, b: str) -> None:
    """At every prefix the two crawls have had the same number of turns, give or take one."""
    seen: Counter[str] = Counter()
    for n, crawl in enumerate(order):
        seen[crawl] += 1
        assert abs(seen[a] - seen[b]) <= 1, f"after {n + 1} jobs: {dict(seen)}: {''.join(c[0] for c in order)}"


# -- 1. the seen set, per crawl -------------------------------------------------------------------------
def test_one_url_is_queued_once_in_each_crawl() -> None:
    f = make()
    assert f.ingest([sub("http://h.test/x", "a"), sub("http://h.test/x", "b")], 0.0) == 2
    assert f.queued() == 2
    r = rows(f, 0.0)
    assert (r["a"].queued, r["b"].queued) == (1, 1)
    # again in "a" (another spelling of the same URL too): duplicates there, whatever "b" holds
    assert f.ingest([sub("http://h.test/x", "a"), sub("HTTP://H.TEST:80/x", "a")], 1.0) == 0
    assert f.stats.duplicates == 2 and f.queued() == 2
    assert rows(f, 1.0)["a"].queued == 1
    # and the default crawl is a crawl of its own too
    assert f.ingest([sub("http://h.test/x")], 2.0) == 1
    assert f.ingest([parse_input(b"http://h.test/x")], 2.0) == 0


def test_default_crawl_fingerprints_are_those_written_before_crawls() -> None:
    plain = parse_input(b"HTTP://H.TEST:80/p?b=2&a=1")  # canonical form differs from the URL as given
    named = sub("HTTP://H.TEST:80/p?b=2&a=1", DEFAULT_CRAWL)
    assert plain.crawl == named.crawl == DEFAULT_CRAWL and plain.canonical and plain.canonical != plain.url
    assert seen_fingerprint(plain) == seen_fingerprint(named) == url_fingerprint(plain.canonical)
    other = sub("HTTP://H.TEST:80/p?b=2&a=1", "a")
    assert seen_fingerprint(other) != url_fingerprint(other.canonical)
    assert seen_fingerprint(other) != seen_fingerprint(sub("HTTP://H.TEST:80/p?b=2&a=1", "b"))
    # the store: the default crawl's seen entry sits at S + the digest of the canonical URL alone
    f = make()
    assert f.ingest([plain, other], 0.0) == 2
    assert f.kv.get(b"S" + url_fingerprint(plain.canonical)) is not None
    assert f.kv.get(b"S" + seen_fingerprint(other)) is not None
    assert sum(1 for _ in f.kv.scan(b"S")) == 2


# -- 2. turns shared out on one host, one politeness ----------------------------------------------------------
@pytest.mark.parametrize("pair", [("a", "b"), (DEFAULT_CRAWL, "b")], ids=["two-named", "default-and-named"])
def test_crawls_of_one_host_take_turns_under_one_delay(pair: tuple[str, str]) -> None:
    a, b = pair
    f = make()
    f.ingest(subs(a, "h.test", 20), 0.0)
    f.ingest(subs(b, "h.test", 20), 0.0)
    sim = Sim(f)
    jobs = sim.run(until=200.0)
    assert len(jobs) == 40 and len({j.item.url for j in jobs}) == 40
    assert Counter(crawls_of(jobs)) == {a: 20, b: 20}
    assert_round_robin(crawls_of(jobs), a, b)
    assert_polite(jobs)  # one delay for the host, not one per crawl: 40 sends take 39 s at least
    assert jobs[-1].not_before - jobs[0].not_before >= 39 * DELAY - EPS
    assert f.queued() == 0 and f.inflight == 0


def test_a_round_gives_a_host_shared_by_many_crawls_one_turn_that_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: each crawl's queue of a host is popped on its own; once the host's turn was given
    in a round and could not send (its slot taken), every other crawl's queue popped in that round
    chose and decided again (20 crawls: 20 turns a round). They follow the turn given instead: the
    same jobs, in the same order, each crawl in turn, one delay for the host."""
    names = [f"c{n:02d}" for n in range(20)]
    f = make()
    for name in names:
        f.ingest(subs(name, "h.test", 2), 0.0)
    turns: list[str] = []
    choose = Queues.choose

    def counting(self: Queues, qid: QueueId, group: set[QueueId]) -> QueueId:
        turns.append(qid)
        return choose(self, qid, group)

    monkeypatch.setattr(Queues, "choose", counting)
    first = f.dispatch(0.0).jobs
    assert len(first) == 1
    assert len(turns) <= 2, f"{len(turns)} turns in one round"  # the one that sent, the one that waits
    sim = Sim(f, now=0.0, jobs=list(first))
    for job in first:
        heapq.heappush(sim.pending, (job.not_before + LATENCY, 1, job))
    jobs = [*first, *sim.run(until=100.0)]
    assert len(jobs) == 40 and len({j.item.url for j in jobs}) == 40
    assert sorted(crawls_of(jobs[:20])) == names and sorted(crawls_of(jobs[20:])) == names  # each crawl in turn
    assert_polite(jobs)
    assert f.queued() == 0 and f.inflight == 0


def test_the_highest_priority_head_goes_first_whatever_the_crawl() -> None:
    f = make()
    f.ingest(subs("a", "h.test", 4), 0.0)
    f.ingest([sub("http://h.test/b-hi0", "b", priority=5), sub("http://h.test/b-hi1", "b", priority=5),
              sub("http://h.test/b-low", "b")], 0.0)  # fmt: skip
    sim = Sim(f)
    urls = [j.item.url.rsplit("/", 1)[1] for j in sim.run(until=100.0)]
    assert urls[:2] == ["b-hi0", "b-hi1"]  # b's head outranks a's, twice running
    assert urls[2:] == ["a0", "b-low", "a1", "a2", "a3"]  # then equal heads: a's turn, b's, then a alone
    assert_polite(sim.jobs)


def test_a_higher_priority_url_of_another_crawl_overtakes_a_running_crawl() -> None:
    f = make()
    f.ingest(subs("a", "h.test", 6), 0.0)
    sim = Sim(f)
    assert crawls_of(sim.run(until=2.5)) == ["a", "a", "a"]  # sends at 0, 1, 2
    f.ingest([sub("http://h.test/urgent", "b", priority=9)], sim.now)
    nxt = sim.run(until=100.0)
    assert nxt[0].item.url == "http://h.test/urgent"
    assert crawls_of(nxt) == ["b", "a", "a", "a"]
    assert_polite(sim.jobs)


# -- 3. held crawls ---------------------------------------------------------------------------------------
def test_a_crawl_without_workers_waits_and_goes_when_one_comes() -> None:
    f = make()
    f.ingest(subs("a", "h.test", 4), 0.0)
    f.ingest(subs("b", "h.test", 4) + subs("b", "solo.test", 2), 0.0)  # solo.test: b's alone
    f.set_idle_crawls({"b"}, 0.0)
    assert f.held_reason("b") == "crawl 'b' has no worker" and f.held_reason("a") is None
    sim = Sim(f)
    jobs = sim.run(until=60.0)
    assert crawls_of(jobs) == ["a"] * 4  # a keeps going, b not at all (not even on its own host)
    f.ingest([sub("http://new.test/b", "b")], sim.now)  # queued while held: waits too
    assert sim.run(until=120.0) == []
    r = rows(f, sim.now)
    assert (r["b"].queued, r["b"].dispatched, r["a"].queued) == (7, 0, 0)
    f.set_idle_crawls(set(), sim.now)
    assert f.held_reason("b") is None
    later = sim.run(until=200.0)
    assert sorted(j.item.url for j in later) == sorted(
        [f"http://h.test/b{i}" for i in range(4)] + ["http://solo.test/b0", "http://solo.test/b1", "http://new.test/b"]
    )
    assert_polite(sim.jobs)
    assert f.queued() == 0


def test_only_the_crawls_the_service_says_have_workers_go() -> None:
    f = make()
    f.ingest(subs("a", "h.test", 2) + subs("b", "h.test", 2) + subs(None, "d.test", 1), 0.0)
    f.set_served_crawls({"a"}, 0.0)
    assert f.held_reason("a") is None
    assert f.held_reason("b") == "crawl 'b' has no worker" and f.held_reason(DEFAULT_CRAWL) is not None
    assert f.held_reason("new") is not None  # a crawl not seen yet waits too
    sim = Sim(f)
    assert crawls_of(sim.run(until=50.0)) == ["a", "a"]
    f.ingest(subs("c", "c.test", 1), sim.now)
    assert sim.run(until=100.0) == []
    f.set_served_crawls({"a", "b", DEFAULT_CRAWL}, sim.now)
    assert Counter(crawls_of(sim.run(until=200.0))) == {"b": 2, DEFAULT_CRAWL: 1}  # c: still no worker
    f.set_served_crawls(None, sim.now)  # None: every crawl (no service watching)
    assert crawls_of(sim.run(until=300.0)) == ["c"]
    assert_polite(sim.jobs)


def test_an_idle_crawl_waits_while_the_other_crawl_of_its_host_goes_on() -> None:
    f = make()
    f.ingest(subs("a", "h.test", 3) + subs("b", "h.test", 3), 0.0)
    sim = Sim(f)
    first = sim.run(until=100.0, want=2)  # one turn each
    assert sorted(crawls_of(first)) == ["a", "b"]
    f.set_idle_crawls({"b"}, sim.now)
    mid = sim.run(until=100.0)
    assert crawls_of(mid) == ["a", "a"]
    f.set_idle_crawls(set(), sim.now)
    assert crawls_of(sim.run(until=200.0)) == ["b", "b"]
    assert_polite(sim.jobs)


def test_a_paused_crawl_stays_paused_across_a_rebuild_and_resumes() -> None:
    kv, log = MemoryKV(), Log()
    f = make(kv, log)
    f.ingest(subs("a", "h.test", 3) + subs("b", "h.test", 3) + subs("b", "solo.test", 2), 0.0)
    assert f.control(cmd("pause", "b"), 0.0) == 0
    assert f.held_reason("b") == "crawl 'b' paused"
    sim = Sim(f)
    assert crawls_of(sim.run(until=1.05)) == ["a", "a"]  # sent at 0 and 1: the second still in flight
    assert rows(f, sim.now)["b"].paused and f.inflight == 1
    f.save_stats()
    # a fresh frontier over the same store (a's job in flight is still leased there)
    g = make(kv, log)
    g.rebuild(sim.now)
    assert g.held_reason("b") == "crawl 'b' paused"
    r = rows(g, sim.now)
    assert r["b"].paused and (r["b"].queued, r["a"].queued, r["a"].inflight) == (5, 1, 1)
    sim.f = g
    assert crawls_of(sim.run(until=60.0)) == ["a"]  # a's last URL; b's stay queued
    assert g.dispatch(sim.now + 100.0).jobs == []
    sim.now += 100.0
    assert g.control(cmd("resume", "b"), sim.now) == 0
    assert g.held_reason("b") is None and not rows(g, sim.now)["b"].paused
    later = sim.run(until=300.0)
    assert Counter(crawls_of(later)) == {"b": 5}
    assert_polite(sim.jobs)
    # the changelog has the resume too: a restore from it is not paused
    g.save_stats()
    h = make(log.replay())
    h.rebuild(sim.now)
    assert not rows(h, sim.now)["b"].paused and h.held_reason("b") is None


def test_a_pause_restored_from_the_changelog_holds() -> None:
    log = Log()
    f = make(log=log)
    f.ingest(subs("b", "h.test", 2), 0.0)
    f.control(cmd("pause", "b"), 0.0)
    f.save_stats()
    g = make(log.replay())
    g.rebuild(1.0)
    assert g.dispatch(1.0).jobs == [] and rows(g, 1.0)["b"].paused
    g.control(cmd("resume", "b"), 2.0)
    assert [j.item.url for j in g.dispatch(2.0).jobs] == ["http://h.test/b0"]


# -- 4. drop -------------------------------------------------------------------------------------------
def test_drop_removes_the_crawls_queued_urls_only() -> None:
    f = make()
    f.ingest(subs("a", "h.test", 5) + subs("a", "other.test", 2), 0.0)
    f.ingest(subs("b", "h.test", 5) + subs("b", "other.test", 2), 0.0)
    assert f.control(cmd("drop", "b"), 1.0) == 7
    r = rows(f, 1.0)
    assert (r["b"].queued, r["b"].dropped) == (0, 7)
    assert (r["a"].queued, r["a"].dropped) == (7, 0)
    assert f.queued() == 7 and f.stats.dropped == 7
    assert f.ingest([sub("http://h.test/b0", "b")], 2.0) == 0  # dropped, not forgotten: a duplicate
    assert f.ingest([sub("http://h.test/b0", "a")], 2.0) == 1  # the same URL in a: new there
    sim = Sim(f, now=2.0)
    jobs = sim.run(until=100.0)
    assert Counter(crawls_of(jobs)) == {"a": 8}
    assert_polite(jobs)


def test_drop_with_forget_lets_the_crawls_urls_be_queued_again() -> None:
    f = make()
    f.ingest(subs("a", "h.test", 2), 0.0)
    f.ingest(subs("b", "h.test", 3), 0.0)
    sim = Sim(f)
    done = [j for j in sim.run(until=100.0, want=2) if j.item.crawl == "b"]
    sim.settle()
    assert len(done) == 1  # one of b's URLs fetched (done), two still queued
    assert f.control(cmd("drop", "b", forget=True), sim.now) == 2
    assert rows(f, sim.now)["b"].queued == 0
    again = subs("b", "h.test", 3)
    assert f.ingest(again, sim.now) == 3  # queued and done URLs alike: forgotten
    assert f.ingest(again, sim.now) == 0  # (and duplicates again from then on)
    assert f.ingest(subs("a", "h.test", 2), sim.now) == 0  # a's seen set is untouched
    assert rows(f, sim.now)["b"].queued == 3


def test_jobs_in_flight_finish_after_a_drop() -> None:
    f = make()
    f.ingest(subs("b", "h.test", 3), 0.0)
    job = f.dispatch(0.0).jobs[0]
    assert f.control(cmd("drop", "b"), 0.5) == 2
    r = rows(f, 0.5)["b"]
    assert (r.queued, r.inflight, r.dropped) == (0, 1, 2)
    assert f.feedback(feedback_of(job), 0.6)  # its lease is still known
    r = rows(f, 0.6)["b"]
    assert (r.queued, r.inflight, r.completed, r.fetched) == (0, 0, 1, 1)
    assert f.dispatch(10.0).jobs == []


def test_a_job_in_flight_at_a_forgetting_drop_leaves_a_resubmitted_url_open() -> None:
    # (found by this test at 7014243: the old job's result stamped the URL done in the NEW generation,
    # over the open entry of its new submission, and a recrawl then queued it a second time)
    f = make()
    f.ingest(subs("b", "h.test", 1), 0.0)
    job = f.dispatch(0.0).jobs[0]
    assert f.control(cmd("drop", "b", forget=True), 0.5) == 0  # nothing queued: its one URL is in flight
    assert f.ingest([sub(job.item.url, "b")], 0.6) == 1  # forgotten: submitted again, queued again
    assert f.feedback(feedback_of(job), 0.7)  # then the job of before the drop finishes
    assert rows(f, 0.7)["b"].queued == 1
    # the URL is queued: a recrawl must not queue it twice (Submission.recrawl; seen.py: open entries)
    assert f.ingest([sub(job.item.url, "b", recrawl=True)], 0.8) == 0
    assert rows(f, 0.8)["b"].queued == 1


def test_a_url_in_flight_at_a_forgetting_drop_is_new_when_submitted_after_its_result() -> None:
    f = make()
    f.ingest(subs("b", "h.test", 1), 0.0)
    job = f.dispatch(0.0).jobs[0]
    f.control(cmd("drop", "b", forget=True), 0.5)
    assert f.feedback(feedback_of(job), 0.7)
    assert f.ingest([sub(job.item.url, "b")], 0.8) == 1  # forgotten means: a later submission crawls it again
    assert f.ingest([sub(job.item.url, "b")], 0.8) == 0


@pytest.mark.parametrize("outcome", ["fetched", "retry", "expired", "lost"])
def test_a_job_in_flight_at_a_drop_does_not_come_back(outcome: str) -> None:
    kv = MemoryKV()
    f = make(kv)
    f.ingest([sub("http://h.test/v", "b", revisit=60, priority=1), *subs("b", "h.test", 2)], 0.0)
    f.ingest(subs("a", "other.test", 3), 0.0)
    jobs = f.dispatch(0.0).jobs
    (job,) = [j for j in jobs if j.item.crawl == "b"]
    assert job.item.url == "http://h.test/v"  # in flight: b's URL with a revisit
    assert f.control(cmd("drop", "b"), 0.5) == 2
    f.save_stats()
    g = make(kv)  # the drop's memory of b's job in flight survives a rebuild
    g.rebuild(0.6)
    assert rows(g, 0.6)["b"].inflight == 1
    sim = Sim(g, now=0.6)
    sim.pending.extend((0.7, n, j) for n, j in enumerate(jobs) if j.item.crawl == "a")  # a's answered as usual
    if outcome == "lost":
        sim.now = job.expires_at + SETTINGS.fetch_timeout + SETTINGS.lease_grace
        assert g.expire_leases(sim.now) == 2  # b's and a's: a's comes back, b's does not
        sim.pending.clear()
    else:
        assert g.feedback(feedback_of(job, outcome=outcome), 0.7)
    later = sim.run(until=5000.0)  # past the revisit's due time too
    r = rows(g, sim.now)["b"]
    assert (r.queued, r.inflight, r.revisits) == (0, 0, 0)
    assert all(j.item.crawl == "a" for j in later) and g.queued() == 0
    assert next(g.kv.scan(b"V"), None) is None


# -- 5. per-host limit --------------------------------------------------------------------------------------
def test_limit_bounds_a_crawls_urls_queued_per_host() -> None:
    f = make()
    assert f.control(cmd("limit", "a", per_host=3), 0.0) == 0
    assert f.ingest(subs("a", "h.test", 5), 0.0) == 3
    r = rows(f, 0.0)["a"]
    assert (r.queued, r.over_limit, r.per_host) == (3, 2, 3)
    assert f.ingest(subs("a", "other.test", 4), 0.0) == 3  # per host: other.test has its own 3
    assert f.ingest(subs("b", "h.test", 5), 0.0) == 5  # other crawls: no limit
    assert f.ingest(subs(None, "h.test", 5), 0.0) == 5
    r = rows(f, 0.0)["a"]
    assert (r.queued, r.over_limit) == (6, 3)
    # over the limit means not queued and not seen: submitted again once the limit is gone, queued
    assert f.control(cmd("limit", "a", per_host=0), 1.0) == 0
    assert rows(f, 1.0)["a"].per_host == 0
    assert f.ingest(subs("a", "h.test", 5) + subs("a", "other.test", 4), 1.0) == 3
    assert rows(f, 1.0)["a"].queued == 9


def test_limit_counts_queued_urls_not_ever_queued() -> None:
    f = make()
    f.control(cmd("limit", "a", per_host=2), 0.0)
    assert f.ingest(subs("a", "h.test", 2), 0.0) == 2
    sim = Sim(f)
    assert len(sim.run(until=100.0, want=1)) == 1  # one left the queue: room for one more
    assert f.ingest([sub("http://h.test/late0", "a"), sub("http://h.test/late1", "a")], sim.now) == 1
    assert rows(f, sim.now)["a"].over_limit == 1


def test_limit_of_the_default_crawl() -> None:
    f = make()
    f.control(cmd("limit", DEFAULT_CRAWL, per_host=2), 0.0)
    assert f.ingest(subs(None, "h.test", 4), 0.0) == 2
    assert f.ingest(subs("b", "h.test", 4), 0.0) == 4
    assert rows(f, 0.0)[DEFAULT_CRAWL].over_limit == 2


# -- 6. bounded names, crawl commands ---------------------------------------------------------------------
BAD_NAMES = ["", " ", "x" * (MAX_CRAWL_CHARS + 1), "a\x00b", "a\x1eb", "a\nb", "\x7f", "tab\t"]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_valid_crawl_refuses_bad_names(name: str) -> None:
    with pytest.raises(ValueError, match="crawl"):
        valid_crawl(name)


@pytest.mark.parametrize("name", ["a", "x" * MAX_CRAWL_CHARS, "books 2024/q1", "café", DEFAULT_CRAWL])
def test_valid_crawl_accepts_good_names(name: str) -> None:
    assert valid_crawl(name) == name
    assert sub("http://h.test/", name).crawl == name


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_a_submission_with_a_bad_crawl_name_is_rejected(name: str) -> None:
    with pytest.raises(Rejection, match="crawl"):
        parse_input(json.dumps({"url": "http://h.test/", "crawl": name}).encode())


def test_a_submission_with_a_crawl_name_of_another_type_is_rejected() -> None:
    with pytest.raises(Rejection):
        parse_input(b'{"url": "http://h.test/", "crawl": 7}')


@pytest.mark.parametrize(
    "kw",
    [
        {"action": "set", "crawl": "a"},  # not a crawl action
        {"action": "watch", "crawl": "a"},
        {"action": "pause", "crawl": "a", "scope": "h.test"},  # a scope together with a crawl
        {"action": "pause", "crawl": "a", "delay": 1.0},
        {"action": "limit", "crawl": "a"},  # limit without per_host
        {"action": "limit", "crawl": "a", "per_host": -1},
        {"action": "pause", "crawl": "a", "per_host": 3},  # per_host without limit
        {"action": "pause", "crawl": "a", "forget": True},  # forget without drop
        {"action": "pause", "crawl": "a\x1eb"},  # a bad name
        {"action": "pause", "crawl": "x" * (MAX_CRAWL_CHARS + 1)},
        {"action": "pause", "scope": "h.test", "forget": True},  # crawl fields on a scope command
        {"action": "pause", "scope": "h.test", "per_host": 3},
    ],
)
def test_crawl_commands_are_validated(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ControlCommand(**kw).validate()


@pytest.mark.parametrize(
    "kw",
    [
        {"action": "pause", "crawl": "a"},
        {"action": "resume", "crawl": "a"},
        {"action": "drop", "crawl": "a"},
        {"action": "drop", "crawl": "a", "forget": True},
        {"action": "limit", "crawl": "a", "per_host": 0},
        {"action": "limit", "crawl": "a", "per_host": 3},
    ],
)
def test_valid_crawl_commands_pass(kw: dict[str, Any]) -> None:
    ControlCommand(**kw).validate()


# -- 7. per-crawl rows ---------------------------------------------------------------------------------
def test_crawl_rows_count_queued_inflight_done_and_revisits() -> None:
    f = make()
    f.ingest([sub("http://h.test/r", "a", revisit=3600, priority=1), *subs("a", "h.test", 2)], 0.0)
    f.ingest(subs("b", "other.test", 1), 0.0)
    r = rows(f, 0.0)
    assert (r["a"].queued, r["a"].inflight, r["a"].ingested, r["a"].completed) == (3, 0, 3, 0)
    assert (r["b"].queued, r["b"].ingested) == (1, 1)
    jobs = f.dispatch(0.0).jobs
    assert sorted(j.item.url for j in jobs) == ["http://h.test/r", "http://other.test/b0"]
    r = rows(f, 0.0)
    assert (r["a"].queued, r["a"].inflight, r["a"].dispatched) == (2, 1, 1)
    assert (r["b"].queued, r["b"].inflight, r["b"].dispatched) == (0, 1, 1)
    for job in jobs:
        assert f.feedback(feedback_of(job), 0.5)
    r = rows(f, 0.5)
    assert (r["a"].inflight, r["a"].completed, r["a"].fetched, r["a"].failed) == (0, 1, 1, 0)
    assert (r["a"].revisits, r["a"].next_revisit) == (1, 3600.5)
    assert (r["b"].completed, r["b"].fetched, r["b"].revisits, r["b"].next_revisit) == (1, 1, 0, None)
    # an error is completed, failed
    job = f.dispatch(1.0).jobs[0]
    f.feedback(feedback_of(job, outcome="error"), 1.2)
    a = rows(f, 1.2)["a"]
    assert (a.queued, a.completed, a.fetched, a.failed) == (1, 2, 1, 1)
    # the revisit comes due: queued again
    f.dispatch(3600.5)
    a = rows(f, 3600.5)["a"]
    assert (a.revisits, a.next_revisit) == (0, None)
    assert a.queued + a.inflight == 2


def test_crawl_rows_revisits_of_two_crawls() -> None:
    f = make()
    f.ingest([sub("http://h.test/x", "a", revisit=100), sub("http://other.test/x", "b", revisit=50)], 0.0)
    for job in f.dispatch(0.0).jobs:
        f.feedback(feedback_of(job), 1.0)
    r = rows(f, 1.0)
    assert (r["a"].revisits, r["a"].next_revisit) == (1, 101.0)
    assert (r["b"].revisits, r["b"].next_revisit) == (1, 51.0)


# -- 8. rebuild ---------------------------------------------------------------------------------------------
def _state(f: PartitionFrontier, now: float) -> dict[str, tuple[int, ...]]:
    return {
        name: (r.queued, r.inflight, r.ingested, r.dispatched, r.completed, r.fetched, r.revisits)
        for name, r in rows(f, now).items()
    }


@pytest.mark.parametrize("source", ["store", "changelog"])
def test_rebuild_restores_each_crawls_queues_and_leases(source: str) -> None:
    kv, log = MemoryKV(), Log()
    f = make(kv, log)
    urls = subs("a", "h.test", 5) + subs("a", "x.test", 3) + subs("b", "h.test", 5) + subs("b", "y.test", 2)
    urls.append(sub("http://h.test/d0"))  # the default crawl on the shared host too
    assert f.ingest(urls, 0.0) == len(urls)
    sim = Sim(f)
    sim.run(until=2.05)  # some sent and answered, one per host in flight
    assert f.inflight > 0 and f.queued() > 0
    f.save_stats()
    before = _state(f, sim.now)
    assert {"a", "b", DEFAULT_CRAWL} <= before.keys()

    g = make(kv if source == "store" else log.replay(), Log())
    g.rebuild(sim.now)
    assert _state(g, sim.now) == before
    assert g.queued() == f.queued() and g.inflight == f.inflight
    sim.f = g  # the jobs in flight are answered to the new frontier: their leases are known there
    sim.run(until=500.0)
    assert g.queued() == 0 and g.inflight == 0
    assert Counter(j.item.url for j in sim.jobs) == Counter(i.url for i in urls)  # each once
    assert_polite(sim.jobs)
    after = rows(g, sim.now)
    assert {n: (r.completed, r.fetched) for n, r in after.items()} == {"a": (8, 8), "b": (7, 7), DEFAULT_CRAWL: (1, 1)}


def test_forgetting_a_crawl_survives_a_rebuild() -> None:
    kv = MemoryKV()
    f = make(kv)
    f.ingest(subs("b", "h.test", 2), 0.0)
    job = f.dispatch(0.0).jobs[0]
    f.feedback(feedback_of(job), 0.5)  # b0 done, b1 queued
    assert f.control(cmd("drop", "b", forget=True), 1.0) == 1
    f.save_stats()
    g = make(kv)
    g.rebuild(2.0)
    assert g.ingest(subs("b", "h.test", 2), 2.0) == 2  # the new generation's seen set: empty
    assert g.ingest(subs("b", "h.test", 2), 2.0) == 0


def test_a_crawl_item_round_trips_and_the_default_crawl_is_left_out() -> None:
    item = sub("http://h.test/x", "a")
    assert msgspec.json.decode(msgspec.json.encode(item), type=UrlItem) == item
    assert b'"crawl"' not in msgspec.json.encode(parse_input(b"http://h.test/x"))  # default: left out


def test_a_load_puts_each_crawls_queues_where_the_live_partition_has_them() -> None:
    # Queues.load takes the default crawl's queues together and the others one by one: the loaded
    # counts, indexes, groups, held and scheduled queues are those of the partition that queued them
    kv, log = MemoryKV(), Log()
    f = make(kv, log)
    f.ingest(subs(None, "h.test", 3) + subs(None, "k.test", 2) + subs("a", "h.test", 2) + subs("b", "h.test", 3)
             + subs("b", "solo.test", 2) + [sub("http://h.test/api", None, scopes=["api"]),
                                            sub("http://h.test/api2", "a", scopes=["api"])], 0.0)  # fmt: skip
    assert f.control(cmd("pause", "b"), 0.0) == 0
    f.save_stats()
    g = make(kv, log)
    g.rebuild(1.0)
    live, loaded = f.queues, g.queues
    assert dict(loaded._queued) == {q: n for q, n in live._queued.items() if n}
    assert {c: n for c, n in loaded._crawl_queued.items() if n} == {c: n for c, n in live._crawl_queued.items() if n}
    assert loaded._multi == live._multi and loaded.groups == live.groups
    held = {q for q in live._queued if q.startswith("b\x1e")}  # (the live one puts them aside as they come up)
    assert len(held) == 2 and {c: q for c, q in loaded._parked.items() if q} == {"b": held}
    assert set(loaded.scheduler._at) == set(live._queued) - held and len(loaded._multi) == 3

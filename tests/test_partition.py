"""PartitionFrontier contract tests, run against both the in-memory and the RocksDB store."""

import itertools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from frontier.config import AutoThrottleSettings, FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core.kv import KV, MemoryKV
from frontier.core.policy import ScopeState
from frontier.core.urls import parse_input
from frontier.partition import PartitionFrontier
from frontier.partition.keys import state_key
from frontier.partition.records import encoder
from frontier.service.rocks import RocksKV
from topics.schemas import Feedback, Job, UrlItem

FIXED = AutoThrottleSettings(enabled=False)  # these tests pin the fixed delay/concurrency behaviour
THROTTLE = ThrottleConfig(
    default=ScopeSettings(delay=1.0, concurrency=1, autothrottle=FIXED),
    scopes={"fast.test": ScopeSettings(delay=0.0, concurrency=2, autothrottle=FIXED)},
)
SETTINGS = FrontierConfig(
    job_ttl=30.0, fetch_timeout=20.0, lease_grace=10.0, max_retries=1, robots_obey=False, dispatch_lead=0.0
)


@pytest.fixture(params=["memory", "rocksdb"])
def kv(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KV]:
    store: KV = MemoryKV() if request.param == "memory" else RocksKV(tmp_path / "p0")
    yield store
    store.close()


class Log:
    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def __call__(self, key: bytes, value: bytes | None) -> None:
        self.records.append((key, value))

    def replay(self, upto: int | None = None) -> MemoryKV:
        """A new store holding what a restore from this changelog (or its first ``upto`` records) gives."""
        replica = MemoryKV()
        for key, value in self.records[:upto]:
            if value is None:
                replica.delete(key)
            else:
                replica.put(key, value)
        return replica


def make(kv: KV, log: Log | None = None) -> PartitionFrontier:
    return PartitionFrontier(0, kv, SETTINGS, THROTTLE, log or Log())


def items(*urls: str) -> list[UrlItem]:
    return [parse_input(u.encode()) for u in urls]


def fb(job: Job, outcome: str = "fetched", sent_at: float = 0.0, status: int = 200) -> Feedback:
    i = job.item
    return Feedback(
        lease=job.lease, host=i.host, domain=i.domain, url=i.url, outcome=outcome, status=status, sent_at=sent_at
    )


def test_dedup_across_batches_and_canonical_forms(kv: KV) -> None:
    f = make(kv)
    assert f.ingest(items("http://a.test/1", "http://a.test/2", "HTTP://A.TEST:80/1"), 0.0) == 2
    assert f.ingest(items("http://a.test/2", "http://a.test/3"), 1.0) == 1
    assert f.stats.duplicates == 2


def test_one_host_respects_delay_and_concurrency(kv: KV) -> None:
    f = make(kv)
    f.ingest(items("http://a.test/1", "http://a.test/2", "http://a.test/3"), 0.0)
    first = f.dispatch(0.0).jobs
    assert [j.item.url for j in first] == ["http://a.test/1"]
    assert f.dispatch(5.0).jobs == []  # concurrency 1: nothing until feedback
    f.feedback(fb(first[0], sent_at=0.1), 0.5)
    assert f.dispatch(1.0).jobs == []  # 1.0 s after the send at 0.1 is 1.1
    second = f.dispatch(1.1).jobs
    assert [j.item.url for j in second] == ["http://a.test/2"]
    assert second[0].min_gap == 1.0 and second[0].not_before == 1.1 and second[0].expires_at == 31.1


def test_hosts_are_independent_and_priority_orders_a_queue(kv: KV) -> None:
    f = make(kv)
    f.ingest(items("http://a.test/low", '{"url": "http://a.test/high", "priority": 9}', "http://b.test/x"), 0.0)
    jobs = f.dispatch(0.0).jobs
    assert sorted(j.item.url for j in jobs) == ["http://a.test/high", "http://b.test/x"]


def test_fifo_within_priority(kv: KV) -> None:
    f = make(kv)
    urls = [f"http://fast.test/{i}" for i in range(5)]
    f.ingest(items(*urls[:3]), 0.0)
    f.ingest(items(*urls[3:]), 0.1)
    got = []
    now = 1.0
    while len(got) < 5:
        for job in f.dispatch(now).jobs:
            got.append(job.item.url)
            f.feedback(fb(job, sent_at=now), now)
        now += 0.01
    assert got == urls


def test_retry_of_a_url_failing_alone_counts_and_stops_when_exhausted(kv: KV) -> None:
    """x fails (503) while its host answers y: x's failure is its own, and counts."""
    f = make(kv)
    f.ingest(items("http://fast.test/x", "http://fast.test/y"), 0.0)
    job, other = f.dispatch(0.0).jobs  # (concurrency 2)
    assert job.item.url == "http://fast.test/x" and job.retries_left == 1
    f.feedback(fb(job, outcome="retry", status=503, sent_at=0.0), 0.1)
    assert f.dispatch(0.2).jobs == []  # the 503 started a backoff of 1 s
    f.feedback(fb(other, sent_at=0.0), 0.3)  # the host answers y: its failing run is over
    job2 = next(j for t in (2.0, 3.0, 5.0) for j in f.dispatch(t).jobs)
    assert job2.item.url == "http://fast.test/x" and job2.item.attempts == 1 and job2.retries_left == 0
    f.feedback(fb(job2, outcome="fetched", status=503, sent_at=5.0), 5.1)
    assert f.dispatch(20.0).jobs == [] and f.stats.retried == 1 and f.stats.completed == 2


def test_a_host_failing_as_a_whole_keeps_its_urls_until_retry_give_up(kv: KV) -> None:
    """Issue 23: a site that resets its first connections lost its root after 5 tries in 18 s.
    While the whole host fails, its URLs' failures do not count (max_retries 1 here): they are
    retried at the host's outage probing, until the host has failed for retry_give_up (100 s)."""
    f = PartitionFrontier(0, kv, replace(SETTINGS, retry_give_up=100.0), THROTTLE, Log())
    f.ingest(items("http://down.test/x"), 0.0)
    now, jobs = 0.0, []
    while now < 400 and (not jobs or jobs[-1].retries_left > 0):
        for job in f.dispatch(now).jobs:
            jobs.append(job)
            f.feedback(_failed(job, now), now + 0.1)
        nxt = f.next_wakeup()
        now = max(now + 0.2, nxt if nxt is not None else now + 1)
    assert len(jobs) > 4  # far more than max_retries + 1 tries
    assert {j.item.attempts for j in jobs[1:]} == {1}  # only the first failure counted
    assert all(j.retries_left >= 1 for j in jobs[:-1]) and jobs[-1].retries_left == 0
    assert jobs[-2].not_before - jobs[0].not_before < 100 <= jobs[-1].not_before - jobs[0].not_before
    gaps = [b.not_before - a.not_before for a, b in itertools.pairwise(jobs)]
    assert gaps[1] > gaps[0] and max(gaps) <= THROTTLE.default.backoff.trouble_max + 1  # the outage probing


def _failed(job: Job, now: float) -> Feedback:
    """A connection reset: retried while the job may ask for it, else its end."""
    i = job.item
    return Feedback(lease=job.lease, host=i.host, domain=i.domain, url=i.url,
                    outcome="retry" if job.retries_left else "error", error="connect", sent_at=now)  # fmt: skip


def test_a_late_signal_keeps_the_lease_and_moves_the_next_send(kv: KV) -> None:
    """A worker that lost the job's partition before its done mark sends the fetch as a late
    signal (the lease id with "~late"): the lease stays open for the job's new owner, and the
    host's next send is timed from the signal's send time (delay 1 s)."""
    from workers.api.reporting import LATE_SUFFIX

    f = make(kv)
    f.ingest(items("http://a.test/1", "http://a.test/2"), 0.0)
    job = f.dispatch(0.0).jobs[0]
    late = fb(job, sent_at=5.0)
    late.lease = job.lease + LATE_SUFFIX
    assert f.feedback(late, 5.1) is False and f.inflight == 1  # stale for the lease: it stays open
    assert f.feedback(fb(job, sent_at=5.0), 5.2) is True  # the new owner's report closes it
    assert f.dispatch(5.5).jobs == []  # within a second of the real send at 5.0
    assert [j.item.url for j in f.dispatch(6.0).jobs] == ["http://a.test/2"]


def test_expired_job_goes_back_to_the_front(kv: KV) -> None:
    f = make(kv)
    f.ingest(items("http://a.test/1", "http://a.test/2"), 0.0)
    job = f.dispatch(0.0).jobs[0]
    f.feedback(fb(job, outcome="expired"), 31.0)
    again = f.dispatch(31.0).jobs
    assert [j.item.url for j in again] == ["http://a.test/1"] and again[0].lease != job.lease


def test_stale_and_duplicate_feedback_is_ignored(kv: KV) -> None:
    f = make(kv)
    f.ingest(items("http://a.test/1"), 0.0)
    job = f.dispatch(0.0).jobs[0]
    assert f.feedback(fb(job, sent_at=0.0), 0.5) is True
    assert f.feedback(fb(job, sent_at=0.0), 0.6) is False
    assert f.inflight == 0 and f.stats.stale_feedback == 1


def test_lost_lease_requeues_after_deadline(kv: KV) -> None:
    f = make(kv)
    f.ingest(items("http://a.test/1"), 0.0)
    job = f.dispatch(0.0).jobs[0]
    assert f.expire_leases(59.9) == 0  # deadline = 0 + ttl 30 + timeout 20 + grace 10 = 60
    assert f.expire_leases(60.0) == 1
    again = f.dispatch(60.0).jobs
    assert [j.item.url for j in again] == ["http://a.test/1"] and f.stats.lost == 1
    assert f.feedback(fb(job, sent_at=1.0), 61.0) is False  # the old lease is gone


def test_max_inflight_bounds_dispatch(kv: KV) -> None:
    f = PartitionFrontier(0, kv, FrontierConfig(max_inflight=2, robots_obey=False), THROTTLE, Log())
    f.ingest(items("http://a.test/", "http://b.test/", "http://c.test/"), 1.0)
    assert len(f.dispatch(1.0).jobs) == 2
    # c.test is due, but nothing can go out before a lease closes: the next wakeup is not "now"
    # (it was, and the dispatch loop spun a whole core while at max_inflight)
    wake = f.next_wakeup()
    assert wake is not None and wake > 30.0


def test_rebuild_from_store_restores_queues_and_leases(kv: KV) -> None:
    f = make(kv)
    f.ingest(items("http://a.test/1", "http://a.test/2", "http://b.test/1"), 0.0)
    leased = f.dispatch(0.0).jobs
    assert len(leased) == 2
    g = make(kv)  # a new instance on the same store (e.g. after restart)
    g.rebuild(0.5)
    assert g.inflight == 2
    assert g.dispatch(0.5).jobs == []  # both hosts are busy: politeness survives the restart
    for job in leased:
        assert g.feedback(fb(job, sent_at=0.0), 0.6)
    assert [j.item.url for j in g.dispatch(1.0).jobs] == ["http://a.test/2"]
    assert g.ingest(items("http://a.test/1"), 2.0) == 0  # seen-set restored


def test_changelog_replay_rebuilds_an_identical_partition(kv: KV) -> None:
    log = Log()
    f = make(kv, log)
    f.ingest(items(*(f"http://h{i % 3}.test/{i}" for i in range(9))), 0.0)
    for job in f.dispatch(0.0).jobs:
        f.feedback(fb(job, sent_at=0.0), 0.2)
    assert f.dispatch(1.0).jobs
    replica = log.replay()
    assert list(replica.scan(b"")) == [kv_item for kv_item in kv.scan(b"")]


def test_counters_move_with_the_partition(kv: KV) -> None:
    """A new owner rebuilt from the changelog reports what the old owner counted (totals in
    ``crawl-frontier status`` must not drop when partitions move between instances)."""
    log = Log()
    f = make(kv, log)
    f.ingest(items("http://a.test/1", "http://a.test/1", "http://b.test/1"), 0.0)
    for job in f.dispatch(0.0).jobs:
        f.feedback(fb(job, sent_at=0.0), 0.2)
    f.save_stats()
    f.save_stats()  # unchanged: no second record
    assert sum(1 for key, _ in log.records if key == b"C") == 1
    g = make(log.replay())
    g.rebuild(1.0)
    assert (g.stats.ingested, g.stats.duplicates, g.stats.completed) == (2, 1, 2)
    assert g.stats == f.stats


def test_crash_between_writes_never_loses_a_url(kv: KV) -> None:
    """Replay every prefix of the changelog: each URL is always queued, leased or done."""
    log = Log()
    f = make(kv, log)
    f.ingest(items("http://a.test/1", "http://a.test/2"), 0.0)
    job = f.dispatch(0.0).jobs[0]
    f.feedback(fb(job, outcome="retry", status=503, sent_at=0.0), 0.5)
    for cut in range(len(log.records) + 1):
        replica = log.replay(cut)
        seen = {k for k, _ in replica.scan(b"S")}
        live = {v for _, v in replica.scan(b"Q")} | {v for _, v in replica.scan(b"L")}
        assert len(live) >= len(seen) or not seen, f"a seen URL is neither queued nor leased at cut {cut}"


def test_jobs_go_out_ahead_of_their_slot_with_not_before() -> None:
    f = PartitionFrontier(0, MemoryKV(), replace(SETTINGS, dispatch_lead=0.1), THROTTLE, Log())
    f.ingest(items("http://a.test/1", "http://a.test/2"), 0.0)
    f.feedback(fb(f.dispatch(0.0).jobs[0], sent_at=0.0), 0.05)
    assert f.dispatch(0.85).jobs == []  # the slot at 1.0 is more than the lead away
    [job] = f.dispatch(0.9).jobs
    assert (job.not_before, job.expires_at) == (1.0, 31.0)  # the worker holds it until its slot


def test_a_jobs_min_gap_is_the_gap_its_send_was_timed_with(kv: KV) -> None:
    """The worker holds a job until its previous send to the host plus the job's ``min_gap``. The
    last request of a budget's turn test ends the test as it is sent, and the state after the send
    has the slowed-down delay again: the job must carry the test's pace, not that delay (else the
    test's last request went out 1-1.7 s late end to end, and the new period's count, started
    late, could run on past a turn it never saw; reproduced in the simulator, 15 % of runs)."""
    f = make(kv)
    testing = ScopeState(bud_test_left=1, bud_limit0=3.0, backoff=5.0, last_sent=-10.0)
    f.kv.put(state_key("a.test"), encoder.encode(testing))  # one test request left, at the pace of 3 s
    f.ingest(items("http://a.test/1", "http://a.test/2"), 0.0)
    [job] = f.dispatch(0.0).jobs
    assert job.min_gap == 3.0, job.min_gap
    assert f.scopes.state("a.test").bud_test_left == 0  # the test ended with this send: the next gap is the backoff's

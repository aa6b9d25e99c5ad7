"""A worker sends a job only while its ``crawl.jobs`` partition is its own (issue 27, defect 3):
after a stall of the whole process (the group may have expired it meanwhile) held jobs wait until
a synchronous commit confirms the membership; a lost assignment drops them at once, unsent and
unreported (no "expired" hand-back either: another worker has the job). Real local HTTP server,
an in-memory producer, an injected clock for the stall watch."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import aiohttp
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tests.fakes import FakeClock, FakeProducer, JumpClock, message
from tests.test_worker_jobs import Site, make_job, make_worker, poll, session, site, start
from workers.api.clock import SYSTEM, Clock
from workers.api.membership import Membership
from workers.api.reporting import LATE_SUFFIX

__all__ = ["session", "site"]  # the fixtures, imported for these tests

TP = ("crawl.jobs", 0)


def test_a_gap_between_ticks_makes_ownership_unknown_until_confirmed() -> None:
    clock = FakeClock(now=1000.0)
    m = Membership(stall=2.0, clock=clock)
    assert m.owns(TP) is False  # never assigned
    clock.now += 30  # a stall while owning nothing: nothing to doubt
    m.assigned([TP])
    assert m.owns(TP) is True
    clock.now += 1.5
    assert m.owns(TP) is True  # shorter than the stall threshold
    clock.now += 20
    assert m.owns(TP) is None and m.stalls == 1
    asked = m.now()
    clock.now += 0.1
    m.confirmed(asked)
    assert m.owns(TP) is True
    clock.now += 20
    asked_before = m.now() - 30  # a confirmation asked before the stall does not clear it
    assert m.owns(TP) is None
    m.confirmed(asked_before)
    assert m.owns(TP) is None
    m.revoked([TP])
    assert m.owns(TP) is False


def worker_with(clock: FakeClock, producer: FakeProducer, jumps: Clock = SYSTEM) -> Any:
    """A worker whose stall watch reads ``clock``, its API ``jumps``."""
    worker = make_worker(producer, clock=jumps)
    worker.jobs.consuming.membership = Membership(stall=2.0, clock=clock)
    worker.jobs.consuming.membership.assigned([TP])
    return worker


async def test_a_job_held_through_a_stall_is_dropped_unsent_when_the_assignment_is_lost(
    site: Site, session: aiohttp.ClientSession
) -> None:
    site.routes["/a"] = (200, {}, b"a")
    clock, producer, jumps = FakeClock(now=1000.0), FakeProducer(), JumpClock()
    worker = worker_with(clock, producer, jumps)
    job = make_job(site.url("/a"), clock=jumps)
    job.not_before = jumps.now() + 0.3  # held for its slot
    task = start(worker, session, message(job))
    await poll(lambda: worker.jobs.metrics.held._value.get() == 1, 5, "the job to be held")
    clock.now += 20  # the process was stopped for 20 s (its timers fire late, all at once)
    await jumps.advance(0.5)  # the job's slot passes
    assert site.hits == [] and not task.done()  # not sent while its ownership is unknown
    worker.jobs.consuming.lose({TP}, "the group's assignment was lost")  # the consumer hears it (on_lost)
    await poll(task.done, 5, "the held job to be dropped")
    await worker.jobs.reporter.publisher.settled()
    assert site.hits == [] and producer.records == [] and worker.jobs.endings.dropped == 1  # unsent, unreported
    assert worker.jobs.tracker.commit_points() == []  # nothing of that partition is committed here


async def test_a_job_held_through_a_stall_goes_once_the_group_confirms_the_membership(
    site: Site, session: aiohttp.ClientSession
) -> None:
    site.routes["/b"] = (200, {}, b"b")
    clock, producer, jumps = FakeClock(now=1000.0), FakeProducer(), JumpClock()
    worker = worker_with(clock, producer, jumps)
    job = make_job(site.url("/b"), clock=jumps)
    job.not_before = jumps.now() + 0.2
    task = start(worker, session, message(job))
    await poll(lambda: worker.jobs.metrics.held._value.get() == 1, 5, "the job to be held")
    clock.now += 20
    await jumps.advance(0.4)  # the job's slot passes
    assert site.hits == []

    class Accepting:
        def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
            return offsets

    worker.jobs.consuming.confirm(Accepting())
    await poll(task.done, 5, "the job to be fetched")
    await worker.jobs.reporter.publisher.settled()
    assert site.hits == ["/b"] and [fb.outcome for fb in producer.feedback()] == ["fetched"]


async def test_a_job_of_a_partition_not_owned_is_dropped_even_past_its_expiry(
    site: Site, session: aiohttp.ClientSession
) -> None:
    """Past its expiry a held job is handed back ("expired" feedback) by its owner only: from a worker
    that no longer owns it, that report would close the lease the new owner is fetching under."""
    clock, producer = FakeClock(now=1000.0), FakeProducer()
    worker = worker_with(clock, producer)
    worker.jobs.consuming.membership.revoked([TP])
    job = make_job(site.url("/c"))
    job.expires_at = time.time() - 1
    await start(worker, session, message(job))
    await worker.jobs.reporter.publisher.settled()
    assert producer.records == [] and site.hits == [] and worker.jobs.endings.dropped == 1


async def test_a_commit_refused_as_an_expired_member_means_the_partitions_are_lost() -> None:
    clock = FakeClock(now=1000.0)
    worker = worker_with(clock, FakeProducer())
    jobs = worker.jobs
    jobs.tracker.started(*TP, 7)
    clock.now += 20
    assert jobs.consuming.membership.suspect

    class Refusing:
        def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
            assert not asynchronous and offsets == [TopicPartition(*TP, 7)]
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID, "expired"))

    jobs.consuming.confirm(Refusing())
    assert jobs.consuming.membership.owns(TP) is False and jobs.tracker.commit_points() == []

    jobs.consuming.membership.assigned([TP])
    jobs.tracker.started(*TP, 9)
    clock.now += 20

    class Rebalancing:
        def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
            raise KafkaException(KafkaError(KafkaError.REBALANCE_IN_PROGRESS, "rebalancing"))

    jobs.consuming.confirm(Rebalancing())
    assert jobs.consuming.membership.owns(TP) is None  # not known yet: asked again, nothing dropped


class RecordingConsumer:
    """What a worker's consumer commits, in order with what its producer publishes."""

    def __init__(self, producer: FakeProducer, refuse: KafkaError | None = None) -> None:
        self.producer, self.refuse = producer, refuse
        self.commits: list[tuple[list[tuple[int, str | None]], int]] = []  # (points, records published before)

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
        self.commits.append(([(tp.offset, tp.metadata) for tp in offsets], len(self.producer.records)))
        if self.refuse is not None:
            raise KafkaException(self.refuse)
        return offsets


async def test_a_jobs_done_mark_is_committed_before_its_report_goes_out(
    site: Site, session: aiohttp.ClientSession
) -> None:
    """Reported is done (issue 27, defect 6): a worker frozen or killed right after a report landed
    left the job uncommitted, and the partition's next owner fetched it again. The mark (the
    offset, or the commit's ``done:`` metadata above a job still open) now lands first."""
    site.routes["/d"] = (200, {}, b"d")
    clock, producer = FakeClock(now=1000.0), FakeProducer()
    worker = worker_with(clock, producer)
    consumer = RecordingConsumer(producer)
    worker.jobs.consuming.consumer = consumer
    worker.jobs.tracker.started(*TP, 4)  # an earlier job still open: the mark goes in the metadata
    task = start(worker, session, message(make_job(site.url("/d")), offset=5))
    await poll(lambda: bool(worker.jobs.consuming.marks), 5, "the job to wait for its mark")
    assert producer.records == []  # fetched, not reported before its mark is committed
    worker.jobs.consuming.commit_marks(consumer)
    await poll(task.done, 5, "the report")
    await worker.jobs.reporter.publisher.settled()
    assert consumer.commits == [([(4, "done:1")], 0)]  # offset 5 done above the open 4, before any record
    assert [fb.outcome for fb in producer.feedback()] == ["fetched"] and len(producer.pages()) == 1


async def test_a_mark_refused_as_from_an_expired_member_publishes_no_page(
    site: Site, session: aiohttp.ClientSession
) -> None:
    site.routes["/e"] = (200, {}, b"e")
    clock, producer = FakeClock(now=1000.0), FakeProducer()
    worker = worker_with(clock, producer)
    consumer = RecordingConsumer(producer, refuse=KafkaError(KafkaError.UNKNOWN_MEMBER_ID, "expired"))
    worker.jobs.consuming.consumer = consumer
    task = start(worker, session, message(make_job(site.url("/e")), offset=9))
    await poll(lambda: bool(worker.jobs.consuming.marks), 5, "the job to wait for its mark")
    worker.jobs.consuming.commit_marks(consumer)
    await poll(task.done, 5, "the job to end")
    await worker.jobs.reporter.publisher.settled()
    assert site.hits == ["/e"] and producer.pages() == []  # its new owner reports it, not this worker
    assert [fb.lease for fb in producer.feedback()] == [f"L1{LATE_SUFFIX}"]  # a late signal only
    assert worker.jobs.consuming.membership.owns(TP) is False


async def test_a_mark_refused_during_a_rebalance_is_asked_again_and_the_partition_kept(
    site: Site, session: aiohttp.ClientSession
) -> None:
    """A cooperative rebalance moves the generation while this member keeps its partitions: a
    commit made meanwhile gets ILLEGAL_GENERATION (seen in the freeze tests). That is no loss: the
    mark is asked again, and the job reported once it went through."""
    site.routes["/f"] = (200, {}, b"f")
    clock, producer = FakeClock(now=1000.0), FakeProducer()
    worker = worker_with(clock, producer)
    consumer = RecordingConsumer(producer, refuse=KafkaError(KafkaError.ILLEGAL_GENERATION, "rebalancing"))
    worker.jobs.consuming.consumer = consumer
    task = start(worker, session, message(make_job(site.url("/f")), offset=3))
    await poll(lambda: bool(worker.jobs.consuming.marks), 5, "the job to wait for its mark")
    worker.jobs.consuming.commit_marks(consumer)
    assert (
        worker.jobs.consuming.membership.owns(TP) is True and len(worker.jobs.consuming.marks) == 1 and not task.done()
    )
    consumer.refuse = None
    worker.jobs.consuming.commit_marks(consumer)
    await poll(task.done, 5, "the report")
    await worker.jobs.reporter.publisher.settled()
    assert [fb.outcome for fb in producer.feedback()] == ["fetched"] and len(consumer.commits) == 2


async def test_a_request_on_its_way_when_the_partition_is_lost_is_not_reported(
    site: Site, session: aiohttp.ClientSession
) -> None:
    """A process frozen past its session with a request on its way (CI: a page published twice):
    at the thaw the group tells it the assignment is lost, then the response ends. The partition's
    new owner has read the job again and reports it; this worker publishes no page and commits
    nothing of that partition, and only a late signal goes out (a lease id no lease has), so the
    request's send time still reaches the host's throttling."""
    clock, producer = FakeClock(now=1000.0), FakeProducer()
    worker = worker_with(clock, producer)
    consumer = RecordingConsumer(producer)
    worker.jobs.consuming.consumer = consumer
    held = make_job(site.url("/hold"))
    job_lease = held.lease
    task = start(worker, session, message(held, offset=7))
    await poll(lambda: site.hits == ["/hold"], 5, "the request to be sent")
    worker.jobs.consuming.lose({TP}, "the group's assignment was lost")  # on_lost, at the thaw
    site.release.set()  # then the response ends
    await poll(task.done, 5, "the job to end")
    worker.jobs.consuming.commit_marks(consumer)
    await worker.jobs.reporter.publisher.settled()
    assert producer.pages() == [] and worker.jobs.consuming.marks == [] and consumer.commits == []
    [late] = producer.feedback()
    assert late.lease.endswith(LATE_SUFFIX) and late.lease != job_lease and late.sent_at > 0 and late.status == 200


async def test_a_mark_whose_partition_is_lost_before_its_commit_reports_nothing(
    site: Site, session: aiohttp.ClientSession
) -> None:
    """The loss comes between a job's mark and the commit: the commit carries the other partitions
    (accepted), not this one, and the job's report does not go."""
    site.routes["/g"] = (200, {}, b"g")
    clock, producer = FakeClock(now=1000.0), FakeProducer()
    worker = worker_with(clock, producer)
    consumer = RecordingConsumer(producer)
    worker.jobs.consuming.consumer = consumer
    worker.jobs.consuming.membership.assigned([("crawl.jobs", 1)])
    worker.jobs.tracker.started("crawl.jobs", 1, 2)  # a job of another partition, still open
    task = start(worker, session, message(make_job(site.url("/g")), offset=4))
    await poll(lambda: bool(worker.jobs.consuming.marks), 5, "the job to wait for its mark")
    worker.jobs.consuming.lose({TP}, "the group's assignment was lost")
    worker.jobs.consuming.commit_marks(consumer)
    await poll(task.done, 5, "the job to end")
    await worker.jobs.reporter.publisher.settled()
    assert site.hits == ["/g"] and producer.pages() == [] and [fb.lease[-5:] for fb in producer.feedback()] == ["~late"]
    assert consumer.commits == [([(2, None)], 0)]  # the other partition's point only


class PollingConsumer(RecordingConsumer):
    def poll(self, timeout: float) -> None:
        time.sleep(timeout)


async def test_a_report_after_the_worker_stopped_has_its_done_mark_committed_before_the_close() -> None:
    """A request on its way when the worker was told to stop (a Scrapy spider's SIGTERM with a
    download in flight) reports after the consumer's loop took its last job, and before the close
    (the spider's close waits for that report, then closes the worker): its done mark is committed
    by that loop until the close begins (it waited for ever: nothing committed it)."""
    producer, jumps = FakeProducer(), JumpClock()
    jobs = worker_with(FakeClock(now=1000.0), producer, jumps).jobs
    consumer = PollingConsumer(producer)
    jobs.consuming.consumer, jobs.consuming.loop = consumer, asyncio.get_running_loop()
    jobs.tracker.started(*TP, 3)
    poller = asyncio.ensure_future(jobs.consuming.run(consumer))
    jobs.stop()
    await jumps.advance(0.3)  # the loop took its last job
    leased: Any = SimpleNamespace(_coords=(*TP, 3))
    assert await asyncio.wait_for(jobs.consuming.mark_done(leased), 5) is True
    assert [points for points, _ in consumer.commits] == [[(4, None)]]
    assert not poller.done()
    jobs.consuming.finishing.set()  # the close begins: the loop ends, the close commits from now on
    await asyncio.wait_for(poller, 5)

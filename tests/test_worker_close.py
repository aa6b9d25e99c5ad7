"""A worker told to stop ends in a bounded time even when its broker does not answer: each call
into a Kafka client on the way out (the last done marks, the flush, leaving the group, which makes
the revoke's commit) is waited for within a bound, then abandoned in its daemon thread (CI saw an example worker
not stopped 30 s after SIGTERM; by hand, a worker ended only when its broker, frozen 80 s, came back:
88 s). The real broker's case is ``tests/integration/test_broker.py``."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from frontier.config import Config
from tests.fakes import FakeConsumer, FakeProducer, JumpClock, message
from topics.kafka import DeliveryError
from topics.schemas import Job, UrlItem
from workers.api import Jobs, consuming
from workers.api import jobs as jobs_module
from workers.api.caller import Abandoned, Serial, awaited_within
from workers.api.leased import LeasedJob
from workers.api.publishing import Publisher


class Unanswered(FakeConsumer):
    """A consumer whose commits and close wait for a broker that does not answer (until ``answer``)."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = threading.Event()

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> list[TopicPartition]:
        self.answer.wait(30)
        return super().commit(offsets, asynchronous)

    def close(self) -> None:
        self.answer.wait(30)
        super().close()


def test_serial_calls_give_their_result_or_exception_in_order_and_a_call_not_answered_is_given_up() -> None:
    serial = Serial("t")
    assert serial.within(1.0, lambda x: x + 1, 1) == 2
    with pytest.raises(ValueError, match="bad"):
        serial.within(1.0, int, "bad")
    release = threading.Event()
    order: list[str] = []
    started = time.monotonic()
    with pytest.raises(Abandoned):
        serial.within(0.2, lambda: (release.wait(30), order.append("first")))
    with pytest.raises(Abandoned):  # behind the one not answered: in its turn, after it
        serial.within(0.2, order.append, "second")
    assert time.monotonic() - started < 2 and order == []
    release.set()
    assert serial.within(5.0, order.append, "third") is None
    assert order == ["first", "second", "third"]


async def test_awaited_within_lets_the_event_loop_run_meanwhile() -> None:
    release = threading.Event()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.ensure_future(tick())
    with pytest.raises(Abandoned):
        await awaited_within(0.3, release.wait, 30)
    ticker.cancel()
    release.set()
    assert ticks >= 5, ticks
    assert await awaited_within(1.0, lambda: "done") == "done"


async def test_a_closing_worker_ends_when_its_clients_never_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs_module, "CLOSE_CLIENTS_WAIT", 0.6)
    monkeypatch.setattr(consuming, "COMMIT_WAIT", 0.4)
    jobs = Jobs(Config(), concurrency=2, name="closing", check_addresses=False)
    jobs.reporter.publisher = Publisher(FakeProducer(), jobs.cfg.topics)  # type: ignore[arg-type]
    jobs._bind()
    consumer = Unanswered()
    jobs.consuming.consumer = consumer  # type: ignore[assignment]
    jobs.consuming.tracker.started("crawl.jobs", 0, 5)
    jobs.consuming.tracker.finished("crawl.jobs", 0, 5)  # its mark's commit waits for the broker
    mark: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    jobs.consuming.marks.append((mark, time.monotonic(), ("crawl.jobs", 0)))  # a done mark still to commit
    started = time.monotonic()
    await asyncio.wait_for(jobs.close(), 10)
    took = time.monotonic() - started
    consumer.answer.set()
    assert took < 4 * 0.6 + 1, f"the close waited {took:.1f} s for clients that never answered"
    assert not consumer.closed  # (it was abandoned, not waited for)
    assert mark.result() is False  # never committed: its job is not reported (nobody waits for it forever)


def test_a_done_marks_commit_not_answered_is_an_error_and_the_mark_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job's report waits for its done mark; a commit the broker does not answer (librdkafka's
    waits for the coordinator with no limit) is given up after COMMIT_WAIT like a refused one: the
    consumer's loop goes on, and the mark is asked again (then goes after MARK_PATIENCE)."""
    monkeypatch.setattr(consuming, "COMMIT_WAIT", 0.3)
    jobs = Jobs(Config(), concurrency=2, name="marks", check_addresses=False)
    jobs.consuming.tracker.started("crawl.jobs", 0, 5)
    jobs.consuming.tracker.finished("crawl.jobs", 0, 5)
    consumer = Unanswered()
    jobs.consuming.marks.append((object(), time.monotonic(), ("crawl.jobs", 0)))  # type: ignore[arg-type]
    started = time.monotonic()
    jobs.consuming.commit_marks(consumer)  # type: ignore[arg-type]
    assert time.monotonic() - started < 2, "the loop waited for a commit the broker never answered"
    assert len(jobs.consuming.marks) == 1  # asked again at the next turn
    consumer.answer.set()


class Unacknowledged(FakeProducer):
    """A producer whose broker never acknowledges: every send waits, until ``abandon`` fails them."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[asyncio.Future[Any]] = []
        self.abandoned = False

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             partition: int | None = None) -> asyncio.Future[Any]:  # fmt: skip
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.abandoned:
            fut.set_exception(DeliveryError("given up"))
        else:
            self._record(topic, value, partition)
            self.waiting.append(fut)
        return fut

    def unanswered_for(self) -> float:
        return 60.0 if any(not f.done() for f in self.waiting) else 0.0

    def abandon(self) -> int:
        self.abandoned = True
        waiting = [f for f in self.waiting if not f.done()]
        for fut in waiting:
            fut.set_exception(DeliveryError("purged"))
        return len(waiting)


async def one_job_in_hand(clock: JumpClock, producer: FakeProducer) -> tuple[Jobs, LeasedJob, asyncio.Task[None]]:
    """Jobs on ``clock`` publishing through ``producer``, with one job consumed and handed over."""
    jobs = Jobs(Config(), concurrency=2, name="stopping", check_addresses=False, clock=clock)
    jobs.reporter.publisher = Publisher(producer, jobs.cfg.topics, clock)  # type: ignore[arg-type]
    jobs._bind()
    now = clock.now()
    job = Job(lease="A", item=UrlItem(url="http://127.0.0.93/x", host="127.0.0.93", domain="127.0.0.93"),
              not_before=now, expires_at=now + 300, timeout=5)  # fmt: skip
    consumed = jobs.consuming.take(message(job, offset=5))  # type: ignore[arg-type]
    leased = await jobs.get(5)
    assert leased is not None
    return jobs, leased, consumed


async def test_a_report_waiting_for_a_broker_that_never_answers_returns_once_the_stopped_worker_gives_up() -> None:
    """The blocking shapes report from the user's thread, which must get back to its loop to see
    the stop: a report waiting for an acknowledgement that never comes returns the fetch timeout
    and 5 s after stop(), unreported (its lease brings the job back), not after the 5 minutes of
    librdkafka's delivery timeout; before the stop it waits as long as the broker takes."""
    clock, producer = JumpClock(), Unacknowledged()
    jobs, leased, consumed = await one_job_in_hand(clock, producer)
    reporting = asyncio.ensure_future(leased.fetched(200, {}, b"ok"))
    await clock.advance(120)
    assert not reporting.done(), "a report gave up on the broker while the worker was not stopping"
    jobs.stop()
    await clock.advance(jobs.cfg.frontier.fetch_timeout + 4)
    assert not reporting.done(), "given up before the jobs in hand had their time"
    await clock.advance(2)
    await asyncio.wait_for(reporting, 5)
    await asyncio.wait_for(consumed, 5)
    assert producer.abandoned
    assert producer.feedback() == []  # nothing reported: the lease brings the job back


async def test_a_stopped_worker_whose_broker_answers_gives_nothing_up() -> None:
    """A report late after the stop (a Scrapy download that ends then) still goes while the broker
    answers: only a broker that does not answer is given up on."""
    clock, producer = JumpClock(), FakeProducer()
    jobs, leased, consumed = await one_job_in_hand(clock, producer)
    jobs.stop()
    await clock.advance(jobs.cfg.frontier.fetch_timeout + 30)
    await asyncio.wait_for(leased.fetched(200, {}, b"ok"), 5)
    await asyncio.wait_for(consumed, 5)
    await jobs.reporter.publisher.settled()
    assert [fb.lease for fb in producer.feedback()] == ["A"]
    assert not jobs.consuming.gave_up

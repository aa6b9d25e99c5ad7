"""An idle worker wakes up as little as it can: the consumer loop's polls and commits run on a
thread of their own (:class:`~workers.api.caller.Caller`, not ``asyncio.to_thread``'s executor),
and ``serve()`` waits for the stop or the consumer's end rather than looking ten times a second."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from tests.fakes import FakeConsumer, FakeProducer
from tests.test_worker_jobs import make_worker
from topics.kafka import AsyncProducer
from workers.api.caller import Caller
from workers.api.consuming import IDLE_POLL_WAIT, POLL_WAIT
from workers.api.jobs import PRODUCER_POLL_WAIT


async def test_calls_run_in_order_on_one_thread_and_return_or_raise() -> None:
    caller = Caller("calls-test")
    seen: list[tuple[int, str]] = []

    def note(i: int) -> int:
        seen.append((i, threading.current_thread().name))
        return i * 2

    def fail() -> None:
        raise ValueError("refused")

    assert await asyncio.gather(*(caller.call(note, i) for i in range(5))) == [0, 2, 4, 6, 8]
    assert seen == [(i, "calls-test") for i in range(5)]
    with pytest.raises(ValueError, match="refused"):
        await caller.call(fail)
    assert await caller.call(note, 7) == 14  # still serving after an exception
    thread = caller._thread
    caller.close()
    assert thread is not None
    await asyncio.to_thread(thread.join, 5)
    assert not thread.is_alive()


class PollingConsumer(FakeConsumer):
    """Polls for nothing, a little at a time, noting the thread each poll ran on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()
        self.polls = threading.Event()
        self.timeouts: list[float] = []

    def poll(self, timeout: float) -> None:
        self.threads.add(threading.current_thread().name)
        self.timeouts.append(timeout)
        self.polls.set()
        threading.Event().wait(min(timeout, 0.01))

    def assignment(self) -> list[Any]:
        return []


async def test_the_consumer_loop_polls_on_its_own_thread_not_the_default_executor() -> None:
    jobs = make_worker(FakeProducer()).jobs
    consumer = PollingConsumer()
    jobs.consuming.consumer = consumer
    poller = asyncio.ensure_future(jobs.consuming.run(consumer))  # type: ignore[arg-type]
    await asyncio.to_thread(consumer.polls.wait, 5)
    jobs.stop()
    jobs.consuming.finishing.set()
    await asyncio.wait_for(poller, 5)
    assert consumer.threads == {"consumer-calls"}
    thread = jobs.consuming.caller._thread
    assert thread is None  # closed with the loop


async def test_serve_waits_for_the_stop_without_looking_again_and_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle, ``serve()`` does not wake up ten times a second (it did: a sleep of 0.1 s in a loop);
    a stop from another thread ends it at once."""
    jobs = make_worker(FakeProducer()).jobs
    consumer_running: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    sleeps: list[float] = []

    async def start() -> None:
        jobs._poller = asyncio.ensure_future(consumer_running)

    async def close() -> None:
        consumer_running.cancel()

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        await asyncio.sleep(seconds)

    monkeypatch.setattr(jobs, "start", start)
    monkeypatch.setattr(jobs, "close", close)
    monkeypatch.setattr(jobs.clock, "sleep", sleep)

    async def handler(_: Any) -> None:
        return None

    serving = asyncio.ensure_future(jobs.serve(handler))
    await asyncio.sleep(0.35)
    assert not serving.done()
    threading.Thread(target=jobs.stop).start()
    await asyncio.wait_for(serving, 0.5)
    assert sleeps == []


async def test_an_idle_consumer_loop_polls_longer_than_one_with_jobs_in_hand() -> None:
    """No job in hand, no done mark waiting: nothing needs the loop before a job comes (which ends
    the poll at once), so it polls a quarter of a second; with a job in hand, a twentieth (its
    done mark is committed between two polls)."""
    jobs = make_worker(FakeProducer()).jobs
    consumer = PollingConsumer()
    jobs.consuming.consumer = consumer
    poller = asyncio.ensure_future(jobs.consuming.run(consumer))  # type: ignore[arg-type]
    await asyncio.to_thread(consumer.polls.wait, 5)
    jobs.tracker.started("crawl.jobs", 0, 7)
    deadline = asyncio.get_running_loop().time() + 5
    while consumer.timeouts[-1] != POLL_WAIT and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    jobs.stop()
    jobs.consuming.finishing.set()
    await asyncio.wait_for(poller, 5)
    assert consumer.timeouts[0] == IDLE_POLL_WAIT == 0.25 and consumer.timeouts[-1] == POLL_WAIT == 0.05


class PollCountingProducer:
    """A confluent-kafka producer as far as the poll thread sees it: the waits it was asked."""

    def __len__(self) -> int:  # records waiting for a delivery report
        return 0

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.polled = threading.Event()

    def poll(self, timeout: float) -> int:
        self.waits.append(timeout)
        self.polled.set()
        threading.Event().wait(0.01)
        return 0

    def flush(self, timeout: float) -> int:
        return 0


async def test_the_workers_producer_thread_waits_a_quarter_second_for_a_delivery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(It waited a twentieth: twenty wake-ups a second of an idle worker; a delivery ends the
    wait at once either way.)"""
    jobs = make_worker(FakeProducer()).jobs
    producer = PollCountingProducer()
    monkeypatch.setattr(jobs.kafka, "producer", lambda **_: producer)
    monkeypatch.setattr(jobs.kafka, "consumer", lambda *_, **__: PollingConsumer())
    monkeypatch.setattr(jobs.consuming, "start", lambda *_: None)
    await jobs.start()
    await asyncio.to_thread(producer.polled.wait, 5)
    await asyncio.to_thread(jobs.reporter.publisher.producer.close)
    assert producer.waits and set(producer.waits) == {PRODUCER_POLL_WAIT} and PRODUCER_POLL_WAIT == 0.25


class DeliveringProducer:
    """A confluent-kafka producer whose poll serves every delivery produced since the last one
    (as a poll does when the broker acknowledged a batch); a refused record fails its delivery."""

    def __len__(self) -> int:  # records waiting for a delivery report (served at each poll)
        return 0

    def __init__(self) -> None:
        self.pending: list[tuple[Any, str, bytes | None]] = []
        self.lock = threading.RLock()  # (the test holds it while it produces)
        self.served = threading.Event()

    def produce(self, topic: str, value: bytes | None, **kwargs: Any) -> None:
        with self.lock:
            self.pending.append((kwargs["on_delivery"], topic, value))

    def poll(self, timeout: float) -> int:
        with self.lock:
            pending, self.pending = self.pending, []
        for callback, topic, value in pending:
            error = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "refused") if value == b"refused" else None
            callback(error, (topic, value))
        if pending:
            self.served.set()
        threading.Event().wait(min(timeout, 0.01))
        return len(pending)

    def flush(self, timeout: float) -> int:
        return 0


class CountingLoop:
    """The event loop, counting the calls other threads hand it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.calls = 0

    def call_soon_threadsafe(self, callback: Any, *args: Any) -> Any:
        self.calls += 1
        return self.loop.call_soon_threadsafe(callback, *args)

    def create_future(self) -> asyncio.Future[Any]:
        return self.loop.create_future()


@pytest.mark.parametrize("batched", [False, True])
async def test_the_deliveries_of_one_poll_wake_the_event_loop_once(batched: bool) -> None:
    """Batched (the worker's producer), the records one poll delivered resolve their futures, in
    order, in one call on the event loop: not one wake-up of the loop per record. Unbatched, as
    before: one each."""
    producer = DeliveringProducer()
    loop = CountingLoop(asyncio.get_running_loop())
    with producer.lock:  # the five records are produced before the thread's first poll serves them
        out = AsyncProducer(producer, loop, poll_wait=0.01, batched=batched)  # type: ignore[arg-type]
        futures = [out.send("crawl.pages", f"{i}".encode()) for i in range(4)] + [out.send("crawl.pages", b"refused")]
    await asyncio.to_thread(producer.served.wait, 5)
    done, _ = await asyncio.wait(futures, timeout=5)
    assert len(done) == 5
    assert [f.result() for f in futures[:4]] == [("crawl.pages", f"{i}".encode()) for i in range(4)]
    with pytest.raises(KafkaException):
        futures[4].result()
    assert loop.calls == (1 if batched else 5)
    await asyncio.to_thread(out.close)


async def test_a_turn_with_done_marks_waiting_is_one_call_to_the_consumers_thread() -> None:
    """The marks waiting are committed, then the poll, in one call to the consumer's thread (it
    was two calls there and back a turn: the poll's, then the commit's); the mark is settled
    (its report may go) once the commit was made."""
    jobs = make_worker(FakeProducer()).jobs
    consuming = jobs.consuming
    consumer = PollingConsumer()
    consuming.consumer = consumer
    consuming.loop = asyncio.get_running_loop()
    calls: list[str] = []
    call = consuming.caller.call

    async def counted(fn: Any, *args: Any) -> Any:
        calls.append(fn.__name__)
        return await call(fn, *args)

    consuming.caller.call = counted  # type: ignore[method-assign]
    poller = asyncio.ensure_future(consuming.run(consumer))  # type: ignore[arg-type]
    await asyncio.to_thread(consumer.polls.wait, 5)
    jobs.tracker.started("crawl.jobs", 0, 7)
    jobs.tracker.finished("crawl.jobs", 0, 7)
    mark: asyncio.Future[bool] = consuming.loop.create_future()
    before = len(calls)
    consuming.marks.append((mark, jobs.clock.monotonic(), ("crawl.jobs", 0)))
    assert await asyncio.wait_for(mark, 5) is True
    assert consumer.commits == [[("crawl.jobs", 0, 8)]]
    jobs.stop()
    consuming.finishing.set()
    await asyncio.wait_for(poller, 5)
    assert "commit_marks" not in calls[before:] and calls[before] == "_take"

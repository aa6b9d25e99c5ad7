"""The stand-ins the unit tests share: a Kafka producer (:class:`FakeProducer`, both the asyncio one
and confluent-kafka's), a consumer (:class:`FakeConsumer`), a consumed message (:class:`FakeMessage`,
:func:`message`), a clock that moves only when told (:class:`FakeClock`) and the worker API's clock
that a test jumps instead of sleeping (:class:`JumpClock`)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from topics.schemas import Feedback, FeedbackBatch, Job, Page, Submission, decode, encode
from workers.api.clock import Clock

T = TypeVar("T")


class FakeProducer:
    """Records every record sent: ``records`` (topic, value) and ``sent`` (topic, value, partition:
    -1 when none was named). ``send`` returns the delivery's future (the asyncio producer's);
    ``send_nowait``, and ``produce`` / ``poll`` / ``flush`` (confluent-kafka's, delivery said at
    once) record the same. ``refuse(topic, value)`` returning a reason makes a delivery fail like a
    broker refusal; ``ack_delay`` is the simulated broker's acknowledgement time."""

    def __init__(self, refuse: Callable[[str, bytes], str | None] | None = None, ack_delay: float = 0.0) -> None:
        self.refuse = refuse or (lambda _topic, _value: None)
        self.ack_delay = ack_delay
        self.records: list[tuple[str, bytes]] = []
        self.sent: list[tuple[str, bytes | None, int]] = []
        self.unacked_at_feedback: list[int] = []  # records not yet acknowledged when each feedback was sent
        self._acks: list[asyncio.Future[Any]] = []

    def _record(self, topic: str, value: bytes | None, partition: int | None) -> None:
        self.records.append((topic, value or b""))
        self.sent.append((topic, value, -1 if partition is None else partition))

    def send(
        self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None
    ) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if topic.endswith("crawl.feedback"):
            self.unacked_at_feedback.append(sum(not f.done() for f in self._acks))
        self._record(topic, value, partition)
        reason = self.refuse(topic, value or b"")
        if reason:
            fut.set_exception(KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, reason)))
        elif self.ack_delay:
            loop.call_later(self.ack_delay, _resolve, fut)
        else:
            fut.set_result(None)
        self._acks.append(fut)
        return fut

    def send_nowait(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int = -1,
                    on_delivery: Any = None) -> None:  # fmt: skip
        self._record(topic, value, partition)

    def produce(self, topic: str, value: bytes, **kwargs: Any) -> None:
        self._record(topic, value, kwargs.get("partition"))
        kwargs["on_delivery"](None, None)

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        return 0

    def close(self, timeout: float = 30.0) -> None:
        pass

    def abandon(self) -> int:
        return 0

    def unanswered_for(self) -> float:
        return 0.0

    def values(self, suffix: str) -> list[bytes]:
        return [v for t, v in self.records if t.endswith(suffix)]

    def pages(self) -> list[Page]:
        return [decode(v, Page) for v in self.values("crawl.pages")]

    def feedback(self) -> list[Feedback]:
        return [fb for v in self.values("crawl.feedback") for fb in decode(v, FeedbackBatch).items]

    def submissions(self) -> list[Submission]:
        return [decode(v, Submission) for v in self.values("crawl.urls")]


def _resolve(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_result(None)


class FakeConsumer:
    """A confluent-kafka consumer as far as the tests drive it: ``commits`` (topic, partition,
    offset) in order, ``closed``; watermarks ``low``/``high`` (``asked``: how often), the
    position ``pos`` of every partition, and the partitions ``assigned``."""

    def __init__(self) -> None:
        self.commits: list[list[tuple[str, int, int]]] = []
        self.closed = False
        self.low, self.high = 0, 0
        self.asked = 0
        self.assigned: list[TopicPartition] = []
        self.pos = -1001  # the consumer's position: nothing fetched yet

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> list[TopicPartition]:
        self.commits.append([(tp.topic, tp.partition, tp.offset) for tp in offsets])
        return offsets

    def close(self) -> None:
        self.closed = True

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = 0, cached: bool = False) -> tuple[int, int]:
        self.asked += 1
        return self.low, self.high

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.pos) for tp in tps]

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        self.assigned.extend(tps)

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        pass


@dataclass
class FakeMessage:
    """What the worker reads of a consumed confluent-kafka message."""

    data: bytes
    offset_: int = 0
    topic_: str = "crawl.jobs"
    partition_: int = 0

    def value(self) -> bytes:
        return self.data

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def error(self) -> None:
        return None


def message(job: Job, offset: int = 0) -> FakeMessage:
    """``job`` as consumed from ``crawl.jobs`` (partition 0) at ``offset``."""
    return FakeMessage(encode(job), offset_=offset)


class FakeClock:
    """A clock read by calling it: ``now``, moved by the test, and ``step`` more at each read."""

    def __init__(self, step: float = 0.0, now: float = 0.0) -> None:
        self.now = now
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


class JumpClock(Clock):
    """The worker API's clock for tests: real time plus the jumps the test makes (:meth:`advance`).

    Every wait of the API on it (``sleep``, ``pause`` on a thread, ``wait_for``, ``call_at``) ends
    when its time has come on this clock, by real time passing or by a jump: a test moves a job's
    hold, expiry or lease past with one ``await clock.advance(s)`` instead of sleeping through it.
    """

    def __init__(self) -> None:
        self.offset = 0.0
        self._jumped = threading.Condition()
        self._waiters: set[asyncio.Future[None]] = set()
        self._timers: list[_Timer] = []

    def now(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    async def advance(self, seconds: float) -> None:
        """Let the event loop run what is ready (a wait just asked for starts from before the jump),
        jump ``seconds`` ahead; the waits whose time has come end, and the event loop runs them."""
        await _run_ready()
        with self._jumped:
            self.offset += seconds
            self._jumped.notify_all()
        for waiter in list(self._waiters):
            if not waiter.done():
                waiter.set_result(None)
        now = self.now()
        for timer in [t for t in self._timers if not t.done and t.when <= now]:
            timer.handle.cancel()
            asyncio.get_running_loop().call_soon(timer.fire)
        self._timers = [t for t in self._timers if not t.done]
        await _run_ready()

    async def lapse(self, aw: Awaitable[T], step: float = 0.05) -> T:
        """``aw``'s result, this clock jumping ``step`` ahead every few real milliseconds meanwhile
        (a time-lapse: what waits on the clock passes quickly, a real request takes its real time)."""
        task = asyncio.ensure_future(aw)
        while not task.done():
            await self.advance(step)
            await asyncio.wait({task}, timeout=0.002)
        return task.result()

    async def _until(self, deadline: float, task: asyncio.Future[Any] | None = None) -> None:
        """Wait until ``deadline`` (monotonic, this clock's) or until ``task`` is done."""
        loop = asyncio.get_running_loop()
        if deadline <= self.monotonic():
            await asyncio.sleep(0)
        while (left := deadline - self.monotonic()) > 0 and not (task is not None and task.done()):
            jumped: asyncio.Future[None] = loop.create_future()
            self._waiters.add(jumped)
            try:
                await asyncio.wait({jumped} if task is None else {jumped, task}, timeout=left,
                                   return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            finally:
                self._waiters.discard(jumped)

    async def sleep(self, seconds: float) -> None:
        await self._until(self.monotonic() + seconds)

    def pause(self, seconds: float) -> None:
        deadline = self.monotonic() + seconds
        with self._jumped:
            while (left := deadline - self.monotonic()) > 0:
                self._jumped.wait(left)

    async def wait_for(self, aw: Awaitable[T], timeout: float) -> T:
        task = asyncio.ensure_future(aw)
        try:
            await self._until(self.monotonic() + timeout, task)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if task.cancelled():
                raise TimeoutError
        return task.result()

    def call_at(self, when: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(when, callback)
        timer.handle = asyncio.get_running_loop().call_later(max(0.0, when - self.now()), timer.fire)
        self._timers.append(timer)
        return timer


async def _run_ready(turns: int = 20) -> None:
    """Let the event loop run ``turns`` times: the ready tasks' next steps, no real time passing."""
    for _ in range(turns):
        await asyncio.sleep(0)


class _Timer:
    """A :meth:`JumpClock.call_at` callback: run once, at its real time or at a jump past it."""

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.done = False
        self.handle: asyncio.TimerHandle | asyncio.Handle

    def fire(self) -> None:
        if not self.done:
            self.done = True
            self.callback()

    def cancel(self) -> None:
        self.done = True
        self.handle.cancel()

"""The fenced writes of an owned partition (frontier/service/writer.py), with a stand-in for the
transactional producer: records of a transaction become visible together, on commit; writes made
during a commit wait for the next one, in order; a failed commit (fenced by a newer owner) runs no
callback, reports the failure once, and the close says the store cannot be trusted."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaError, KafkaException

from frontier.partition.keys import ACK_KEY
from frontier.service.writer import PartitionWriter, WriteFailed, fenced
from tests.test_service_protocol import Recorder


async def until(condition: object, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.002)


async def test_records_of_a_transaction_become_visible_together_and_callbacks_run_after() -> None:
    rec = Recorder()
    writer = PartitionWriter(rec, "state", 3, applied=1)
    await writer.start()
    done: list[str] = []
    rec.hold.set()
    writer.write("state", b"v1", b"k1", 3)
    writer.write("jobs", b"job", b"host")
    writer.commit(lambda: done.append("first"))
    await until(lambda: writer._committing is not None)
    writer.write("state", b"v2", b"k2", 3)  # during the commit: held for the next transaction
    writer.commit(lambda: done.append("second"))
    assert rec.sent == [] and done == []
    rec.hold.clear()
    await until(lambda: done == ["first", "second"])
    assert [k for _, k, _ in rec.sent] == [b"k1", b"host", ACK_KEY, b"k2", ACK_KEY]
    assert rec.commits == 2
    assert writer.applied == 4  # the offset of the last marker: what a clean close records
    assert await writer.close() == 4


async def test_a_store_that_wrote_nothing_closes_at_the_offset_it_restored_to() -> None:
    writer = PartitionWriter(Recorder(), "state", 0, applied=17)
    await writer.start()
    assert await writer.close() == 17


class Fenced(Recorder):
    def commit_transaction(self, timeout: float) -> None:
        raise KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))

    def flush(self, timeout: float) -> int:  # a fenced producer raises its fatal error again (seen on the broker)
        raise KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))


async def test_a_fenced_commit_runs_no_callback_and_the_store_is_not_trusted() -> None:
    failures: list[WriteFailed] = []
    writer = PartitionWriter(Fenced(), "state", 2, applied=10, on_failure=failures.append)
    await writer.start()
    acked: list[int] = []
    writer.write("state", b"v", b"k", 2)
    writer.commit(lambda: acked.append(1))
    await until(lambda: failures)
    assert acked == [] and failures[0].fenced and "another instance owns it" in str(failures[0])
    writer.write("jobs", b"job", b"host")  # a zombie's later writes go nowhere
    writer.commit(lambda: acked.append(2))
    assert await writer.close() is None and acked == [] and len(failures) == 1


def test_only_fencing_errors_count_as_fenced() -> None:
    assert fenced(KafkaException(KafkaError(KafkaError.PRODUCER_FENCED)))
    assert fenced(KafkaException(KafkaError(KafkaError.INVALID_PRODUCER_EPOCH)))
    assert not fenced(KafkaException(KafkaError(KafkaError._TIMED_OUT)))
    assert not fenced(RuntimeError("x"))


async def test_input_waits_while_too_many_records_are_held_for_the_next_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    import frontier.service.writer as module

    rec = Recorder()
    writer = PartitionWriter(rec, "state", 0, applied=-1)
    monkeypatch.setattr(module, "MAX_PENDING", 3)
    try:
        rec.hold.set()
        writer.write("state", b"v", b"k0", 0)
        writer.commit()
        await until(lambda: writer._committing is not None)
        for n in range(5):
            writer.write("state", b"v", b"k%d" % (n + 1), 0)
        assert writer.crowded
        waiting = asyncio.ensure_future(writer.room())
        for _ in range(10):  # the commit is held: room() has nothing to wake it
            await asyncio.sleep(0)
        assert not waiting.done()
        rec.hold.clear()
        await asyncio.wait_for(waiting, 5)
    finally:
        rec.hold.clear()
    assert await writer.close() is not None
    assert [k for _, k, _ in rec.sent if k != ACK_KEY] == [b"k%d" % n for n in range(6)]


class GoneFatal(Recorder):
    """A producer fenced in the background (librdkafka's fatal error) before the next commit: the
    next produce raises it (seen on the broker after a frontier's freeze)."""

    def produce(self, topic: str, value: bytes | None = None, *args: object, **kwargs: object) -> None:
        raise KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error", fatal=True))


async def test_a_write_on_a_producer_gone_fatal_fails_the_partition_not_the_instance() -> None:
    failures: list[WriteFailed] = []
    writer = PartitionWriter(GoneFatal(), "state", 3, applied=5, on_failure=failures.append)
    await writer.start()
    acked: list[int] = []
    writer.write("jobs", b"job", b"host")  # raised out of the dispatch loop before: the instance crashed
    writer.commit(lambda: acked.append(1))
    assert len(failures) == 1 and writer.failed is not None and acked == []
    writer.write("jobs", b"job", b"host")  # later writes go nowhere, said once
    assert len(failures) == 1
    assert await writer.close() is None


class FencedWhileFlushing(Fenced):
    """What CI saw at e117264 (test_fencing, on the broker): the fatal error raised while a purged
    record's delivery callback was to run, surfacing from the callback as a SystemError."""

    def flush(self, timeout: float) -> int:
        fatal = KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))
        raise SystemError("<method 'offset'> returned a result with an exception set") from fatal


class BrokenFlush(Recorder):
    def flush(self, timeout: float) -> int:
        raise SystemError("not a fenced producer's")


async def test_a_fenced_writer_closes_whatever_its_flush_raises_for_the_fatal_error() -> None:
    failures: list[WriteFailed] = []
    writer = PartitionWriter(FencedWhileFlushing(), "state", 2, applied=10, on_failure=failures.append)
    await writer.start()
    writer.write("state", b"v", b"k", 2)
    writer.commit()
    await until(lambda: failures)
    assert await writer.close() is None and failures[0].fenced
    other = PartitionWriter(BrokenFlush(), "state", 2, applied=10)
    await other.start()
    with pytest.raises(SystemError):  # any other SystemError is a bug to see, not a release to hide
        await other.close()


async def test_a_transaction_sends_the_last_value_written_to_each_changelog_key_once() -> None:
    """A host's state written by a result and again by its next job's send: one changelog record of
    the transaction (its last value); the other records go after them, in the order written; a key
    written again during a commit goes again in the next transaction."""
    rec = Recorder()
    writer = PartitionWriter(rec, "state", 1, applied=-1)
    await writer.start()
    rec.hold.set()
    writer.write("state", b"h1", b"Hhost", 1)
    writer.write("state", b"l1", b"Llease", 1)
    writer.write("jobs", b"job1", b"host")
    writer.write("state", b"h2", b"Hhost", 1)
    writer.write("state", None, b"Qentry", 1)
    writer.write("jobs", b"job2", b"host")
    writer.commit()
    await until(lambda: writer._committing is not None)
    writer.write("state", b"h3", b"Hhost", 1)  # during the commit: the next transaction's
    rec.hold.clear()
    assert await writer.close() is not None
    assert rec.sent == [("state", b"Hhost", b"h2"), ("state", b"Llease", b"l1"), ("state", b"Qentry", None),
                        ("jobs", b"host", b"job1"), ("jobs", b"host", b"job2"), ("state", ACK_KEY, None),
                        ("state", b"Hhost", b"h3"), ("state", ACK_KEY, None)]  # fmt: skip
    assert rec.commits == 2


class QueueFull(Recorder):
    """A producer whose local queue is full for the first record of each transaction."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1,
                on_delivery: object = None) -> None:  # fmt: skip
        if not self.open and self.refused <= self.commits:
            self.refused += 1
            raise BufferError("Local: Queue full")
        super().produce(topic, value, key, partition, on_delivery)


async def test_records_a_full_queue_refused_are_sent_once_it_has_room() -> None:
    rec = QueueFull()
    writer = PartitionWriter(rec, "state", 0, applied=-1)
    await writer.start()
    for n in range(3):
        writer.write("state", b"v", b"k%d" % n, 0)
    writer.write("jobs", b"job", b"host")
    writer.commit()
    assert await writer.close() is not None
    assert rec.refused == 1 and [k for _, k, _ in rec.sent] == [b"k0", b"k1", b"k2", b"host", ACK_KEY]


async def test_records_written_within_the_group_window_wait_for_one_transaction() -> None:
    """Issue 39: with 50 crawls each small feedback record started a transaction of its own as
    soon as the last one ended (128 transactions per 1,000 jobs against 2 with one crawl). The
    next transaction begins ``window`` after the last one began: what is written meanwhile goes
    in it, and its callbacks run once it committed; after a quiet spell a write goes at once."""
    rec = Recorder()
    writer = PartitionWriter(rec, "state", 0, applied=-1)
    writer.window = 0.3
    now = [100.0]
    writer.clock = lambda: now[0]  # the window's clock: moved by hand below
    await writer.start()
    done: list[str] = []
    writer.write("state", b"v1", b"k1", 0)
    writer.commit(lambda: done.append("k1"))  # the first: at once
    await until(lambda: done == ["k1"])
    for n in (2, 3, 4):
        writer.write("state", b"v%d" % n, b"k%d" % n, 0)
        writer.commit(lambda n=n: done.append(f"k{n}"))  # type: ignore[misc]
        await asyncio.sleep(0)  # (a turn of the loop each: the window, 0.3 s, is far off)
    assert rec.commits == 1 and done == ["k1"]  # within the window: none committed yet
    now[0] += 0.3  # the window passes (its timer, 0.3 s of the loop's own time, then finds it ended)
    await until(lambda: len(done) == 4)
    assert rec.commits == 2 and done == ["k1", "k2", "k3", "k4"]
    assert [k for _, k, _ in rec.sent] == [b"k1", ACK_KEY, b"k2", b"k3", b"k4", ACK_KEY]
    now[0] += 0.3  # a quiet spell: the next write goes at once
    writer.write("state", b"v5", b"k5", 0)
    writer.commit(lambda: done.append("k5"))
    assert writer._committing is not None and rec.open[:1] == [("state", b"k5", b"v5")]
    assert await writer.close() is not None and rec.commits == 3


async def test_a_close_does_not_wait_for_the_group_window() -> None:
    """A rebalance closes every partition it takes away, one after another: what is left goes at once."""
    rec = Recorder()
    writer = PartitionWriter(rec, "state", 0, applied=-1)
    writer.window = 30.0
    await writer.start()
    writer.write("state", b"v1", b"k1", 0)
    writer.commit()
    await until(lambda: rec.commits == 1)
    writer.write("state", b"v2", b"k2", 0)
    writer.commit()  # within the window
    assert await asyncio.wait_for(writer.close(), 5) is not None
    assert rec.commits == 2 and [k for _, k, _ in rec.sent] == [b"k1", ACK_KEY, b"k2", ACK_KEY]


async def test_a_commit_someone_waits_on_does_not_wait_for_the_group_window() -> None:
    """Issue 39, the gateway: a hold's answer goes once its commit is in (questions.answer); the
    group window delayed every hold by up to ``window`` (the gateway read 0.90 of the code before
    it). An urgent commit ends a window under way, taking what was written in it; one asked while
    a commit is in flight goes right after it."""
    rec = Recorder()
    writer = PartitionWriter(rec, "state", 0, applied=-1)
    writer.window = 30.0
    now = [100.0]
    writer.clock = lambda: now[0]  # (never moved: the window never passes on its own)
    await writer.start()
    done: list[str] = []
    writer.write("state", b"v1", b"k1", 0)
    writer.commit(lambda: done.append("k1"))  # the first: at once
    await until(lambda: done == ["k1"])
    writer.write("state", b"v2", b"k2", 0)
    writer.commit(lambda: done.append("k2"))  # within the window: waits
    await asyncio.sleep(0)
    writer.write("state", b"v3", b"k3", 0)
    writer.commit(lambda: done.append("k3"), urgent=True)  # an asker waits: the window ends now
    await asyncio.wait_for(until(lambda: done == ["k1", "k2", "k3"]), 5)
    assert rec.commits == 2 and [k for _, k, _ in rec.sent] == [b"k1", ACK_KEY, b"k2", b"k3", ACK_KEY]
    rec.hold.set()  # the next commit stays in flight
    writer.write("state", b"v4", b"k4", 0)
    writer.commit(lambda: done.append("k4"), urgent=True)
    await until(lambda: len(rec.open) == 2)  # k4 and its marker, their commit held
    writer.write("state", b"v5", b"k5", 0)
    writer.commit(lambda: done.append("k5"), urgent=True)  # during the commit: right after it
    rec.hold.clear()
    await asyncio.wait_for(until(lambda: done[-1:] == ["k5"]), 5)
    assert rec.commits == 4
    writer.write("state", b"v6", b"k6", 0)
    writer.commit(lambda: done.append("k6"))  # not urgent: the window again
    for _ in range(5):
        await asyncio.sleep(0)
    assert done[-1] == "k5" and rec.commits == 4
    assert await writer.close() is not None and done[-1] == "k6"


async def test_a_hold_asked_by_a_gateway_is_committed_without_the_group_window() -> None:
    """questions.answer: the gateway waits for a hold's (or a deletion's) answer, sent once its
    commit is in: it asks the partition's writer for an urgent commit."""
    from unittest.mock import MagicMock

    from frontier.service.questions import Questions
    from topics.schemas import Query, Reply

    owned = MagicMock()
    owned.applied_before.return_value = False
    owned.frontier.change.return_value = Reply(id="q", partition=0, counts={"held": 1}, leases=["L"])

    async def room() -> None:
        return None

    async def serving(p: int) -> object:
        return owned

    owned.writer.room = room
    partitions = MagicMock()
    partitions.serving = serving
    questions = Questions(lambda: 0.0, MagicMock(), partitions, MagicMock(), lambda: None)
    await questions.answer(0, Query(id="q", kind="hold", reply_to="gw", leases=["L"], until=10.0), MagicMock())
    assert owned.commit.call_count == 1 and owned.commit.call_args.kwargs.get("urgent") is True

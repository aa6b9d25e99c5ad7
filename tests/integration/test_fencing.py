"""Zombie fencing on the real broker (issue 27): the instance that opens a partition takes the
partition's transactional id, and from then on nothing the previous owner writes counts. Its
changelog records and jobs never reach a read_committed reader (workers, restores), and its
writer reports the partition fenced."""

from __future__ import annotations

import asyncio
import uuid

from confluent_kafka import TopicPartition

from frontier.service.restore import replay
from frontier.service.rocks import RocksKV
from frontier.service.writer import PartitionWriter, WriteFailed
from topics.admin import create_all
from topics.catalog import Topics
from topics.kafka import Kafka


async def committed(writer: PartitionWriter) -> None:
    done = asyncio.Event()
    writer.commit(done.set)
    await asyncio.wait_for(done.wait(), 30)


def jobs_seen(kafka: Kafka, topic: str) -> list[bytes]:
    reader = kafka.reader("fencing", {"enable.partition.eof": True, "auto.offset.reset": "earliest"})
    reader.assign([TopicPartition(topic, 0, 0)])
    seen: list[bytes] = []
    try:
        for _ in range(100):
            msg = reader.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                break  # end of the partition (read_committed: up to the last stable offset)
            seen.append(msg.value() or b"")
    finally:
        reader.close()
    return seen


async def test_a_zombie_owner_writes_nothing_that_counts(bootstrap: str, tmp_path: object) -> None:
    topics = Topics(prefix=f"f{uuid.uuid4().hex[:8]}.", partitions=1)
    kafka = Kafka({"bootstrap.servers": bootstrap})
    create_all(kafka, topics)
    tid = f"{topics.prefix}frontier-p0"
    failures: list[WriteFailed] = []
    old = PartitionWriter(kafka.producer(**{"transactional.id": tid}), topics.state, 0, -1, on_failure=failures.append)
    await old.start()
    old.write(topics.state, b"lease-1", b"L1", 0)
    old.write(topics.jobs, b"job-1", b"host", 0)
    await committed(old)
    # the instance freezes; another takes the partition over (its writer opens first: fences the old one)
    new = PartitionWriter(kafka.producer(**{"transactional.id": tid}), topics.state, 0, -1)
    await new.start()
    new.write(topics.state, b"lease-2", b"L2", 0)
    new.write(topics.jobs, b"job-2", b"host", 0)
    await committed(new)
    # the old one thaws and carries on: a lease, a deletion and a job
    old.write(topics.state, b"zombie", b"L9", 0)
    old.write(topics.state, None, b"L2", 0)
    old.write(topics.jobs, b"zombie-job", b"host", 0)
    old.commit()
    deadline = asyncio.get_running_loop().time() + 30
    while not failures:
        assert asyncio.get_running_loop().time() < deadline, "the zombie's commit was not refused"
        await asyncio.sleep(0.05)
    assert failures[0].fenced
    assert await old.close() is None  # its store holds what the changelog does not: no clean marker
    assert await new.close() is not None
    assert jobs_seen(kafka, topics.jobs) == [b"job-1", b"job-2"]  # the zombie's job never reaches a worker
    kv = RocksKV(tmp_path / "p0")  # type: ignore[operator]
    try:
        replay(kv, kafka, topics.state, 0, -2)  # a restore from the beginning
        assert kv.get(b"L1") == b"lease-1" and kv.get(b"L2") == b"lease-2" and kv.get(b"L9") is None
    finally:
        kv.close()

"""Durable per-partition state: open a partition's RocksDB, restore it from the changelog topic,
and close it cleanly so the next owner knows how far the local copy can be trusted.

Recovery rule (as faust's RocksDB store does, made stricter): the local database is trusted only
if it was closed cleanly or kept as a standby copy (see ``frontier.standby``), in which case it
records the changelog offset it is complete up to and only newer changelog records are replayed.
After a crash the local files are wiped and the partition is rebuilt from the whole (compacted)
changelog, so nothing that was never acknowledged by Kafka survives locally and diverges.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from frontier.kafka_io import watermarks
from frontier.store import META, RocksKV

log = logging.getLogger(__name__)

CLEAN_KEY = META + b"clean-offset"  # present only while the database is closed cleanly
STANDBY_KEY = META + b"standby-offset"  # a standby copy: only changelog records, applied up to here


def db_path(state_dir: str | Path, app_id: str, partition: int) -> Path:
    return Path(state_dir) / app_id / f"p{partition}"


def open_partition(path: Path, client_conf: dict[str, Any], topic: str, partition: int) -> tuple[RocksKV, int]:
    """Open (and restore) one partition's store. Returns the store and the number of records replayed.

    Blocking: call it from a thread.
    """
    start: int = OFFSET_BEGINNING
    if path.exists():
        kv = RocksKV(path)
        marker = kv.get(CLEAN_KEY) or kv.get(STANDBY_KEY)
        if marker is not None:
            start = int(marker) + 1
            kv.delete(CLEAN_KEY)  # from now on the local copy is "dirty" until closed cleanly
            kv.delete(STANDBY_KEY)
        else:
            kv.close()
            RocksKV.destroy(path)
            kv = RocksKV(path)
    else:
        kv = RocksKV(path)
    replayed = replay(kv, client_conf, topic, partition, start)
    return kv, replayed


def replay(kv: RocksKV, client_conf: dict[str, Any], topic: str, partition: int, start: int) -> int:
    """Apply changelog records from ``start`` up to the current end of the partition."""
    consumer = Consumer(
        {
            **client_conf,
            "group.id": f"restore-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        low, high = watermarks(consumer, topic, partition)
        first = low if start == OFFSET_BEGINNING else max(start, low)
        if first >= high:
            return 0
        consumer.assign([TopicPartition(topic, partition, first)])
        count = 0
        while True:
            msgs: list[Message] = consumer.consume(10000, timeout=1.0)
            done = False
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done = True  # reached the end of the changelog
                        continue
                    raise RuntimeError(f"changelog restore of {topic}[{partition}] failed: {err}")
                key = msg.key()
                if key is None:
                    continue
                value = msg.value()
                if value is None:
                    kv.delete(key)
                else:
                    kv.put(key, value)
                count += 1
                if (msg.offset() or 0) >= high - 1:
                    done = True
            if done:
                return count
    finally:
        consumer.close()


def close_partition(kv: RocksKV, last_offset: int) -> None:
    """Mark the store clean at ``last_offset`` (every write up to it is in the changelog), then close."""
    kv.put(CLEAN_KEY, str(last_offset).encode())
    kv.close()


def changelog_end(client_conf: dict[str, Any], topic: str, partition: int) -> int:
    """The offset of the last record in the changelog partition (-1 when empty)."""
    consumer = Consumer({**client_conf, "group.id": f"restore-{uuid.uuid4().hex}"})
    try:
        _, high = watermarks(consumer, topic, partition)
        return high - 1
    finally:
        consumer.close()

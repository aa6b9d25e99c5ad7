"""Standby replicas: warm copies of partitions this instance does not own.

A background thread tails the changelog of every partition this instance does not own into
that partition's local RocksDB, recording the last applied offset under ``STANDBY_KEY``. Such a
copy holds nothing but changelog records, so it can be trusted up to that offset: when the
partition is assigned here (a takeover after a crash, a rebalance), only the tail is replayed.

All RocksDB access for standby partitions happens on the standby thread; the service asks for a
partition back with :meth:`Standby.release` before opening it as active.
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from frontier.state import CLEAN_KEY, STANDBY_KEY, db_path
from frontier.store import RocksKV

log = logging.getLogger(__name__)


class Standby:
    def __init__(self, client: dict[str, Any], topic: str, state_dir: str, app_id: str) -> None:
        self._client = client
        self._topic = topic
        self._state_dir = state_dir
        self._app_id = app_id
        self._control: queue.Queue[tuple[str, int, threading.Event | None]] = queue.Queue()
        self._stores: dict[int, RocksKV] = {}
        self._applied: dict[int, int] = {}
        self.partitions: set[int] = set()  # wanted as standby (maintained by the caller's thread)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="standby", daemon=True)
        self._thread.start()

    def add(self, partition: int) -> None:
        if partition not in self.partitions:
            self.partitions.add(partition)
            self._control.put(("add", partition, None))

    def release(self, partition: int, timeout: float = 60.0) -> None:
        """Stop tailing ``partition`` and close its store (blocking), so it can be opened as active."""
        self.partitions.discard(partition)
        done = threading.Event()
        self._control.put(("remove", partition, done))
        done.wait(timeout)

    def close(self) -> None:
        for p in list(self.partitions):
            self.release(p)
        self._stop.set()
        self._thread.join(timeout=10)

    # -- the thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        consumer = Consumer({**self._client, "group.id": f"standby-{uuid.uuid4().hex}", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest"})  # fmt: skip
        try:
            while not self._stop.is_set():
                self._handle_control(consumer)
                if not self._stores:
                    self._stop.wait(0.2)
                    continue
                for msg in consumer.consume(2000, timeout=0.2):
                    if msg.error() is not None or msg.key() is None:
                        continue
                    p = msg.partition()
                    kv = self._stores.get(p) if p is not None else None
                    if kv is None or p is None:
                        continue
                    value = msg.value()
                    if value is None:
                        kv.delete(msg.key())  # type: ignore[arg-type]
                    else:
                        kv.put(msg.key(), value)  # type: ignore[arg-type]
                    self._applied[p] = msg.offset() or 0
                for p, offset in self._applied.items():
                    if p in self._stores:
                        self._stores[p].put(STANDBY_KEY, str(offset).encode())
        except Exception:
            log.exception("standby replication stopped")
        finally:
            for p in list(self._stores):
                self._close(consumer, p)
            consumer.close()

    def _handle_control(self, consumer: Consumer) -> None:
        while True:
            try:
                action, p, done = self._control.get_nowait()
            except queue.Empty:
                return
            if action == "add" and p not in self._stores:
                self._open(consumer, p)
            elif action == "remove":
                if p in self._stores:
                    self._close(consumer, p)
                if done is not None:
                    done.set()

    def _open(self, consumer: Consumer, p: int) -> None:
        path: Path = db_path(self._state_dir, self._app_id, p)
        kv = RocksKV(path)
        marker = kv.get(CLEAN_KEY) or kv.get(STANDBY_KEY)
        if marker is None:
            kv.close()  # a crashed active copy: not trustworthy, rebuild from the changelog
            RocksKV.destroy(path)
            kv = RocksKV(path)
            start = OFFSET_BEGINNING
        else:
            start = int(marker) + 1
            kv.delete(CLEAN_KEY)
            kv.put(STANDBY_KEY, marker)
        self._stores[p] = kv
        consumer.incremental_assign([TopicPartition(self._topic, p, start)])
        log.info("standby for partition %d from changelog offset %s", p, "start" if marker is None else start)

    def _close(self, consumer: Consumer, p: int) -> None:
        consumer.incremental_unassign([TopicPartition(self._topic, p)])
        kv = self._stores.pop(p)
        if p in self._applied:
            kv.put(STANDBY_KEY, str(self._applied.pop(p)).encode())
        kv.close()

"""Standby replicas: warm copies of partitions this instance does not own.

A background thread tails the changelog of every partition this instance does not own into
that partition's local RocksDB, recording the last applied offset under ``STANDBY_KEY``. Such a
copy holds nothing but changelog records, so it can be trusted up to that offset: when the
partition is assigned here (a takeover after a crash, a rebalance), only the tail is replayed.

It also records under ``STANDBY_AT_KEY`` a wall-clock time before which every changelog record
is in the copy: every ``probe_interval`` seconds the thread notes the time and asks for the
partition's high watermark; once the copy has applied everything below that watermark, the
noted time is recorded. A copy left behind for longer than the changelog keeps tombstones is
then rebuilt instead of tailed (``frontier.service.restore.restore_plan``), as is a clean copy of a formerly
owned partition that is too old when it becomes a standby.

All RocksDB access for standby partitions happens on the standby thread; the service asks for a
partition back with :meth:`Standby.release` before opening it as active.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from frontier.partition.counts import QueueCounts
from frontier.partition.keys import CLEAN_AT_KEY, CLEAN_KEY, STANDBY_AT_KEY, STANDBY_KEY
from frontier.service.restore import (
    Plan,
    db_path,
    delete_retention,
    encode_time,
    local_copy,
    restore_plan,
)
from frontier.service.rocks import RocksKV
from topics.kafka import Connection, Kafka, watermarks

log = logging.getLogger(__name__)

PROBE_INTERVAL = 30.0  # seconds between high-watermark probes of one standby partition
PROBE_TIMEOUT = 2.0  # seconds one probe may take
RETENTION_TTL = 300.0  # seconds a read delete.retention.ms is reused
SETTLE_AT = 1024  # queues changed since a copy's counts were settled: counted again past this


@dataclass(frozen=True, slots=True)
class _Probe:
    at: float  # wall-clock time noted before asking
    low: int
    high: int  # every record written before ``at`` has an offset below this


class Standby:
    def __init__(
        self,
        client: Connection,
        topic: str,
        state_dir: str,
        app_id: str,
        clock: Callable[[], float] = time.time,
        retention: float | None = None,
        probe_interval: float = PROBE_INTERVAL,
    ) -> None:
        self._client = Kafka.of(client)
        self._topic = topic
        self._state_dir = state_dir
        self._app_id = app_id
        self._clock = clock  # wall clock: compared with the broker's tombstone retention
        self._retention = retention  # delete.retention.ms in seconds; None: read from the topic
        self._retention_read: tuple[float, float] | None = None  # (value, when read)
        self._probe_interval = probe_interval
        self._control: queue.Queue[tuple[str, int, threading.Event | None]] = queue.Queue()
        self._stores: dict[int, RocksKV] = {}
        self._applied: dict[int, int] = {}
        self._start: dict[int, int | None] = {}  # next offset wanted at open; None: from the beginning
        self._probes: dict[int, _Probe] = {}
        self._asked: dict[int, float] = {}
        self._caught_up_once: set[int] = set()  # copies whose catching up was logged
        # each caught-up copy's queue counts, kept as records are applied, and those handed
        # over with a released copy (read by the caller once release returned)
        self._counts: dict[int, QueueCounts] = {}
        self._handed: dict[int, QueueCounts] = {}
        self.partitions: set[int] = set()  # wanted as standby (maintained by the caller's thread)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="standby", daemon=True)
        self._thread.start()

    def add(self, partition: int) -> None:
        if partition not in self.partitions:
            self.partitions.add(partition)
            self._control.put(("add", partition, None))

    def release(self, partition: int, timeout: float = 60.0) -> bool:
        """Stop tailing ``partition`` and close its store (blocking), so it can be opened as active;
        False when the standby thread did not hand it back within ``timeout`` (or has stopped)."""
        self.partitions.discard(partition)
        if not self._thread.is_alive():
            return True  # stopped: its stores were closed as it ended
        done = threading.Event()
        self._control.put(("remove", partition, done))
        return done.wait(timeout)

    def counts(self, partition: int) -> QueueCounts | None:
        """The queue counts of the copy of ``partition`` :meth:`release` handed back (once: None
        when it had none), at the offset it was complete up to."""
        return self._handed.pop(partition, None)

    def retention(self) -> float | None:
        """The changelog's ``delete.retention.ms`` in seconds as last read (within
        ``RETENTION_TTL``), None when not known: an open of a partition need not ask again."""
        if self._retention is not None:
            return self._retention
        read = self._retention_read
        return read[0] if read is not None and time.monotonic() - read[1] <= RETENTION_TTL else None

    def applied(self, partition: int) -> int | None:
        """The last changelog offset applied to the standby copy of ``partition`` (None: none yet)."""
        return self._applied.get(partition)

    def close(self) -> None:
        for p in list(self.partitions):
            self.release(p)
        self._stop.set()
        self._thread.join(timeout=10)

    # -- the thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        consumer = self._client.reader("standby", {"enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            while not self._stop.is_set():
                self._handle_control(consumer)
                if not self._stores:
                    self._stop.wait(0.2)
                    continue
                self._apply(consumer.consume(2000, timeout=0.2))
                self._probe_all(consumer)
                if self._caught_up_once:  # known ahead for a takeover's open (read again once stale)
                    self._delete_retention()
        except Exception:
            log.exception("standby replication stopped")
        finally:
            for p in list(self._stores):
                self._close(consumer, p)
            consumer.close()

    def _apply(self, msgs: list[Message]) -> None:
        """Apply consumed changelog records to their copies: each copy's records and the offset
        they reach in one RocksDB write (not one per record), counted applied once written."""
        batches: dict[int, list[tuple[bytes, bytes | None]]] = {}
        reached: dict[int, int] = {}
        for msg in msgs:
            if msg.error() is not None:
                continue
            p = msg.partition()
            if p is None or p not in self._stores:
                continue
            key = msg.key()
            if key is not None:  # (none: nothing to apply, but the copy is complete past it)
                batches.setdefault(p, []).append((key, msg.value()))
            reached[p] = msg.offset() or 0
        for p, offset in reached.items():
            records = batches.get(p, [])
            self._stores[p].write_many([*records, (STANDBY_KEY, str(offset).encode())])
            self._applied[p] = offset
            counts = self._counts.get(p)
            if counts is not None:
                for key, value in records:
                    counts.touched(key, value)
                if len(counts.dirty) > SETTLE_AT:
                    counts.settle(self._stores[p])

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
                    self._close(consumer, p, ask=False)
                if done is not None:
                    done.set()

    def _delete_retention(self) -> float:
        if self._retention is not None:
            return self._retention
        now = time.monotonic()
        if self._retention_read is None or now - self._retention_read[1] > RETENTION_TTL:
            self._retention_read = (delete_retention(self._client, self._topic), now)
        return self._retention_read[0]

    def _plan(self, consumer: Consumer, p: int, offset: int, at: float | None) -> Plan:
        try:
            low, high = watermarks(consumer, self._topic, p)
        except KafkaException as exc:
            return Plan(False, f"changelog watermarks unknown ({exc})")
        return restore_plan(offset, at, self._clock(), self._delete_retention(), low, high)

    def _open(self, consumer: Consumer, p: int) -> None:
        path: Path = db_path(self._state_dir, self._app_id, p)
        kv = RocksKV(path)
        copy = local_copy(kv)
        plan = self._plan(consumer, p, copy.offset, copy.at) if copy is not None else None
        if copy is not None and plan is not None and plan.trust:
            start = copy.offset + 1
            self._start[p] = start
            kv.delete(CLEAN_KEY)
            kv.delete(CLEAN_AT_KEY)
            kv.put(STANDBY_KEY, str(copy.offset).encode())
            if copy.at is not None:
                kv.put(STANDBY_AT_KEY, encode_time(copy.at))
        else:
            # a crashed active copy, or one too old to be completed by the changelog's tail
            if plan is not None:
                log.info("standby for partition %d: local state not trusted (%s), rebuilding", p, plan.reason)
            kv.close()
            RocksKV.destroy(path)
            kv = RocksKV(path)
            start = OFFSET_BEGINNING
            self._start[p] = None
        self._stores[p] = kv
        self._handed.pop(p, None)
        consumer.incremental_assign([TopicPartition(self._topic, p, start)])
        log.info(
            "standby for partition %d from changelog offset %s", p, "start" if start == OFFSET_BEGINNING else start
        )

    def _close(self, consumer: Consumer, p: int, ask: bool = True) -> None:
        """Stop tailing ``p`` and close its copy. ``ask``: ask the broker once more how far the
        changelog goes, to record a recent completion time. Not when the copy is handed back to
        become the active store (:meth:`release`): that open reads the watermarks itself, and
        the time recorded at the last probe caught up with (at most a probe interval old) is
        one before which the copy holds every record, so it is as safe, and a takeover is not
        held up by a round trip per partition. (A copy that has not caught up with a probe yet
        is asked about all the same: it has no such time.)"""
        consumer.incremental_unassign([TopicPartition(self._topic, p)])
        self._probe(consumer, p, final=True, ask=ask or p not in self._caught_up_once)
        kv = self._stores.pop(p)
        counts = self._counts.pop(p, None)
        offset = self._applied.pop(p, None)
        if offset is not None:
            kv.put(STANDBY_KEY, str(offset).encode())
        elif (start := self._start.get(p)) is not None:
            offset = start - 1  # trusted up to there at open, nothing applied since
        if counts is not None and offset is not None and not ask:  # handed back to become the active store
            counts.settle(kv)
            counts.offset = offset
            self._handed[p] = counts
        self._start.pop(p, None)
        self._probes.pop(p, None)
        self._asked.pop(p, None)
        self._caught_up_once.discard(p)
        kv.close()

    # -- when was each copy complete ----------------------------------------------------------------
    def _next_offset(self, p: int) -> int | None:
        """The next changelog offset the copy of ``p`` needs (None: it has applied nothing yet, from the start)."""
        if p in self._applied:
            return self._applied[p] + 1
        return self._start.get(p)

    def _caught_up(self, p: int, probe: _Probe, position: int | None = None) -> bool:
        """Whether the copy holds every record below the probe's high watermark: its next offset,
        or the consumer's position (past transaction markers and aborted records, which it skips)."""
        nxt = self._next_offset(p)
        if position is not None and position >= 0:
            nxt = max(nxt or 0, position)
        if nxt is None:
            return probe.low >= probe.high  # nothing applied, nothing to apply
        return nxt >= probe.high

    def _probe_all(self, consumer: Consumer) -> None:
        for p in list(self._stores):
            self._probe(consumer, p)

    def _probe(self, consumer: Consumer, p: int, final: bool = False, ask: bool = True) -> None:
        """Record the time of a probe the copy has caught up with; ask again when one is due
        (or on ``final``, when the copy is being closed), unless not to ``ask``."""
        kv = self._stores[p]
        pending = self._probes.get(p)
        position = self._position(consumer, p)
        if pending is not None and self._caught_up(p, pending, position):
            self._record(kv, p, pending.at, final)
            del self._probes[p]
            pending = None
        if not ask:
            return
        now = self._clock()
        due = now - self._asked.get(p, -math.inf) >= self._probe_interval
        if not final and (pending is not None or not due):
            return
        self._asked[p] = now
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(self._topic, p), timeout=PROBE_TIMEOUT)
        except KafkaException as exc:
            log.debug("standby probe of partition %d failed: %s", p, exc)
            return
        probe = _Probe(now, int(low), int(high))
        if self._caught_up(p, probe, position):
            self._record(kv, p, probe.at, final)
        elif pending is None:
            self._probes[p] = probe

    def _position(self, consumer: Consumer, p: int) -> int | None:
        try:
            offset = consumer.position([TopicPartition(self._topic, p)])[0].offset
        except KafkaException:
            return None
        return int(offset) if offset is not None and offset >= 0 else None

    def _record(self, kv: RocksKV, p: int, at: float, final: bool = False) -> None:
        if p in self._applied:
            kv.put(STANDBY_KEY, str(self._applied[p]).encode())  # the offset first, then its time
        kv.put(STANDBY_AT_KEY, encode_time(at))
        if p not in self._caught_up_once:
            self._caught_up_once.add(p)
            if not final:  # (not while the copy is being closed: its next open counts)
                # counted once here, in the background, then kept as records come: an open
                # of the copy as the active store does not walk every queued URL
                started = time.monotonic()
                self._counts[p] = counts = QueueCounts.scan(kv)
                log.info("standby for partition %d: %d queues counted in %.2fs", p, len(counts.counts),
                         time.monotonic() - started)  # fmt: skip
            log.info("standby for partition %d caught up at changelog offset %s", p, self._applied.get(p))

"""A frontier instance's partitions as they come and go: opened (the writer fenced first, the
store restored, retried with backoff while it fails and shown in status), closed with a clean
marker at the last record the store holds, dropped when fenced or failed, and opened again if the
group still assigns it here (a failed commit: from its last committed marker; fenced: a zombie took
the partition's transactional id, e.g. an instance whose open was still under way when the
partition was revoked from it, and is fenced back). :class:`Lifecycle` is a part of
:class:`~frontier.service.service.FrontierService`; the partitions it opens are in the
:class:`~frontier.service.owned.Partitions` the service's parts share.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from frontier.config import Config
from frontier.partition import PartitionFrontier
from frontier.partition.counts import QueueCounts
from frontier.partition.records import ChangeHook
from frontier.service.crawls import CrawlDirectory
from frontier.service.owned import Partitions, _Owned
from frontier.service.pending import Pending
from frontier.service.restore import close_partition, db_path, feedback_backlog_end, open_partition
from frontier.service.rocks import RocksKV
from frontier.service.standby import Standby
from frontier.service.writer import PartitionWriter, WriteFailed
from topics.kafka import Kafka

log = logging.getLogger("frontier")

OPEN_ATTEMPTS = 6  # tries to open a partition's store before the process gives up (exit, restarted)
OPEN_BACKOFF = 1.0  # seconds before the second try, doubled each time (at most 30)
GROUP_SESSION = 10.0  # seconds: the frontier group's session timeout (frontier.service.app)...
GROUP_HEARTBEAT = 2.0  # ...and its heartbeat interval
# Fenced while the group assigns it here: taken back after this. An instance cut from the group's
# coordinator (it has not heard of the rebalance that moved the partition) has found its session
# expired by then and let its partitions go; the partition's real owner, fenced by a zombie's
# late open, takes it back.
RETAKE_AFTER = GROUP_SESSION + GROUP_HEARTBEAT
# an event of a partition revoked here waits this long at most for the group's next assignment
REASSIGN_WAIT = 3 * GROUP_SESSION


class Phases:
    """The seconds each step of a partition's open took, for its ``ready`` log line."""

    def __init__(self, started: float) -> None:
        self._last = started
        self._took: list[tuple[str, float]] = []

    def end(self, step: str) -> None:
        now = time.monotonic()
        self._took.append((step, now - self._last))
        self._last = now

    def __str__(self) -> str:
        return ", ".join(f"{step} {took:.2f}s" for step, took in self._took)


class Lifecycle:
    """Opens, retries, closes and drops the partitions the group assigns here, and keeps the
    standby copies of the others. Interface: :meth:`on_assigned`, :meth:`on_revoked` (the group's
    rebalances), :meth:`close`. Owns the writers and stores of the partitions it opens (put in
    ``partitions``, which only it changes), the group's last assignment, the partitions fenced and
    taken back since, the drops under way and the :class:`Standby` copies. Given the
    configuration, the Kafka clients, the clock, the shared :class:`Partitions`, and callables:
    ``on_change`` (every scope's delay change, handed to each partition opened), ``wake`` (the
    dispatch loop), ``fatal`` (a partition that cannot be opened: the process gives up),
    ``running`` (the service is not closing) and ``directory`` (the crawls' workers, once
    started)."""

    def __init__(
        self,
        cfg: Config,
        kafka: Kafka,
        clock: Callable[[], float],
        partitions: Partitions,
        on_change: ChangeHook,
        wake: Callable[[], None],
        fatal: Callable[[Exception], None],
        running: Callable[[], bool],
        directory: Callable[[], CrawlDirectory | None],
    ) -> None:
        self.cfg = cfg
        self.topics = cfg.topics
        self.kafka = kafka
        self.clock = clock
        self.partitions = partitions
        self._on_change = on_change
        self._wake = wake
        self._fatal = fatal
        self._running = running
        self._directory = directory
        self._assigned: set[int] = set()  # the partitions the group assigns here now
        self._retaken: set[int] = set()  # fenced and taken back since the group last assigned
        # the queue counts of partitions closed cleanly here, for their next open if the group's
        # next assignment gives them back (a rebalance revokes every partition, then gives most
        # back): that open does not walk every queued URL again
        self._kept: dict[int, QueueCounts] = {}
        self._dropping: set[asyncio.Task[None]] = set()
        self.standby: Standby | None = None
        if cfg.frontier.standby_replicas:
            self.standby = Standby(kafka, self.topics.state, cfg.frontier.state_dir, cfg.frontier.app_id)

    async def close(self) -> None:
        """Close every partition (cleanly where its writes committed), then the standby copies."""
        parts = self.partitions
        await self.on_revoked(set(parts.owned) | set(parts.restoring))
        if self._dropping:
            await asyncio.gather(*self._dropping, return_exceptions=True)
        if self.standby is not None:
            await asyncio.to_thread(self.standby.close)

    def on_assigned(self, partitions: set[int]) -> None:
        parts = self.partitions
        self._assigned = set(partitions)
        parts.assignment.set()
        self._retaken.clear()  # the group spoke again: a fenced partition may be taken back once more
        for p in set(self._kept) - partitions:
            del self._kept[p]  # not given back: its counts go (a standby copy counts its own)
        for p in sorted(partitions):
            if p not in parts.owned and p not in parts.restoring:
                parts.restoring[p] = asyncio.ensure_future(self._open_retrying(p))
        if self.standby is not None:
            for p in set(range(self.topics.partitions)) - partitions - set(parts.owned):
                self.standby.add(p)

    async def _open_retrying(self, p: int) -> None:
        """Open ``p``, retried with backoff while it fails (shown in status meanwhile); past
        ``OPEN_ATTEMPTS`` the process gives up (``fatal``: the dispatch loop raises it, the
        process exits non-zero and its supervisor restarts it)."""
        for attempt in range(1, OPEN_ATTEMPTS + 1):
            try:
                await self._open(p)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - shown, retried, then fatal
                reason = f"{type(exc).__name__}: {exc}"[:300]
                self.partitions.unserved[p] = reason
                log.error("partition %d not served (attempt %d of %d): %s", p, attempt, OPEN_ATTEMPTS, reason)
                if attempt == OPEN_ATTEMPTS:
                    self._fatal(RuntimeError(f"partition {p} could not be opened: {reason}"))
                    break
                await asyncio.sleep(min(OPEN_BACKOFF * 2 ** (attempt - 1), 30.0))
            else:
                self.partitions.unserved.pop(p, None)
                break
        self.partitions.restoring.pop(p, None)

    def _new_writer(self, p: int) -> PartitionWriter:
        producer = self.kafka.producer(**{"transactional.id": f"{self.cfg.frontier.app_id}-p{p}"})
        return PartitionWriter(producer, self.topics.state, p, -1, on_failure=self._write_failed)

    async def _open(self, p: int) -> None:
        started = time.monotonic()
        phases = Phases(started)
        # the standby's warm copy handed back (to become the active store) while the writer
        # fences the previous owner: neither waits for the other. The changelog's end is read
        # after both, so it is final.
        writer = self._new_writer(p)
        release = asyncio.ensure_future(self._release(p))
        opened: RocksKV | None = None  # the store, once open: closed if the open goes no further
        counting: asyncio.Future[QueueCounts] | None = None
        try:
            await writer.start()
            counts = await release
            phases.end("release+fence")
            path = db_path(self.cfg.frontier.state_dir, self.cfg.frontier.app_id, p)
            retention = self.standby.retention() if self.standby is not None else None  # (None: asked)
            kv, replayed, applied = await asyncio.to_thread(open_partition, path, self.kafka, self.topics.state, p,
                                                            retention=retention, counts=counts)  # fmt: skip
            opened = kv
            phases.end("restore")
            if counts is None or not counts.usable:  # counted off the event loop (beside other opens)
                counting = asyncio.ensure_future(asyncio.to_thread(QueueCounts.scan, kv))
                counts = await asyncio.shield(counting)
                phases.end("count")
        except BaseException:
            release.cancel()
            await asyncio.gather(release, return_exceptions=True)
            if counting is not None:  # (cancelled: the thread still reads the store; closed after it)
                await asyncio.gather(counting, return_exceptions=True)
            if opened is not None:
                opened.close()  # no clean marker: its next open rebuilds it
            await writer.close()
            raise
        writer.applied = applied
        writer.generations = store = Pending(kv)  # RocksDB written at each commit, with what committed
        frontier = PartitionFrontier(p, store, self.cfg.frontier, self.cfg.throttle, self.partitions.changelog(p),
                                     user_agent=self.cfg.worker.user_agent, on_change=self._on_change)  # fmt: skip
        owned = _Owned(frontier=frontier, kv=store, writer=writer)
        owned.feedback_due = await asyncio.to_thread(self._feedback_waiting, p)
        phases.end("feedback")
        owned.expire_from = self.clock() + self.cfg.frontier.lease_grace + self.cfg.frontier.fetch_timeout
        self.partitions.owned[p] = owned
        owned.frontier.rebuild(self.clock(), counts)
        phases.end("rebuild")
        directory = self._directory()
        if directory is not None:  # before its first dispatch: crawls nobody works for wait
            owned.frontier.set_served_crawls(directory.served(), self.clock())
        self._wake()
        log.info(
            "partition %d ready: %d changelog records replayed in %.2fs, %d in flight, %d hosts due (%s)",
            p, replayed, time.monotonic() - started, owned.frontier.inflight, owned.frontier.queued_hosts(), phases,
        )  # fmt: skip

    async def _release(self, p: int) -> QueueCounts | None:
        """The standby copy of ``p`` handed back, to become the active store, with its queue
        counts when it kept them, or else those kept when ``p`` was closed here (None: neither;
        the open checks that they are the store's, at its offset)."""
        kept = self._kept.pop(p, None)
        if self.standby is None:
            return kept
        if not await asyncio.to_thread(self.standby.release, p):
            raise RuntimeError("the standby copy was not handed back in time")
        return self.standby.counts(p) or kept

    def _feedback_waiting(self, p: int) -> int:
        """The offset of the last feedback record waiting for ``p`` (past the group's committed
        offset), -1 when none: leases are expired only once it is applied."""
        try:
            return feedback_backlog_end(self.kafka, self.topics.feedback, p, self.cfg.frontier.app_id)
        except Exception as exc:  # noqa: BLE001 - unknown: wait the bounded time instead
            log.warning("feedback waiting for partition %d not measured (%s)", p, exc)
            return 1 << 62

    async def on_revoked(self, partitions: set[int]) -> None:
        parts = self.partitions
        self._assigned -= partitions  # (first: a write failing meanwhile must not open it again)
        parts.assignment.clear()  # events of these partitions wait for the next assignment (Partitions.serving)
        for p in sorted(partitions):
            task = parts.restoring.pop(p, None)
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            parts.unserved.pop(p, None)
            owned = parts.owned.pop(p, None)
            if owned is None:
                continue
            applied = await owned.writer.close()
            if applied is None:  # its last writes did not commit: its RocksDB holds up to the last that did
                owned.kv.close()
                log.warning("partition %d closed without a clean marker (its writes did not all commit)", p)
            else:
                counts = owned.frontier.queues.counted()  # the store's, as closed: for its next open here
                close_partition(owned.kv, applied)
                counts.offset = applied
                self._kept[p] = counts
                log.info("partition %d closed cleanly at changelog offset %d", p, applied)
            # Not made a standby copy here: the group's next assignment does that (on_assigned) if
            # the partition is not given back. A revoke is followed by an assignment, and most
            # often one that gives it back (every partition is revoked at each rebalance): opened
            # as a standby copy and handed back at once, each cost the standby thread broker
            # round trips, one partition after another (0.5 s each, 5.5 s of a takeover).

    def _write_failed(self, failure: WriteFailed) -> None:
        """A partition's commit failed: its in-memory writes the changelog does not hold are
        dropped with it (closed without a clean marker: its RocksDB holds the transactions that
        committed, up to their marker) and, while the group still assigns it here, it is opened
        again from there. Fenced: another instance took the partition's transactional id. If
        the group assigns it there, that instance owns it now; if the group still assigns it here,
        the other is a zombie (an instance whose open was under way when the partition was
        revoked from it, or that has not heard of the rebalance yet), and the partition is taken
        back after ``RETAKE_AFTER`` (dropped for good, it would stay unserved until the next
        rebalance). Once per assignment: fenced again after that, this instance may be the one
        that has not heard (cut from the group's coordinator, it still thinks the partition its
        own), and the two would fence each other in turn, both serving it (CI at 871383b,
        test_cluster)."""
        p, parts = failure.partition, self.partitions
        owned = parts.owned.pop(p, None)
        if owned is None:
            return
        parts.unserved[p] = str(failure)[:300]

        async def drop() -> None:
            await owned.writer.close()
            owned.kv.close()  # no clean marker: a later open rebuilds it from the changelog
            if failure.fenced:
                if p in self._retaken:
                    # fenced again after it was taken back: this instance may be the one the group
                    # moved on from without its hearing (cut from the coordinator), and two instances
                    # taking it back in turn would both serve it. Left until the group assigns again.
                    log.warning("partition %d: fenced again after it was taken back: left to the instance "
                                "that took it until the group assigns partitions again", p)  # fmt: skip
                    return
                self._retaken.add(p)
                await asyncio.sleep(RETAKE_AFTER)
            if self._running() and p in self._assigned and p not in parts.owned and p not in parts.restoring:
                if failure.fenced:
                    log.warning("partition %d: fenced, but the group assigns it here: taking it back", p)
                parts.restoring[p] = asyncio.ensure_future(self._open_retrying(p))

        self._dropping.add(task := asyncio.ensure_future(drop()))
        task.add_done_callback(self._dropping.discard)

"""The partitions this process serves: each one it owns (its partition logic, RocksDB store and
fenced writer, with the input it applied and the commit of its writes), and ``Partitions``, the
map of them that the service's parts share."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from frontier.partition import PartitionFrontier
from frontier.service.inputs import Ackable, input_offset
from frontier.service.pending import Pending
from frontier.service.writer import PartitionWriter


@dataclass
class _Owned:
    """A partition open here: its frontier, store and writer. Interface: :meth:`applied_before`
    and :meth:`note` (the input it applied), :meth:`commit` (its writes, then the events they
    settle), :meth:`may_expire` and :meth:`fed` (the restore order). Made by
    :class:`~frontier.service.lifecycle.Lifecycle` when it opens the partition."""

    frontier: PartitionFrontier
    kv: Pending  # (its RocksDB holds committed transactions only)
    writer: PartitionWriter
    dirty: bool = False  # changelog records written since the last commit was asked for
    # Restore order: leases are not expired before the feedback that was waiting for this
    # partition when it opened is applied (offset ``feedback_due`` of crawl.feedback, -1: none),
    # or ``expire_from`` (wall clock) has passed, whichever comes first.
    feedback_due: int = -1
    expire_from: float = 0.0

    def __post_init__(self) -> None:
        if self.writer is not None:  # (None: a test's partition that writes nothing)
            # the counters and the crawl records the applied input changed are saved once a
            # transaction, as it takes the writes (not once per input record: with 50 crawls,
            # each small feedback record wrote every crawl record it touched again)
            self.writer.prepare = self.frontier.save_stats

    def may_expire(self, now: float) -> bool:
        return self.feedback_due < 0 or now >= self.expire_from

    def fed(self, offset: int) -> None:
        """Feedback up to ``offset`` is applied."""
        if offset >= self.feedback_due:
            self.feedback_due = -1

    def applied_before(self, role: str, event: Ackable) -> bool:
        """A record delivered again (a rebalance drops offsets acked but not yet committed) that this
        partition already applied: acknowledged, not applied twice (a drop would remove URLs queued
        since, a 429 would count twice)."""
        offset = input_offset(event)
        if offset is None or offset > self.frontier.applied_input(role):
            return False
        event.ack()
        return True

    def note(self, role: str, event: Ackable) -> None:
        """Record that ``event``'s input is applied (committed with the changes the record caused)."""
        offset = input_offset(event)
        if offset is not None:
            self.frontier.note_input(role, offset)

    def commit(self, events: tuple[Ackable, ...] = (), then: Callable[[], None] | None = None,
               urgent: bool = False) -> None:  # fmt: skip
        """Commit the partition's writes; ack ``events`` and run ``then`` once they committed
        (``urgent``: an asker waits for it, no group window: :meth:`PartitionWriter.commit`).

        The changelog records, and a dispatch round's jobs and report pages, are one transaction
        (:mod:`frontier.service.writer`): a worker sees a job only once its lease is in the
        changelog, and an input offset is committed only after the changes it caused.
        """
        self.dirty = False  # (the counters are saved as the transaction takes the writes: the writer's prepare)

        def committed() -> None:
            for event in events:
                event.ack()
            if then is not None:
                then()

        self.writer.commit(committed if events or then is not None else None, urgent)


class Partitions:
    """The partitions served here, shared by the service's parts: ``owned`` (partition → its
        :class:`_Owned`, once open), ``restoring`` (the opens under way), ``unserved`` (partition → why
        it is assigned here but not served) and ``assignment`` (clear from a revoke until the group's
        next assignment). Only :class:`~frontier.service.lifecycle.Lifecycle` changes them; the others
        read them, and wait for a partition with :meth:`serving`. Given the changelog's topic and how
    long an event of a revoked partition waits for the group's next assignment."""

    def __init__(self, state_topic: str, reassign_wait: float) -> None:
        self.state_topic = state_topic
        self.reassign_wait = reassign_wait
        self.owned: dict[int, _Owned] = {}
        self.restoring: dict[int, asyncio.Task[None]] = {}
        self.unserved: dict[int, str] = {}
        self.assignment = asyncio.Event()
        self.assignment.set()

    def transactions(self) -> int:
        """The transactions of the partitions owned now, since they opened (a count that moves with work)."""
        return sum(owned.writer.commits for owned in self.owned.values() if owned.writer is not None)

    def served(self) -> set[int]:
        """The partitions open here."""
        return set(self.owned)

    def changelog(self, p: int) -> Callable[[bytes, bytes | None], None]:
        """Where partition ``p``'s frontier writes its changelog records: its writer's open
        transaction, while this instance owns it."""
        topic = self.state_topic
        owned_map = self.owned

        def write(key: bytes, value: bytes | None) -> None:
            owned = owned_map.get(p)
            if owned is None:
                return
            owned.dirty = True
            owned.writer.write(topic, value, key, p)

        return write

    async def serving(self, p: int) -> _Owned | None:
        """The partition's state once it is open; None when this instance does not serve it (revoked,
        fenced or failed: the event is left unacknowledged for its owner, never parked). An event
        of a partition revoked here while the group's new assignment is not known yet waits for
        it (at most ``reassign_wait``): if the partition comes back here, the consumer keeps its
        position and never delivers the event again, so it is applied now (CI at b3c1869: a
        batch of 384 URLs delivered between a revoke and the assignment that gave its partition
        back was dropped, and never crawled). Another owner reads it again from the committed
        offset; an event applied twice is acknowledged, not applied again
        (:meth:`_Owned.applied_before`)."""
        owned = self.owned.get(p)
        if owned is not None:
            return owned
        if p not in self.restoring and not self.assignment.is_set():
            try:
                await asyncio.wait_for(self.assignment.wait(), self.reassign_wait)
            except TimeoutError:
                return None
            owned = self.owned.get(p)
            if owned is not None:
                return owned
        task = self.restoring.get(p)
        if task is not None:
            await asyncio.wait({task})
        return self.owned.get(p)

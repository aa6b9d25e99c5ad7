"""A partition this process owns (its partition logic, RocksDB store and fenced writer), and an
input event whose offset is committed when it is acknowledged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from frontier.partition import PartitionFrontier
from frontier.service.rocks import RocksKV
from frontier.service.writer import PartitionWriter


class Ackable(Protocol):
    def ack(self) -> bool: ...


@dataclass
class _Owned:
    frontier: PartitionFrontier
    kv: RocksKV
    writer: PartitionWriter
    dirty: bool = False  # changelog records written since the last commit was asked for
    # Restore order: leases are not expired before the feedback that was waiting for this
    # partition when it opened is applied (offset ``feedback_due`` of crawl.feedback, -1: none),
    # or ``expire_from`` (wall clock) has passed, whichever comes first.
    feedback_due: int = -1
    expire_from: float = 0.0

    def may_expire(self, now: float) -> bool:
        return self.feedback_due < 0 or now >= self.expire_from

    def fed(self, offset: int) -> None:
        """Feedback up to ``offset`` is applied."""
        if offset >= self.feedback_due:
            self.feedback_due = -1


def _ack_all(events: tuple[Ackable, ...]) -> None:
    for event in events:
        event.ack()

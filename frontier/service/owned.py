"""A partition this process owns (its partition logic and RocksDB store), and an input event
whose offset is committed when it is acknowledged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from frontier.partition import PartitionFrontier
from frontier.service.rocks import RocksKV


class Ackable(Protocol):
    def ack(self) -> bool: ...


@dataclass
class _Owned:
    frontier: PartitionFrontier
    kv: RocksKV
    dirty: bool = False  # changelog records written since the last marker


def _ack_all(events: tuple[Ackable, ...]) -> None:
    for event in events:
        event.ack()

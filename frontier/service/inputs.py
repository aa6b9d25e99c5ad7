"""The frontier's input topics as a partition records how far it applied each (in the same
transaction as the changes a record caused, so a record delivered again is applied once), an input
event (acknowledged once those changes committed: its offset is committed then), and the offset of
the record behind one."""

from __future__ import annotations

from typing import Protocol

URLS, FEEDBACK, CONTROL = "u", "f", "c"  # crawl.urls.bydomain, crawl.feedback, crawl.control


class Ackable(Protocol):
    def ack(self) -> bool: ...


def input_offset(event: Ackable) -> int | None:
    """The offset of the input record behind ``event`` (None: not known, e.g. a test's event)."""
    offset = getattr(getattr(event, "message", None), "offset", None)
    return offset if isinstance(offset, int) else None


def record_offset(event: Ackable) -> int:
    """The offset of the record behind ``event`` as crawl.rejected says it (-1: not known)."""
    offset: int = getattr(getattr(event, "message", None), "offset", -1)
    return offset

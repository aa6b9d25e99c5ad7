"""The frontier's input topics as a partition records how far it applied each (in the same
transaction as the changes a record caused, so a record delivered again is applied once), and the
offset of the record behind an input event."""

from __future__ import annotations

from frontier.service.owned import Ackable

URLS, FEEDBACK, CONTROL = "u", "f", "c"  # crawl.urls.bydomain, crawl.feedback, crawl.control


def input_offset(event: Ackable) -> int | None:
    """The offset of the input record behind ``event`` (None: not known, e.g. a test's event)."""
    offset = getattr(getattr(event, "message", None), "offset", None)
    return offset if isinstance(offset, int) else None

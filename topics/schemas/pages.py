"""The output: a fetched (or finally failed) URL's :class:`Page` on ``crawl.pages``, and input
that could not be accepted, bounded, as a :class:`Rejected` on ``crawl.rejected``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from topics.schemas.versions import CRAWLS_VERSION, DEFAULT_CRAWL, SCHEMA_VERSION


class Page(msgspec.Struct, kw_only=True):
    """One fetched (or finally failed) URL, as published on ``crawl.pages``."""

    v: int = SCHEMA_VERSION
    url: str
    status: int = 0
    outcome: str = "fetched"  # fetched | error | disallowed (by robots.txt) | skipped (declined by a worker)
    error: str = ""
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    body: bytes = b""
    truncated: bool = False
    content_type: str = ""
    fetched_at: float = 0.0
    latency: float = 0.0
    meta: dict[str, Any] = msgspec.field(default_factory=dict)
    worker: str = ""
    crawl: str = DEFAULT_CRAWL  # the crawl of its URL (version 3 when not the default one)
    # a revisit that found the page as it was (a 304 to a conditional request, or the same content
    # digest): the record says so, without the body; ``digest``: that body's (WARC's payload-digest
    # form, after the status when it is not 200), when compared by it
    unchanged: bool = False
    digest: str = ""

    def __post_init__(self) -> None:
        if self.crawl != DEFAULT_CRAWL and self.v < CRAWLS_VERSION:
            self.v = CRAWLS_VERSION  # a version-2 reader would take it for the default crawl's


REJECTED_ORIGINAL_BYTES = 4096  # the prefix of a rejected record's bytes that Rejected keeps
REJECTED_REASON_CHARS = 1000  # reasons are short; a longer one (an echoed input) is cut here


class Rejected(msgspec.Struct, kw_only=True):
    """Input that could not be accepted, on ``crawl.rejected``: why, where it was, what it was.

    Bounded whatever the input: ``original`` keeps at most the first
    :data:`REJECTED_ORIGINAL_BYTES` of the record (a 900 KB record would otherwise make a
    Rejected over the topic's 1 MiB limit, and the broker would refuse it), ``original_length``
    and ``original_sha256`` describe the whole record, and ``reason`` is cut at
    :data:`REJECTED_REASON_CHARS`. ``__post_init__`` does this for every Rejected, however it is
    built, so no producer can publish an unbounded one. ``len(original) < original_length``
    means the original was cut. A *minimal* Rejected (:meth:`minimal`) carries no original at
    all, only its length and digest.

    Records written before these fields existed decode with the length and digest computed from
    the original they carry (then whole).
    """

    v: int = SCHEMA_VERSION
    reason: str
    original: bytes
    topic: str = ""
    partition: int = -1
    offset: int = -1
    original_length: int = -1  # bytes of the whole original record (-1 until computed)
    original_sha256: str = ""  # hex SHA-256 of the whole original record

    def __post_init__(self) -> None:
        if self.original_length < 0:  # built from the whole original: describe it, then cut it
            self.original_length = len(self.original)
            self.original_sha256 = hashlib.sha256(self.original).hexdigest()
        if len(self.original) > REJECTED_ORIGINAL_BYTES:
            self.original = self.original[:REJECTED_ORIGINAL_BYTES]
        if len(self.reason) > REJECTED_REASON_CHARS:
            self.reason = self.reason[: REJECTED_REASON_CHARS - 1] + "…"

    @property
    def truncated(self) -> bool:
        """True when ``original`` is only a prefix of the rejected record."""
        return len(self.original) < self.original_length

    def minimal(self, reason: str) -> Rejected:
        """The same rejection without the original bytes: ``reason``, the coordinates, the
        length and the digest (for when even the bounded record could not be published)."""
        return Rejected(reason=reason, original=b"", topic=self.topic, partition=self.partition, offset=self.offset,
                        original_length=self.original_length, original_sha256=self.original_sha256)  # fmt: skip

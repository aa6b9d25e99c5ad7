"""Typed, versioned message schemas for every topic, and their one codec: the wire's public face
(import records from here: ``from topics.schemas import Job, encode``).

Every record on a crawl topic is a msgspec ``Struct`` encoded as JSON. Each struct carries a
``v`` (schema version) field; decoders reject unknown major versions with a clear error rather
than guessing. Bytes fields (page bodies, rejected originals) are base64 in JSON.

Topic → message type:
- ``crawl.urls``           user input: a bare URL string or :class:`Submission` JSON (see ``frontier.core.urls``)
- ``crawl.urls.bydomain``  :class:`UrlBatch`   (router → frontier, one partition's URLs per record)
- ``crawl.jobs``           :class:`Job`        (frontier → workers, keyed by host)
- ``crawl.feedback``       :class:`FeedbackBatch` (workers → frontier, keyed by registrable domain)
- ``crawl.pages``          :class:`Page`       (output)
- ``crawl.rejected``       :class:`Rejected`   (input that could not be accepted, with the reason)
- ``crawl.control``        :class:`ControlCommand` (operators; the URLFrontier gateway's :class:`Query`)
- ``crawl.replies``        :class:`Reply`      (a partition's answer to a query)
- ``crawl.frontier.status`` :class:`Status`    (one snapshot per frontier instance)

Modules: ``versions`` (schema versions, crawl names), ``urls`` (submissions, URL items and
batches), ``jobs`` (jobs and feedback), ``pages`` (pages, rejected input), ``status`` (status
snapshots), ``control`` (commands, queries, replies), ``codec`` (encode, decode).
"""

from __future__ import annotations

from topics.schemas.codec import SchemaError, decode, encode, unencodable
from topics.schemas.control import (
    CHANGING_KINDS,
    CONTROL_ACTIONS,
    CRAWL_ACTIONS,
    MAX_HOLD_LEASES,
    MAX_PER_HOST,
    MAX_QUERY_LIMIT,
    QUERY_KINDS,
    ControlCommand,
    Query,
    Reply,
    UrlRecord,
)
from topics.schemas.jobs import NETWORK_ERRORS, EncodedJob, Feedback, FeedbackBatch, Job, JobTerms
from topics.schemas.pages import REJECTED_ORIGINAL_BYTES, REJECTED_REASON_CHARS, Page, Rejected
from topics.schemas.status import MAX_STATUS_CRAWLS, CrawlStatus, ScopeStatus, Status
from topics.schemas.urls import EncodedUrlBatch, Submission, UrlBatch, UrlItem
from topics.schemas.versions import (
    CRAWLS_VERSION,
    DEFAULT_CRAWL,
    MAX_CRAWL_CHARS,
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    SKIPPED_VERSION,
    valid_crawl,
)

__all__ = [
    "CHANGING_KINDS",
    "CONTROL_ACTIONS",
    "CRAWLS_VERSION",
    "CRAWL_ACTIONS",
    "DEFAULT_CRAWL",
    "MAX_CRAWL_CHARS",
    "MAX_HOLD_LEASES",
    "MAX_PER_HOST",
    "MAX_QUERY_LIMIT",
    "MAX_STATUS_CRAWLS",
    "NETWORK_ERRORS",
    "QUERY_KINDS",
    "READABLE_VERSIONS",
    "REJECTED_ORIGINAL_BYTES",
    "REJECTED_REASON_CHARS",
    "SCHEMA_VERSION",
    "SKIPPED_VERSION",
    "ControlCommand",
    "CrawlStatus",
    "EncodedJob",
    "EncodedUrlBatch",
    "Feedback",
    "FeedbackBatch",
    "Job",
    "JobTerms",
    "Page",
    "Query",
    "Rejected",
    "Reply",
    "SchemaError",
    "ScopeStatus",
    "Status",
    "Submission",
    "UrlBatch",
    "UrlItem",
    "UrlRecord",
    "decode",
    "encode",
    "unencodable",
    "valid_crawl",
]

"""The jobs and their answers: a :class:`Job` (a lease on one URL) on ``crawl.jobs``, and what
happened to it, a :class:`Feedback` in a :class:`FeedbackBatch` on ``crawl.feedback``.
"""

from __future__ import annotations

import msgspec

from topics.schemas.urls import UrlItem
from topics.schemas.versions import SCHEMA_VERSION


class JobTerms(msgspec.Struct, kw_only=True):
    """The fields of a :class:`Job` other than its item."""

    v: int = SCHEMA_VERSION
    lease: str
    # "page" | "robots" (fetch /robots.txt, follow no redirect: report a 3xx with its location, or the body)
    kind: str = "page"
    not_before: float  # epoch seconds; never send before
    expires_at: float  # epoch seconds; picked up later than this → return unfetched
    min_gap: float = 0.0  # the host's delay at dispatch: workers keep at least this between sends
    # a server-stated interval (Crawl-delay, with its margin): the worker keeps at least this from
    # the END of the host's previous response to this send (THROTTLING.md v2 §9)
    floor: float = 0.0
    timeout: float = 20.0  # fetch timeout the frontier's lease deadline assumes
    retries_left: int = 0


class Job(JobTerms, kw_only=True):
    """A lease on one URL: fetch it in ``[not_before, expires_at]`` or hand it back."""

    item: UrlItem


class EncodedJob(JobTerms, kw_only=True):
    """A :class:`Job` as the frontier writes it: the item's bytes spliced in as they were queued
    (decodes as a ``Job``; the item is not encoded again)."""

    item: msgspec.Raw


# Feedback ``error`` kinds that mean the network failed (no complete response): they trigger
# backoff at the frontier and a retry at the worker.
NETWORK_ERRORS = frozenset({"timeout", "connect", "reset", "truncated"})


class Feedback(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What happened to one job. ``outcome``: fetched | error | retry | expired (handed back
    unfetched: queued again) | skipped (version 2: declined without a request; the URL is done)."""

    lease: str
    host: str
    domain: str
    url: str
    outcome: str
    ip: str = ""  # the job's UrlItem.ip: with ``domain``, where the feedback goes (topics.partitioning)
    status: int = 0
    latency: float = 0.0  # send → response headers, seconds
    sent_at: float = 0.0  # epoch seconds when the request was sent (0 if never sent)
    done_at: float = 0.0  # epoch seconds when the response ended (0: unknown; server-stated floors count from it)
    error: str = ""  # error kind: timeout, connect, reset, too_large, ...
    headers: dict[str, str] = msgspec.field(default_factory=dict)  # throttling-relevant headers only
    body: bytes = b""  # robots jobs only: the robots.txt body
    # outcome "held" (version 3): the job is in a client's hands until then (a URLFrontier GetURLs'
    # delay_requestable); the lease stays open till then, and is handed out again after it
    held_until: float = 0.0
    # a revisit URL's fetch: its validators now, and whether the page was unchanged since the last
    # fetch (a 304, or the same digest); the frontier keeps them and moves an adaptive interval
    validators: dict[str, str] = msgspec.field(default_factory=dict)
    unchanged: bool = False


class FeedbackBatch(msgspec.Struct, kw_only=True):
    v: int = SCHEMA_VERSION
    items: list[Feedback]

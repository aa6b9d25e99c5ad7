"""Typed, versioned message schemas for every topic, and their one codec.

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
"""

from __future__ import annotations

import hashlib
from typing import Any, TypeVar

import msgspec

# The version a record is written with: 1, unless it uses what version 2 added (a Feedback or Page
# with outcome "skipped"): then 2, so that readers of version 1 keep working in a rolling upgrade.
# Readers accept every version in READABLE_VERSIONS (docs/PROTOCOL.md, "Versions"; the records a
# version-1 writer put on the wire are kept in topics/fixtures/v1 and decoded by a test).
SCHEMA_VERSION = 1
SKIPPED_VERSION = 2  # added the outcome "skipped": a worker declined a job without sending a request
# added crawls: a record that names a crawl other than the default one (a UrlBatch holding such an
# item, its Job, its Page) or a crawl command is marked 3, so that an older reader refuses it
# instead of taking it for the default crawl's
CRAWLS_VERSION = 3
READABLE_VERSIONS = frozenset({1, 2, 3})

DEFAULT_CRAWL = "default"  # the crawl of a URL submitted without one (and of every record written before crawls)
MAX_CRAWL_CHARS = 64  # characters of a crawl name


def valid_crawl(name: str) -> str:
    """``name`` if it may name a crawl (1-64 characters, no control characters, not only spaces),
    else ValueError with the reason (a submission naming it goes to crawl.rejected with it)."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_CRAWL_CHARS:
        raise ValueError(f"invalid crawl name {str(name)[:70]!r} (1-{MAX_CRAWL_CHARS} characters)")
    if any(c < " " or c == "\x7f" for c in name):
        raise ValueError(f"invalid crawl name {name[:70]!r} (control characters)")
    return name


class Submission(msgspec.Struct, forbid_unknown_fields=False, kw_only=True, omit_defaults=True):
    """The JSON form a user may publish on ``crawl.urls``.

    Fields added later have defaults and are omitted when they have them, so records of either
    age decode with either code. ``recrawl`` and ``forget`` (added for issue 13) are seen-set
    commands carried by the normal input path to the partition owning the URL's domain:
    ``recrawl`` queues the URL even if it was seen (unless it is still queued or in flight),
    ``forget`` removes it from the seen set (queues nothing). A router or frontier older than
    these fields would take a ``forget`` for a plain submission: upgrade them first.
    """

    url: str
    priority: int = 0
    meta: dict[str, Any] = msgspec.field(default_factory=dict)
    follow: int = 0  # how many more levels of same-site links the worker may follow
    scopes: list[str] = msgspec.field(default_factory=list)  # extra throttling scopes, e.g. ["api"]
    redirects: int = 0  # redirect hops that led here
    cost: float = 1.0  # quota units this URL consumes in each of its scopes
    autothrottle: bool = True  # False: this URL's latency must not move the AutoThrottle delay
    # seconds after a successful fetch when the URL is due again (0: once); or an interval that follows
    # the page's changes: "adaptive" (an hour to 30 days) or [min, max] seconds (frontier.core.revisit)
    revisit: float | str | list[float] = 0.0
    recrawl: bool = False  # queue it even if it was seen before (not twice while it is queued or in flight)
    forget: bool = False  # remove it from the seen set instead of queueing it
    crawl: str = DEFAULT_CRAWL  # the crawl it belongs to: its seen set, its workers, its pages (version 3)
    # the User-Agent its requests send (a Scrapy spider's): robots.txt is matched with its product
    # token, Disallow and Crawl-delay alike; "" the frontier's own (``worker.user_agent``) (version 3)
    agent: str = ""
    # a URLFrontier client's queue key (version 3): the URL is *recorded* in its crawl under this key
    # (listed, counted, looked up, deleted by the URLFrontier API, with ``meta`` as its metadata); a
    # key other than the host is also a named scope of the URL. "" : not recorded (the native path)
    key: str = ""
    # a URLFrontier *known* URL (version 3): epoch seconds from which it may be fetched again (0:
    # never); None: a discovered URL (queued unless known)
    refetch_at: float | None = None
    # a sitemap (sitemaps.org; or a robots.txt whose Sitemap: lines to read): fetched as a job of its
    # host, the URLs it lists submitted (workers/api/sitemaps.py). ``sitemap_for``: the registrable
    # domain whose URLs it may list ("": its own); ``sitemap_depth``: index levels above it
    sitemap: bool = False
    sitemap_for: str = ""
    sitemap_depth: int = 0
    # an adaptive revisit's first interval, seconds (a sitemap's lastmod or changefreq); 0: the default
    revisit_first: float = 0.0
    # also crawl the sitemaps its site's robots.txt names (its ``Sitemap:`` lines, read from the copy
    # the frontier keeps for politeness): each once per crawl, as throttled sitemap jobs with this
    # URL's revisit, so a site given with its root is found whole and kept fresh. Passed on to
    # redirect targets and followed links (another site reached is read the same way)
    discover_sitemaps: bool = False


class UrlItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One accepted URL on its way into a frontier partition.

    ``url`` is what gets fetched and checked against robots.txt: the URL as given (fragment
    removed, unsafe characters percent-encoded, host in IDNA), never re-ordered or rewritten.
    ``canonical`` is its canonical form, used only to recognise duplicates; empty when it is
    the same as ``url`` (see :func:`frontier.core.urls.seen_fingerprint`).
    """

    url: str
    host: str
    domain: str  # registrable domain: the partition key
    priority: int = 0
    meta: dict[str, Any] = msgspec.field(default_factory=dict)
    follow: int = 0
    scopes: list[str] = msgspec.field(default_factory=list)
    redirects: int = 0
    cost: float = 1.0
    adjust: bool = True  # may move the AutoThrottle delay
    attempts: int = 0  # fetch attempts already made (retries of 429 / 5xx / network errors)
    revisit: float = 0.0  # recrawl interval, seconds (0: fetch once); adaptive: the current one
    # adaptive revisits (revisit_max > 0): the interval's bounds, seconds (frontier.core.revisit)
    revisit_min: float = 0.0
    revisit_max: float = 0.0
    # a revisit URL's validators from its last fetch: "etag", "last-modified" (sent back as
    # If-None-Match / If-Modified-Since) and "digest" (of status and body: a change without them)
    validators: dict[str, str] = msgspec.field(default_factory=dict)
    # a sitemap job: the registrable domain whose URLs it may list (non-empty: a sitemap), index depth
    sitemap: str = ""
    sitemap_depth: int = 0
    discover_sitemaps: bool = False  # also crawl its site's robots.txt sitemaps (Submission.discover_sitemaps)
    canonical: str = ""  # canonical form for the seen-set, when it differs from url
    recrawl: bool = False  # seen-set command from the Submission (never stored on a queued item)
    forget: bool = False  # seen-set command from the Submission: forget the URL, queue nothing
    # the host's address when frontier.ip_scope is on (the router resolved it): the partition key
    # instead of ``domain``, and the scope ``ip:<address>``; empty otherwise (and in older records)
    ip: str = ""
    crawl: str = DEFAULT_CRAWL  # the crawl it belongs to (version 3; left out for the default crawl)
    agent: str = ""  # the robots.txt product token its requests match ("" the frontier's own; version 3)
    key: str = ""  # its URLFrontier queue key: recorded under it in its crawl (Submission.key; version 3)
    refetch_at: float | None = None  # a URLFrontier known URL: due again then (0: never); None: discovered

    def passed_on_revisit(self) -> float | list[float]:
        """The revisit this URL passes on to what it leads to (redirect target, followed links, the
        URLs of a sitemap, its site's sitemaps), as a submission gives it: the same fixed interval,
        or the same adaptive bounds (each page then learns its own interval)."""
        return [self.revisit_min, self.revisit_max] if self.revisit_max > 0 else self.revisit


class UrlBatch(msgspec.Struct, kw_only=True):
    v: int = SCHEMA_VERSION
    items: list[UrlItem]


class EncodedUrlBatch(msgspec.Struct, kw_only=True):
    """A :class:`UrlBatch` record read with its items left encoded: the frontier stores and
    forwards each item's bytes as the router wrote them (one encoding on the URL's way)."""

    v: int = SCHEMA_VERSION
    items: list[msgspec.Raw]


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


class ScopeStatus(msgspec.Struct, kw_only=True):
    scope: str
    queued: int
    inflight: int
    delay: float
    concurrency: int
    gate_until: float
    backoff: float
    reason: str  # why it is not dispatching now ("ready" when it is)
    wait_until: float | None = None
    sent: int = 0  # requests sent to this scope, ever (rates come from two snapshots)
    limit: float = 0.0  # the limit learned from the server's signals, requests/s (0: none learned)
    cause: str = ""  # why the delay is what it is (its last change), e.g. "limit ≈ 4.80 req/s from 429"


MAX_STATUS_CRAWLS = 1000  # crawl rows in one Status at most (the busiest): it must fit its topic


class CrawlStatus(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One crawl as one frontier instance sees it (its partitions' part): readers add the
    instances' rows up (``frontier.client.crawls.crawl_rows``). Fields at their default
    are left out, so an instance's snapshot stays small with many crawls."""

    crawl: str
    queued: int = 0  # URLs queued
    inflight: int = 0  # jobs leased (in a worker's hands, or on their way)
    ingested: int = 0  # URLs queued, ever (new, recrawled)
    dispatched: int = 0  # jobs sent, ever
    completed: int = 0  # URLs whose fate is decided: fetched, failed, skipped, disallowed
    fetched: int = 0
    failed: int = 0  # ended in an error (network, robots.txt unreachable, leases lost)
    disallowed: int = 0
    dropped: int = 0  # queued URLs removed by a drop
    over_limit: int = 0  # URLs not queued: the crawl's per-host limit was reached
    revisits: int = 0  # fetched URLs waiting for their revisit
    next_revisit: float | None = None  # the earliest of them is due then (None: none)
    paused: bool = False
    per_host: int = 0  # at most this many URLs queued per host (0: no limit)
    workers: int = -1  # members of the crawl's worker group (-1: not known yet)
    pages_per_s: float = 0.0


class Status(msgspec.Struct, kw_only=True):
    """One frontier instance's latest view, on ``crawl.frontier.status`` keyed by instance id."""

    v: int = SCHEMA_VERSION
    instance: str
    at: float
    partitions: list[int]
    totals: dict[str, int]
    scopes: list[ScopeStatus]
    # assigned to the instance but not served (a store that cannot be opened, a fenced writer): why
    unserved: dict[int, str] = msgspec.field(default_factory=dict)
    crawls: list[CrawlStatus] = msgspec.field(default_factory=list)  # the crawls these partitions know (busiest first)
    crawls_cut: int = 0  # crawls left out of ``crawls`` (more than MAX_STATUS_CRAWLS): their counts are not known here


T = TypeVar("T", bound=msgspec.Struct)


def _as_base(value: Any) -> Any:
    """msgspec's hook for what it does not encode itself: a subclass of ``str``, ``int`` or
    ``float`` (lxml's text results, a ``str`` subclass, are what Scrapy's link extractors give)
    goes as its base type; anything else is refused, naming the type. (msgspec encodes ``dict``
    and ``list`` subclasses as they are.)"""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


_encoder = msgspec.json.Encoder(enc_hook=_as_base)
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


class SchemaError(ValueError):
    """A record does not match its topic's schema."""


def encode(msg: msgspec.Struct) -> bytes:
    """The record's JSON (TypeError when something in it cannot be encoded: see :func:`unencodable`)."""
    return _encoder.encode(msg)


def unencodable(value: Any) -> str:
    """Why :func:`encode` would refuse ``value`` inside a record ("" when it takes it): the check
    that a record can go is the encoder itself, so the two never disagree."""
    try:
        _encoder.encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    return ""


def decode(data: bytes, kind: type[T]) -> T:
    """Decode ``data`` as ``kind``; raise :class:`SchemaError` on any mismatch or unknown version."""
    dec = _decoders.get(kind)
    if dec is None:
        dec = _decoders[kind] = msgspec.json.Decoder(kind)
    try:
        msg: T = dec.decode(data)
    except msgspec.DecodeError as exc:
        raise SchemaError(f"{kind.__name__}: {exc}") from exc
    version = getattr(msg, "v", SCHEMA_VERSION)
    if version not in READABLE_VERSIONS:
        raise SchemaError(f"{kind.__name__}: unsupported schema version {version}")
    return msg


CONTROL_ACTIONS = ("pause", "resume", "drop", "set", "clear", "watch", "block")
CRAWL_ACTIONS = ("pause", "resume", "drop", "limit")  # commands on a whole crawl (``crawl`` set, no scope)
MAX_PER_HOST = 10_000_000  # a crawl's per-host limit, at most


class ControlCommand(msgspec.Struct, kw_only=True, omit_defaults=True):
    """An operator's command for one scope, on ``crawl.control`` (keyed by registrable domain).

    ``scope``: a host, a registrable domain (covers every host under it) or ``domain#name``.
    ``set`` overrides delay and/or concurrency at run time; ``clear`` removes the override.
    ``watch`` asks the owning instance to report the scope in its status snapshots for a while
    (a live page is charting it), whatever its queue; it changes no state.

    A *crawl command* (version 3) names a ``crawl`` and no scope: ``pause`` / ``resume`` its
    dispatch, ``drop`` its queued URLs and revisits (``forget``: its seen entries too), ``limit``
    the URLs it may have queued per host (``per_host``; 0 removes the limit). It goes to every
    partition. Other crawls are untouched.
    """

    v: int = SCHEMA_VERSION
    action: str
    scope: str = ""
    delay: float | None = None
    concurrency: int | None = None
    crawl: str = ""  # a crawl command (version 3): the crawl; empty for a scope command
    forget: bool = False  # a crawl's drop: forget its seen entries too (a later submission crawls them again)
    per_host: int | None = None  # a crawl's limit: URLs queued per host at most (0: none)
    until: float | None = None  # block (version 3): no request to the scope before then (epoch s; 0 lifts it)
    query: Query | None = None  # action "query" (version 3): a question to every partition, answered on crawl.replies

    def validate(self) -> None:
        if self.action == "query":
            if self.query is None or self.scope or self.crawl:
                raise ValueError("a query carries a query and no scope or crawl")
            self.query.validate()
            return
        if self.query is not None:
            raise ValueError("query goes with the action query")
        if (self.action == "block") != (self.until is not None):
            raise ValueError("block needs until (epoch seconds; 0 lifts the block), and until goes with block")
        if self.until is not None and not 0 <= self.until < 1e11:
            raise ValueError(f"until must be epoch seconds, got {self.until}")
        if self.crawl:
            self._validate_crawl()
            return
        if self.forget or self.per_host is not None:
            raise ValueError("forget and per_host are for crawl commands")
        if self.action not in CONTROL_ACTIONS:
            raise ValueError(f"action must be one of {', '.join(CONTROL_ACTIONS)}, got {self.action!r}")
        # the characters a submission's named scopes may hold (spaces and "/" too: "books/api v2"),
        # so that every scope a URL can be in can be paused; never control characters
        if not self.scope or len(self.scope) > 253 or any(c < " " or c == "\x7f" for c in self.scope):
            raise ValueError(f"invalid scope {self.scope[:60]!r}")
        if self.action == "set":
            if self.delay is None and self.concurrency is None:
                raise ValueError("set needs a delay and/or a concurrency")
            if self.delay is not None and not 0 <= self.delay <= 86400:
                raise ValueError(f"delay must be within 0..86400 seconds, got {self.delay}")
            if self.concurrency is not None and not 1 <= self.concurrency <= 1000:
                raise ValueError(f"concurrency must be within 1..1000, got {self.concurrency}")

    def _validate_crawl(self) -> None:
        valid_crawl(self.crawl)
        if self.action not in CRAWL_ACTIONS:
            raise ValueError(f"a crawl's action must be one of {', '.join(CRAWL_ACTIONS)}, got {self.action!r}")
        if self.scope or self.delay is not None or self.concurrency is not None:
            raise ValueError("a crawl command names no scope, delay or concurrency")
        if self.forget and self.action != "drop":
            raise ValueError("forget goes with drop")
        if self.action == "limit":
            if self.per_host is None or not 0 <= self.per_host <= MAX_PER_HOST:
                raise ValueError(f"limit needs per_host within 0..{MAX_PER_HOST}, got {self.per_host}")
        elif self.per_host is not None:
            raise ValueError("per_host goes with limit")


# -- the URLFrontier gateway's questions to the partitions (crawl.control) and their answers ----------
QUERY_KINDS = ("stats", "queues", "urls", "count", "status", "crawls", "delete_queue", "delete_crawl", "purge", "hold")
CHANGING_KINDS = ("delete_queue", "delete_crawl", "purge", "hold")  # applied once, answered once committed
MAX_HOLD_LEASES = 10_000
MAX_QUERY_LIMIT = 1000  # URL records or queue keys in one reply at most (a reply must fit its topic)


class Query(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A URLFrontier gateway's question to every partition (a :class:`ControlCommand` with action
    ``query``). Each partition's owner answers with a :class:`Reply` on ``crawl.replies`` keyed
    by ``reply_to``. ``delete_queue``, ``delete_crawl`` and ``hold`` (``leases`` in a client's hands
    until ``until``: handed out by GetURLs) change the partition (applied once, answered once
    committed); the others only read it. A gateway's questions reach a partition in the order it
    sent them, after its holds and deletions: a question sees them done."""

    id: str  # the asker's request id, echoed in each reply
    reply_to: str  # the asking gateway: the key of the replies
    kind: str
    crawl: str = DEFAULT_CRAWL  # the frontier crawl ("" for kind crawls: every crawl)
    key: str = ""  # a queue key: only that queue ("" every queue of the crawl)
    url: str = ""  # status: the URL looked up (with key)
    after: str = ""  # urls / queues: the answer starts after this (the cursor of the previous reply)
    limit: int = 0  # urls / queues: at most this many (<= MAX_QUERY_LIMIT)
    inactive: bool = False  # queues: with the queues that have nothing queued or in flight
    leases: list[str] = msgspec.field(default_factory=list)  # hold: the leases handed out
    until: float = 0.0  # hold: in the client's hands until then; purge: URLs first recorded before then (epoch s)

    def validate(self) -> None:
        if self.kind not in QUERY_KINDS:
            raise ValueError(f"query kind must be one of {', '.join(QUERY_KINDS)}, got {self.kind!r}")
        if not self.id or len(self.id) > 64 or not self.reply_to or len(self.reply_to) > 200:
            raise ValueError("a query needs an id (<= 64 characters) and reply_to (<= 200)")
        if self.kind != "crawls":
            valid_crawl(self.crawl)
        if len(self.key) > 2048 or len(self.url) > 8192 or len(self.after) > 10_240:
            raise ValueError("query key, url or cursor too long")
        if len(self.leases) > MAX_HOLD_LEASES or any(len(lease) > 64 for lease in self.leases):
            raise ValueError(f"a hold names at most {MAX_HOLD_LEASES} leases (ids of at most 64 characters)")
        if not 0 <= self.until < 1e11:
            raise ValueError(f"until must be epoch seconds, got {self.until}")
        if not 0 <= self.limit <= MAX_QUERY_LIMIT:
            raise ValueError(f"query limit must be within 0..{MAX_QUERY_LIMIT}, got {self.limit}")


class UrlRecord(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    """One recorded URL (a URLFrontier client's), as a reply carries it. Not tracked by Python's
    garbage collector (no cycle can pass through one): the thousand of a page, alive while it is
    walked, never end up in the collector's oldest generation, whose full collections hold a
    process as large as the frontier for tens of milliseconds."""

    url: str
    key: str
    crawl: str = DEFAULT_CRAWL
    meta: dict[str, Any] = msgspec.field(default_factory=dict)
    refetch_at: float = 0.0  # due then (a queued URL: when it was queued; 0: never again)
    created: float = 0.0


class Reply(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One partition's answer to a :class:`Query`, on ``crawl.replies`` keyed by the asker."""

    v: int = CRAWLS_VERSION
    id: str
    partition: int
    error: str = ""
    counts: dict[str, int] = msgspec.field(default_factory=dict)  # stats, count, deletions
    queues: list[str] = msgspec.field(default_factory=list)
    urls: list[UrlRecord] = msgspec.field(default_factory=list)
    crawls: list[str] = msgspec.field(default_factory=list)
    # hold: the leases held (the others had closed, or a URL of their queue came before them)
    leases: list[str] = msgspec.field(default_factory=list)
    more: str = ""  # urls / queues: more follow; ask again with after = this

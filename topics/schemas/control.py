"""Commands and questions on ``crawl.control``: an operator's :class:`ControlCommand` on a scope
or a crawl, and the URLFrontier gateway's :class:`Query` to every partition with the
:class:`Reply` each sends on ``crawl.replies``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from topics.schemas.versions import CRAWLS_VERSION, DEFAULT_CRAWL, SCHEMA_VERSION, valid_crawl

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

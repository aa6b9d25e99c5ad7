"""The URLs' records: a user's :class:`Submission` on ``crawl.urls`` and the accepted
:class:`UrlItem` the router sends a partition in a :class:`UrlBatch` on ``crawl.urls.bydomain``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from topics.schemas.versions import DEFAULT_CRAWL, SCHEMA_VERSION


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

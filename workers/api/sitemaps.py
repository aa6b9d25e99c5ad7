"""Sitemaps (sitemaps.org 0.9): what a fetched sitemap job leads to, bounded whatever it holds.

A URL submitted with ``"sitemap": true`` (``crawl-frontier submit --sitemap URL``) is fetched as a
job of its host, throttled like any page, and its body read here:

- a ``<urlset>`` gives its ``<loc>`` URLs as submissions: ``priority`` (0.0-1.0, 0.5 by default)
  moves the sitemap's own priority by up to ±5; when the sitemap was given a revisit, the URLs
  inherit it, an adaptive one starting at half the age its ``lastmod`` gives, else at the
  ``changefreq`` period (``hourly`` an hour, ``daily`` a day, ...), within the bounds;
- a ``<sitemapindex>`` gives its ``<loc>`` sitemaps as sitemap submissions, one level deeper;
- a robots.txt (a sitemap URL whose path is ``/robots.txt``) gives its ``Sitemap:`` lines; a site's
  root URL given as a sitemap is taken for its robots.txt (``frontier.core.urls``);
- a plain-text sitemap gives one URL per line.

Bounds: 50,000 URLs and 50 MB uncompressed per sitemap (the protocol's limits: past them the
first 50,000 are taken and the page says so), gzip inflated at most that far (a gzip bomb stops
there), index chains at most :data:`MAX_DEPTH` deep, no entity expanded and no DTD or network
access (an XML bomb expands nothing), URLs of another registrable domain than the one the
sitemap lists for (its own, or the robots.txt's site that named it) left out and counted.
Anything else ends the sitemap job as an error page with the reason: never a crash.
"""

from __future__ import annotations

import calendar
import codecs
import re
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

from lxml import etree
from protego import Protego

from frontier.core import revisit
from frontier.core.urls import registrable_domain
from topics.schemas import Submission, UrlItem
from workers.api.followups import absolute_location

GZIP_MAGIC = bytes((0x1F, 0x8B))
MAX_URLS = 50_000
MAX_BYTES = 50 * 1024 * 1024
MAX_DEPTH = 3  # robots.txt -> index -> index -> sitemap: deeper chains end with an error
CHANGEFREQ = {"always": 0.0, "hourly": 3600.0, "daily": 86400.0, "weekly": 7 * 86400.0,
              "monthly": 30 * 86400.0, "yearly": 365 * 86400.0, "never": float("inf")}  # fmt: skip


class SitemapError(ValueError):
    """A sitemap that cannot be read (its reason, for the error page)."""


@dataclass
class Entry:
    url: str
    lastmod: float | None = None  # epoch seconds
    changefreq: float | None = None  # seconds
    priority: float | None = None  # 0.0-1.0


@dataclass
class Sitemap:
    """What one sitemap holds: page entries, sitemaps it names, and what was left out (said)."""

    entries: list[Entry] = field(default_factory=list)
    sitemaps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def inflate(body: bytes) -> bytes:
    """The sitemap's bytes, gunzipped when gzip (by magic number), never past MAX_BYTES."""
    if not body.startswith(GZIP_MAGIC):
        if len(body) > MAX_BYTES:
            raise SitemapError(f"over {MAX_BYTES // 2**20} MB")
        return body
    out = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        data = out.decompress(body, MAX_BYTES + 1)
    except zlib.error as exc:
        raise SitemapError(f"gzip unreadable: {exc}") from None
    if len(data) > MAX_BYTES:
        raise SitemapError(f"over {MAX_BYTES // 2**20} MB uncompressed (gzip inflated no further)")
    return data


def read(url: str, body: bytes) -> Sitemap:
    """Parse a fetched sitemap (XML urlset or index, robots.txt, or plain text); SitemapError when
    it cannot be read."""
    data = inflate(body)
    if urlsplit(url).path == "/robots.txt":
        found = list(Protego.parse(data.decode("utf-8", errors="replace")).sitemaps)
        return Sitemap(sitemaps=found[:MAX_URLS], notes=_past_limit(len(found), "sitemaps"))
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        data = data.decode("utf-16", errors="replace").encode()  # (its XML declaration, if any, says UTF-16)
        data = re.sub(rb"^\s*<\?xml[^>]*\?>", b"", data)
    text_start = data.removeprefix(codecs.BOM_UTF8).lstrip()
    if not text_start.startswith(b"<"):
        return _text(text_start)
    return _xml(text_start)


def _text(data: bytes) -> Sitemap:
    """A text sitemap: one absolute http(s) URL per line (the protocol's form); other lines are
    left out and counted (a "Not Found" page served as a sitemap submits nothing)."""
    lines = [line.strip() for line in data.decode("utf-8", errors="replace").splitlines() if line.strip()]
    urls = [u for u in lines if u.lower().startswith(("http://", "https://"))]
    notes = _past_limit(len(urls), "URLs")
    if len(urls) < len(lines):
        notes.append(f"{len(lines) - len(urls)} lines left out: not absolute http(s) URLs")
    return Sitemap(entries=[Entry(u) for u in urls[:MAX_URLS]], notes=notes)


def _parser() -> etree.XMLParser:
    """One per parse (lxml parsers are not shared across threads): no entity expanded, no DTD
    loaded, no network, no huge tree."""
    return etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, recover=False,
                           remove_comments=True, remove_pis=True)  # fmt: skip


def _xml(data: bytes) -> Sitemap:
    try:
        root = etree.fromstring(data, parser=_parser())
    except etree.XMLSyntaxError as exc:
        raise SitemapError(f"XML unreadable: {str(exc)[:200]}") from None
    if root is None:
        raise SitemapError("XML empty")
    kind = etree.QName(root).localname
    if kind not in ("urlset", "sitemapindex"):
        raise SitemapError(f"not a sitemap: root element <{kind[:50]}>")
    got = Sitemap()
    count = 0
    for child in root:
        if not isinstance(child.tag, str):
            continue  # an entity reference left unexpanded, a comment
        count += 1
        if count > MAX_URLS:
            continue
        fields = {etree.QName(e).localname: (e.text or "").strip() for e in child if isinstance(e.tag, str)}
        loc = fields.get("loc", "")
        if not loc:
            continue
        if kind == "sitemapindex":
            got.sitemaps.append(loc)
        else:
            got.entries.append(Entry(loc, _lastmod(fields.get("lastmod", "")),
                                     CHANGEFREQ.get(fields.get("changefreq", "").lower()),
                                     _priority(fields.get("priority", ""))))  # fmt: skip
    got.notes = _past_limit(count, "URLs" if kind == "urlset" else "sitemaps")
    return got


def _past_limit(count: int, what: str) -> list[str]:
    return (
        [f"{count} {what}, over the protocol's {MAX_URLS:,}: the first {MAX_URLS:,} taken"] if count > MAX_URLS else []
    )


_W3C = re.compile(
    r"^(\d{4})(?:-(\d{2})(?:-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?)?)?$"
)


def _lastmod(text: str) -> float | None:
    """W3C Datetime (the protocol's ``lastmod``) as epoch seconds; None when it does not parse."""
    m = _W3C.match(text)
    if m is None:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00")) if m.group(2) and m.group(3) else None
        if when is None:  # a year or a year and month: their first day
            return float(calendar.timegm(datetime(int(m.group(1)), int(m.group(2) or 1), 1).timetuple()))
        if when.tzinfo is None:
            return float(calendar.timegm(when.timetuple()))
        return when.timestamp()
    except (ValueError, OverflowError):  # 2024-13, 0000: no date
        return None


def _priority(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0.0 <= value <= 1.0 else None


# -- what a sitemap job leads to ----------------------------------------------------------------------
def follow_ups(item: UrlItem, url: str, body: bytes, at: float) -> tuple[list[Submission], list[str]]:
    """The submissions a fetched sitemap leads to, and notes on what was left out (empty: all
    taken). SitemapError when it cannot be read at all. ``at``: when it was fetched."""
    got = read(url, body)
    allowed = item.sitemap
    subs: list[Submission] = []
    notes = list(got.notes)
    if got.sitemaps and urlsplit(url).path != "/robots.txt":  # only a robots.txt may name another site's
        named = len(got.sitemaps)
        got.sitemaps = [loc for loc in got.sitemaps if _domain(absolute_location(url, loc)) == allowed]
        if len(got.sitemaps) < named:
            notes.append(f"{named - len(got.sitemaps)} sitemaps left out: not of {allowed}")
    if got.sitemaps:
        if item.sitemap_depth >= MAX_DEPTH:
            raise SitemapError(f"index chain deeper than {MAX_DEPTH}: {len(got.sitemaps)} sitemaps not followed")
        for loc in dict.fromkeys(got.sitemaps):
            target = absolute_location(url, loc)
            if target is None:
                continue
            deeper = item.sitemap_depth + 1
            subs.append(Submission(url=target, priority=item.priority, meta=item.meta, follow=item.follow,
                                   scopes=item.scopes, revisit=item.passed_on_revisit(), crawl=item.crawl,
                                   agent=item.agent, sitemap=True, sitemap_for=allowed,
                                   sitemap_depth=deeper))  # fmt: skip
    other = 0
    for entry in got.entries:
        target = absolute_location(url, entry.url)
        if target is None or _domain(target) != allowed:
            other += 1
            continue
        subs.append(Submission(url=target, priority=item.priority + _nudge(entry.priority), meta=item.meta,
                               follow=item.follow, scopes=item.scopes, revisit=item.passed_on_revisit(),
                               revisit_first=_first(item, entry, at), crawl=item.crawl, agent=item.agent))  # fmt: skip
    if other:
        notes.append(f"{other} URLs left out: not of {allowed} (or not URLs)")
    return subs, notes


def _domain(url: str | None) -> str:
    """The registrable domain of ``url`` ("" for none or a URL that does not parse)."""
    try:
        host = urlsplit(url).hostname if url else None
        return registrable_domain(host) if host else ""
    except ValueError:
        return ""


def _nudge(priority: float | None) -> int:
    """A sitemap priority (0.0-1.0, 0.5 when not given) as a move of the sitemap's own: -5..+5."""
    return 0 if priority is None else round((priority - 0.5) * 10)


def _first(item: UrlItem, entry: Entry, at: float) -> float:
    """An adaptive revisit's first interval from the entry: half its age (``lastmod``), else its
    ``changefreq`` period; within the bounds. 0: nothing said (the intake's default start)."""
    if item.revisit_max <= 0:
        return 0.0
    lo, hi = item.revisit_min, item.revisit_max
    if entry.lastmod is not None and entry.lastmod <= at:
        return revisit.first_interval(lo, hi, at - entry.lastmod)
    if entry.changefreq is not None:
        return revisit.clamp(min(entry.changefreq, revisit.MAX_INTERVAL), lo, hi)
    return 0.0

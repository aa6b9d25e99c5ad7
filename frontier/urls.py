"""URL intake: parse what a user published, canonicalise it, and key it by registrable domain.

Pure functions, no I/O: the tldextract suffix list is the snapshot bundled with the package
(never fetched at run time). A value that cannot be accepted raises :class:`Rejection` with a
short, stable reason that ends up on ``crawl.rejected``.
"""

from __future__ import annotations

import hashlib
import ipaddress
from functools import lru_cache
from urllib.parse import urlsplit

import msgspec
import tldextract
from w3lib.url import canonicalize_url, safe_url_string

from topics.schemas import Submission, UrlItem

MAX_URL_LENGTH = 2048
MAX_INPUT_BYTES = 64 * 1024
DEFAULT_PORTS = {"http": 80, "https": 443}

# suffix_list_urls=() → offline: use the snapshot shipped inside tldextract, never the network.
_extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
_submission_decoder = msgspec.json.Decoder(Submission)


class Rejection(ValueError):
    """An input that cannot be accepted; ``str(exc)`` is the reason."""


@lru_cache(maxsize=65536)
def registrable_domain(host: str) -> str:
    """The partition key of a host: its registrable domain (``books.toscrape.com`` → ``toscrape.com``).

    IP addresses and hosts without a public suffix (``localhost``) are their own domain.
    """
    try:
        ipaddress.ip_address(host.strip("[]"))
        return host
    except ValueError:
        pass
    ext = _extract(host)
    if ext.domain and ext.suffix:
        return f"{ext.domain}.{ext.suffix}"
    return host


def canonicalize(url: str) -> tuple[str, str]:
    """Return ``(canonical_url, host)`` or raise :class:`Rejection`.

    Canonical form (w3lib): lower-case scheme and host, IDN hosts punycoded, default port
    dropped, query arguments sorted, percent-encoding normalised, fragment removed.
    """
    url = url.strip()
    if not url:
        raise Rejection("empty url")
    if len(url) > MAX_URL_LENGTH:
        raise Rejection(f"url too long ({len(url)} > {MAX_URL_LENGTH} chars)")
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError on a bad port
    except ValueError as exc:
        raise Rejection(f"unparseable url: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise Rejection(f"unsupported scheme {scheme!r}" if scheme else "not an absolute http(s) url")
    if not parts.hostname:
        raise Rejection("no host")
    if parts.username is not None or parts.password is not None:
        raise Rejection("credentials in url")
    try:
        canonical = canonicalize_url(url, keep_fragments=False)
    except (ValueError, UnicodeError) as exc:
        raise Rejection(f"unparseable url: {exc}") from None
    cparts = urlsplit(canonical)
    host = cparts.hostname or ""
    if not host:
        raise Rejection("no host")
    if cparts.port is not None and DEFAULT_PORTS.get(scheme) == cparts.port:
        # w3lib keeps an explicit default port; http://a:80/ and http://a/ are one URL
        netloc = cparts.netloc.rsplit(":", 1)[0]
        canonical = cparts._replace(netloc=netloc).geturl()
    if len(canonical) > MAX_URL_LENGTH:
        raise Rejection(f"url too long after canonicalisation ({len(canonical)} chars)")
    del port
    return canonical, host


def url_fingerprint(canonical_url: str) -> bytes:
    """A short stable digest for the seen-set (collision odds negligible at 16 bytes)."""
    return hashlib.blake2b(canonical_url.encode(), digest_size=16).digest()


def seen_fingerprint(item: UrlItem) -> bytes:
    """The seen-set key of an item: the digest of its canonical form."""
    return url_fingerprint(item.canonical or item.url)


def as_given(url: str) -> str:
    """The URL to fetch: as the user gave it, only made safe to send (fragment removed, unsafe
    characters percent-encoded, host in IDNA). Query arguments keep their order and spelling:
    ``?b=2&a=1`` and ``?print`` may be different pages from ``?a=1&b=2`` and ``?print=``, and a
    robots.txt rule like ``Disallow: /*?sort=`` must see the URL the server will see."""
    try:
        safe = safe_url_string(url.strip())
    except (ValueError, UnicodeError) as exc:
        raise Rejection(f"unparseable url: {exc}") from None
    safe = safe.split("#", 1)[0]
    if len(safe) > MAX_URL_LENGTH:
        raise Rejection(f"url too long after encoding ({len(safe)} chars)")
    return safe


def item_from_submission(sub: Submission) -> UrlItem:
    canonical, host = canonicalize(sub.url)
    given = as_given(sub.url)
    for scope in sub.scopes:
        if not scope or len(scope) > 200 or any(c in scope for c in "#\x00\x1f"):
            raise Rejection(f"invalid scope name {scope[:50]!r}")
    if not (sub.cost >= 0 and sub.cost < 1e12):
        raise Rejection("invalid cost")
    if not (sub.revisit >= 0 and sub.revisit < 1e9):
        raise Rejection("invalid revisit interval")
    return UrlItem(
        url=given,
        canonical="" if canonical == given else canonical,
        host=host,
        domain=registrable_domain(host),
        priority=sub.priority,
        meta=sub.meta,
        follow=max(0, sub.follow),
        scopes=sub.scopes,
        redirects=max(0, sub.redirects),
        cost=sub.cost,
        adjust=sub.autothrottle,
        revisit=sub.revisit,
    )


def parse_input(raw: bytes | None) -> UrlItem:
    """Turn one ``crawl.urls`` record into a :class:`UrlItem`, or raise :class:`Rejection`.

    Accepted: a bare URL string, or a JSON object ``{"url": ..., "priority"?, "meta"?, "follow"?,
    "scopes"?}``.
    """
    if raw is None or not raw.strip():
        raise Rejection("empty record")
    if len(raw) > MAX_INPUT_BYTES:
        raise Rejection(f"record too large ({len(raw)} > {MAX_INPUT_BYTES} bytes)")
    text = raw.strip()
    if text[:1] in (b"{", b"[", b'"'):
        try:
            if text[:1] == b'"':
                sub = Submission(url=msgspec.json.decode(text, type=str))
            else:
                sub = _submission_decoder.decode(text)
        except msgspec.ValidationError as exc:
            raise Rejection(f"invalid submission: {exc}") from None
        except msgspec.DecodeError as exc:
            raise Rejection(f"not valid JSON: {exc}") from None
        return item_from_submission(sub)
    try:
        url = text.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejection("not UTF-8") from None
    if any(c.isspace() for c in url):
        raise Rejection("whitespace inside url")
    return item_from_submission(Submission(url=url))

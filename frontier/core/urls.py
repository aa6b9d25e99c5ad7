"""URL intake: parse what a user published, canonicalise it, and key it by registrable domain.

Pure functions, no I/O: the tldextract suffix list is the snapshot bundled with the package
(never fetched at run time). A value that cannot be accepted raises :class:`Rejection` with a
short, stable reason that ends up on ``crawl.rejected``.

**One name per server.** The scope host (``UrlItem.host``), the registrable domain and the
canonical URL spell a host one way (:func:`normal_host`): lower case, IDNA, trailing dots
removed, an IPv4 address in any form the WHATWG URL standard (and ``inet_aton``) accepts --
``2130706433``, ``0x7f000001``, ``0177.0.0.1``, ``127.1``, ``0x7f.1``, mixed bases -- written
as dotted decimal, an IPv6 address compressed. So ``example.com``, ``EXAMPLE.com.``,
``127.0.0.1``, ``2130706433`` and ``0x7f.0.0.1.`` are two scopes (one name, one address), not
five. A host that ends in a number but is no IPv4 address (``1.2.3.999``, ``a.1``) is rejected,
as browsers reject it; so is an IPv6 zone id.

The URL that is *fetched* (:func:`as_given`) keeps the user's spelling of a host name, with
its trailing dot: ``example.com.`` is a different ``Host`` header, and a virtual host may
answer it differently. IP literals are rewritten there too (dotted decimal IPv4, compressed
IPv6): every WHATWG parser does the same, so the server cannot tell the difference, and the
worker's address check (``workers.api.safety``) sees the plain address.

**Scope limits.** A submission names at most :data:`MAX_SCOPES` distinct scopes, each at most
:data:`MAX_SCOPE_CHARS` characters, together at most :data:`MAX_SCOPES_CHARS`; duplicates
collapse (first spelling kept, order kept). The scopes are part of the queue key and every
scope is a state record in the changelog, and follow-ups copy them: without the limits a 63 KB
submission made a 171 KB queue key and 9,003 changelog records for one job. Over a limit, the
submission is rejected with the reason; the router applies the same check to the follow-ups
workers publish (they copy an item's validated scopes, so they never exceed it).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from functools import lru_cache
from urllib.parse import urlsplit, urlunsplit

import msgspec
import tldextract
from w3lib.url import canonicalize_url, safe_url_string

from frontier.core import revisit
from frontier.core.robots import agent_token
from topics.schemas import DEFAULT_CRAWL, Submission, UrlItem, valid_crawl

MAX_URL_LENGTH = 2048
_SPACE = re.compile(r"\s")
MAX_INPUT_BYTES = 64 * 1024
DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_SCOPES = 8  # distinct named scopes per URL
MAX_SCOPE_CHARS = 64  # characters per scope name
MAX_SCOPES_CHARS = 256  # characters of all of a URL's scope names together

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


_DIGITS = {10: frozenset("0123456789"), 8: frozenset("01234567"), 16: frozenset("0123456789abcdefABCDEF")}


def _ipv4_number(part: str) -> int | None:
    """One part of an IPv4 address as WHATWG reads it (``0x`` hex, leading ``0`` octal, else
    decimal; ``0x`` alone is 0), or None when it is not a number."""
    base = 10
    if part[:2] in ("0x", "0X"):
        part, base = part[2:], 16
    elif len(part) > 1 and part[0] == "0":
        part, base = part[1:], 8
    if not part:
        return 0 if base == 16 else None
    if not set(part) <= _DIGITS[base]:
        return None
    return int(part, base)


def _ipv4(host: str) -> str | None:
    """The dotted decimal form of ``host`` when it ends in a number (an IPv4 address in some
    form, WHATWG's "ends in a number" rule), None when it does not; raise :class:`Rejection`
    when it ends in a number but is not an IPv4 address."""
    parts = host.split(".")
    last = parts[-1]
    if not (last and last.isascii() and last.isdigit()) and not (
        last[:2] in ("0x", "0X") and _ipv4_number(last) is not None
    ):
        return None
    numbers = [_ipv4_number(p) for p in parts] if len(parts) <= 4 else [None]
    if any(n is None for n in numbers):
        raise Rejection(f"invalid IPv4 address {host[:60]!r}")
    values = [n for n in numbers if n is not None]
    if any(n > 255 for n in values[:-1]) or values[-1] >= 256 ** (5 - len(values)):
        raise Rejection(f"invalid IPv4 address {host[:60]!r}")
    address = values[-1]
    for i, n in enumerate(values[:-1]):
        address += n << (8 * (3 - i))
    return str(ipaddress.IPv4Address(address))


def normal_host(host: str) -> str:
    """The one spelling of a server's name (see the module docstring); raise :class:`Rejection`
    when it is an invalid address. ``host`` is as :func:`urllib.parse.urlsplit` gives it
    (lower case, IPv6 without brackets)."""
    if ":" in host:  # only IPv6 literals have colons in a hostname
        if "%" in host:
            raise Rejection(f"IPv6 zone id in url {host[:60]!r}")
        try:
            return ipaddress.IPv6Address(host).compressed
        except ValueError:
            raise Rejection(f"invalid IPv6 address {host[:60]!r}") from None
    host = host.rstrip(".").lower()
    if not host:
        return host
    return _ipv4(host) or host


def _netloc(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None else f"{shown}:{port}"


def canonicalize(url: str) -> tuple[str, str]:
    """Return ``(canonical_url, host)`` or raise :class:`Rejection`.

    Canonical form (w3lib): lower-case scheme and host, IDN hosts punycoded, default port
    dropped, query arguments sorted, percent-encoding normalised, fragment removed; and the
    host in its one spelling (:func:`normal_host`: no trailing dot, IP addresses in their
    plain form). ``host`` is that spelling: the host's scope.
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
    host = normal_host(cparts.hostname or "")
    if not host:
        raise Rejection("no host")
    # w3lib keeps an explicit default port (http://a:80/ and http://a/ are one URL) and the
    # host's trailing dot and numeric address forms (one server, one spelling)
    cport = None if DEFAULT_PORTS.get(scheme) == cparts.port else cparts.port
    netloc = _netloc(host, cport)
    if netloc != cparts.netloc:
        canonical = cparts._replace(netloc=netloc).geturl()
    if len(canonical) > MAX_URL_LENGTH:
        raise Rejection(f"url too long after canonicalisation ({len(canonical)} chars)")
    del port
    return canonical, host


def url_fingerprint(canonical_url: str) -> bytes:
    """A short stable digest for the seen-set (collision odds negligible at 16 bytes)."""
    return hashlib.blake2b(canonical_url.encode(), digest_size=16).digest()


def seen_fingerprint(item: UrlItem, generation: int = 0) -> bytes:
    """The seen-set key of an item: the digest of its canonical form, in its crawl. The default
    crawl's first generation keeps the digest of the URL alone (the seen sets written before
    crawls); any other crawl, or a crawl whose seen entries were forgotten (``generation``, see
    ``frontier.partition.crawls``), digests its name and generation too: one URL is crawled once
    in each crawl."""
    canonical = item.canonical or item.url
    if item.crawl == DEFAULT_CRAWL and generation == 0:
        return url_fingerprint(canonical)
    return url_fingerprint(f"{item.crawl}\x1e{generation}\x1e{canonical}")


def as_given(url: str, host: str | None = None) -> str:
    """The URL to fetch: as the user gave it, only made safe to send (fragment removed, unsafe
    characters percent-encoded, host in IDNA, an IP address in its plain form). Query arguments
    keep their order and spelling: ``?b=2&a=1`` and ``?print`` may be different pages from
    ``?a=1&b=2`` and ``?print=``, and a robots.txt rule like ``Disallow: /*?sort=`` must see the
    URL the server will see. ``host``: the host's one spelling when already known
    (:func:`canonicalize`); a name needs no rewriting, so the URL is not parsed again."""
    try:
        safe = safe_url_string(url.strip())
    except (ValueError, UnicodeError) as exc:
        raise Rejection(f"unparseable url: {exc}") from None
    safe = safe.split("#", 1)[0]
    # in its one spelling, a host is an address when it has a colon (IPv6) or ends in a digit
    # (names that do are rejected or read as IPv4 by normal_host)
    if host is None or ":" in host or host[-1:].isdigit():
        safe = _plain_address(safe)
    if len(safe) > MAX_URL_LENGTH:
        raise Rejection(f"url too long after encoding ({len(safe)} chars)")
    return safe


def _plain_address(safe: str) -> str:
    """``safe`` with an IP literal host written in its plain form (numeric IPv4 forms as dotted
    decimal, IPv6 compressed); any other host as it is."""
    try:
        parts = urlsplit(safe)
        hostname, port = parts.hostname or "", parts.port
    except ValueError as exc:
        raise Rejection(f"unparseable url: {exc}") from None
    if hostname:
        host = normal_host(hostname)
        netloc = _netloc(host, port)
        if (":" in host or _is_ipv4(host)) and netloc != parts.netloc:
            return parts._replace(netloc=netloc).geturl()
    return safe


def _is_ipv4(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


def valid_scopes(scopes: list[str]) -> list[str]:
    """A submission's named scopes, duplicates collapsed (order kept), or :class:`Rejection`
    when one is invalid or they exceed :data:`MAX_SCOPES` / :data:`MAX_SCOPE_CHARS` /
    :data:`MAX_SCOPES_CHARS`."""
    unique = list(dict.fromkeys(scopes))
    if len(unique) > MAX_SCOPES:
        raise Rejection(f"too many scopes ({len(unique)} > {MAX_SCOPES})")
    for scope in unique:
        if not scope or len(scope) > MAX_SCOPE_CHARS or any(c == "#" or c < " " or c == "\x7f" for c in scope):
            raise Rejection(f"invalid scope name {scope[:50]!r} (1-{MAX_SCOPE_CHARS} characters, no '#' or "
                            "control characters)")  # fmt: skip
    total = sum(len(scope) for scope in unique)
    if total > MAX_SCOPES_CHARS:
        raise Rejection(f"scope names too long together ({total} > {MAX_SCOPES_CHARS} characters)")
    return unique


def item_from_submission(sub: Submission) -> UrlItem:
    url = sub.url
    if sub.sitemap:  # a site's root: its sitemaps are its robots.txt's Sitemap lines
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise Rejection(f"invalid URL: {exc}") from None
        if parts.path in ("", "/") and not parts.query:
            url = urlunsplit((parts.scheme, parts.netloc, "/robots.txt", "", ""))
    canonical, host = canonicalize(url)
    given = as_given(url, host)
    scopes = valid_scopes(sub.scopes)
    if not (sub.cost >= 0 and sub.cost < 1e12):
        raise Rejection("invalid cost")
    try:
        adaptive = revisit.bounds(sub.revisit)
    except ValueError as exc:
        raise Rejection(str(exc)) from None
    lo, hi = adaptive or (0.0, 0.0)
    interval = revisit.first_interval(lo, hi) if adaptive else float(sub.revisit)  # type: ignore[arg-type]
    if adaptive and sub.revisit_first > 0:
        interval = revisit.clamp(sub.revisit_first, lo, hi)
    sitemap_for = ""
    if sub.sitemap:
        if len(sub.sitemap_for) > 253 or not 0 <= sub.sitemap_depth < 100:
            raise Rejection("invalid sitemap_for or sitemap_depth")
        sitemap_for = sub.sitemap_for or registrable_domain(host)
    try:
        crawl = valid_crawl(sub.crawl)
    except ValueError as exc:
        raise Rejection(str(exc)) from None
    agent = robots_agent(sub.agent)
    key = valid_key(sub.key)
    if key and key != host:  # a URLFrontier queue key other than the host: a named scope on top of the host's
        scopes = valid_scopes([*scopes, key_scope(key)])
    refetch_at = sub.refetch_at
    if refetch_at is not None and not (0 <= refetch_at < 1e11):
        raise Rejection("invalid refetch_at (epoch seconds, 0: never)")
    if refetch_at is not None and not key:
        raise Rejection("refetch_at needs a key (a URLFrontier known URL)")
    return UrlItem(
        url=given,
        canonical="" if canonical == given else canonical,
        host=host,
        domain=registrable_domain(host),
        priority=sub.priority,
        meta=sub.meta,
        follow=max(0, sub.follow),
        scopes=scopes,
        redirects=max(0, sub.redirects),
        cost=sub.cost,
        adjust=sub.autothrottle,
        revisit=interval,
        revisit_min=lo,
        revisit_max=hi,
        sitemap=sitemap_for,
        sitemap_depth=sub.sitemap_depth if sub.sitemap else 0,
        discover_sitemaps=sub.discover_sitemaps,
        recrawl=sub.recrawl,
        forget=sub.forget,
        crawl=crawl,
        agent=agent,
        key=key,
        refetch_at=refetch_at,
    )


MAX_KEY_CHARS = 512  # characters of a URLFrontier queue key


def valid_key(key: str) -> str:
    """A URLFrontier queue key as given ("" stays ""), or :class:`Rejection`."""
    if len(key) > MAX_KEY_CHARS or any(c < " " or c == "\x7f" for c in key):
        raise Rejection(f"invalid key: at most {MAX_KEY_CHARS} characters, no control characters")
    return key


def key_scope(key: str) -> str:
    """The named scope of a queue key other than the host: the key itself when it may name a
    scope, else ``key-`` and a digest of it (a scope name has at most 64 characters, no ``#``)."""
    if len(key) <= MAX_SCOPE_CHARS and "#" not in key:
        return key
    return f"key-{hashlib.blake2b(key.encode(), digest_size=8).hexdigest()}"


MAX_AGENT_CHARS = 512


def robots_agent(user_agent: str) -> str:
    """The robots.txt product token of a submission's User-Agent ("" stays ""), or :class:`Rejection`."""
    if not user_agent:
        return ""
    if len(user_agent) > MAX_AGENT_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in user_agent):
        raise Rejection(f"invalid agent: at most {MAX_AGENT_CHARS} characters, no control characters")
    return agent_token(user_agent)


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
    if _SPACE.search(url):
        raise Rejection("whitespace inside url")
    return item_from_submission(Submission(url=url))

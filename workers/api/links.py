"""Link extraction for optional link following (stdlib HTML parser; tolerant of broken HTML).

Links marked ``rel="nofollow"`` are skipped, and a page whose ``<meta name="robots">`` (or
``<meta name="AGENT">`` for our own agent token) says ``nofollow`` or ``none`` yields no links.
:func:`header_nofollow` reads the same directives from an ``X-Robots-Tag`` header.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

from frontier.core.urls import registrable_domain

MAX_LINKS = 500
_TOKENS = re.compile(r"[\s,]+")
# X-Robots-Tag directives that carry a value after a colon (anything else before a colon names a crawler)
_VALUED = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})


def _nofollow(directives: str) -> bool:
    return not {"nofollow", "none"}.isdisjoint(_TOKENS.split(directives.strip().lower()))


class _Hrefs(HTMLParser):
    def __init__(self, agent: str) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []
        self.base: str | None = None
        self.nofollow = False  # the page's meta robots forbid following its links
        self._names = {"robots", agent.lower()} if agent else {"robots"}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values: dict[str, str] = {}
        for name, value in attrs:
            values.setdefault(name, value or "")  # the first occurrence of an attribute wins
        if tag == "a":
            href = values.get("href")
            if href and "nofollow" not in _TOKENS.split(values.get("rel", "").lower()):
                self.hrefs.append(href)
        elif tag == "base" and self.base is None:
            self.base = values.get("href") or None
        elif tag == "meta" and values.get("name", "").strip().lower() in self._names:
            self.nofollow = self.nofollow or _nofollow(values.get("content", ""))


def header_nofollow(value: str, agent: str) -> bool:
    """Whether an ``X-Robots-Tag`` value (several headers joined by ", ") forbids following links
    for every crawler or for ``agent`` (``nofollow``, ``none``, ``agent: nofollow``)."""
    target = ""  # the crawler the following directives are for ("": every crawler)
    for piece in value.lower().split(","):
        name, colon, rest = piece.partition(":")
        if colon and name.strip() not in _VALUED:
            target, piece = name.strip(), rest
        if (not target or target == agent.lower()) and _nofollow(piece):
            return True
    return False


def same_site_links(page_url: str, html: str, agent: str = "") -> list[str]:
    """Absolute http(s) links of ``html`` on the same registrable domain as ``page_url``, except
    nofollow links; none when the page's meta robots (or meta ``agent``) say nofollow."""
    parser = _Hrefs(agent)
    try:
        parser.feed(html)
        parser.close()
    except Exception:  # noqa: BLE001 - a broken page yields the links found so far
        pass
    if parser.nofollow:
        return []
    try:
        base = urljoin(page_url, parser.base) if parser.base else page_url
    except ValueError:
        base = page_url
    host = urlsplit(page_url).hostname or ""
    domain = registrable_domain(host)
    out: list[str] = []
    seen: set[str] = set()
    for href in parser.hrefs:
        try:
            url = urljoin(base, href.strip())
            parts = urlsplit(url)
            hostname = parts.hostname
        except ValueError:
            continue
        if parts.scheme not in ("http", "https") or not hostname:
            continue
        if registrable_domain(hostname) != domain:
            continue
        url = url.split("#", 1)[0]
        if url not in seen:
            seen.add(url)
            out.append(url)
            if len(out) >= MAX_LINKS:
                break
    return out

"""Link extraction for optional link following (stdlib HTML parser; tolerant of broken HTML)."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

from frontier.urls import registrable_domain

MAX_LINKS = 500


class _Hrefs(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []
        self.base: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            for name, value in attrs:
                if name == "href" and value:
                    self.hrefs.append(value)
        elif tag == "base" and self.base is None:
            self.base = dict(attrs).get("href")


def same_site_links(page_url: str, html: str) -> list[str]:
    """Absolute http(s) links of ``html`` on the same registrable domain as ``page_url``."""
    parser = _Hrefs()
    try:
        parser.feed(html)
        parser.close()
    except Exception:  # noqa: BLE001 - a broken page yields the links found so far
        pass
    base = urljoin(page_url, parser.base) if parser.base else page_url
    host = urlsplit(page_url).hostname or ""
    domain = registrable_domain(host)
    out: list[str] = []
    seen: set[str] = set()
    for href in parser.hrefs:
        try:
            url = urljoin(base, href.strip())
            parts = urlsplit(url)
        except ValueError:
            continue
        if parts.scheme not in ("http", "https") or not parts.hostname:
            continue
        if registrable_domain(parts.hostname) != domain:
            continue
        url = url.split("#", 1)[0]
        if url not in seen:
            seen.add(url)
            out.append(url)
            if len(out) >= MAX_LINKS:
                break
    return out

"""A local site for Scrapy's feed spiders (tests/integration/test_scrapy_spiders.py): a sitemap index
that points to two urlsets (books and authors in one, news in the other), an RSS-like XML feed and a
CSV feed, each leading to pages, and the pages themselves. It answers on its own loopback address and
records every request (:class:`~frontier.demo.sites.SiteFleet`'s hits), so a test judges what the
spider asked for from the site's own log. ``/robots.txt`` allows everything."""

from __future__ import annotations

import re

from aiohttp import web

from frontier.demo.sites import Hit, Site, SiteFleet

BOOKS = 3
AUTHORS = 2
NEWS = 2
ARTICLES = 3
PRODUCTS = 3

_PAGE = re.compile(r"^/(books|authors|news|articles|products)/(\d+)$")


def _index(*locs: str) -> str:
    entries = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    return f'<?xml version="1.0" encoding="UTF-8"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</sitemapindex>'


def _urlset(*locs: str) -> str:
    entries = "".join(f"<url><loc>{loc}</loc></url>" for loc in locs)
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'


class FeedSite(SiteFleet):
    """One site (``127.0.0.<first_octet>``) serving the sitemaps, the feeds and their pages."""

    def __init__(self, first_octet: int) -> None:
        super().__init__(1, pages=0, latency=0.01, first_octet=first_octet)

    @property
    def base(self) -> str:
        return self.sites[0].url(self.port, "").rstrip("/")

    def requested(self) -> list[str]:
        """Every path asked for (robots.txt aside), in order, repeats kept."""
        return [h.path for h in self.sites[0].hits if h.path != "/robots.txt"]

    def body(self, path: str) -> tuple[str, str] | None:
        """(content type, text) of ``path``; None: not found."""
        b = self.base
        if path == "/robots.txt":
            return "text/plain", "User-agent: *\nDisallow:\n"
        if path == "/sitemap_index.xml":
            return "application/xml", _index(f"{b}/sitemap-books.xml", f"{b}/sitemap-news.xml")
        if path == "/sitemap-books.xml":  # /about matches no sitemap rule: never requested
            locs = [f"{b}/books/{n}" for n in range(1, BOOKS + 1)] + [f"{b}/authors/{n}" for n in range(1, AUTHORS + 1)]
            return "application/xml", _urlset(*locs, f"{b}/about")
        if path == "/sitemap-news.xml":  # sitemap_follow leaves this one out
            return "application/xml", _urlset(*(f"{b}/news/{n}" for n in range(1, NEWS + 1)))
        if path == "/feed.xml":  # relative links for two items, an absolute one for the last
            items = "".join(
                f"<item><title>Article {n}</title><link>{b if n == ARTICLES else ''}/articles/{n}</link></item>"
                for n in range(1, ARTICLES + 1)
            )
            return "application/xml", f'<?xml version="1.0"?><rss version="2.0"><channel>{items}</channel></rss>'
        if path == "/feed.csv":
            rows = "".join(f'{n},"Product, no. {n}",/products/{n}\n' for n in range(1, PRODUCTS + 1))
            return "text/csv", f"id,name,url\n{rows}"
        if m := _PAGE.match(path):
            kind, n = m.group(1), int(m.group(2))
            if n >= 1:
                return "text/html", f"<html><body><h1>{kind[:-1].title()} {n}</h1><p>{kind} page</p></body></html>"
        return None

    async def respond(self, site: Site, request: web.Request, hit: Hit) -> web.Response:
        found = self.body(request.path)
        if found is None:
            return web.Response(status=404, text="not found")
        content_type, text = found
        return web.Response(text=text, content_type=content_type)

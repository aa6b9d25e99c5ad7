"""The hidden-limit sites (:mod:`tests.integration.hidden_sites`) serving a bookshop: catalogue
pages ``/catalogue/page-N.html`` (each with ``BOOKS`` links to book pages and a link to the next
catalogue page) and book pages ``/catalogue/book-N-K.html`` (a title and a price), so a spider with
two callbacks crawls them. The robots site's catalogue also links to ``/private/`` books, which its
robots.txt disallows, with its Crawl-delay, to the example project's agent only (``bookshop-bot``):
every other agent may fetch anything at any pace, so only a crawler that matches robots.txt with
the spider's own User-Agent is polite there."""

from __future__ import annotations

import re

from aiohttp import web

from tests.integration.hidden_sites import HiddenLimitFleet, Limits

BOOKS = 4  # book links per catalogue page

_CATALOGUE = re.compile(r"^/catalogue/page-(\d+)\.html$")
_BOOK = re.compile(r"^/(catalogue|private)/book-(\d+)-(\d+)\.html$")


class BookshopFleet(HiddenLimitFleet):
    def __init__(self, limits: list[Limits], pages: int, first_octet: int = 151) -> None:
        super().__init__(limits, first_octet=first_octet)
        self.catalogue_pages = pages

    def robots_txt(self, lim: Limits) -> str:
        return (f"User-agent: bookshop-bot\nCrawl-delay: {lim.crawl_delay}\nDisallow: /private\n\n"
                "User-agent: *\nDisallow:\n")  # fmt: skip

    def html(self, request: web.Request, private: bool = False) -> str:
        path = request.path
        if m := _CATALOGUE.match(path):
            n = int(m.group(1))
            links = [f'<a class="book" href="/catalogue/book-{n}-{k}.html">book {n}-{k}</a>' for k in range(BOOKS)]
            if private:
                links.append(f'<a class="book" href="/private/book-{n}-0.html">private book</a>')
            if n < self.catalogue_pages:
                links.append(f'<a class="next" href="/catalogue/page-{n + 1}.html">next</a>')
            return f"<html><body><h1>catalogue {n}</h1>{''.join(links)}</body></html>"
        if m := _BOOK.match(path):
            n, k = int(m.group(2)), int(m.group(3))
            return f'<html><body><h1>Book {n}-{k}</h1><p class="price">£{n * 10 + k}.99</p></body></html>'
        return "<html><body>not a bookshop page</body></html>"

    def expected_books(self, host: str) -> set[str]:
        """The book URLs a complete crawl of ``host`` yields as items (not the disallowed ones)."""
        return {f"http://{host}:{self.port}/catalogue/book-{n}-{k}.html"
                for n in range(1, self.catalogue_pages + 1) for k in range(BOOKS)}  # fmt: skip

    def start_url(self, host: str) -> str:
        return f"http://{host}:{self.port}/catalogue/page-1.html"

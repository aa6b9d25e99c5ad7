"""Spiders of Scrapy's own spider classes for ``scrapy runspider`` on the frontier
(tests/integration/test_scrapy_spiders.py), against :class:`tests.integration.feed_sites.FeedSite`
at ``$FEED_BASE``. ``$SPIDER_CLASS`` picks the spider (``runspider`` runs the last spider class the
module binds: :data:`SPIDER`):

- ``sitemap``: a ``SitemapSpider`` with ``sitemap_rules`` (books and authors to two callbacks) and
  ``sitemap_follow`` (the books' urlset of the index, not the news');
- ``xmlfeed``: an ``XMLFeedSpider`` (``iternodes``, itertag ``item``): an item per node and a
  request per node's link to a callback, with ``cb_kwargs``;
- ``csvfeed``: a ``CSVFeedSpider``: an item per row and a request per row's URL to a callback;
- ``meta``: a plain spider whose requests carry meta JSON cannot (a ``set``, an ``object()``, a
  ``datetime`` in ``cb_kwargs``: each refused at yield, the crawl goes on) and lxml's text (a ``str``
  subclass: it goes, and comes back a ``str``).

Each item names the callback that made it. :class:`TagProcess` (a downloader middleware) marks each
download with ``$SPIDER_TAG`` in an ``X-Spider`` header, so a site's log tells which process
fetched what.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import lxml.html
import scrapy
from scrapy.http import Response
from scrapy.selector import Selector
from scrapy.spiders import CSVFeedSpider, SitemapSpider, XMLFeedSpider

SETTINGS: dict[str, Any] = {"ADDONS": {"workers.scrapy.FrontierAddon": 0}, "USER_AGENT": "feed-bot/1.0"}


def base() -> str:
    return os.environ.get("FEED_BASE", "http://127.0.0.1:1")


class TagProcess:
    """Marks each download with this process's ``$SPIDER_TAG`` (header ``X-Spider``)."""

    def process_request(self, request: scrapy.Request, spider: Any = None) -> None:
        request.headers["X-Spider"] = os.environ.get("SPIDER_TAG", "")


def heading(response: Response) -> str:
    return response.css("h1::text").get() or ""


class ShopSitemapSpider(SitemapSpider):
    name = "sitemap"
    custom_settings = SETTINGS
    sitemap_rules = [(r"/books/", "parse_book"), (r"/authors/", "parse_author")]
    sitemap_follow = [r"/sitemap-books"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sitemap_urls = [f"{base()}/sitemap_index.xml"]
        super().__init__(*args, **kwargs)

    def parse_book(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {"callback": "parse_book", "url": response.url, "heading": heading(response)}

    def parse_author(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {"callback": "parse_author", "url": response.url, "heading": heading(response)}


class ShopXmlFeedSpider(XMLFeedSpider):
    name = "xmlfeed"
    custom_settings = SETTINGS
    iterator = "iternodes"
    itertag = "item"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.start_urls = [f"{base()}/feed.xml"]
        super().__init__(*args, **kwargs)

    def parse_node(self, response: Response, selector: Selector) -> Iterator[Any]:
        title = selector.xpath("title/text()").get()
        link = selector.xpath("link/text()").get() or ""
        yield {"callback": "parse_node", "url": response.url, "title": title, "link": link}
        yield scrapy.Request(response.urljoin(link), callback=self.parse_article, cb_kwargs={"title": title})

    def parse_article(self, response: Response, title: str) -> Iterator[dict[str, Any]]:
        yield {"callback": "parse_article", "url": response.url, "title": title, "heading": heading(response)}


class ShopCsvFeedSpider(CSVFeedSpider):
    name = "csvfeed"
    custom_settings = SETTINGS
    delimiter = ","
    quotechar = '"'

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.start_urls = [f"{base()}/feed.csv"]
        super().__init__(*args, **kwargs)

    def parse_row(self, response: Response, row: dict[str, str]) -> Iterator[Any]:
        yield {"callback": "parse_row", "url": response.url, "id": row["id"], "name": row["name"]}
        yield scrapy.Request(response.urljoin(row["url"]), callback=self.parse_product, cb_kwargs={"name": row["name"]})

    def parse_product(self, response: Response, name: str) -> Iterator[dict[str, Any]]:
        yield {"callback": "parse_product", "url": response.url, "name": name, "heading": heading(response)}


class MetaSpider(scrapy.Spider):
    name = "meta"
    custom_settings = SETTINGS

    async def start(self) -> AsyncIterator[scrapy.Request]:
        yield scrapy.Request(f"{base()}/articles/2", callback=self.parse, meta={"bad": {1, 2}})  # a set: refused
        yield scrapy.Request(f"{base()}/articles/1", callback=self.parse)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        text = lxml.html.fromstring(response.body).xpath("//h1/text()")[0]  # lxml's _ElementUnicodeResult
        yield {"callback": "parse", "url": response.url, "type": type(text).__name__}
        yield scrapy.Request(f"{base()}/articles/3", callback=self.parse_text, meta={"when": object()})
        yield scrapy.Request(
            f"{base()}/products/1", callback=self.parse_text, cb_kwargs={"at": datetime.datetime.now(datetime.UTC)}
        )
        yield scrapy.Request(f"{base()}/products/2", callback=self.parse_text, meta={"text": text, "texts": [text]})

    def parse_text(self, response: Response, **kwargs: Any) -> Iterator[dict[str, Any]]:
        text, texts = response.meta.get("text"), response.meta.get("texts")
        yield {"callback": "parse_text", "url": response.url, "text": text, "type": type(text).__name__,
               "texts": texts, "types": [type(t).__name__ for t in texts or []]}  # fmt: skip


SPIDERS: dict[str, type[scrapy.Spider]] = {
    cls.name: cls for cls in (ShopSitemapSpider, ShopXmlFeedSpider, ShopCsvFeedSpider, MetaSpider)
}
SPIDER = SPIDERS[os.environ.get("SPIDER_CLASS") or "sitemap"]  # the last spider class bound: runspider's

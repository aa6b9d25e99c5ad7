"""The same bookshop as ``books``, written as most Scrapy users write a site crawl: a ``CrawlSpider``
whose rules follow the catalogue's pages and hand each book page to a callback (with the page it was
listed on, from ``cb_kwargs``-free link text, and an errback); nothing in it knows of the frontier."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrapy.http import Response
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule
from twisted.python.failure import Failure


class RulesSpider(CrawlSpider):
    name = "rules"
    rules = (
        Rule(LinkExtractor(allow=r"/catalogue/page-\d+\.html$"), follow=True),
        Rule(
            LinkExtractor(allow=r"/(catalogue|private)/book-[\d-]+\.html$"),
            callback="parse_book",
            cb_kwargs={"shelf": "books"},
            errback="failed",
            process_links="keep_links",
        ),
    )

    def __init__(self, start_urls: str = "", **kwargs: Any) -> None:
        self.start_urls = [u for u in start_urls.split(",") if u]
        super().__init__(**kwargs)

    def keep_links(self, links: list[Any]) -> list[Any]:
        return [link for link in links if link.text]  # a rule's process_links: the links with text

    def parse_book(self, response: Response, shelf: str) -> Iterator[dict[str, Any]]:
        yield {
            "url": response.url,
            "title": response.css("h1::text").get(),
            "price": response.css("p.price::text").get(),
            "listing": response.meta.get("link_text", ""),
            "shelf": shelf,
        }

    def failed(self, failure: Failure) -> None:
        self.logger.warning("book not fetched: %r", failure.value)

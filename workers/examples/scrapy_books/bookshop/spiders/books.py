"""Catalogue pages lead to the next catalogue page and to book pages; each book page is an item."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.http import Response


class BooksSpider(scrapy.Spider):
    name = "books"

    def __init__(self, start_urls: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [u for u in start_urls.split(",") if u]

    async def start(self) -> AsyncIterator[scrapy.Request]:
        for url in self.start_urls:
            yield scrapy.Request(url, callback=self.parse)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[scrapy.Request]:
        for href in response.css("a.book::attr(href)").getall():
            yield response.follow(href, callback=self.parse_book, cb_kwargs={"listing": response.url})
        for href in response.css("a.next::attr(href)").getall():
            yield response.follow(href, callback=self.parse)

    def parse_book(self, response: Response, listing: str) -> Iterator[dict[str, Any]]:
        yield {
            "url": response.url,
            "title": response.css("h1::text").get(),
            "price": response.css("p.price::text").get(),
            "listing": listing,
        }

"""A spider for ``scrapy runspider`` on the frontier (tests/integration/test_scrapy_edges.py): it
yields a request with meta JSON cannot carry (refused at yield, key named), a request a downloader
middleware of its own drops before download (skipped, with the reason), a page that answers 404
(reported; HttpErrorMiddleware keeps it from the callback) and a redirect (followed through the
frontier, to its callback)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response


class DropMiddleware:
    """A project's own downloader middleware that drops some requests before download."""

    def process_request(self, request: scrapy.Request, spider: Any = None) -> None:
        if "/drop/" in request.url:
            raise IgnoreRequest("dropped by the project's middleware")


class EdgeSpider(scrapy.Spider):
    name = "edges"
    custom_settings = {
        "ADDONS": {"workers.scrapy.FrontierAddon": 0},
        "DOWNLOADER_MIDDLEWARES": {f"{__name__}.DropMiddleware": 100},
        "CRAWL_FRONTIER_PAGES": True,
        "USER_AGENT": "edge-bot/1.0",
    }

    async def start(self) -> AsyncIterator[scrapy.Request]:
        base = os.environ["EDGE_BASE"]
        yield scrapy.Request(f"{base}/page/1", callback=self.parse)
        yield scrapy.Request(f"{base}/drop/1", callback=self.parse)
        yield scrapy.Request(f"{base}/missing", callback=self.parse)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        yield {"url": response.url, "status": response.status}
        if response.url.endswith("/page/1"):
            base = os.environ["EDGE_BASE"]
            yield scrapy.Request(f"{base}/page/2", callback=self.parse, meta={"fine": [1, "two"]})
            yield scrapy.Request(f"{base}/page/3", callback=self.parse, meta={"bad": object()})

"""A spider for ``scrapy runspider`` on the frontier (tests/integration/test_scrapy_edges.py) whose
pages are kept fresh: ``CRAWL_FRONTIER_REVISIT`` gives every request an adaptive revisit, and the
add-on makes each revisit conditional once the page gave an ETag."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.http import Response


class RevisitSpider(scrapy.Spider):
    name = "fresh"
    custom_settings = {
        "ADDONS": {"workers.scrapy.FrontierAddon": 0},
        "CRAWL_FRONTIER_REVISIT": "1:2",
        "USER_AGENT": "fresh-bot/1.0",
    }

    async def start(self) -> AsyncIterator[scrapy.Request]:
        yield scrapy.Request(f"{os.environ['REVISIT_BASE']}/static", callback=self.parse)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        with open(os.environ["REVISIT_ITEMS"], "a") as out:  # one line per callback: 304s never reach it
            out.write(f"{response.status} {response.url}\n")
        yield {"url": response.url}
        yield scrapy.Request(f"{os.environ['REVISIT_BASE']}/changing", callback=self.parse)

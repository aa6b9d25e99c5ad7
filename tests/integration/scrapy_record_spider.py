"""A stock spider for ``scrapy runspider`` (tests/integration/test_scrapy_records.py): it starts
nothing itself and takes its crawl's jobs, whatever records put them on ``crawl.urls``. Each item
carries the start of the body it parsed; every call of ``__init__`` and of the private ``_secret``
is written to ``RECORDS_MARKS``, so a record that made the spider call either is seen."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.http import Response


def mark(what: str) -> None:
    with open(os.environ["RECORDS_MARKS"], "a", encoding="utf-8") as out:
        out.write(what + "\n")


class RecordSpider(scrapy.Spider):
    name = "records"
    custom_settings = {
        "ADDONS": {"workers.scrapy.FrontierAddon": 0},
        "CRAWL_FRONTIER_PAGES": True,
        "USER_AGENT": "records-bot/1.0",
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        mark(f"__init__ {args!r:.100}")

    async def start(self) -> AsyncIterator[scrapy.Request]:
        return
        yield  # (an async generator that yields nothing: the jobs come from the crawl)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield {"url": response.url, "status": response.status, "body": response.text[:300]}

    def _secret(self, response: Response) -> None:
        mark(f"_secret {response.url}")

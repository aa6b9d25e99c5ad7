"""Scrapy's side of benchmark 6, run as its own process: crawl a list of URLs with AutoThrottle,
ROBOTSTXT_OBEY and CONCURRENT_REQUESTS 64 (other settings Scrapy's defaults), then write what it
got as JSON.

    python -m tests.bench.scrapy_crawl URLS_FILE RESULT_JSON
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import scrapy
from scrapy.crawler import CrawlerProcess

SETTINGS = {
    "AUTOTHROTTLE_ENABLED": True,
    "ROBOTSTXT_OBEY": True,
    "CONCURRENT_REQUESTS": 64,
    "LOG_LEVEL": "CRITICAL",  # 429 give-ups are counted, not logged one by one
    "TELNETCONSOLE_ENABLED": False,
    "USER_AGENT": "scrapy-benchmark (+https://example.invalid/bot)",
}


class ListSpider(scrapy.Spider):
    name = "bench"

    def __init__(self, urls: list[str], outcome: Counter[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls = urls
        self.outcome = outcome

    async def start(self) -> Any:  # Scrapy >= 2.13
        for url in self.urls:
            yield scrapy.Request(url, callback=self.parse, errback=self.failed, dont_filter=False)

    def start_requests(self) -> Iterator[scrapy.Request]:  # older Scrapy
        for url in self.urls:
            yield scrapy.Request(url, callback=self.parse, errback=self.failed)

    def parse(self, response: scrapy.http.Response) -> None:
        self.outcome[f"status_{response.status}"] += 1

    def failed(self, failure: Any) -> None:
        self.outcome[f"failed_{type(failure.value).__name__}"] += 1


def main() -> None:
    urls = Path(sys.argv[1]).read_text().split()
    outcome: Counter[str] = Counter()
    started = time.time()
    process = CrawlerProcess(SETTINGS)
    process.crawl(ListSpider, urls=urls, outcome=outcome)
    process.start()
    Path(sys.argv[2]).write_text(json.dumps({"started": started, "finished": time.time(),
                                             "scrapy": scrapy.__version__, **outcome}))  # fmt: skip


if __name__ == "__main__":
    main()

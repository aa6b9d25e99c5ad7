"""Items out as JSON lines, one file per process."""

from __future__ import annotations

import json
from typing import IO, Any


class JsonLinesPipeline:
    def __init__(self, path: str) -> None:
        self.path = path
        self.out: IO[str] | None = None

    @classmethod
    def from_crawler(cls, crawler: Any) -> JsonLinesPipeline:
        return cls(crawler.settings.get("BOOKSHOP_ITEMS", "items.jsonl"))

    def open_spider(self, spider: Any = None) -> None:
        self.out = open(self.path, "a", encoding="utf-8")

    def close_spider(self, spider: Any = None) -> None:
        if self.out is not None:
            self.out.close()

    def process_item(self, item: dict[str, Any], spider: Any = None) -> dict[str, Any]:
        assert self.out is not None
        self.out.write(json.dumps(dict(item), sort_keys=True) + "\n")
        self.out.flush()  # a process killed mid-crawl keeps what it wrote
        return item

"""The client side of the frontier: what runs outside the service and talks to it only through
its topics.

- :mod:`~frontier.client.client`: :class:`FrontierClient` (submit URLs, read pages and status,
  steer scopes and crawls; the CLI's commands and the Scrapy add-on use it);
- :mod:`~frontier.client.feed`: a background reader of ``crawl.frontier.status``;
- :mod:`~frontier.client.status`, :mod:`~frontier.client.crawls`,
  :mod:`~frontier.client.history`: pure views of the status records (no Kafka client).

``from frontier.client import FrontierClient`` loads the Kafka client on first use only, so the
pure views here import without it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from frontier.client.client import CrawlDone, FrontierClient, SubmitError, read_lines, submission_value

__all__ = ["CrawlDone", "FrontierClient", "SubmitError", "read_lines", "submission_value"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("frontier.client.client"), name)
    raise AttributeError(f"module 'frontier.client' has no attribute {name!r}")

"""The client side of the frontier: what runs outside the service and talks to it only through
its topics.

- :mod:`~frontier.client.client`: :class:`FrontierClient` (submit URLs, read pages and status,
  steer scopes and crawls; the CLI's commands and the Scrapy add-on use it);
- :mod:`~frontier.client.submission`: submissions as the command line takes them (pure);
- :mod:`~frontier.client.done`: when a crawl is finished (``FrontierClient.wait_done``);
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
    from frontier.client.client import FrontierClient, SubmitError
    from frontier.client.done import CrawlDone
    from frontier.client.submission import read_lines, submission_value

__all__ = ["CrawlDone", "FrontierClient", "SubmitError", "read_lines", "submission_value"]

# the public names above -> the module of this package that defines each
_HOMES = {
    "CrawlDone": "done",
    "FrontierClient": "client",
    "SubmitError": "client",
    "read_lines": "submission",
    "submission_value": "submission",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"frontier.client.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'frontier.client' has no attribute {name!r}")

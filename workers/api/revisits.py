"""A revisit URL's fetch, judged by the worker for the frontier: the conditional request's headers
from the validators its last fetch left (``If-None-Match``, ``If-Modified-Since``), and whether the
page is unchanged since (a 304, or the same digest of status and body when the site ignores
validators or gives none), with the validators to keep for the next revisit.

Only URLs with a revisit carry validators, each bounded (``MAX_VALIDATOR_CHARS``): URLs fetched
once cost no byte more.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping

from frontier.core.revisit import MAX_VALIDATOR_CHARS
from topics.schemas import UrlItem
from workers.api.outcome import FetchResult

REQUEST_HEADERS = {"etag": "If-None-Match", "last-modified": "If-Modified-Since"}


def conditional_headers(item: UrlItem) -> dict[str, str]:
    """The request headers that make a revisit conditional (empty for any other URL)."""
    if item.revisit <= 0:
        return {}
    return {name: item.validators[key] for key, name in REQUEST_HEADERS.items() if item.validators.get(key)}


def digest(status: int, body: bytes, location: str = "") -> str:
    """What a page without validators is compared by: its body's digest in WARC's payload-digest
    form (``sha1:`` base32), after the status when it is not 200 (a page gone 404 has changed); a
    redirect's target is part of what it says (``location`` digested with the body)."""
    raw = (location.encode(errors="replace") + b"\n" if location else b"") + body
    payload = "sha1:" + base64.b32encode(hashlib.sha1(raw, usedforsecurity=False).digest()).decode()
    return payload if status == 200 else f"{status} {payload}"


def judge(item: UrlItem, result: FetchResult) -> tuple[bool, dict[str, str]]:
    """(unchanged, validators) for a revisit URL's response: a 304 to a conditional request keeps
    the digest and takes any validator it sends; a 2xx or 3xx is unchanged when its digest is the
    last one's. What tells nothing gives no validators (the frontier then keeps the last ones and
    the interval): an error or another status (a 5xx, a 404: the server's trouble, not the page's
    change), a body cut at the size limit, a report without the body (``page`` False and no body;
    a report with its body and ``page`` False, as the Scrapy add-on's, is judged, its page not
    published)."""
    if item.revisit <= 0 or result.error:
        return False, {}  # (no revisit: nothing to keep)
    given = _validators(result.headers)
    if result.status == 304 and conditional_headers(item):
        return True, {**item.validators, **given}
    if not 200 <= result.status < 400 or result.truncated or not (result.page or result.body):
        return False, {}
    location = result.headers.get("location", "") if result.status >= 300 else ""
    now = digest(result.status, result.body, location)
    return item.validators.get("digest") == now, {**given, "digest": now}


def _validators(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k in REQUEST_HEADERS if (v := headers.get(k, "")) and len(v) <= MAX_VALIDATOR_CHARS}

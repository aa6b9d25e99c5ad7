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


def digest(status: int, body: bytes) -> str:
    """What a page without validators is compared by: its body's digest in WARC's payload-digest
    form (``sha1:`` base32), after the status when it is not 200 (a page gone 404 has changed)."""
    payload = "sha1:" + base64.b32encode(hashlib.sha1(body, usedforsecurity=False).digest()).decode()
    return payload if status == 200 else f"{status} {payload}"


def judge(item: UrlItem, result: FetchResult) -> tuple[bool, dict[str, str]]:
    """(unchanged, validators) for a revisit URL's response: a 304 to a conditional request keeps
    the digest and takes any validator it sends; any other response is unchanged when its digest
    is the last one's."""
    given = _validators(result.headers)
    if result.status == 304 and conditional_headers(item):
        return True, {**item.validators, **given}
    now = digest(result.status, result.body)
    return item.validators.get("digest") == now, {**given, "digest": now}


def _validators(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k in REQUEST_HEADERS if (v := headers.get(k, "")) and len(v) <= MAX_VALIDATOR_CHARS}

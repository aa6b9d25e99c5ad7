"""What came of a job: :class:`FetchResult` (``Outcome`` in the worker API), what user code
reports and what the built-in fetcher returns; which outcomes are worth another attempt
(:func:`is_retryable`, with the backoff codes of a job's scopes: :class:`BackoffCodes`); and the
headers as the protocol carries them (:func:`lower_headers`, :func:`throttle_headers`).

No HTTP library here: the worker API and any fetcher share these without depending on one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from frontier.config import BACKOFF_CODES, Config
from frontier.core.headers import THROTTLE_HEADERS
from topics.schemas import NETWORK_ERRORS, Job, Submission

CODES_CACHED = 10_000  # scope sets whose backoff codes are kept


@dataclass
class FetchResult:
    """What came of one fetch (also what user code reports through the worker API, as ``Outcome``)."""

    sent_at: float = 0.0  # epoch seconds the request went out (0: unknown, or never sent)
    status: int = 0
    latency: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    truncated: bool = False
    error: str = ""  # error kind when no response was received
    done_at: float = 0.0  # when the response ended (set by the worker once the body is read)
    links: list[str] | None = None  # URLs to follow; None: the same-site links of an HTML body
    # submissions to publish with the page instead of the redirect target and links (None: those);
    # an adapter that builds its own requests (Scrapy) gives them here, so they land before the feedback
    follow_ups: list[Submission] | None = None
    page: bool = True  # False: publish no page on crawl.pages (the follow-ups and the feedback still go)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


def is_retryable(result: FetchResult, codes: Collection[int] = BACKOFF_CODES) -> bool:
    """Worth another attempt (bounded by the job's retries_left): exactly what the frontier backs
    off on, network errors and the backoff ``codes`` (429, 502-504, 520-524 by default). Other
    statuses (500, 501, 505, ...) are answers: a retry without backoff would only repeat them."""
    return result.error in NETWORK_ERRORS or result.status in codes


def throttle_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k in THROTTLE_HEADERS}


def lower_headers(headers: Mapping[str, Any]) -> dict[str, str]:
    """Headers as the protocol carries them: a plain dict, names lower-cased, values as text."""
    if type(headers) is dict and all(type(k) is str and k.islower() and type(v) is str for k, v in headers.items()):
        return headers
    return {str(k).lower(): str(v) for k, v in headers.items()}


class BackoffCodes:
    """``codes(job)``: the statuses the frontier backs off on for the job's URL's scopes: only
    those are retried, and only those close the host's gate at once."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._codes: dict[tuple[str, ...], frozenset[int]] = {}  # by scopes (bounded)

    def __call__(self, job: Job) -> frozenset[int]:
        item = job.item
        key = (item.host, item.domain, *item.scopes)
        codes = self._codes.get(key)
        if codes is None:  # the configuration never changes: asked three times per job, built once
            if len(self._codes) >= CODES_CACHED:
                self._codes.clear()
            codes = self._codes[key] = frozenset(
                code for name in key for code in self.cfg.throttle.for_scope(name).backoff.codes
            )
        return codes

"""The URLFrontier API's terms in the frontier's (pure): crawl IDs, queue keys, what a known
URL's metadata says about its fetch, and a URLItem as a submission.

- **crawlID**: the API's default crawl ``DEFAULT`` (also ``""``) is the frontier's ``default``
  crawl; any other ID is the frontier crawl of that name (1-64 characters, no control characters).
- **key**: the API's queue key; when a client leaves it empty, the host as the reference service
  derives it (after ``://``, cut at the first ``:``, ``/``, ``?`` or ``&``), in lower case as
  StormCrawler's status updater writes it.
- **fetch status in metadata**: StormCrawler writes the response status as ``fetch.statusCode``
  and response headers as ``protocol.<header>`` when its metadata persistence keeps them (its
  QueueRegulatorBolt needs them: ``fetch.statusCode`` and ``protocol.retry-after``); other clients
  may send the same keys. The throttling headers among them (``frontier.core.headers``'
  ``THROTTLE_HEADERS``: Retry-After, RateLimit, X-RateLimit, and Date, against which an HTTP-date
  Retry-After is read) reach the frontier as a worker's would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from frontier.core.headers import THROTTLE_HEADERS
from topics.schemas import DEFAULT_CRAWL, Submission, valid_crawl

API_DEFAULT_CRAWL = "DEFAULT"
MAX_KEY_CHARS = 255  # the reference service skips longer keys
MAX_META_BYTES = 48 * 1024  # a URL's metadata, as JSON, at most (a submission is at most 64 KiB)
MAX_URL_CHARS = 8192
STATUS_KEYS = ("fetch.statusCode", "fetch.status_code", "status")
HEADER_PREFIX = "protocol."


class BadItem(ValueError):
    """An input the gateway does not pass on (acknowledged SKIPPED, with the reason logged)."""


def frontier_crawl(crawl_id: str) -> str:
    """The frontier crawl of an API crawlID (ValueError: not a valid crawl name)."""
    if crawl_id in ("", API_DEFAULT_CRAWL):
        return DEFAULT_CRAWL
    return valid_crawl(crawl_id)


def api_crawl(crawl: str) -> str:
    return API_DEFAULT_CRAWL if crawl == DEFAULT_CRAWL else crawl


def default_key(url: str) -> str:
    """The queue key of a URL sent without one: its host as the reference service cuts it, lower
    case as StormCrawler's status updater makes it (its seeds come with no key, their updates with
    this one: both land in one queue); "" if none."""
    host = url
    at = host.find("://")
    if at != -1:
        host = host[at + 3 :]
    for sep in (":", "/", "?", "&"):
        cut = host.find(sep)
        if cut != -1:
            host = host[:cut]
    return host.lower()


def queue_key(url: str, key: str) -> str:
    """The key a URL is queued under: the client's, or the default one; BadItem when there is none
    or it is too long."""
    key = key or default_key(url)
    if not key:
        raise BadItem(f"no queue key for {url[:100]!r}")
    if len(key) > MAX_KEY_CHARS:
        raise BadItem(f"queue key longer than {MAX_KEY_CHARS} characters")
    if any(c < " " or c == "\x7f" for c in key):
        raise BadItem("queue key with control characters")
    return key


def metadata_dict(metadata: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    return {str(k): [str(v) for v in values] for k, values in metadata.items()}


@dataclass(frozen=True)
class Signal:
    """What a known URL's metadata says about its fetch."""

    status: int = 0  # 0: not said
    headers: dict[str, str] | None = None


def fetch_signal(metadata: Mapping[str, Sequence[str]]) -> Signal:
    """The response status and throttling headers a client recorded in the URL's metadata."""
    status = 0
    for key in STATUS_KEYS:
        values = metadata.get(key)
        if values:
            try:
                status = int(str(values[-1]).strip())
            except ValueError:
                status = 0
            if not 100 <= status <= 999:
                status = 0
            break
    headers: dict[str, str] = {}
    for key, values in metadata.items():
        if key.lower().startswith(HEADER_PREFIX) and values:
            name = key[len(HEADER_PREFIX) :].lower()
            if name in THROTTLE_HEADERS:
                headers[name] = str(values[-1])[:200]
    return Signal(status=status, headers=headers or None)


def submission(url: str, key: str, crawl: str, metadata: dict[str, list[str]], refetch_at: float | None) -> Submission:
    """A URLItem as the frontier's input. Its latency is not the server's (a client reports when
    it is done, not when the response came): it never moves AutoThrottle's delay; server signals
    (429, 5xx, Retry-After) still do, through the report of the job."""
    if len(url) > MAX_URL_CHARS:
        raise BadItem(f"URL longer than {MAX_URL_CHARS} characters")
    size = sum(len(k) + sum(len(v) for v in vs) + 8 * len(vs) for k, vs in metadata.items())
    if size > MAX_META_BYTES:
        raise BadItem(f"metadata larger than {MAX_META_BYTES} bytes")
    return Submission(url=url, key=key, crawl=crawl, meta=dict(metadata), refetch_at=refetch_at, autothrottle=False)

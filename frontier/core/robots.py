"""robots.txt rules for one origin (scheme, host and port: RFC 9309 §2.3), parsed with Protego,
and what they mean for throttling. Pure: the fetched text and its HTTP status come in; no I/O here.

- 2xx: obey ``Disallow``/``Allow`` for our user agent; ``Crawl-delay`` and ``Request-rate``
  become the scope's minimum delay (garbage, zero, NaN and negatives ignored).
- 4xx other than 429: no rules (allow everything).
- anything else (5xx, 429, a network error, TLS, a blocked address, a malformed response, an
  unknown error kind): everything is disallowed until a later retry (RFC 9309 §2.3.1.4). Retries
  come at growing intervals (:func:`retry_after_failures`); once the file has been unreachable
  for ``robots_give_up`` seconds, the origin's queued URLs are reported with a final error
  instead of waiting any longer (RFC 9309's 30 days is the outer limit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import msgspec
from protego import Protego

MAX_ROBOTS_BYTES = 500 * 1024  # RFC 9309: parse at least the first 500 KiB
MAX_SITEMAPS = 1000  # a robots.txt's Sitemap: lines followed (Submission.discover_sitemaps), at most


class RobotsRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What is stored per origin: the raw answer, so rules can be re-derived at any time."""

    status: int = 0  # 0: no response (see error)
    body: bytes = b""
    fetched_at: float = 0.0
    error: str = ""  # the fetch's error kind, if any
    failures: int = 0  # consecutive unavailable answers, this one included (0 when available)
    failing_since: float = 0.0  # when the first of those failures came in
    retry_at: float = 0.0  # not fetched again before this (the failure's Retry-After)
    redirect: str = ""  # a 3xx on the way: the next hop to fetch (one throttled job per hop)
    hops: int = 0  # redirects followed so far


def unavailable_answer(status: int, error: str) -> bool:
    """RFC 9309 §2.3.1.3-4: only a 2xx or a 4xx other than 429 is an answer; anything else
    (5xx, 429, no response at all whatever the reason) means "try again later, fetch nothing"."""
    if status == 0 or error:
        return True
    return status == 429 or status >= 500 or status < 200


def retry_after_failures(failures: int, base: float, cap: float) -> float:
    """Seconds before the next robots.txt attempt after ``failures`` consecutive failures:
    ``base``, doubling per failure, at most ``cap``."""
    return min(cap, base * 2.0 ** min(max(0, failures - 1), 40))


@dataclass(frozen=True)
class Rules:
    record: RobotsRecord
    user_agent: str

    @cached_property
    def unavailable(self) -> bool:
        """No usable answer: assume complete disallow (and retry later). Kept once computed, as
        ``_parser`` is (the record does not change: asked once a job at dispatch)."""
        return unavailable_answer(self.record.status, self.record.error)

    @cached_property
    def _parser(self) -> Protego | None:
        if not 200 <= self.record.status < 300:
            return None
        text = self.record.body[:MAX_ROBOTS_BYTES].decode("utf-8", errors="replace")
        try:
            return Protego.parse(text)
        except Exception:  # noqa: BLE001 - an unparseable file is treated as no rules
            return None

    def allowed(self, url: str, agent: str = "") -> bool:
        """Whether ``agent`` (a product token; "" the frontier's own) may fetch ``url``."""
        if self.unavailable:
            return False
        parser = self._parser
        return True if parser is None else bool(parser.can_fetch(url, agent or self.user_agent))

    def sitemaps(self, most: int = MAX_SITEMAPS) -> tuple[list[str], int]:
        """The sitemaps its ``Sitemap:`` lines name: absolute http(s) URLs of at most 2048
        characters, each once, in order, at most ``most`` of them; and how many distinct lines it
        has (those left out included)."""
        parser = self._parser
        if parser is None:
            return [], 0
        found = dict.fromkeys(str(u).strip() for u in parser.sitemaps)
        good = [u for u in found if u.lower().startswith(("http://", "https://")) and len(u) <= 2048]
        return good[:most], len(found)

    def delay(self, agent: str = "") -> float:
        """The interval robots.txt asks ``agent`` for (Crawl-delay, or Request-rate's
        seconds/requests); 0: none."""
        parser = self._parser
        if parser is None:
            return 0.0
        agent = agent or self.user_agent
        delays = [0.0]
        cd = parser.crawl_delay(agent)
        if cd is not None and isinstance(cd, int | float) and math.isfinite(cd) and cd > 0:
            delays.append(float(cd))
        rr = parser.request_rate(agent)
        if rr is not None and rr.requests and rr.requests > 0 and rr.seconds and rr.seconds > 0:
            delays.append(rr.seconds / rr.requests)
        return max(delays)


def origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL: what one robots.txt covers (RFC 9309 §2.3)."""
    scheme, rest = url.split("://", 1)
    authority = rest.split("/", 1)[0].split("?", 1)[0]
    return f"{scheme.lower()}://{authority.lower()}"


def robots_url(url: str) -> str:
    """``scheme://host[:port]/robots.txt`` for any URL of that origin."""
    return f"{origin(url)}/robots.txt"


def agent_token(user_agent: str) -> str:
    """The product token robots.txt groups match against (``mybot/1.0 (+url)`` → ``mybot``; the
    browser-like ``Mozilla/5.0 (compatible; mybot/1.0; +url)`` → ``mybot``)."""
    _, compatible, rest = user_agent.partition("compatible;")
    if compatible:
        token = rest.strip().split("/", 1)[0].split(";", 1)[0].split(" ", 1)[0].strip()
        if token:
            return token
    return user_agent.split("/", 1)[0].split(" ", 1)[0] or "*"

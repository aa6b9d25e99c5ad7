"""robots.txt rules for one host, parsed with Protego (RFC 9309), and what they mean for
throttling. Pure: the fetched text and its HTTP status come in; no I/O here.

- 2xx: obey ``Disallow``/``Allow`` for our user agent; ``Crawl-delay`` and ``Request-rate``
  become the scope's minimum delay (garbage, zero, NaN and negatives ignored).
- 4xx: no rules (allow everything).
- 5xx or a network error: everything is disallowed until a later retry (RFC 9309 §2.3.1.4).
- a permanent error (TLS, blocked address, malformed response): no rules; the pages will fail
  the same way and be reported with that error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import msgspec
from protego import Protego

from topics.schemas import NETWORK_ERRORS

MAX_ROBOTS_BYTES = 500 * 1024  # RFC 9309: parse at least the first 500 KiB


class RobotsRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What is stored per host: the raw answer, so rules can be re-derived at any time."""

    status: int = 0  # 0: no response (see error)
    body: bytes = b""
    fetched_at: float = 0.0
    error: str = ""  # the fetch's error kind, if any


@dataclass(frozen=True)
class Rules:
    record: RobotsRecord
    user_agent: str

    @property
    def unavailable(self) -> bool:
        """5xx or a network error: assume complete disallow (and retry later).

        A permanent failure (TLS, a blocked address, a malformed response) is not "unreachable"
        in RFC 9309's sense: the pages would fail the same way, so they are let through to be
        reported with that error rather than held back forever.
        """
        if self.record.status >= 500:
            return True
        return self.record.status == 0 and (not self.record.error or self.record.error in NETWORK_ERRORS)

    @cached_property
    def _parser(self) -> Protego | None:
        if not 200 <= self.record.status < 300:
            return None
        text = self.record.body[:MAX_ROBOTS_BYTES].decode("utf-8", errors="replace")
        try:
            return Protego.parse(text)
        except Exception:  # noqa: BLE001 - an unparseable file is treated as no rules
            return None

    def allowed(self, url: str) -> bool:
        if self.unavailable:
            return False
        parser = self._parser
        return True if parser is None else bool(parser.can_fetch(url, self.user_agent))

    def delay(self) -> float:
        """The interval robots.txt asks for (Crawl-delay, or Request-rate's seconds/requests); 0: none."""
        parser = self._parser
        if parser is None:
            return 0.0
        delays = [0.0]
        cd = parser.crawl_delay(self.user_agent)
        if cd is not None and isinstance(cd, int | float) and math.isfinite(cd) and cd > 0:
            delays.append(float(cd))
        rr = parser.request_rate(self.user_agent)
        if rr is not None and rr.requests and rr.requests > 0 and rr.seconds and rr.seconds > 0:
            delays.append(rr.seconds / rr.requests)
        return max(delays)


def robots_url(url: str) -> str:
    """``scheme://host[:port]/robots.txt`` for any URL of that origin."""
    scheme, rest = url.split("://", 1)
    origin = rest.split("/", 1)[0]
    return f"{scheme}://{origin}/robots.txt"


def agent_token(user_agent: str) -> str:
    """The product token robots.txt groups match against (``mybot/1.0 (+url)`` → ``mybot``)."""
    return user_agent.split("/", 1)[0].split(" ", 1)[0] or "*"

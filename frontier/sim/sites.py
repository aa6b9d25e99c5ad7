"""Model sites for the throttling simulator: what a server does with each request, in virtual time.

Each site answers ``handle(t, inflight)`` for a request arriving at ``t`` (epoch seconds, virtual)
with a status, headers and a latency, and keeps its own log: arrivals, the windows it announced
(Retry-After, RateLimit reset) and the minimum interval it asked for (Crawl-delay). The
simulator judges the crawler by these logs only, as a site operator would.

Kinds (``../shared/THROTTLING.md`` §10):
- :class:`TokenBucket`: a rate limit of ``rate`` req/s with a ``burst``; above it a 429 that says
  nothing, or ``Retry-After`` (seconds or HTTP-date), or a RateLimit header (each draft), or
  ``X-RateLimit-*``; ``publish`` also sends the budget on every success;
- :class:`Outage`: a window of 503s (with or without Retry-After) or refused connections;
- :class:`Loaded`: latency that grows with the requests in flight;
- :class:`CrawlDelay`: robots.txt asks for an interval and the site counts gaps under it;
- :class:`StagedQuota`: seed 003's operator: a daily quota answered with 429 to 50 %, 75 %,
  then 100 % of requests as the count grows;
- :class:`Changing`: a token bucket whose rate changes mid-crawl.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from email.utils import formatdate


@dataclass(frozen=True)
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    latency: float = 0.02
    error: str = ""  # a network error kind instead of a response ("connect", "timeout", ...)


@dataclass
class Site:
    """The common log and defaults; subclasses implement :meth:`answer`."""

    name: str = "site"
    latency: float = 0.02
    allowance: float = math.inf  # req/s the site allows (for shares); inf: no limit
    arrivals: list[float] = field(default_factory=list)
    windows: list[tuple[float, float]] = field(default_factory=list)  # announced "stay away" windows
    floor: float = 0.0  # interval robots.txt asked for (0: none)
    limited: int = 0  # limit responses sent (429)
    troubled: int = 0  # trouble answers sent (503, refused, ...)

    def handle(self, t: float, inflight: int) -> Answer:
        self.arrivals.append(t)
        answer = self.answer(t, inflight)
        if answer.status == 429:
            self.limited += 1
        elif answer.status >= 500 or answer.error:
            self.troubled += 1
        return answer

    def answer(self, t: float, inflight: int) -> Answer:
        return Answer(latency=self.latency)

    def allowance_at(self, t: float) -> float:
        return self.allowance

    # -- what the operator counts ---------------------------------------------------------------
    def inside_windows(self) -> int:
        """Requests that arrived inside a window the site had announced before they arrived."""
        count = 0
        for start, end in self.windows:
            count += sum(1 for a in self.arrivals if start < a < end)
        return count

    def under_floor(self) -> int:
        if not self.floor:
            return 0
        ordered = sorted(self.arrivals)
        return sum(1 for a, b in itertools.pairwise(ordered) if b - a < self.floor)


HEADERS = ("none", "retry-after", "http-date", "ratelimit-1", "ratelimit-2", "ratelimit-3", "x-ratelimit")


@dataclass
class TokenBucket(Site):
    rate: float = 5.0
    burst: float = 10.0
    signal: str = "none"  # one of HEADERS: what a 429 carries
    publish: bool = False  # send the budget (remaining, reset) on every response
    _tokens: float = -1.0
    _at: float = 0.0

    def __post_init__(self) -> None:
        self.allowance = self.rate

    def _refill(self, t: float, rate: float) -> None:
        if self._tokens < 0:
            self._tokens, self._at = self.burst, t
        self._tokens = min(self.burst, self._tokens + (t - self._at) * rate)
        self._at = t

    def current_rate(self, t: float) -> float:
        return self.rate

    def allowance_at(self, t: float) -> float:
        return self.current_rate(t)

    def answer(self, t: float, inflight: int) -> Answer:
        rate = self.current_rate(t)
        self._refill(t, rate)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return Answer(latency=self.latency, headers=self._budget(t, rate) if self.publish else {})
        wait = (1.0 - self._tokens) / rate  # until the next token
        return Answer(status=429, latency=self.latency, headers=self._limit_headers(t, wait, rate))

    def _budget(self, t: float, rate: float) -> dict[str, str]:
        """Remaining requests and seconds until the bucket is full again (a window of burst/rate)."""
        remaining = int(self._tokens)
        reset = max(1, math.ceil((self.burst - self._tokens) / rate)) if remaining < self.burst else 1
        return self._encode(remaining, reset, t)

    def _limit_headers(self, t: float, wait: float, rate: float) -> dict[str, str]:
        seconds = max(1, math.ceil(wait))
        if self.signal == "none":
            return {}
        # the window is open from when the answer is out (the crawler cannot know it before)
        self.windows.append((t + self.latency, t + seconds))
        if self.signal == "retry-after":
            return {"retry-after": str(seconds)}
        if self.signal == "http-date":
            # the date is whole seconds: the window ends at that second, not before
            end = math.ceil(t + seconds)
            self.windows[-1] = (t + self.latency, float(end))
            # Date is when the answer is generated (after the latency), in whole seconds
            return {"retry-after": formatdate(end, usegmt=True), "date": formatdate(t + self.latency, usegmt=True)}
        return self._encode(0, seconds, t)

    def _encode(self, remaining: int, reset: int, t: float) -> dict[str, str]:
        limit = str(int(self.burst))
        kind = self.signal if self.signal.startswith(("ratelimit", "x-")) else "ratelimit-3"
        if kind == "ratelimit-1":
            return {"ratelimit-limit": limit, "ratelimit-remaining": str(remaining), "ratelimit-reset": str(reset)}
        if kind == "ratelimit-2":
            return {"ratelimit": f"limit={limit}, remaining={remaining}, reset={reset}"}
        if kind == "x-ratelimit":
            return {"x-ratelimit-limit": limit, "x-ratelimit-remaining": str(remaining),
                    "x-ratelimit-reset": str(reset)}  # fmt: skip
        return {"ratelimit": f'"default";r={remaining};t={reset}', "ratelimit-policy": f'"default";q={limit};w={reset}'}


@dataclass
class Changing(TokenBucket):
    """A token bucket whose rate becomes ``later`` at ``change_at`` (virtual epoch seconds)."""

    later: float = 2.0
    change_at: float = 0.0

    def current_rate(self, t: float) -> float:
        return self.later if t >= self.change_at else self.rate


@dataclass
class Outage(Site):
    """Healthy, except between ``start`` and ``end``: 503 (``retry_after`` seconds if > 0) or
    refused connections (``refuse``)."""

    start: float = 0.0
    end: float = 0.0
    retry_after: int = 0
    refuse: bool = False
    successes_after: list[float] = field(default_factory=list)

    def answer(self, t: float, inflight: int) -> Answer:
        if self.start <= t < self.end:
            if self.refuse:
                return Answer(error="connect", latency=0.001)
            headers = {}
            if self.retry_after:
                headers = {"retry-after": str(self.retry_after)}
                self.windows.append((t + self.latency, t + self.retry_after))
            return Answer(status=503, latency=self.latency, headers=headers)
        if t >= self.end:
            self.successes_after.append(t)
        return Answer(latency=self.latency)


@dataclass
class Loaded(Site):
    """Latency ``latency * (1 + growth * inflight)``: a server that slows down under load."""

    growth: float = 0.5

    def answer(self, t: float, inflight: int) -> Answer:
        return Answer(latency=self.latency * (1 + self.growth * inflight))


@dataclass
class CrawlDelay(Site):
    """robots.txt asks for ``floor`` seconds between requests; the site answers everything."""

    def answer(self, t: float, inflight: int) -> Answer:
        return Answer(latency=self.latency)


@dataclass
class StagedQuota(Site):
    """Seed 003: ``quota`` requests served per fixed period of ``window`` seconds (periods begin
    ``phase`` seconds before the crawl: the crawler does not know when). Past half of the quota
    50 % of requests get a 429, past three quarters 75 %, past the quota all of them, with no
    headers, as that operator did; ``retry_after``: the last stage's 429s say when the period
    turns. ``rate`` > 0: a token bucket of that rate (burst ``2 * rate``) on top, answering a bare
    429 first. ``every``: the stages follow every request of the period, refused ones too (else
    only the ones served). The site keeps, per period, what it served and refused."""

    quota: int = 600
    window: float = 600.0
    phase: float = 0.0
    retry_after: bool = False
    rate: float = 0.0
    every: bool = False
    burst: float = 0.0  # the token bucket's burst (0: twice its rate)
    served: int = 0
    periods: dict[int, list[int]] = field(default_factory=dict)  # period -> [served, refused]
    _period: int = -1
    _n: int = 0
    _bucket: TokenBucket | None = None

    def __post_init__(self) -> None:
        self.allowance = self.quota / self.window
        if self.rate > 0:
            self._bucket = TokenBucket(rate=self.rate, burst=self.burst or 2 * self.rate)

    @property
    def free(self) -> int:
        """Requests a period serves before it refuses any."""
        return self.quota // 2

    def period_of(self, t: float, t0: float) -> int:
        return math.floor((t - t0 + self.phase) / self.window)

    def answer(self, t: float, inflight: int) -> Answer:
        t0 = self.arrivals[0]
        k = self.period_of(t, t0)
        if k != self._period:
            self._period, self.served, self._n = k, 0, 0
        tally = self.periods.setdefault(k, [0, 0])
        if self._bucket is not None and self._bucket.answer(t, inflight).status == 429:
            tally[1] += 1
            return Answer(status=429, latency=self.latency)
        self._n += 1
        share = (self._n - 1 if self.every else self.served) / self.quota
        refuse = 1.0 if share >= 1 else 0.75 if share >= 0.75 else 0.5 if share >= 0.5 else 0.0
        # deterministic: refuse the first `refuse` share of every four requests
        if (self._n % 4) < refuse * 4:
            tally[1] += 1
            headers = {}
            if self.retry_after and share >= 1:
                turn = t0 - self.phase + (k + 1) * self.window
                seconds = max(1, math.ceil(turn - t))
                headers = {"retry-after": str(seconds)}
                self.windows.append((t + self.latency, t + seconds))
            return Answer(status=429, latency=self.latency, headers=headers)
        self.served += 1
        tally[0] += 1
        return Answer(latency=self.latency)

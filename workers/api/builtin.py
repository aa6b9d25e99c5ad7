"""The built-in fetcher: aiohttp through :class:`~workers.api.safety.SafeConnector` (addresses checked
at connect time, every redirect hop too), the request's send time taken when its headers leave,
windows the host announces applied as soon as the response headers are in, bodies capped, no
redirect followed and no request retried (only the frontier decides to send again), and no request
delivered later than ``worker.unacked_timeout`` after it left (:func:`~workers.api.fetch.bounded_sockets`).

Used by the project's worker for every job, and by the worker API for the kinds user code does
not take (robots.txt).
"""

from __future__ import annotations

import logging

import aiohttp

from frontier.config import Config
from workers.api.clock import SYSTEM, Clock
from workers.api.fetch import TimedRequest, bounded_sockets, fetch
from workers.api.leased import LeasedJob
from workers.api.outcome import FetchResult
from workers.api.safety import AddressPolicy, SafeConnector

log = logging.getLogger("worker")


class AiohttpFetcher:
    """Fetches jobs with one aiohttp session (made when first needed); send times read on ``clock``."""

    def __init__(self, cfg: Config, concurrency: int, clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.cfg = cfg
        self.concurrency = concurrency
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            policy = AddressPolicy(self.cfg.worker.allow_networks, self.cfg.worker.block_private)
            connector = SafeConnector(policy, limit=self.concurrency * 2, limit_per_host=0, ttl_dns_cache=300,
                                      socket_factory=bounded_sockets(self.cfg.worker.unacked_timeout))  # fmt: skip
            # the send time from TimedRequest (not aiohttp's tracing: a quarter of a fetch's CPU);
            # no aiohttp timeouts: fetch() bounds each request by its job's timeout (one timer, not three)
            self._session = aiohttp.ClientSession(connector=connector, request_class=TimedRequest,
                                                  timeout=aiohttp.ClientTimeout(total=None, sock_connect=None),
                                                  headers={"User-Agent": self.cfg.worker.user_agent})  # fmt: skip
            # aiohttp silently re-sends a request when a reused keep-alive connection was
            # closed: a second request the frontier never scheduled. Only the frontier may
            # decide to retry (no public switch; tests/integration/test_hostile.py guards it).
            self._session._retry_connection = False
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def fetch(self, job: LeasedJob) -> FetchResult:
        sent_at = 0.0

        def on_sent(at: float) -> None:
            nonlocal sent_at
            sent_at = at
            job.sent(at)

        try:
            # robots.txt: no redirects followed here: the frontier sends each hop as a job of its own,
            # through the host's throttling (RFC 9309 asks for at least five hops; see frontier.partition)
            return await fetch(self.session(), job.url, job.timeout, job.max_body_bytes, on_sent=on_sent,
                               on_headers=lambda r: job.answered(r.status, r.headers),
                               headers=job.conditional_headers, clock=self.clock)  # fmt: skip
        except Exception as exc:  # reported as an error, never silence (a poison URL)
            log.exception("fetch of %s failed unexpectedly", job.url)
            return FetchResult(sent_at=sent_at, error=f"worker:{type(exc).__name__}")

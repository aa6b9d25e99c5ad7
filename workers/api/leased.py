"""A job in user code's hands: :class:`LeasedJob`, what the worker API hands over once the job
may be sent, and :class:`Outcome` (an alias of the fetch result), what user code reports back.

User code reports each job exactly once: ``fetched`` (a response: any status), ``failed`` (no
complete response: a network error kind), ``skip`` (declined, no request sent: the URL is done)
or ``release`` (not now: the frontier queues it again), or the general ``finish(outcome)``.
Optional along the way: ``sent()`` when the request really goes out (the host's next request is
timed from it and may be prepared meanwhile; without it the host's next job waits for this one's
report) and ``answered(status, headers)`` as soon as the response headers are in (a window the
host announces closes its gate at once). ``async with job:`` reports an exception as an error
and a job left without a report as released.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Protocol

from topics.schemas import Job, UrlItem
from workers.api.outcome import FetchResult, lower_headers
from workers.api.revisits import conditional_headers

Outcome = FetchResult  # what user code reports: status, headers, body, sent_at, done_at, error, links


class Lessor(Protocol):
    """What a :class:`LeasedJob` calls of the worker API that handed it over (the API's
    :class:`~workers.api.endings.Endings`): the job's reports and what it tells along the way
    (``sent`` with ``at`` None: now, on the API's clock)."""

    def max_body(self, job: Job) -> int: ...

    def sent(self, leased: LeasedJob, at: float | None) -> None: ...

    def answered(self, leased: LeasedJob, result: FetchResult) -> None: ...

    def keep_gate_until(self, leased: LeasedJob, done: asyncio.Future[object]) -> None: ...

    async def finish(self, leased: LeasedJob, outcome: Outcome) -> None: ...

    async def skip(self, leased: LeasedJob, reason: str) -> None: ...

    async def release(self, leased: LeasedJob) -> None: ...

    async def hold(self, leased: LeasedJob, until: float, tell: bool = True) -> None: ...


class AlreadyReported(RuntimeError):
    """A job was reported twice (or after the worker gave it up: see :class:`LeasedJob`)."""


class JobFacts:
    """What a job says, for both handles (:class:`LeasedJob`, :class:`~workers.api.blocking.BlockingJob`)."""

    __slots__ = ()

    def _job(self) -> Job:
        raise NotImplementedError

    @property
    def item(self) -> UrlItem:
        return self._job().item

    @property
    def url(self) -> str:
        return self._job().item.url

    @property
    def kind(self) -> str:
        return self._job().kind

    @property
    def timeout(self) -> float:
        """Seconds the fetch may take (the frontier's lease assumes it)."""
        return self._job().timeout

    @property
    def expires_at(self) -> float:
        return self._job().expires_at

    @property
    def conditional_headers(self) -> dict[str, str]:
        """Send these with the request: a revisit's ``If-None-Match`` / ``If-Modified-Since`` from
        its last fetch (empty for other jobs). A 304 then costs the site no body, and the page is
        reported unchanged; without them a revisit is compared by its content digest."""
        return conditional_headers(self._job().item)


class LeasedJob(JobFacts):
    """One leased job, handed over when its send slot has come (``not_before``, the host's gap
    since this worker's previous send, any window the host announced, a server-stated floor).

    Send the request now (or as soon as you can), then report. A job neither reported nor
    released by ``expires_at + timeout`` is given up here (its slot freed, no feedback: the
    frontier's lease expires a little later and the job comes back); a later report raises
    :class:`AlreadyReported`.
    """

    __slots__ = ("_coords", "_jobs", "_prev_sent", "addresses", "gate_host", "handed_at", "holds_idle", "job",
                 "reported", "sent_at")  # fmt: skip

    def __init__(self, jobs: Lessor, job: Job, coords: tuple[str, int, int]) -> None:
        self._jobs = jobs
        self._coords = coords
        self.job = job
        self.gate_host = job.item.host
        self.handed_at = 0.0  # when it was handed over (the send time assumed if none is reported)
        self.sent_at = 0.0  # when user code said the request went out (sent())
        self._prev_sent = 0.0  # the host's last send before this job's slot (restored by skip/release)
        # the host's gate waits for this job's request to go out: only this job may open it (sent()
        # or leaving), once; a job that left earlier must not open it under a later one's feet
        self.holds_idle = False
        self.reported = False
        self.addresses: list[str] = []  # the host's addresses, checked against the worker's policy

    def _job(self) -> Job:
        return self.job

    @property
    def max_body_bytes(self) -> int:
        """Bodies are cut to this many bytes when published (``truncated`` set)."""
        return self._jobs.max_body(self.job)

    def __repr__(self) -> str:
        return f"LeasedJob({self.job.lease!r}, {self.url!r})"

    # -- along the way -----------------------------------------------------------------------------
    def sent(self, at: float | None = None) -> None:
        """The request has surely gone out by ``at`` (default now): the host's next request is timed
        from it and may be prepared meanwhile. Call it once the request is sent, at the latest when
        the response headers are in; never before the request leaves (a slow connect would then
        shorten the gap the server sees). Not called, the host's next request waits for the report."""
        self._jobs.sent(self, at)

    def answered(self, status: int, headers: Mapping[str, str]) -> None:
        """The response headers are in: a window the host announces (Retry-After on a 429 or 503,
        RateLimit remaining 0) closes its gate to this worker's held jobs now, not at the report."""
        self._jobs.answered(self, FetchResult(status=status, headers=lower_headers(headers)))

    def keep_gate_until(self, done: asyncio.Future[object]) -> None:
        """For fetcher adapters: the job is reported before its fetch has surely ended (a thread
        past its timeout); the host's next job waits until ``done``."""
        self._jobs.keep_gate_until(self, done)

    # -- the report --------------------------------------------------------------------------------
    async def finish(self, outcome: Outcome) -> None:
        """Report ``outcome``: its page (and follow-ups) are published, then the feedback; the
        call returns once the frontier's topics have them (or the job is left to expire)."""
        await self._jobs.finish(self, outcome)

    async def fetched(
        self,
        status: int,
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
        *,
        sent_at: float = 0.0,
        done_at: float = 0.0,
        latency: float = 0.0,
        truncated: bool = False,
        links: Iterable[str] | None = None,
    ) -> None:
        """A response came (any status). ``sent_at``: when the request went out (default: the
        time given to :meth:`sent`, else none: the host's next request is timed from the report);
        ``done_at``: when the response ended (default now); ``latency``: send → response headers,
        what AutoThrottle learns from (default ``done_at - sent_at`` when a send time is known, else
        0: nothing learned); ``links``: URLs to follow (default: the same-site links of an HTML
        body), within the job's ``follow`` budget."""
        await self.finish(Outcome(status=status, headers=dict(headers or {}), body=body, sent_at=sent_at,
                                  done_at=done_at, latency=latency, truncated=truncated,
                                  links=None if links is None else list(links)))  # fmt: skip

    async def failed(self, error: str, *, sent_at: float = 0.0, done_at: float = 0.0) -> None:
        """No complete response. ``error``: ``timeout``, ``connect``, ``reset`` or ``truncated``
        (network failures: the frontier backs off and the job may be retried), or any other kind
        (``tls``, ``blocked_address``, ``worker:ValueError``, ...): the URL ends with an error page."""
        await self.finish(Outcome(sent_at=sent_at, done_at=done_at, error=error or "worker:unknown"))

    async def skip(self, reason: str) -> None:
        """Decline the job without sending a request: the URL is done, published as a page with
        outcome ``skipped`` and ``reason``; no delay moves."""
        await self._jobs.skip(self, reason)

    async def release(self) -> None:
        """Hand the job back unfetched (no request sent): the frontier queues it again."""
        await self._jobs.release(self)

    async def hold(self, until: float, tell: bool = True) -> None:
        """Keep the job until ``until`` (epoch seconds), past its usual lease: the frontier keeps
        the lease as long (feedback ``held``; ``tell=False``: the caller tells it another way), and
        queues the URL again if no report came by then (as the worker API gives it up here then).
        For work handed on to a client that reports later (the URLFrontier gateway's GetURLs,
        whose ``delay_requestable`` is this)."""
        await self._jobs.hold(self, until, tell)

    # -- async with job: ---------------------------------------------------------------------------
    async def __aenter__(self) -> LeasedJob:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.reported:
            return
        if isinstance(exc, Exception):
            await self.failed(f"worker:{type(exc).__name__}")
        elif exc is None:
            await self.release()
        # a cancellation (a timeout, a revoke) or an interrupt is not the job's result: the caller
        # decides (the project's worker reports a timeout; a revoke leaves it to the lease)

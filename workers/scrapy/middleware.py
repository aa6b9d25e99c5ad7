"""The add-on's two middlewares.

:class:`FrontierDownloaderMiddleware` sits next to the downloader (it sees the raw answer before
any other middleware): for a job's request it records the outcome (status, headers, Scrapy's
``download_latency``, the time), tells the worker API at once that the request went out and what it
answered (a window the host announces closes its gate now, for every job of the host in this
process), and for a throttling answer the frontier will retry (a backoff code or a network error,
with retries left) reports the job at once and ends its way through Scrapy: the frontier's backoff
retries it, never Scrapy's immediate RetryMiddleware, and the spider never sees the 429.

:class:`FrontierSpiderMiddleware` sits next to the engine (it sees a callback's output last): it
refuses a request that cannot go to the frontier (the error names the key) and tags every request
with the job of the response it came from, so the scheduler publishes it with that job's report.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response

from topics.schemas import NETWORK_ERRORS
from workers.api import Outcome
from workers.scrapy.requests import HANDED_BACK, JOB_KEY, PARENT_KEY, UnencodableRequest, check_request
from workers.scrapy.resolver import blocked_recently
from workers.scrapy.scheduler import Entry, FrontierScheduler, scheduler_of

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

log = logging.getLogger("workers.scrapy")

# exception class names (any in the class's MRO) -> the protocol's network error kinds
ERROR_KINDS = {
    "timeout": ("DownloadTimeoutError", "TimeoutError", "TCPTimedOutError", "UserTimeoutError"),
    "connect": ("DownloadConnectionRefusedError", "CannotResolveHostError", "DNSLookupError", "ConnectionRefusedError",
                "ConnectError", "TunnelError", "NoRouteError"),
    "reset": ("ConnectionDone", "ConnectionLost", "ResponseNeverReceived", "ResponseFailed", "DownloadFailedError"),
    "truncated": ("ResponseDataLossError", "_DataLoss", "PartialDownloadError"),
}  # fmt: skip


def error_kind(exc: BaseException) -> str:
    """The protocol's error kind of a download failure (``scrapy:<Name>`` when it is not a network one)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    for kind, known in ERROR_KINDS.items():
        if names.intersection(known):
            return kind
    return f"scrapy:{type(exc).__name__}"


def response_headers(response: Response) -> dict[str, str]:
    return {
        k.decode("latin-1").lower(): ", ".join(v.decode("latin-1") for v in vs) for k, vs in response.headers.items()
    }


class FrontierDownloaderMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierDownloaderMiddleware:
        return cls(crawler)

    def _job(self, request: Request) -> tuple[FrontierScheduler | None, Entry | None]:
        """The add-on's scheduler, and the job whose request this is (None: not a job)."""
        run = scheduler_of(self.crawler)
        return run, (run.entry_of(request) if run is not None else None)

    def process_request(self, request: Request, spider: Any = None) -> None:
        run, entry = self._job(request)
        if entry is not None:
            entry.downloading = True  # past every other middleware: what fails now failed in the download
            return
        if run is not None and not run.warned_outside:
            run.warned_outside = True  # once per crawl: engine.download_async, a media pipeline, scrapy shell
            log.warning("%s is downloaded outside the frontier (not a job: engine.download, a media pipeline?): "
                        "the frontier neither paces nor sees such requests; give them to the spider as requests "
                        "instead (said once)", request)  # fmt: skip

    def process_response(self, request: Request, response: Response, spider: Any = None) -> Request | Response:
        run, entry = self._job(request)
        if run is None or entry is None:
            return response  # not a job (an extension's own download)
        now = time.time()
        headers = response_headers(response)
        latency = float(request.meta.get("download_latency") or 0.0)
        leased = entry.leased
        if "cached" in response.flags:  # HttpCacheMiddleware's answer: the site said nothing now
            entry.outcome = Outcome(status=response.status, headers={}, body=response.body if run.pages else b"",
                                    done_at=now, links=[])  # fmt: skip
            return response
        leased.sent(now)  # surely out by now: the host's next job may go once its gap has passed
        leased.answered(response.status, headers)
        keep = run.pages or leased.job.item.revisit > 0  # a revisit's body is digested (is it unchanged?)
        outcome = Outcome(status=response.status, headers=headers, body=response.body if keep else b"",
                          sent_at=now, latency=latency, done_at=now, links=[])  # fmt: skip
        if (response.status in run.jobs.backoff_codes(leased.job)  # type: ignore[union-attr]
                and leased.job.retries_left > 0 and not request.meta.get("dont_retry")):  # fmt: skip
            run.conclude_now(entry, outcome)
            return request.replace(meta={**request.meta, HANDED_BACK: True})
        entry.outcome = outcome
        return response

    def process_exception(self, request: Request, exception: BaseException, spider: Any = None) -> Request | None:
        run, entry = self._job(request)
        if run is None or entry is None:
            return None
        if isinstance(exception, IgnoreRequest) and not entry.downloading:
            entry.dropped = f"scrapy: dropped before download: {exception}"[:500]  # by a middleware: skipped
            return None
        kind = error_kind(exception)
        if kind == "connect" and blocked_recently(urlsplit(request.url).hostname or ""):
            kind = "blocked_address"  # the address check refused the answer (workers.scrapy.resolver)
        outcome = Outcome(error=kind, done_at=time.time(), links=[])
        if kind in NETWORK_ERRORS and entry.leased.job.retries_left > 0 and not request.meta.get("dont_retry"):
            run.conclude_now(entry, outcome)
            return request.replace(meta={**request.meta, HANDED_BACK: True})
        entry.outcome = outcome  # the request's errback (or Scrapy's log) has it; reported once it is through
        return None


class FrontierSpiderMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierSpiderMiddleware:
        return cls(crawler)

    def _refused(self, request: Request) -> bool:
        """Whether the request cannot go to the frontier: then it is said (the key named) and left
        out, and the rest of the output goes on."""
        try:
            check_request(request)
        except UnencodableRequest as exc:
            log.error("%s", exc)
            if self.crawler is not None and self.crawler.stats is not None:
                self.crawler.stats.inc_value("frontier/unencodable")
            return True
        return False

    def _tag(self, response: Response, item: Any) -> Any:
        if isinstance(item, Request):
            if self._refused(item):
                return None
            parent = response.meta.get(JOB_KEY) if response.request is not None else None
            if parent is not None and JOB_KEY not in item.meta:
                item.meta[PARENT_KEY] = parent
        return item

    def process_spider_output(self, response: Response, result: Iterable[Any], spider: Any = None) -> Iterator[Any]:
        for item in result:
            if (tagged := self._tag(response, item)) is not None:
                yield tagged

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Any = None
    ) -> AsyncIterator[Any]:
        async for item in result:
            if (tagged := self._tag(response, item)) is not None:
                yield tagged

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for item in start:
            if not (isinstance(item, Request) and self._refused(item)):
                yield item

"""The Scrapy scheduler of the add-on: the spider's crawl on the frontier, in Scrapy's shape.

- **Requests out**: every request Scrapy schedules goes to the crawl as a submission
  (:mod:`workers.scrapy.requests`). One that came of a job's response (a callback's output, tagged
  by the spider middleware; a redirect built by a downloader middleware) is published with that
  job's report, before its feedback, so a process that dies before reporting loses nothing: the job
  comes back and its response is parsed again. Any other (``start()``, an extension) is published
  at once.
- **Jobs in**: the worker API (:class:`~workers.api.Jobs` of the crawl, one consumer group over
  every ``scrapy crawl`` process of it) hands each job once its host may be sent to; it waits in a
  buffer that the engine takes from, never blocking the reactor (it runs on the reactor's asyncio
  loop).
- **Reports**: once the engine is through with a job's request (downloaded, parsed, its output
  scheduled: it leaves the engine's requests in progress), its outcome is reported with the
  requests it led to. A throttling answer the frontier retries was reported at once by the
  downloader middleware; a request a middleware dropped before download ends ``skipped``; on a
  close, the jobs not yet sent are handed back at once.
- **Closing**: ``has_pending_requests`` is true while the crawl has work anywhere
  (:class:`~workers.scrapy.closing.DoneWatch`), so the spider closes when the crawl is done.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import weakref
from collections import deque
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from scrapy import Request, Spider, signals
from scrapy.exceptions import CloseSpider
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future

from frontier.client import FrontierClient
from frontier.config import Config, load
from frontier.core.revisit import spec_of
from topics.kafka import KafkaUnreachable
from topics.schemas import Submission
from workers.api import Jobs, LeasedJob, Outcome
from workers.api.safety import AddressPolicy
from workers.scrapy.closing import DoneWatch
from workers.scrapy.requests import (
    HANDED_BACK,
    JOB_KEY,
    PARENT_KEY,
    Allowed,
    UnencodableRequest,
    to_request,
    to_submission,
)
from workers.scrapy.resolver import install as install_resolver

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

log = logging.getLogger("workers.scrapy")

SWEEP_EVERY = 0.2  # seconds between looks at which handed requests the engine is through with

_RUNS: weakref.WeakKeyDictionary[Crawler, FrontierScheduler] = weakref.WeakKeyDictionary()


def scheduler_of(crawler: Crawler) -> FrontierScheduler | None:
    """The add-on's scheduler of this crawler (None until the engine built it)."""
    return _RUNS.get(crawler)


@dataclass(eq=False)
class Entry:
    """One job in this process: its request, what came of it, and the requests it led to."""

    leased: LeasedJob
    request: Request
    outcome: Outcome | None = None
    follow_ups: list[Submission] = field(default_factory=list)
    handed: bool = False  # given to the engine
    downloading: bool = False  # past every downloader middleware's process_request
    dropped: str = ""  # why a middleware dropped it before download
    concluded: bool = False  # its report is on its way (or it was handed back)


def crawl_config(settings: Any) -> Config:
    """The frontier's configuration for this project: ``CRAWL_FRONTIER_CONFIG`` (a TOML file), else
    the ``CRAWL__*`` environment and the defaults."""
    path = settings.get("CRAWL_FRONTIER_CONFIG") or None
    return load(path)


def allowed(settings: Any) -> Allowed:
    """What a job's request may ask beyond its URL, from the project's settings."""
    return Allowed(
        proxies=frozenset(settings.getlist("CRAWL_FRONTIER_ALLOWED_PROXIES")),
        bindaddresses=frozenset(settings.getlist("CRAWL_FRONTIER_ALLOWED_BINDADDRESSES")),
        max_size=settings.getint("DOWNLOAD_MAXSIZE", 0),
    )


def user_agent(spider: Spider, settings: Any) -> str:
    """The User-Agent the spider's requests send (``UserAgentMiddleware``: the spider's
    ``user_agent`` attribute, else ``USER_AGENT``)."""
    return str(getattr(spider, "user_agent", None) or settings.get("USER_AGENT") or "Scrapy")


class FrontierScheduler:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.settings = crawler.settings
        self.cfg = crawl_config(self.settings)
        self.crawl: str = self.settings.get("CRAWL_FRONTIER_CRAWL") or str(getattr(crawler.spidercls, "name", ""))
        self.pages = self.settings.getbool("CRAWL_FRONTIER_PAGES", False)
        self.revisit = spec_of(self.settings.get("CRAWL_FRONTIER_REVISIT") or 0.0)  # (the add-on checked it)
        self.concurrency = self.settings.getint("CONCURRENT_REQUESTS", 16)
        self.spider: Spider | None = None
        self.agent = ""  # the User-Agent its requests send: robots.txt is matched with it
        self.jobs: Jobs | None = None
        self.ready: deque[Entry] = deque()
        self.active: dict[str, Entry] = {}  # by lease
        self.tasks: set[asyncio.Task[Any]] = set()  # reports and submissions on their way
        self.watch: DoneWatch | None = None
        self._pump: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._closer: asyncio.Future[None] | None = None
        self.submitted = self.reported = self.failed_submissions = 0
        self.followed = 0  # requests sent with their job's report (a callback's)
        self.unreachable = False
        self.warned_outside = False  # a download outside the frontier was said (once)
        self.download_timeout = self.settings.getfloat("DOWNLOAD_TIMEOUT", 180.0)
        self.allowed = allowed(self.settings)
        _RUNS[crawler] = self
        crawler.signals.connect(self._opened, signal=signals.spider_opened)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        return cls(crawler)

    # -- life ----------------------------------------------------------------------------------------
    def open(self, spider: Spider) -> Deferred[None]:
        return deferred_from_coro(self._open(spider))

    async def _open(self, spider: Spider) -> None:
        self.spider = spider
        agent = user_agent(spider, self.settings)
        # robots.txt is matched as Scrapy's RobotsTxtMiddleware would: ROBOTSTXT_USER_AGENT, else the UA
        self.agent = self.settings.get("ROBOTSTXT_USER_AGENT") or agent
        cfg = replace(self.cfg, worker=replace(self.cfg.worker, user_agent=agent, concurrency=self.concurrency))
        self.cfg = cfg
        name = f"scrapy:{spider.name}@{socket.gethostname()}-{os.getpid()}"
        client = FrontierClient(cfg, crawl=self.crawl)
        try:
            await asyncio.to_thread(client.check, 10.0)
        except KafkaUnreachable as exc:
            log.error("crawl-frontier: %s", exc)
            self.unreachable = True  # the spider closes once open (see _opened): one line, no traceback
            return
        install_resolver(self.settings, AddressPolicy(cfg.worker.allow_networks, cfg.worker.block_private))
        self.jobs = Jobs(cfg, crawl=self.crawl, name=name)
        await self.jobs.start()
        self.watch = DoneWatch(client, self.crawl, self.busy)
        self.watch.start()
        self._pump = asyncio.ensure_future(self._take_jobs())
        self._pump.add_done_callback(self._pump_ended)
        self._sweeper = asyncio.ensure_future(self._sweep_loop())
        log.info("crawl %r on the frontier at %s: this process takes its jobs as %s (at most %d at once)",
                 self.crawl, cfg.kafka.bootstrap, name, self.concurrency)  # fmt: skip

    def _opened(self, spider: Spider) -> None:
        if self.unreachable:
            raise CloseSpider("frontier_unreachable")

    def close(self, reason: str) -> Deferred[None]:
        return deferred_from_coro(self._close(reason))

    async def _close(self, reason: str) -> None:
        if self.watch is not None:
            self.watch.stop()
        jobs = self.jobs
        if jobs is None:
            return
        jobs.stop()
        for task in (self._pump, self._sweeper):
            if task is not None:
                task.cancel()
        self._sweep()
        for entry in list(self.active.values()):  # not sent, or never through the engine: back at once
            if not entry.concluded:
                entry.concluded = True
                self._spawn(self._hand_back(entry))
        self.active.clear()
        self.ready.clear()
        if self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
        await jobs.close()
        log.info("crawl %r: closed (%s): %d requests sent to the frontier (%d from start requests, %d with "
                 "reports), %d jobs reported, %d handed back", self.crawl, reason, self.submitted + self.followed,
                 self.submitted, self.followed, self.reported, jobs.reporter.returned)  # fmt: skip
        if reason == "finished" and self.followed and self.reported <= self.submitted:
            log.info("crawl %r: none of the %d requests the callbacks sent came back as jobs: seen before, by an "
                     "earlier run of the crawl or another process (a crawl keeps its seen set across runs; "
                     "`crawl-frontier crawl drop %s --forget` starts it over)", self.crawl, self.followed,
                     self.crawl)  # fmt: skip

    # -- what the engine asks ------------------------------------------------------------------------
    def busy(self) -> bool:
        """Work in this process: jobs in hand, reports or submissions on their way."""
        return bool(self.active or self.ready or self.tasks)

    def has_pending_requests(self) -> bool:
        return self.busy() or self.watch is None or not self.watch.done()

    def enqueue_request(self, request: Request) -> bool:
        meta = request.meta
        if self.jobs is None:
            return False  # not connected (the spider is closing)
        if meta.get(HANDED_BACK):
            return True  # the end of a job the frontier retries (see the downloader middleware)
        lease = meta.get(PARENT_KEY) or meta.get(JOB_KEY)
        try:
            sub = to_submission(request, self.spider, self.crawl, self.agent, self.revisit)
        except UnencodableRequest as exc:
            log.error("%s", exc)
            self.crawler.stats.inc_value("frontier/unencodable")
            return False  # request_dropped: Scrapy says so too
        entry = self.active.get(lease) if isinstance(lease, str) else None
        if entry is not None and not entry.concluded:
            entry.follow_ups.append(sub)  # published with its job's report
        else:
            self._spawn(self._submit(sub))
        if self.watch is not None:
            self.watch.touch()  # after the state that makes the process busy
        return True

    def next_request(self) -> Request | None:
        self._sweep()
        while self.ready:
            entry = self.ready.popleft()
            if self._stale(entry):
                continue
            entry.handed = True
            job = entry.leased.job
            # the download must end within the job's fetch timeout (the frontier's lease assumes it)
            timeout = float(entry.request.meta.get("download_timeout") or self.download_timeout)
            entry.request.meta["download_timeout"] = max(1.0, min(timeout, job.timeout))
            return entry.request
        return None

    def _stale(self, entry: Entry) -> bool:
        """A job waiting in the buffer that must not go to the engine: given up by the worker API
        (forgotten here), or past its slot (handed back)."""
        if entry.leased.reported or entry.concluded:
            entry.concluded = True
            self.active.pop(entry.leased.job.lease, None)
            return True
        if time.time() > entry.leased.expires_at:
            self._end(entry, self._hand_back(entry))
            return True
        return False

    # -- jobs in -------------------------------------------------------------------------------------
    async def _take_jobs(self) -> None:
        assert self.jobs is not None and self.spider is not None
        async for leased in self.jobs:
            try:
                request = to_request(leased.job, self.spider, self.allowed)
            except Exception as exc:  # noqa: BLE001 - a job this spider cannot (or will not) make ends skipped, said
                log.error("job %s (%s): its Scrapy request is not made: %s", leased.job.lease, leased.url, exc)
                await leased.skip(f"scrapy: {type(exc).__name__}: {exc}"[:500])
                continue
            entry = Entry(leased, request)
            self.active[leased.job.lease] = entry
            self.ready.append(entry)
            if self.watch is not None:
                self.watch.touch()  # after the state that makes the process busy
            self._wake()

    def _pump_ended(self, task: asyncio.Task[None]) -> None:
        """The worker API failed (its consumer, say): the spider closes, said, rather than wait forever."""
        if task.cancelled() or task.exception() is None:
            return
        log.error("crawl %r: the worker API failed: %r; closing the spider", self.crawl, task.exception())
        engine = self.crawler.engine
        if engine is not None:
            # kept apart from self.tasks: the close awaits those, and must not await itself
            closing = getattr(engine, "close_spider_async", None)  # Scrapy 2.14+; 2.13 has close_spider
            if closing is not None:
                self._closer = asyncio.ensure_future(closing(reason="frontier_failed"))
            else:
                self._closer = asyncio.ensure_future(
                    maybe_deferred_to_future(engine.close_spider(self.crawler.spider, "frontier_failed"))  # type: ignore[arg-type]
                )

    def _wake(self) -> None:
        """Have the engine ask for requests now, not at its next heartbeat."""
        engine = self.crawler.engine
        slot = getattr(engine, "_slot", None) or getattr(engine, "slot", None)
        if slot is not None:
            slot.nextcall.schedule()

    # -- what the middlewares tell -------------------------------------------------------------------
    def entry_of(self, request: Request) -> Entry | None:
        """The job whose request this is: the very object handed to the engine (a request that
        carries a copy of its meta, downloaded another way, is not the job)."""
        lease = request.meta.get(JOB_KEY)
        entry = self.active.get(lease) if isinstance(lease, str) else None
        return entry if entry is not None and entry.request is request and not entry.concluded else None

    def conclude_now(self, entry: Entry, outcome: Outcome) -> None:
        """Report ``outcome`` at once, without follow-ups (a retry the frontier schedules)."""
        entry.outcome = outcome
        self._conclude(entry)

    # -- reports -------------------------------------------------------------------------------------
    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY)
            self._sweep()

    def _sweep(self) -> None:
        """Report the jobs whose requests the engine is through with."""
        engine = self.crawler.engine
        slot = getattr(engine, "_slot", None) or getattr(engine, "slot", None)
        inprogress = getattr(slot, "inprogress", None)
        if inprogress is None:
            return
        for entry in [e for e in self.active.values() if e.handed and not e.concluded]:
            if entry.request not in inprogress:
                self._conclude(entry)
        closing = getattr(slot, "closing", None) is not None
        if closing and self.jobs is not None and not self.jobs.stopped:
            self.jobs.stop()  # the engine closes (Ctrl-C, CLOSESPIDER_*): take no more jobs
        kept: deque[Entry] = deque()
        for entry in self.ready:  # the buffer, whatever the engine is doing
            if self._stale(entry):
                continue
            if closing:  # never to be downloaded now: back at once, not after the downloads in flight
                self._end(entry, self._hand_back(entry))
                continue
            kept.append(entry)
        self.ready = kept

    def _conclude(self, entry: Entry) -> None:
        self._end(entry, self._report(entry))

    def _end(self, entry: Entry, how: Any) -> None:
        """The job is over in this process: ``how`` (its report or its hand-back) goes out."""
        entry.concluded = True
        self.active.pop(entry.leased.job.lease, None)
        self._spawn(how)

    async def _report(self, entry: Entry) -> None:
        leased = entry.leased
        if leased.reported:  # given up by the worker API (not reported within its lease): it comes back
            log.warning("%r was through Scrapy after the worker API gave it up; its report and the %d requests it "
                        "led to are left out (the job comes back and is parsed again)", leased,
                        len(entry.follow_ups))  # fmt: skip
            return
        outcome = entry.outcome
        if outcome is None:
            await leased.skip(entry.dropped or "scrapy: dropped before download (by a downloader middleware)")
            return
        outcome.follow_ups = entry.follow_ups
        outcome.page = self.pages
        await leased.finish(outcome)
        self.reported += 1
        self.followed += len(entry.follow_ups)

    async def _hand_back(self, entry: Entry) -> None:
        if not entry.leased.reported:
            await entry.leased.release()

    async def _submit(self, sub: Submission) -> None:
        assert self.jobs is not None
        problem = await self.jobs.reporter.publisher.deliver(self.cfg.topics.urls, sub)
        if problem:
            self.failed_submissions += 1
            hint = " (are the topics created? crawl-frontier topics create)" if "UNKNOWN_TOPIC" in str(problem) else ""
            log.error("request %s not sent to the frontier: %s%s", sub.url, problem, hint)
            return
        self.submitted += 1

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._landed)

    def _landed(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("frontier report failed: %r", task.exception())

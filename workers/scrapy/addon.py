"""The Scrapy add-on: ``ADDONS = {"workers.scrapy.FrontierAddon": 0}`` makes the project's spider a
worker of its crawl on the frontier, with settings only.

It sets the scheduler and its two middlewares; it takes over what the frontier does for every
process at once and turns Scrapy's own copy off (saying so in the log): robots.txt
(``ROBOTSTXT_OBEY``: the frontier obeys it, fetched with the spider's User-Agent), AutoThrottle,
``DOWNLOAD_DELAY`` and the per-domain cap (the frontier paces each host from the server's signals),
the duplicate filter (the crawl's seen set), ``RetryMiddleware`` (the frontier's backoff retries
its backoff statuses and network errors). A job is fetched at its http(s) URL only, so Scrapy's other
download handlers (``data``, ``file``, ``ftp``, ``s3``) are off unless the project's
``DOWNLOAD_HANDLERS`` names them, and a download is capped at ``worker.max_body_bytes`` unless the
project set ``DOWNLOAD_MAXSIZE``. It refuses to start, with one line naming the setting, on what it
cannot honour: a reactor other than asyncio's, or another scheduler.

Settings it reads: ``CRAWL_FRONTIER_CONFIG`` (a TOML file; else the ``CRAWL__*`` environment and the
defaults), ``CRAWL_FRONTIER_CRAWL`` (the crawl; default the spider's name), ``CRAWL_FRONTIER_PAGES``
(also publish each page on ``crawl.pages``; default off: a Scrapy project's output is its items),
``CRAWL_FRONTIER_REVISIT`` (every request fetched again: seconds, ``"adaptive"`` or ``"MIN:MAX"``,
conditional once the page gave validators; a request's ``meta["frontier_revisit"]`` overrides it;
default 0: once), ``CRAWL_FRONTIER_ALLOWED_PROXIES`` and ``CRAWL_FRONTIER_ALLOWED_BINDADDRESSES``
(the ``proxy`` / ``bindaddress`` meta values a job's request may carry; default none: a job that
names another is refused, as anyone who may write ``crawl.urls`` could have written it).
"""

from __future__ import annotations

import logging
from typing import Any

from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings

from frontier.config import ConfigError, load
from frontier.core.revisit import spec_of

log = logging.getLogger("workers.scrapy")

SCHEDULER = "workers.scrapy.scheduler.FrontierScheduler"
DOWNLOADER_MW = "workers.scrapy.middleware.FrontierDownloaderMiddleware"
SPIDER_MW = "workers.scrapy.middleware.FrontierSpiderMiddleware"
ASYNCIO_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
PRIORITY = "cmdline"  # above the project's and the spider's own settings: what is taken over stays so
OTHER_SCHEMES = ("data", "file", "ftp", "s3")  # download handlers a job never needs (jobs are http(s))


def refusal(settings: BaseSettings) -> str:
    """What the add-on cannot honour in these settings, as the one line it says ("" when nothing)."""
    reactor = settings.get("TWISTED_REACTOR")
    if reactor and reactor != ASYNCIO_REACTOR:
        return (f"crawl-frontier: TWISTED_REACTOR is {reactor!r}; the frontier add-on runs on "
                f"{ASYNCIO_REACTOR!r} (set that, or remove the setting)")  # fmt: skip
    scheduler = settings.get("SCHEDULER")
    if (
        scheduler
        and not isinstance(scheduler, type)
        and scheduler not in ("scrapy.core.scheduler.Scheduler", SCHEDULER)
    ):
        return (f"crawl-frontier: SCHEDULER is {scheduler!r}; the frontier add-on brings its own scheduler "
                "(remove the setting)")  # fmt: skip
    try:
        spec_of(settings.get("CRAWL_FRONTIER_REVISIT") or 0.0)
    except ValueError as exc:
        return f"crawl-frontier: CRAWL_FRONTIER_REVISIT: {exc}"
    return ""


class FrontierAddon:
    """Scrapy add-on: see the module's text."""

    def __init__(self, crawler: Any = None) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Any) -> FrontierAddon:
        return cls(crawler)

    @classmethod
    def update_pre_crawler_settings(cls, settings: BaseSettings) -> None:
        """Before any crawler (and the reactor) exists: refuse the project's settings here, so the
        process ends with the one line and no traceback."""
        if problem := refusal(settings):
            raise SystemExit(problem)

    def update_settings(self, settings: BaseSettings) -> None:
        if problem := refusal(settings):  # a spider's custom_settings
            raise SystemExit(problem)
        said: list[str] = []

        def take(name: str, value: Any, why: str) -> None:
            before = settings.get(name)
            if before not in (None, value):
                said.append(f"{name}: {before!r} -> {value!r} ({why})")
            settings.set(name, value, PRIORITY)

        robots = settings.getbool("ROBOTSTXT_OBEY")
        take("SCHEDULER", SCHEDULER, "jobs from the frontier, requests to it")
        take("TWISTED_REACTOR", ASYNCIO_REACTOR, "the worker API runs on the reactor's asyncio loop")
        take("ROBOTSTXT_OBEY", False, "the frontier obeys robots.txt (Disallow, Crawl-delay), fetched with "
             "this spider's User-Agent" if robots else "the frontier obeys robots.txt anyway")  # fmt: skip
        take("AUTOTHROTTLE_ENABLED", False, "the frontier adapts each host's delay from every process's answers")
        take("DOWNLOAD_DELAY", 0, "the frontier spaces each host's requests")
        concurrency = settings.getint("CONCURRENT_REQUESTS", 16)
        take("CONCURRENT_REQUESTS_PER_DOMAIN", concurrency, "the frontier caps each scope's concurrency")
        take("CONCURRENT_REQUESTS_PER_IP", 0, "the frontier caps each scope's concurrency")
        take("DUPEFILTER_CLASS", "scrapy.dupefilters.BaseDupeFilter", "the crawl's seen set, shared by every process")
        take("RETRY_ENABLED", False, "the frontier's backoff retries its backoff statuses (429, 502-504, 520-524 by "
             "default) and network errors; RETRY_HTTP_CODES and RETRY_TIMES are not used")  # fmt: skip
        dmw = dict(settings.getdict("DOWNLOADER_MIDDLEWARES"))
        dmw[DOWNLOADER_MW] = 990  # next to the downloader: the raw answer, before any other middleware
        settings.set("DOWNLOADER_MIDDLEWARES", dmw, PRIORITY)
        smw = dict(settings.getdict("SPIDER_MIDDLEWARES"))
        smw[SPIDER_MW] = 1  # next to the engine: a callback's output as it leaves the spider's middlewares
        settings.set("SPIDER_MIDDLEWARES", smw, PRIORITY)
        handlers = dict(settings.getdict("DOWNLOAD_HANDLERS"))
        off = [scheme for scheme in OTHER_SCHEMES if scheme not in handlers]
        handlers.update(dict.fromkeys(off, None))
        settings.set("DOWNLOAD_HANDLERS", handlers, PRIORITY)
        if off:
            said.append(f"DOWNLOAD_HANDLERS: {', '.join(off)} off (a job is fetched at its http(s) URL only; "
                        "a project that needs one names it in DOWNLOAD_HANDLERS)")  # fmt: skip
        if (settings.getpriority("DOWNLOAD_MAXSIZE") or 0) <= SETTINGS_PRIORITIES["default"]:
            try:
                cap = load(settings.get("CRAWL_FRONTIER_CONFIG") or None).worker.max_body_bytes
            except (ConfigError, OSError):
                cap = 0  # the scheduler says what is wrong with the configuration
            if cap:
                take("DOWNLOAD_MAXSIZE", cap, "worker.max_body_bytes: a page is kept up to that size")
        for line in said:
            log.info("crawl-frontier add-on: %s", line)

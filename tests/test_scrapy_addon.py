"""The Scrapy add-on's parts without Kafka (issue 21): a request on the frontier's wire and back,
the requests it refuses (naming the key), what the add-on sets, takes over and refuses, the
error kinds of download failures, the spider middleware's tags, and when a spider may close."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from scrapy import FormRequest, Request, Spider
from scrapy.crawler import Crawler
from scrapy.http import HtmlResponse, JsonRequest
from scrapy.settings import Settings
from twisted.internet.error import ConnectionLost, ConnectionRefusedError, DNSLookupError, TimeoutError

from frontier.client import CrawlDone
from frontier.core.urls import item_from_submission
from topics.schemas import Job, Submission, decode, encode
from workers.scrapy.addon import DOWNLOADER_MW, SCHEDULER, SPIDER_MW, FrontierAddon
from workers.scrapy.closing import DoneWatch
from workers.scrapy.middleware import FrontierSpiderMiddleware, error_kind
from workers.scrapy.requests import (
    JOB_KEY,
    PARENT_KEY,
    REVISIT_META,
    UnencodableRequest,
    to_request,
    to_submission,
)
from workers.scrapy.scheduler import Entry, FrontierScheduler


class Shop(Spider):
    name = "shop"

    def parse(self, response: object, **kwargs: object) -> None:
        return None

    def parse_book(self, response: object, listing: str = "") -> None:
        return None

    def failed(self, failure: object) -> None:
        return None


def through_the_wire(sub: Submission, lease: str = "L1") -> Job:
    """What a worker gets back: the submission as the frontier takes it in and leases it."""
    item = item_from_submission(decode(encode(sub), Submission))
    return Job(lease=lease, not_before=0.0, expires_at=1e12, item=item)


def test_a_request_comes_back_as_the_spider_yielded_it() -> None:
    spider = Shop()
    request = Request("http://shop.test/book/1?x=1", callback=spider.parse_book, errback=spider.failed,
                      cb_kwargs={"listing": "http://shop.test/"}, meta={"depth": 2, "tags": ["a", 1]},
                      headers={"Accept": ["text/html", "application/xhtml+xml"], "X-Token": "t"},
                      cookies={"session": "s1"}, priority=7, flags=["f"])  # fmt: skip
    sub = to_submission(request, spider, "books", "bookshop-bot/1.0")
    assert sub.crawl == "books" and sub.priority == 7 and not sub.recrawl and sub.agent == "bookshop-bot/1.0"
    back = to_request(through_the_wire(sub), spider)
    assert back.url == request.url and back.method == "GET" and back.priority == 7
    assert back.callback == spider.parse_book and back.errback == spider.failed
    assert back.cb_kwargs == {"listing": "http://shop.test/"}
    assert back.headers.getlist("Accept") == [b"text/html", b"application/xhtml+xml"]
    assert back.headers.get("X-Token") == b"t" and back.cookies == {"session": "s1"} and back.flags == ["f"]
    assert back.meta == {"depth": 2, "tags": ["a", 1], JOB_KEY: "L1"}


def test_a_post_keeps_its_class_and_body_and_is_never_taken_for_a_seen_get() -> None:
    spider = Shop()
    request = FormRequest("http://shop.test/search", formdata={"q": "dune", "page": "2"}, callback=spider.parse)
    sub = to_submission(request, spider, "books")
    assert sub.recrawl  # the seen set is by URL: a POST is not a repeat of a GET of it
    back = to_request(through_the_wire(sub), spider)
    assert type(back) is FormRequest and back.method == "POST" and back.body == request.body
    assert back.callback == spider.parse


def test_dont_filter_is_a_recrawl_and_transient_meta_stays_behind() -> None:
    spider = Shop()
    meta = {"download_latency": 0.3, "download_slot": "x", JOB_KEY: "old", PARENT_KEY: "p", "keep": 1}
    request = Request("http://shop.test/", dont_filter=True, meta=meta)
    sub = to_submission(request, spider, "books")
    assert sub.recrawl and sub.meta["scrapy"]["meta"] == {"keep": 1}


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [("meta", {"ok": 1, "when": object()}, "meta key 'when'"),
     ("cb_kwargs", {"item": {1, 2}}, "cb_kwargs key 'item'")],
)  # fmt: skip
def test_what_json_cannot_carry_is_refused_naming_the_key(field: str, value: dict[str, object], named: str) -> None:
    request = Request("http://shop.test/", **{field: value})  # type: ignore[arg-type]
    with pytest.raises(UnencodableRequest, match=named):
        to_submission(request, Shop(), "books")


def test_a_callback_that_is_not_the_spiders_method_is_refused() -> None:
    request = Request("http://shop.test/", callback=lambda r: None)
    with pytest.raises(UnencodableRequest, match=r"shop\.test"):
        to_submission(request, Shop(), "books")


def test_a_url_submitted_outside_scrapy_goes_to_parse_and_a_lost_callback_is_said() -> None:
    spider = Shop()
    plain = to_request(through_the_wire(Submission(url="http://shop.test/x", crawl="books", meta={"k": "v"})), spider)
    assert plain.callback is None and plain.meta == {"k": "v", JOB_KEY: "L1"}  # Scrapy calls parse
    sub = to_submission(Request("http://shop.test/", callback=spider.parse_book), spider, "books")
    sub.meta["scrapy"]["callback"] = "parse_gone"  # the spider changed since the request was queued
    with pytest.raises(ValueError, match="parse_gone"):
        to_request(through_the_wire(sub), spider)


def test_a_revisit_from_the_setting_or_the_meta_is_conditional_once_the_page_gave_validators() -> None:
    spider = Shop()
    sub = to_submission(Request("http://shop.test/a"), spider, "books", revisit="60:3600")
    assert sub.revisit == [60.0, 3600.0]
    own = to_submission(Request("http://shop.test/b", meta={REVISIT_META: 0}), spider, "books", revisit="adaptive")
    assert own.revisit == 0 and to_submission(Request("http://shop.test/c"), spider, "books").revisit == 0.0
    with pytest.raises(UnencodableRequest, match="frontier_revisit"):
        to_submission(Request("http://shop.test/d", meta={REVISIT_META: "weekly"}), spider, "books")
    job = through_the_wire(sub)
    assert not to_request(job, spider).headers.get("If-None-Match")  # the first fetch: nothing to send back
    job.item.validators = {"etag": '"v1"', "last-modified": "Wed, 25 Nov 2026 10:00:00 GMT", "digest": "sha1:X"}
    again = to_request(job, spider)
    assert again.headers.get("If-None-Match") == b'"v1"'
    assert again.headers.get("If-Modified-Since") == b"Wed, 25 Nov 2026 10:00:00 GMT"
    assert again.callback is None and again.meta[JOB_KEY] == "L1"


def project_settings(**given: object) -> Settings:
    settings = Settings()
    settings.setdict({"ROBOTSTXT_OBEY": True, "AUTOTHROTTLE_ENABLED": True, "DOWNLOAD_DELAY": 2.0,
                      "CONCURRENT_REQUESTS": 32, **given}, priority="project")  # fmt: skip
    return settings


def test_the_addon_takes_over_what_the_frontier_does_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    settings = project_settings(DOWNLOADER_MIDDLEWARES={"myproject.mw.Mine": 543})
    with caplog.at_level(logging.INFO, logger="workers.scrapy"):
        FrontierAddon().update_settings(settings)
    assert settings.get("SCHEDULER") == SCHEDULER
    assert settings.getbool("ROBOTSTXT_OBEY") is False and settings.getbool("AUTOTHROTTLE_ENABLED") is False
    assert settings.getfloat("DOWNLOAD_DELAY") == 0 and settings.getbool("RETRY_ENABLED") is False
    assert settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 32
    assert settings.getdict("DOWNLOADER_MIDDLEWARES") == {"myproject.mw.Mine": 543, DOWNLOADER_MW: 990}
    assert settings.getdict("SPIDER_MIDDLEWARES") == {SPIDER_MW: 1}
    said = caplog.text
    assert "ROBOTSTXT_OBEY: True -> False" in said and "DOWNLOAD_DELAY: 2.0 -> 0" in said
    assert "AUTOTHROTTLE_ENABLED: True -> False" in said


@pytest.mark.parametrize(
    ("name", "value"),
    [("TWISTED_REACTOR", "twisted.internet.epollreactor.EPollReactor"),
     ("SCHEDULER", "scrapy_redis.scheduler.Scheduler"),
     ("CRAWL_FRONTIER_REVISIT", "daily")],
)  # fmt: skip
def test_the_addon_refuses_what_it_cannot_honour_naming_the_setting(name: str, value: str) -> None:
    with pytest.raises(SystemExit, match=name):  # the project's settings, before any crawler
        FrontierAddon.update_pre_crawler_settings(project_settings(**{name: value}))
    with pytest.raises(SystemExit, match=name):  # a spider's custom_settings
        FrontierAddon().update_settings(project_settings(**{name: value}))


def test_scrapy_crawl_refuses_with_one_line_naming_the_setting() -> None:
    """As a user runs it: ``scrapy crawl`` of the example project ends at once, exit 1, one line."""
    project = Path(__file__).resolve().parent.parent / "workers" / "examples" / "scrapy_books"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "books", "-s",
                          "TWISTED_REACTOR=twisted.internet.epollreactor.EPollReactor"],
                         cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert run.returncode == 1, run.stderr[-2000:]
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("crawl-frontier: TWISTED_REACTOR is") and "Traceback" not in run.stderr, run.stderr


def test_download_failures_get_the_protocols_error_kinds() -> None:
    assert error_kind(TimeoutError()) == "timeout"
    assert error_kind(DNSLookupError()) == "connect" and error_kind(ConnectionRefusedError()) == "connect"
    assert error_kind(ConnectionLost()) == "reset"
    assert error_kind(ValueError("x")) == "scrapy:ValueError"


def test_the_spider_middleware_tags_requests_with_their_response_and_refuses_bad_meta() -> None:
    job_request = Request("http://shop.test/", meta={JOB_KEY: "L9"})
    response = HtmlResponse("http://shop.test/", body=b"<html></html>", request=job_request)
    mw = FrontierSpiderMiddleware(crawler=None)  # type: ignore[arg-type]
    out = list(mw.process_spider_output(response, [Request("http://shop.test/next"), {"item": 1}]))
    assert out[0].meta[PARENT_KEY] == "L9" and out[1] == {"item": 1}


def test_a_refused_request_is_said_and_left_out_and_the_rest_of_the_output_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    response = HtmlResponse("http://shop.test/", body=b"", request=Request("http://shop.test/", meta={JOB_KEY: "L9"}))
    mw = FrontierSpiderMiddleware(crawler=None)  # type: ignore[arg-type]
    given = [Request("http://shop.test/x", meta={"bad": object()}), {"item": 1}, Request("http://shop.test/y")]
    with caplog.at_level(logging.ERROR, logger="workers.scrapy"):
        out = list(mw.process_spider_output(response, given))
    assert [getattr(o, "url", o) for o in out] == [{"item": 1}, "http://shop.test/y"]
    assert "request http://shop.test/x: meta key 'bad' cannot be sent to the frontier" in caplog.text


@pytest.mark.parametrize(
    ("request_", "named"),
    [(Request("http://shop.test/", flags=["ok", object()]), "attribute 'flags'"),
     (JsonRequest("http://shop.test/", data={"q": 1}, dumps_kwargs={"cls": json.JSONEncoder}), "'dumps_kwargs'"),
     (Request("http://shop.test/", meta={1: "one"}), "meta key 1 .*not a str")],
)  # fmt: skip
def test_every_attribute_must_be_json_as_it_is(request_: Request, named: str) -> None:
    with pytest.raises(UnencodableRequest, match=named):
        to_submission(request_, Shop(), "books")


def test_a_request_built_from_a_jobs_download_leaves_its_cookie_and_proxy_credentials_behind() -> None:
    # (and a revisit's conditional headers: the redirect target has validators of its own)
    headers = {"Cookie": "s=1", "Proxy-Authorization": "Basic eA==", "Accept": "text/html",
               "If-None-Match": '"v1"', "If-Modified-Since": "Wed, 25 Nov 2026 10:00:00 GMT"}  # fmt: skip
    redirected = Request("http://shop.test/b", headers=headers, meta={JOB_KEY: "L1", "redirect_times": 1})
    sent = to_submission(redirected, Shop(), "books").meta["scrapy"]["headers"]
    assert sent == [["Accept", "text/html"]]
    yielded = Request("http://shop.test/c", headers=headers)  # the spider's own: kept as it gave it
    assert len(to_submission(yielded, Shop(), "books").meta["scrapy"]["headers"]) == 5


class Answers:
    """A frontier client whose crawl is done from a given call on."""

    def __init__(self, done_from: int) -> None:
        self.calls = 0
        self.done_from = done_from
        self.asked = threading.Event()

    def wait_done(self, name: str, timeout: float = 0.0) -> CrawlDone:
        self.calls += 1
        if self.calls >= self.done_from:
            self.asked.set()
        done = self.calls >= self.done_from
        return CrawlDone(name, done, None, "" if done else "1 queued")


def wait_for(condition: object, timeout: float = 5.0) -> bool:
    event = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if condition():  # type: ignore[operator]
            return True
        event.wait(0.01)
    return False


def test_a_spider_closes_only_when_its_crawl_is_done_and_nothing_happened_here_since() -> None:
    busy = [True]
    answers = Answers(done_from=2)
    watch = DoneWatch(answers, "books", lambda: busy[0])  # type: ignore[arg-type]
    watch.start()
    try:
        assert not watch.done() and answers.calls == 0  # busy here: not even asked
        busy[0] = False
        assert wait_for(watch.done), "never done"
        assert answers.calls >= 2  # the first answer was "1 queued"
        watch.touch()  # a job came (or a request went out) since: not done until asked again
        assert not watch.done()
        assert wait_for(watch.done)
        busy[0] = True
        assert not watch.done()
    finally:
        watch.stop()


# -- the scheduler's buffer, without Kafka: a job given up, past its slot, or never to be downloaded


class Leased:
    """What the scheduler reads of a leased job, and the hand-back it may call."""

    def __init__(self, lease: str, expires_in: float = 30.0, timeout: float = 20.0) -> None:
        self.job = Job(lease=lease, not_before=0.0, expires_at=time.time() + expires_in, timeout=timeout,
                       item=item_from_submission(Submission(url=f"http://shop.test/{lease}")))  # fmt: skip
        self.reported = False
        self.released = False

    @property
    def expires_at(self) -> float:
        return self.job.expires_at

    async def release(self) -> None:
        self.released = self.reported = True


class Slot:
    def __init__(self) -> None:
        self.inprogress: set[Request] = set()
        self.closing: object = None
        self.nextcall = self

    def schedule(self) -> None:
        return None


class StoppableJobs:
    stopped = False

    def stop(self) -> None:
        self.stopped = True


def scheduler_with(*leased: Leased) -> tuple[FrontierScheduler, Slot]:
    # (not scrapy.utils.test.get_crawler: with no reactor installed, Scrapy 2.13's raises RuntimeError)
    crawler = Crawler(Shop, {"DOWNLOAD_TIMEOUT": 180})
    slot = Slot()
    crawler.engine = type("Engine", (), {"_slot": slot})()  # type: ignore[assignment]
    scheduler = FrontierScheduler(crawler)
    scheduler.spider = Shop()
    scheduler.jobs = StoppableJobs()  # type: ignore[assignment]
    for job in leased:
        entry = Entry(job, to_request(job.job, scheduler.spider))  # type: ignore[arg-type]
        scheduler.active[job.job.lease] = entry
        scheduler.ready.append(entry)
    return scheduler, slot


async def settle(scheduler: FrontierScheduler) -> None:
    if scheduler.tasks:
        await asyncio.gather(*list(scheduler.tasks))


async def test_a_job_given_up_in_the_buffer_is_forgotten_and_one_past_its_slot_handed_back() -> None:
    given_up, late, good = Leased("A"), Leased("B", expires_in=-1.0), Leased("C", timeout=7.0)
    given_up.reported = True  # the worker API gave it up while the engine was busy
    scheduler, _ = scheduler_with(given_up, late, good)
    request = scheduler.next_request()
    assert request is not None and request.meta[JOB_KEY] == "C"
    assert request.meta["download_timeout"] == 7.0  # within the job's fetch timeout, not Scrapy's 180 s
    await settle(scheduler)
    assert late.released and not given_up.released
    assert list(scheduler.active) == ["C"]  # nothing left that would keep the spider open forever


async def test_the_buffer_is_swept_whatever_the_engine_does_and_handed_back_once_it_closes() -> None:
    waiting, late = Leased("A"), Leased("B", expires_in=-1.0)
    scheduler, slot = scheduler_with(waiting, late)
    scheduler._sweep()  # no next_request: the engine is busy (a full downloader)
    await settle(scheduler)
    assert late.released and not waiting.released and [e.leased for e in scheduler.ready] == [waiting]
    slot.closing = object()  # Ctrl-C or CLOSESPIDER_*: the engine waits for its downloads in flight
    scheduler._sweep()
    await settle(scheduler)
    assert waiting.released and not scheduler.ready and not scheduler.busy()
    assert scheduler.jobs is not None and scheduler.jobs.stopped  # no more jobs taken meanwhile


def test_a_copy_of_a_jobs_meta_is_not_the_job() -> None:
    job = Leased("A")
    scheduler, _ = scheduler_with(job)
    request = scheduler.next_request()
    assert request is not None and scheduler.entry_of(request) is not None
    inline = Request("http://shop.test/inline", meta=dict(request.meta))  # e.g. meta=response.meta, downloaded inline
    assert scheduler.entry_of(inline) is None

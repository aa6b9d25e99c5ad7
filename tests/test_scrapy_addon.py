"""The Scrapy add-on's parts without Kafka (issue 21): a request on the frontier's wire and back,
the requests it refuses (naming the key), what the add-on sets, takes over and refuses, the
error kinds of download failures, the spider middleware's tags, and when a spider may close."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from scrapy import FormRequest, Request, Spider
from scrapy.http import HtmlResponse
from scrapy.settings import Settings
from twisted.internet.error import ConnectionLost, ConnectionRefusedError, DNSLookupError, TimeoutError

from frontier.client import CrawlDone
from frontier.intake.urls import item_from_submission
from topics.schemas import Job, Submission, decode, encode
from workers.scrapy.addon import DOWNLOADER_MW, SCHEDULER, SPIDER_MW, FrontierAddon
from workers.scrapy.closing import DoneWatch
from workers.scrapy.middleware import FrontierSpiderMiddleware, error_kind
from workers.scrapy.requests import JOB_KEY, PARENT_KEY, UnencodableRequest, to_request, to_submission


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
     ("SCHEDULER", "scrapy_redis.scheduler.Scheduler")],
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
    with pytest.raises(UnencodableRequest, match="meta key 'bad'"):
        list(mw.process_spider_output(response, [Request("http://shop.test/x", meta={"bad": object()})]))


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

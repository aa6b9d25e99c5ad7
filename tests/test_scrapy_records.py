"""What a record on ``crawl.urls`` can make a Scrapy worker do (issue 36), without Kafka: anyone who
may write the topic writes a job's ``scrapy`` meta, so the request rebuilt from it is fetched at the
job's URL only, calls only the spider's own public methods (or the private callbacks Scrapy's own
spider classes use), imports nothing, goes through no proxy and from no local address the project
did not allow, and downloads no more than the project's cap. And what the spider classes people
write yield goes to the frontier: lxml's link text (a ``str`` subclass) is encoded as a ``str``."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.linkextractors import LinkExtractor
from scrapy.settings import Settings
from scrapy.spiders import CrawlSpider, Rule

from tests.test_scrapy_addon import Shop, project_settings, through_the_wire
from topics.schemas import Submission, encode
from workers.scrapy.addon import FrontierAddon
from workers.scrapy.requests import (
    JOB_KEY,
    Allowed,
    RefusedJob,
    check_request,
    sendable_meta,
    to_request,
    to_submission,
)


class Rules(CrawlSpider):
    name = "rules"
    rules = (Rule(LinkExtractor(allow=r"/book/"), callback="parse_book", cb_kwargs={"k": 1}, follow=True),)

    def parse_book(self, response: Any, k: int = 0) -> None:
        return None


def crawl_spider_requests() -> list[Request]:
    spider = Rules()
    body = b'<html><body><a href="/book/1">The <b>first</b> book</a><a href="/book/2">Two</a></body></html>'
    page = HtmlResponse("http://shop.test/", body=body, request=Request("http://shop.test/", meta={JOB_KEY: "L0"}))
    return [r for r in spider._requests_to_follow(page) if isinstance(r, Request)]


def test_a_crawl_spiders_requests_carry_lxml_link_text_as_a_str_and_come_back_to_its_rule() -> None:
    spider = Rules()
    requests = crawl_spider_requests()
    assert len(requests) == 2
    text = requests[0].meta["link_text"]
    assert isinstance(text, str) and type(text) is not str, type(text)  # lxml's _ElementUnicodeResult
    check_request(requests[0])  # the check and the encoder agree
    sub = to_submission(requests[0], spider, "rules")
    encode(sub)
    back = to_request(through_the_wire(sub), spider)
    assert back.meta["link_text"] == text and type(back.meta["link_text"]) is str
    assert back.callback == spider._callback and back.errback == spider._errback and back.meta["rule"] == 0


def record(spider: Spider, **scrapy: Any) -> Submission:
    """A submission for http://shop.test/book/1 whose ``scrapy`` meta a producer changed."""
    sub = to_submission(Request("http://shop.test/book/1", callback=spider.parse), spider, "books")
    sub.meta["scrapy"].update(scrapy)
    return sub


@pytest.mark.parametrize(
    ("changed", "reason"),
    [({"url": "http://127.99.0.1:8080/secret"}, "not at the job's origin"),
     ({"url": "file:///etc/hostname"}, "not at the job's origin"),
     ({"url": "http://shop.test:8081/book/1"}, "not at the job's origin"),
     ({"url": "https://shop.test/book/1"}, "not at the job's origin"),
     ({"url": "data:text/plain,hello"}, "not at the job's origin"),
     ({"meta": {"proxy": "http://127.99.0.1:3128"}}, "meta proxy .* not allowed"),
     ({"meta": {"bindaddress": ["127.0.0.5", 0]}}, "meta bindaddress .* not allowed"),
     ({"callback": "__init__"}, "callback '__init__' is not a public method"),
     ({"callback": "_set_crawler"}, "callback '_set_crawler' is not a public method"),
     ({"callback": "start"}, "callback 'start' is not a public method"),
     ({"callback": "from_crawler"}, "callback 'from_crawler' is not a public method"),
     ({"callback": "logger"}, "callback 'logger' is not a public method"),
     ({"callback": "custom_settings"}, "callback 'custom_settings' is not a public method"),
     ({"callback": "gone"}, "callback 'gone': the spider has no such method"),
     ({"callback": "_callback"}, "callback '_callback': the spider has no such method"),  # not a CrawlSpider
     ({"errback": "__class__"}, "errback '__class__' is not a public method"),
     ({"_class": "this.Nothing"}, "_class 'this.Nothing' is not a Request class this process imported"),
     ({"_class": "collections.OrderedDict"}, "is not a Request class"),
     ({"headers": {"Host": "x"}}, "headers: .* is not a \\[name, value\\] pair")],
)  # fmt: skip
def test_a_crafted_record_is_refused_with_the_reason_and_nothing_is_imported_or_called(
    changed: dict[str, Any], reason: str
) -> None:
    spider = Shop()
    imported = set(sys.modules)
    with pytest.raises(RefusedJob, match=reason):
        to_request(through_the_wire(record(spider, **changed)), spider)
    assert set(sys.modules) == imported, set(sys.modules) - imported


def test_what_the_project_allows_goes_and_what_cannot_harm_is_mended() -> None:
    spider = Shop()
    allowed = Allowed(proxies={"http://proxy.internal:3128"}, bindaddresses={"10.0.0.5"}, max_size=5_000_000)
    meta = {"proxy": "http://proxy.internal:3128", "bindaddress": ["10.0.0.5", 0], "download_maxsize": 10**12}
    headers = [["Host", "other.test"], ["Accept", "text/html"]]
    back = to_request(through_the_wire(record(spider, meta=meta, headers=headers)), spider, allowed)
    assert back.meta["proxy"] == "http://proxy.internal:3128" and back.meta["bindaddress"] == ["10.0.0.5", 0]
    assert back.meta["download_maxsize"] == 5_000_000, "a record cannot lift the project's cap"
    assert back.headers.get("Host") is None and back.headers.get("Accept") == b"text/html"
    # the URL as the spider gave it (the frontier's canonical form may differ), at the job's origin
    same = to_request(through_the_wire(record(spider, url="HTTP://Shop.Test:80/book/1#x")), spider)
    assert same.url.startswith("http://shop.test")


def test_a_proxy_from_the_environment_is_not_carried_to_the_frontier() -> None:
    env = {"proxy": "http://corp:3128", "_scheme_proxy": True, "keep": 1}
    assert sendable_meta(env) == {"keep": 1}
    assert sendable_meta({"proxy": "http://mine:3128"}) == {"proxy": "http://mine:3128"}


def test_the_addon_turns_off_every_download_handler_but_http_and_caps_the_download(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = project_settings()
    with caplog.at_level(logging.INFO, logger="workers.scrapy"):
        FrontierAddon().update_settings(settings)
    handlers = settings.getdict("DOWNLOAD_HANDLERS")
    assert {s: handlers.get(s, "?") for s in ("data", "file", "ftp", "s3")} == dict.fromkeys(
        ("data", "file", "ftp", "s3")
    )
    assert "DOWNLOAD_HANDLERS: data, file, ftp, s3 off" in caplog.text
    assert settings.getint("DOWNLOAD_MAXSIZE") == 5 * 1024 * 1024  # worker.max_body_bytes
    own = project_settings(DOWNLOAD_MAXSIZE=123, DOWNLOAD_HANDLERS={"ftp": "myproject.handlers.Ftp"})
    FrontierAddon().update_settings(own)
    assert own.getint("DOWNLOAD_MAXSIZE") == 123, "the project's own cap stands"
    assert own.getdict("DOWNLOAD_HANDLERS")["ftp"] == "myproject.handlers.Ftp"
    assert own.getdict("DOWNLOAD_HANDLERS")["file"] is None


def test_settings_name_what_a_jobs_request_may_ask() -> None:
    from workers.scrapy.scheduler import allowed

    settings = Settings({"CRAWL_FRONTIER_ALLOWED_PROXIES": ["http://p:1"], "DOWNLOAD_MAXSIZE": 99})
    got = allowed(settings)
    assert set(got.proxies) == {"http://p:1"} and not got.bindaddresses and got.max_size == 99

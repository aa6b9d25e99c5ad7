"""Revisits that learn (issue 25), without a broker: the interval rules (frontier.core.revisit), a
revisit's conditional request and change judgment by the worker against a real local server
(validators honoured, ignored, or none), the frontier keeping validators and moving an adaptive
interval in its ``V`` entries, followed links inheriting a revisit, and unchanged pages in WARC."""

from __future__ import annotations

import email.utils
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from aiohttp import web
from warcio.archiveiterator import ArchiveIterator

from frontier.archive import WarcFiles
from frontier.cli.submit import _revisit
from frontier.client import submission_value
from frontier.core import revisit
from frontier.core.kv import MemoryKV
from frontier.core.urls import Rejection, parse_input
from frontier.partition import PartitionFrontier
from frontier.partition.revisits import learned
from tests.fakes import FakeProducer, message
from tests.test_partition import SETTINGS, THROTTLE, Log
from tests.test_worker_api import make_job, worker_with
from tests.test_worker_jobs import serving
from topics.schemas import Feedback, Job, Page, UrlItem
from workers.api.outcome import FetchResult
from workers.api.revisits import conditional_headers, digest, judge

HOST = "127.0.0.84"


def sub(url: str, **fields: object) -> UrlItem:
    return parse_input(json.dumps({"url": url, **fields}).encode())


# -- the interval rules ------------------------------------------------------------------------------
def test_revisit_specs_fixed_adaptive_or_bounds_and_clear_errors() -> None:
    assert revisit.bounds(3600) is None and revisit.bounds(0) is None
    assert revisit.bounds("adaptive") == revisit.ADAPTIVE
    assert revisit.bounds([5, 600]) == (5.0, 600.0)
    for bad in ("daily", [600, 5], [0, 5], [1, 2, 3], -1, 1e10, True, ["a", "b"]):
        with pytest.raises(ValueError, match="revisit"):
            revisit.bounds(bad)
    item = sub("http://a.test/", revisit=[5, 600])
    assert (item.revisit_min, item.revisit_max) == (5.0, 600.0)
    assert item.revisit == pytest.approx(5 * 120**0.25)  # a quarter of the way up, in log scale
    fixed = sub("http://a.test/", revisit=60)
    assert (fixed.revisit, fixed.revisit_max) == (60.0, 0.0)
    with pytest.raises(Rejection, match="revisit bounds"):
        sub("http://a.test/", revisit=[600, 5])
    assert _revisit("5:600") == [5.0, 600.0] and _revisit("adaptive") == "adaptive" and _revisit("60") == 60.0
    line = submission_value(b"http://a.test/", revisit=[5.0, 600.0])
    assert json.loads(line) == {"url": "http://a.test/", "revisit": [5.0, 600.0]}


def test_intervals_shrink_on_change_grow_without_and_start_from_the_pages_age() -> None:
    assert revisit.next_interval(100, 5, 600, changed=True) == 50
    assert revisit.next_interval(100, 5, 600, changed=False) == 200
    assert revisit.next_interval(6, 5, 600, changed=True) == 5  # within the bounds
    assert revisit.next_interval(500, 5, 600, changed=False) == 600
    assert revisit.first_interval(5, 600, age=100) == 50  # half the page's age
    assert revisit.first_interval(5, 600, age=86400) == 600
    assert revisit.first_interval(5, 600) == pytest.approx(5 * 120**0.25)
    at = 1_790_000_000.0
    assert revisit.age_of(email.utils.formatdate(at - 3600, usegmt=True), at) == 3600
    assert revisit.age_of(email.utils.formatdate(at + 60, usegmt=True), at) is None  # a clock ahead: no age
    assert revisit.age_of("yesterday", at) is None and revisit.age_of("", at) is None
    # where the interval settles: a page changing at random at rate 1/100 s, revisited by the rule
    lam, interval, found = 1 / 100, 300.0, []
    for n in range(4000):  # the expected share of changes seen at each interval, not a draw
        changed = (n * 0.6180339887) % 1 < 1 - math.exp(-lam * interval)
        interval = revisit.next_interval(interval, 1, 10_000, changed)
        found.append(interval)
    settled = sum(found[1000:]) / len(found[1000:])
    assert 45 < settled < 110, settled  # about ln 2 / lambda = 69 s


# -- the worker: conditional requests and change judged --------------------------------------------
def test_judged_by_304_or_by_digest_validators_bounded() -> None:
    item = sub("http://a.test/", revisit=60)
    assert conditional_headers(item) == {}
    kept = msgspec.structs.replace(item, validators={"etag": '"v1"', "last-modified": "Mon, 01 Jan 2026 00:00:00 GMT",
                                                      "digest": digest(200, b"one")})  # fmt: skip
    assert conditional_headers(kept) == {"If-None-Match": '"v1"', "If-Modified-Since": "Mon, 01 Jan 2026 00:00:00 GMT"}
    not_modified = _result(304, {"etag": '"v1"'})
    assert judge(kept, not_modified) == (True, kept.validators)
    assert judge(kept, _result(200, {}, b"one")) == (True, {"digest": digest(200, b"one")})  # ignored validators
    assert judge(kept, _result(200, {"etag": '"v2"'}, b"two")) == (
        False,
        {"etag": '"v2"', "digest": digest(200, b"two")},
    )
    assert judge(kept, _result(404, {}, b"one"))[0] is False  # gone: a change, even with the same body
    assert "etag" not in judge(item, _result(200, {"etag": "x" * 300}, b""))[1]  # too long: not kept
    assert conditional_headers(msgspec.structs.replace(kept, revisit=0.0)) == {}  # fetched once: none sent


def _result(status: int, headers: dict[str, str], body: bytes = b"") -> FetchResult:
    return FetchResult(status=status, headers=headers, body=body)


@pytest.fixture
async def site() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """/v honours validators (ETag, Last-Modified, 304), /plain has none, /ignores sends an ETag
    but always answers 200; every request's headers are logged."""
    asked: list[dict[str, str]] = []
    modified = email.utils.formatdate(1_700_000_000, usegmt=True)

    async def answer(request: web.Request) -> web.Response:
        asked.append({"path": request.path, **{k.lower(): v for k, v in request.headers.items()}})
        if request.path == "/v":
            if request.headers.get("If-None-Match") == '"v1"':
                return web.Response(status=304, headers={"ETag": '"v1"'})
            return web.Response(body=b"<html>v1</html>", content_type="text/html",
                                headers={"ETag": '"v1"', "Last-Modified": modified})  # fmt: skip
        if request.path == "/ignores":
            return web.Response(body=b"<html>same</html>", content_type="text/html", headers={"ETag": '"i"'})
        return web.Response(body=b'<html><a href="/child">c</a></html>', content_type="text/html")

    async with serving(answer, HOST) as base:
        yield base, asked


async def test_a_revisit_is_conditional_and_an_unchanged_page_is_said_without_its_body(
    site: tuple[str, list[dict[str, str]]],
) -> None:
    base, asked = site
    producer = FakeProducer()
    worker = worker_with(None, producer)
    items = {path: _job_item(base + path) for path in ("/v", "/ignores", "/plain")}
    for round_ in range(2):  # the first fetch, then a revisit with what it left
        for n, (path, item) in enumerate(items.items()):
            job = make_job(item.url, lease=f"{path}#{round_}")
            job = msgspec.structs.replace(job, item=item)
            await worker.jobs.handle(message(job, round_ * 10 + n))  # type: ignore[arg-type]
        await worker.jobs.reporter.publisher.settled()
        feedback = {fb.lease.split("#")[0]: fb for fb in producer.feedback() if fb.lease.endswith(f"#{round_}")}
        items = {p: msgspec.structs.replace(i, validators=feedback[p].validators) for p, i in items.items()}
    await worker.fetcher.close()
    await worker.builtin.close()
    sent = {(a["path"], a.get("if-none-match", ""), a.get("if-modified-since", "")) for a in asked}
    assert ("/v", '"v1"', email.utils.formatdate(1_700_000_000, usegmt=True)) in sent  # conditional
    assert ("/ignores", '"i"', "") in sent and ("/plain", "", "") in sent
    pages = {(p.url.removeprefix(base), p.status, p.unchanged, len(p.body) > 0) for p in producer.pages()}
    assert pages == {("/v", 200, False, True), ("/v", 304, True, False), ("/ignores", 200, False, True),
                     ("/ignores", 200, True, False), ("/plain", 200, False, True),
                     ("/plain", 200, True, False)}  # fmt: skip
    # the links of an unchanged page are not submitted again; a revisit passes on to them
    children = [s for s in producer.submissions() if s.url.endswith("/child")]
    assert len(children) == 1 and children[0].revisit == [5.0, 600.0]
    revisited = [fb for fb in producer.feedback() if fb.lease.endswith("#1")]
    assert all(fb.unchanged and fb.validators.get("digest") for fb in revisited), revisited


def _job_item(url: str) -> UrlItem:
    return msgspec.structs.replace(sub(url, revisit=[5, 600], follow=1), host=HOST, domain=HOST)


# -- the frontier: validators kept, adaptive intervals moved, in the V entries -----------------------
def _done(job: Job, at: float, unchanged: bool, **validators: str) -> Feedback:
    i = job.item
    return Feedback(lease=job.lease, host=i.host, domain=i.domain, url=i.url, outcome="fetched", status=200,
                    sent_at=at, validators={"digest": "sha1:X", **validators}, unchanged=unchanged)  # fmt: skip


def test_the_frontier_keeps_validators_and_moves_the_interval_in_its_state() -> None:
    f = PartitionFrontier(0, MemoryKV(), SETTINGS, THROTTLE, Log())
    f.ingest([sub("http://news.test/", revisit=[10, 1000])], 0.0)
    start = 10 * 100**0.25
    now, due, intervals = 0.0, [], []
    for unchanged in (None, True, True, False, False):  # first fetch, then 2 unchanged, 2 changed
        (job,) = f.dispatch(now).jobs
        assert conditional_headers(job.item) == ({"If-None-Match": '"e"'} if unchanged is not None else {})
        assert f.feedback(_done(job, now, bool(unchanged), etag='"e"'), now)
        ((_key, raw),) = list(f.kv.scan(b"V"))
        stored = msgspec.json.decode(raw, type=UrlItem)
        intervals.append(stored.revisit)
        assert stored.validators == {"digest": "sha1:X", "etag": '"e"'}
        now += stored.revisit
        due.append(now)
        assert not f.dispatch(now - 0.5).jobs  # not before it is due
    assert intervals == pytest.approx([start, start * 2, start * 4, start * 2, start])
    # an error judges nothing: validators and interval stay
    (job,) = f.dispatch(now).jobs
    assert f.feedback(Feedback(lease=job.lease, host=job.item.host, domain=job.item.domain, url=job.item.url,
                               outcome="error", error="connect", sent_at=now), now)  # fmt: skip
    ((_, raw),) = list(f.kv.scan(b"V"))
    assert msgspec.json.decode(raw, type=UrlItem).revisit == pytest.approx(intervals[-1])


def test_the_first_interval_follows_last_modified_and_a_fixed_revisit_stays_fixed() -> None:
    at = 1_790_000_000.0
    item = sub("http://a.test/", revisit=[10, 100_000])
    fb = Feedback(lease="l", host="a.test", domain="a.test", url=item.url, outcome="fetched", status=200, sent_at=at,
                  validators={"last-modified": email.utils.formatdate(at - 4000, usegmt=True)})  # fmt: skip
    assert learned(item, fb).revisit == 2000  # half the page's age
    fixed = sub("http://a.test/", revisit=60)
    assert learned(fixed, msgspec.structs.replace(fb, unchanged=True)).revisit == 60
    assert learned(fixed, fb).validators == fb.validators


# -- WARC: an unchanged revisit is a revisit record ------------------------------------------------
def test_unchanged_pages_are_warc_revisit_records(tmp_path: Path) -> None:
    pages = [Page(url="http://127.0.0.9/a", status=200, body=b"<html>a</html>", fetched_at=1.0),
             Page(url="http://127.0.0.9/a", status=304, unchanged=True, fetched_at=2.0, headers={"etag": '"e"'}),
             Page(url="http://127.0.0.9/b", status=200, unchanged=True, fetched_at=3.0,
                  digest=digest(200, b"<html>b</html>"))]  # fmt: skip
    with WarcFiles(tmp_path, "ua") as warc:
        for page in pages:
            assert warc.write(page)
    records = []
    for path in warc.files:
        with path.open("rb") as fh:
            for rec in ArchiveIterator(fh, check_digests="raise"):
                records.append((rec.rec_type, rec.rec_headers.get_header("WARC-Profile") or "",
                                rec.rec_headers.get_header("WARC-Payload-Digest") or ""))  # fmt: skip
    kinds = [(t, p.rsplit("/", 1)[-1]) for t, p, _ in records]
    assert kinds == [("warcinfo", ""), ("request", ""), ("response", ""), ("request", ""),
                     ("revisit", "server-not-modified"), ("request", ""),
                     ("revisit", "identical-payload-digest")]  # fmt: skip
    assert records[-1][2] == digest(200, b"<html>b</html>")


def test_what_tells_nothing_keeps_the_last_validators_and_a_redirect_target_is_part_of_the_page() -> None:
    """Found by review: a 302 whose Location moved was judged unchanged (empty bodies); a body cut
    at the size limit, a report without the body, a 5xx or a 404 replaced the validators with a
    digest that says nothing about the page."""
    item = msgspec.structs.replace(sub("http://a.test/latest", revisit=[5, 600]),
                                   validators={"etag": '"e"', "digest": digest(302, b"", "/article-1")})  # fmt: skip
    assert judge(item, FetchResult(status=302, headers={"location": "/article-1"}))[0] is True
    assert judge(item, FetchResult(status=302, headers={"location": "/article-2"}))[0] is False
    for nothing in (FetchResult(status=200, body=b"x" * 10, truncated=True), FetchResult(status=200, page=False),
                    FetchResult(status=503), FetchResult(status=404, body=b"gone")):  # fmt: skip
        assert judge(item, nothing) == (False, {}), nothing
        fb = Feedback(lease="l", host="a.test", domain="a.test", url=item.url, outcome="fetched", status=nothing.status)
        assert learned(item, fb) == item  # validators and interval kept


def test_a_report_with_its_body_but_no_page_to_publish_is_judged_by_digest() -> None:
    """The Scrapy add-on keeps a revisit's body (to digest it) while publishing no page."""
    item = msgspec.structs.replace(sub("http://a.test/p", revisit=60), validators={"digest": digest(200, b"same")})
    assert judge(item, FetchResult(status=200, body=b"same", page=False)) == (True, {"digest": digest(200, b"same")})
    assert judge(item, FetchResult(status=200, body=b"new", page=False))[0] is False

"""Sitemaps (issue 25) without a broker: urlsets, indexes, robots.txt Sitemap lines, text and gzip,
the protocol's limits, hostile sitemaps (bombs, external entities, deep chains, other sites' URLs)
bounded and said; the worker's sitemap job against a real local server."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import AsyncIterator

import msgspec
import pytest
from aiohttp import web

from frontier.cli import build_parser
from frontier.client import submission_value
from frontier.config import FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core.kv import MemoryKV
from frontier.core.urls import parse_input
from frontier.partition import PartitionFrontier
from tests.fakes import FakeProducer, message
from tests.test_worker_api import make_job, worker_with
from tests.test_worker_jobs import serving
from topics.schemas import Feedback, Job, Submission, UrlItem
from workers.api import followups, sitemaps
from workers.api.outcome import FetchResult
from workers.api.sitemaps import MAX_URLS, SitemapError, follow_ups, read

HOST = "127.0.0.85"
AT = 1_790_000_000.0


def item(url: str = "http://example.com/sitemap.xml", **fields: object) -> UrlItem:
    return parse_input(json.dumps({"url": url, "sitemap": True, **fields}).encode())


def urlset(*entries: str) -> bytes:
    body = "".join(f"<url>{e}</url>" for e in entries)
    return f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{body}</urlset>'.encode()


def test_a_urlset_gives_its_urls_with_priority_and_a_first_revisit_interval() -> None:
    body = urlset("<loc>http://example.com/new</loc><lastmod>2026-09-15T00:00:00Z</lastmod><priority>1.0</priority>",
                  "<loc>/daily</loc><changefreq>daily</changefreq><priority>0.2</priority>",
                  "<loc>http://www.example.com/plain</loc>")  # fmt: skip
    subs, notes = follow_ups(item(priority=3, revisit=[60, 30 * 86400]), "http://example.com/sitemap.xml", body, AT)
    assert notes == []
    got = {s.url: (s.priority, s.revisit, round(s.revisit_first)) for s in subs}
    age = AT - 1_789_430_400.0  # 2026-09-15
    assert got == {"http://example.com/new": (8, [60.0, 30 * 86400.0], round(age / 2)),
                   "http://example.com/daily": (0, [60.0, 30 * 86400.0], 86400),
                   "http://www.example.com/plain": (3, [60.0, 30 * 86400.0], 0)}  # fmt: skip
    assert not any(s.sitemap for s in subs)
    # the intake starts the adaptive revisit from the hint
    first = parse_input(msgspec.json.encode(subs[1]))
    assert first.revisit == 86400 and (first.revisit_min, first.revisit_max) == (60, 30 * 86400)
    # without a revisit on the sitemap, its URLs are fetched once
    once, _ = follow_ups(item(), "http://example.com/sitemap.xml", body, AT)
    assert all(s.revisit == 0.0 and s.revisit_first == 0 for s in once)


def test_an_index_names_sitemaps_one_level_deeper_up_to_a_bound() -> None:
    index = (
        b'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><sitemap><loc>/s1.xml.gz</loc>'
        b"</sitemap><sitemap><loc>http://example.com/s2.xml</loc><lastmod>2026-01-01</lastmod></sitemap></sitemapindex>"
    )
    subs, _ = follow_ups(item(), "http://example.com/index.xml", index, AT)
    assert [(s.url, s.sitemap, s.sitemap_for, s.sitemap_depth) for s in subs] == [
        ("http://example.com/s1.xml.gz", True, "example.com", 1),
        ("http://example.com/s2.xml", True, "example.com", 1),
    ]
    deep = parse_input(json.dumps({"url": "http://example.com/i.xml", "sitemap": True, "sitemap_depth": 3}).encode())
    with pytest.raises(SitemapError, match="deeper than 3"):
        follow_ups(deep, "http://example.com/i.xml", index, AT)


def test_robots_lines_text_and_gzip_sitemaps() -> None:
    robots = (
        b"User-agent: *\nDisallow: /private\nSitemap: http://example.com/s.xml\nSitemap: http://cdn.other.org/a.xml\n"
    )
    root = item("http://example.com/")
    assert root.url == "http://example.com/robots.txt" and root.sitemap == "example.com"  # a site's sitemaps
    subs, _ = follow_ups(root, root.url, robots, AT)
    assert [(s.url, s.sitemap_for) for s in subs] == [("http://example.com/s.xml", "example.com"),
                                                      ("http://cdn.other.org/a.xml", "example.com")]  # fmt: skip
    text = b"http://example.com/1\n\nhttp://example.com/2\r\n"
    listed = [s.url for s in follow_ups(item(), "http://example.com/s.txt", text, AT)[0]]
    assert listed == ["http://example.com/1", "http://example.com/2"]
    packed = gzip.compress(urlset("<loc>http://example.com/z</loc>"))
    assert [e.url for e in read("http://example.com/s.xml.gz", packed).entries] == ["http://example.com/z"]


def test_the_protocols_limits_are_enforced_and_said() -> None:
    many = urlset(*(f"<loc>http://example.com/{i}</loc>" for i in range(MAX_URLS + 7)))
    got = read("http://example.com/big.xml", many)
    assert len(got.entries) == MAX_URLS and got.notes == [f"{MAX_URLS + 7} URLs, over the protocol's 50,000: "
                                                          "the first 50,000 taken"]  # fmt: skip
    bomb = gzip.compress(b"<urlset>" + b" " * (60 * 2**20) + b"</urlset>")  # 60 MB of blanks in 60 KB
    started = time.monotonic()
    with pytest.raises(SitemapError, match="over 50 MB uncompressed"):
        read("http://example.com/bomb.xml.gz", bomb)
    assert time.monotonic() - started < 10


def test_hostile_sitemaps_end_in_a_clear_error_or_a_bound() -> None:
    laughs = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
              + b"".join(f'<!ENTITY lol{i} "{("&lol%s;" % (i - 1 or "")) * 10}">'.encode() for i in range(1, 10))
              + b']><urlset><url><loc>http://example.com/&lol9;</loc></url></urlset>')  # fmt: skip
    started = time.monotonic()
    with pytest.raises(SitemapError, match="XML unreadable: Maximum entity amplification"):
        read("http://example.com/laughs.xml", laughs)  # refused by the parser, nothing expanded
    assert time.monotonic() - started < 5
    xxe = (
        b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        b"<urlset><url><loc>http://example.com/&x;</loc></url></urlset>"
    )
    assert [e.url for e in read("http://example.com/xxe.xml", xxe).entries] == ["http://example.com/"]  # not read
    with pytest.raises(SitemapError, match="not a sitemap: root element <html>"):
        read("http://example.com/page.xml", b"<html><body>hi</body></html>")
    with pytest.raises(SitemapError, match="unreadable"):
        read("http://example.com/bad.xml", b"<urlset><url><loc>x</loc>")
    listed = urlset(
        "<loc>http://evil.org/x</loc>", "<loc>http://example.com/ok</loc>", "<loc>javascript:alert(1)</loc>"
    )
    others, notes = follow_ups(item(), "http://example.com/s.xml", listed, AT)
    assert [s.url for s in others] == ["http://example.com/ok"]
    assert notes == ["2 URLs left out: not of example.com (or not URLs)"]


def test_the_cli_and_the_client_mark_sitemaps() -> None:
    args = build_parser().parse_args(["submit", "--sitemap", "--revisit", "adaptive", "http://example.com/"])
    assert args.sitemap and args.revisit == "adaptive"
    line = submission_value(b"http://example.com/", sitemap=True, revisit="adaptive")
    assert json.loads(line) == {"url": "http://example.com/", "revisit": "adaptive", "sitemap": True}
    assert sitemaps.MAX_DEPTH == 3


# -- the worker's sitemap job against a real server --------------------------------------------------
@pytest.fixture
async def site() -> AsyncIterator[str]:
    async def answer(request: web.Request) -> web.Response:
        base = f"http://{request.host}"
        if request.path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nSitemap: {base}/index.xml\n")
        if request.path == "/index.xml":
            return web.Response(body=b"<sitemapindex><sitemap><loc>/s.xml.gz</loc></sitemap></sitemapindex>",
                                content_type="application/xml")  # fmt: skip
        if request.path == "/s.xml.gz":
            return web.Response(body=gzip.compress(urlset(f"<loc>{base}/a</loc>", f"<loc>{base}/b</loc>")),
                                content_type="application/gzip")  # fmt: skip
        return web.Response(body=b"<html>not a sitemap</html>", content_type="text/html")

    async with serving(answer, HOST) as base:
        yield base


async def test_a_sitemap_job_submits_what_it_lists_and_a_bad_one_is_an_error_page(site: str) -> None:
    producer = FakeProducer()
    worker = worker_with(None, producer)
    for n, path in enumerate(["/robots.txt", "/index.xml", "/s.xml.gz", "/page"]):
        it = msgspec.structs.replace(item(site + path, sitemap_depth=n if path != "/page" else 0), host=HOST,
                                     domain=HOST, sitemap=HOST)  # fmt: skip
        job = msgspec.structs.replace(make_job(it.url, lease=path), item=it)
        await worker.jobs.handle(message(job, n))  # type: ignore[arg-type]
    await worker.jobs.reporter.publisher.settled()
    await worker.fetcher.close()
    await worker.builtin.close()
    subs = [(s.url.removeprefix(site), s.sitemap) for s in producer.submissions()]
    assert subs == [("/index.xml", True), ("/s.xml.gz", True), ("/a", False), ("/b", False)]
    pages = {p.url.removeprefix(site): (p.outcome, p.error) for p in producer.pages()}
    assert pages["/s.xml.gz"] == ("fetched", "")
    assert pages["/page"] == ("error", "sitemap: not a sitemap: root element <html>")
    outcomes = {fb.lease: fb.outcome for fb in producer.feedback()}
    assert outcomes == {"/robots.txt": "fetched", "/index.xml": "fetched", "/s.xml.gz": "fetched", "/page": "error"}


def test_review_findings_bom_utf16_text_lines_bad_dates_redirects_and_other_sites_indexes() -> None:
    """Found by review: a BOM before the XML read it as a text sitemap (junk URLs); a text body
    that is no sitemap submitted its lines as relative URLs; one bad <lastmod> failed the whole
    sitemap; a sitemap that redirects lost its flag; an index named other sites' sitemaps."""
    from workers.api.followups import follow_ups as page_follow_ups
    from workers.api.outcome import FetchResult

    xml = urlset("<loc>http://example.com/a</loc><lastmod>2024-13</lastmod>")
    assert [(e.url, e.lastmod) for e in read("http://example.com/s.xml", b"\xef\xbb\xbf" + xml).entries] == [
        ("http://example.com/a", None)]  # fmt: skip
    utf16 = ('<?xml version="1.0" encoding="UTF-16"?>' + xml.decode()).encode("utf-16")
    assert [e.url for e in read("http://example.com/s.xml", utf16).entries] == ["http://example.com/a"]
    junk = read("http://example.com/s.txt", b"Not Found\nhttp://example.com/b\n")
    assert [e.url for e in junk.entries] == ["http://example.com/b"]
    assert junk.notes == ["1 lines left out: not absolute http(s) URLs"]
    moved = page_follow_ups(item("http://example.com/sitemap.xml", sitemap_depth=1),
                            FetchResult(status=301, headers={"location": "https://www.example.com/sitemap.xml"}),
                            5, "bot")  # fmt: skip
    assert [(s.url, s.sitemap, s.sitemap_for, s.sitemap_depth) for s in moved] == [
        ("https://www.example.com/sitemap.xml", True, "example.com", 1)]  # fmt: skip
    index = b"<sitemapindex><sitemap><loc>http://victim.org/s.xml</loc></sitemap><sitemap><loc>/own.xml</loc>" \
            b"</sitemap></sitemapindex>"  # fmt: skip
    subs, notes = follow_ups(item(), "http://example.com/index.xml", index, AT)
    assert [s.url for s in subs] == ["http://example.com/own.xml"] and notes == [
        "1 sitemaps left out: not of example.com"
    ]
    assert item("http://example.com/?").url == "http://example.com/robots.txt"


# -- a site's sitemaps found in its robots.txt (discover_sitemaps) ----------------------------------
ROBOTS = (b"User-agent: *\nDisallow: /private\nSitemap: http://shop.test/a.xml\nSitemap: /relative.xml\n"
          b"Sitemap: http://cdn.other.test/shop.xml\nSitemap: http://shop.test/a.xml\n")  # fmt: skip


def page(url: str, **fields: object) -> UrlItem:
    return parse_input(json.dumps({"url": url, **fields}).encode())


def _frontier(obey: bool) -> PartitionFrontier:
    settings = FrontierConfig(max_retries=1, robots_obey=obey, dispatch_lead=0.0)
    return PartitionFrontier(0, MemoryKV(), settings, ThrottleConfig(ScopeSettings(delay=1.0), {}), lambda k, v: None)


def _robots_fed(f: PartitionFrontier, job: Job, now: float, body: bytes = ROBOTS) -> None:
    i = job.item
    assert job.kind == "robots"
    f.feedback(Feedback(lease=job.lease, host=i.host, domain=i.domain, url=i.url, outcome="fetched", status=200,
                        latency=0.05, sent_at=now, body=body), now)  # fmt: skip


def _run(
    f: PartitionFrontier, start: float, seconds: float, robots: bytes = ROBOTS
) -> tuple[list[str], list[Submission]]:
    """Dispatch every 0.5 s, each job answered at once; the URLs fetched and what was submitted."""
    fetched: list[str] = []
    submitted: list[Submission] = []
    for step in range(int(seconds * 2)):
        now = start + step / 2
        out = f.dispatch(now)
        submitted += out.submissions
        for job in out.jobs:
            if job.kind == "robots":
                _robots_fed(f, job, now, robots)
                continue
            i = job.item
            fetched.append(i.url)
            f.feedback(Feedback(lease=job.lease, host=i.host, domain=i.domain, url=i.url, outcome="fetched",
                                status=200, latency=0.05, sent_at=now), now)  # fmt: skip
    return fetched, submitted


def test_a_sites_robots_sitemaps_are_submitted_once_per_crawl_and_copy_from_the_stored_robots() -> None:
    f = _frontier(obey=True)
    given = dict(revisit="adaptive", follow=2, priority=3, meta={"tag": "x"})
    f.ingest([page("http://shop.test/", discover_sitemaps=True, **given), page("http://shop.test/b")], 0.0)
    fetched, submitted = _run(f, 0.0, 1.0)
    # the stored copy is read: absolute http(s) lines, each once, another site's too (cross-submission)
    assert [s.url for s in submitted] == ["http://shop.test/a.xml", "http://cdn.other.test/shop.xml"]
    for s in submitted:
        assert (s.sitemap, s.sitemap_for, s.sitemap_depth, s.crawl) == (True, "shop.test", 1, "default")
        assert (s.revisit, s.follow, s.priority, s.meta) == ([3600.0, 2_592_000.0], 2, 3, {"tag": "x"})
        assert parse_input(msgspec.json.encode(s)).sitemap == "shop.test"  # intake takes it as a sitemap job
    assert f.stats.sitemaps_found == 2
    # a later URL asking the same, in the same crawl: nothing again; another crawl: its own
    f.ingest([page("http://shop.test/c", discover_sitemaps=True),
              page("http://shop.test/d", discover_sitemaps=True, crawl="books")], 2.0)  # fmt: skip
    more, submitted = _run(f, 1.0, 20.0)
    assert sorted(fetched + more) == [f"http://shop.test/{p}" for p in ("", "b", "c", "d")]
    assert [(s.url, s.crawl) for s in submitted] == [("http://shop.test/a.xml", "books"),
                                                     ("http://cdn.other.test/shop.xml", "books")]  # fmt: skip
    # robots.txt fetched again (its TTL passed): the new copy is read again (intake's seen set drops
    # the sitemaps already crawled)
    later = f.settings.robots_ttl + 10.0
    f.ingest([page("http://shop.test/e", discover_sitemaps=True)], later)
    fetched, submitted = _run(f, later, 10.0, ROBOTS + b"Sitemap: http://shop.test/new.xml\n")
    assert "http://shop.test/e" in fetched  # (with the root's revisit, due by now)
    assert [s.url for s in submitted] == ["http://shop.test/a.xml", "http://cdn.other.test/shop.xml",
                                          "http://shop.test/new.xml"]  # fmt: skip


def test_without_robots_obeyed_the_robots_txt_itself_is_submitted_as_a_sitemap() -> None:
    f = _frontier(obey=False)
    f.ingest([page("http://shop.test/x", discover_sitemaps=True), page("http://shop.test/y", discover_sitemaps=True)],
             0.0)  # fmt: skip
    fetched, subs = _run(f, 0.0, 10.0)
    assert fetched == ["http://shop.test/x", "http://shop.test/y"]
    assert [(s.url, s.sitemap, s.sitemap_depth) for s in subs] == [("http://shop.test/robots.txt", True, 0)]
    assert parse_input(msgspec.json.encode(subs[0])).url == "http://shop.test/robots.txt"


def test_discover_sitemaps_passes_on_to_redirects_and_links_and_the_cli_sets_it() -> None:
    root = page("http://shop.test/", discover_sitemaps=True, follow=1)
    moved = FetchResult(status=301, headers={"location": "https://www.shop.test/"})
    [target] = followups.follow_ups(root, moved, 5, "bot")
    assert target.discover_sitemaps and target.url == "https://www.shop.test/"
    html = FetchResult(status=200, headers={"content-type": "text/html"}, body=b'<a href="/next">n</a>')
    [link] = followups.follow_ups(root, html, 5, "bot")
    assert link.discover_sitemaps and link.url == "http://shop.test/next"
    args = build_parser().parse_args(["submit", "--discover-sitemaps", "http://shop.test/"])
    assert args.discover_sitemaps
    value = json.loads(submission_value(b"http://shop.test/", discover_sitemaps=True))
    assert value == {"url": "http://shop.test/", "discover_sitemaps": True}

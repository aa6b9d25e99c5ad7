"""Scrapy's own spider classes work unchanged through the frontier add-on (issue 36), on the real
broker, judged from the local sites' own request logs and the items:

- a ``CrawlSpider`` with rules (the example project's ``rules`` spider: ``Rule``/``LinkExtractor``,
  ``follow``, ``process_links``, ``cb_kwargs``, an errback; lxml's link text in its requests' meta)
  run as two ``scrapy crawl rules`` processes of one crawl against the bookshop sites that enforce
  limits they never tell, one process killed by SIGKILL mid-crawl: every book is an item, no page is
  answered 200 twice (but for the narrow allowances said in :func:`refetches`), politeness holds,
  the survivor closes by itself with ``finished``;
- a ``SitemapSpider`` (``sitemap_rules``, ``sitemap_follow`` leaving one urlset of the index out), an
  ``XMLFeedSpider`` (an item per node, a request per node's link to a callback) and a
  ``CSVFeedSpider`` each crawl a local site: exactly the expected URLs are requested, once each, and
  every callback ran;
- a request whose meta (or ``cb_kwargs``) JSON cannot carry is refused where it is yielded (log line
  naming the key, stat ``frontier/unencodable``) and the crawl goes on; lxml's text in meta goes as a
  ``str``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from aiohttp import web

from frontier.demo.sites import Hit, Site
from frontier.demo.stack import Stack, wait_until
from tests.integration import feed_sites
from tests.integration.bookshop_sites import BookshopFleet
from tests.integration.feed_sites import FeedSite
from tests.integration.test_scrapy import limits, politeness

REPO = Path(__file__).resolve().parents[2]
PROJECT = REPO / "workers" / "examples" / "scrapy_books"
SPIDERS = Path(__file__).resolve().parent / "scrapy_spider_classes.py"
TAGGER = f"{SPIDERS.stem}.TagProcess"  # imported from SPIDERS' directory (on the processes' path)

# -- a CrawlSpider with rules, two processes, one killed ----------------------------------------------

PROCESSES = 2
CATALOGUE_PAGES = 5
KILL_AFTER = 10  # items of one process before it is killed
# a lease lasts at most job_ttl + fetch_timeout + lease_grace (defaults: 30 + 20 + 10 s) from its dispatch
LEASE = 60.0
CONCURRENT = 16  # the example project's CONCURRENT_REQUESTS: the jobs a process holds at once
ROOT = "/catalogue/page-1.html"
TEXTLESS = "/catalogue/book-1-9.html"  # a book link without text: the rule's process_links drops it
MISSING = "/catalogue/book-404-0.html"  # a book link on the latency site's first page that answers 404


class RulesShop(BookshopFleet):
    """The bookshop sites, on 127.0.0.20+, whose first catalogue page also links a book with no link
    text (never to be requested) and, on the latency site, a book that answers 404 (its errback runs).
    Each request's ``X-Spider`` header (the process that sent it) is kept by hit."""

    def __init__(self) -> None:
        super().__init__(limits(), pages=CATALOGUE_PAGES, first_octet=20)
        self.tags: dict[int, str] = {}

    def tag(self, hit: Hit) -> str:
        return self.tags.get(id(hit), "")

    def html(self, request: web.Request, private: bool = False) -> str:
        page = super().html(request, private)
        if request.path == ROOT:
            extra = f'<a class="book" href="{TEXTLESS}"><img src="/cover.png"></a>'
            if request.host.rsplit(":", 1)[0] == self.by_kind("latency")[0].host:
                extra += f'<a class="book" href="{MISSING}">missing book</a>'
            page = page.replace("</body>", f"{extra}</body>")
        return page

    async def respond(self, site: Site, request: web.Request, hit: Hit) -> web.Response:
        self.tags[id(hit)] = request.headers.get("X-Spider", "")
        if request.path == MISSING:
            await asyncio.sleep(site.latency)
            return web.Response(status=404, text="no such book")
        return await super().respond(site, request, hit)


class RulesSpiders:
    """``scrapy crawl rules`` processes of the example project, each with its items file and log, each
    download tagged with the process's name."""

    def __init__(self, stack: Stack, fleet: RulesShop, workdir: Path) -> None:
        self.stack, self.fleet, self.workdir = stack, fleet, workdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.starts = ",".join(fleet.start_url(h) for h in fleet.limits)

    def start(self, name: str) -> None:
        cmd = [sys.executable, "-m", "scrapy", "crawl", "rules", "-a", f"start_urls={self.starts}",
               "-s", f"BOOKSHOP_ITEMS={self.workdir / f'{name}.jsonl'}",
               "-s", f"DOWNLOADER_MIDDLEWARES={json.dumps({TAGGER: 50})}",
               "-s", f"CRAWL_FRONTIER_CONFIG={self.stack.config_path}", "-s", "LOG_LEVEL=INFO"]  # fmt: skip
        path = [str(PROJECT), os.environ.get("PYTHONPATH", ""), str(SPIDERS.parent)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p), "SPIDER_TAG": name}
        with open(self.workdir / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(cmd, cwd=PROJECT, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                start_new_session=True)  # fmt: skip

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def items(self, name: str) -> list[dict[str, Any]]:
        path = self.workdir / f"{name}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        out: list[dict[str, Any]] = []
        for i, line in enumerate(lines):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                if i < len(lines) - 1 or self.procs[name].poll() is None:
                    raise  # only the last line of a killed process may be cut short
        return out

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


def refetches(fleet: RulesShop, killed: str, kill_at: float) -> tuple[list[str], list[str]]:
    """(pages answered 200 more often than allowed, pages fetched again because of the kill).

    A page is answered 200 once, with two narrow allowances:
    - a root (``ROOT``) once per process: a stock spider's ``start_urls`` requests are
      ``dont_filter`` (Scrapy's default ``start()``), a recrawl, queued again if the first fetch of
      the root was already reported when another process's start requests came in;
    - once more when its first fetch was the killed process's, in flight at the kill: fetched by it
      less than a lease before the kill (or on its way as it was killed), and again only by another
      process after the kill (the job comes back when its lease expires)."""
    over: list[str] = []
    again: list[str] = []

    def told(hits: list[Hit]) -> str:  # each fetch: seconds from the kill, the process
        return str([(round(h.start - kill_at, 2), fleet.tag(h)) for h in hits])

    for host in fleet.limits:
        by_path: dict[str, list[Hit]] = defaultdict(list)
        for h in fleet.site(host).hits:
            if h.status == 200 and h.path != "/robots.txt":
                by_path[h.path].append(h)
        for path, hits in by_path.items():
            if len(hits) == 1:
                continue
            hits.sort(key=lambda h: h.start)
            allowed = PROCESSES if path == ROOT else 1
            in_flight = any(fleet.tag(h) == killed and kill_at - LEASE <= h.start <= kill_at + 1.0 for h in hits)
            if in_flight and any(fleet.tag(h) != killed and h.start > kill_at for h in hits):
                allowed += 1
                again.append(f"{host}{path} {told(hits)}")
            if len(hits) > allowed:
                over.append(f"{host}{path} {told(hits)}")
    return over, again


def test_a_crawlspider_with_rules_in_two_processes_one_killed_loses_nothing(bootstrap: str, tmp_path: Path) -> None:
    fleet = RulesShop()
    fleet.start()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4)
    spiders = RulesSpiders(stack, fleet, tmp_path)
    names = [f"spider{i}" for i in range(PROCESSES)]
    try:
        stack.create_topics()
        stack.start_frontier()
        for name in names:
            spiders.start(name)
        victim: list[str] = []

        def one_has_items() -> bool:
            stack.check_alive()
            for name in names:
                assert spiders.procs[name].poll() is None, f"{name} ended:\n{spiders.log(name)[-3000:]}"
                if len(spiders.items(name)) >= KILL_AFTER:
                    victim.append(name)
                    return True
            return False

        # before 11cb6b4, no request a rule made could be published (lxml's link text in meta): no items
        wait_until(one_has_items, timeout=150, interval=0.2, what=f"{KILL_AFTER} items in one process")
        killed = victim[0]
        (survivor,) = [n for n in names if n != killed]
        kill_at = time.time()
        os.killpg(spiders.procs[killed].pid, signal.SIGKILL)

        def survivor_done() -> bool:
            stack.check_alive()
            return spiders.procs[survivor].poll() is not None

        wait_until(survivor_done, timeout=240, interval=0.5, what="the surviving spider to close by itself")
        spiders.procs[killed].wait(10)
    finally:
        spiders.stop_all()
        stack.stop_all()
        fleet.stop()
    log = spiders.log(survivor)
    code = spiders.procs[survivor].returncode
    assert code == 0, f"{survivor} exited with {code}:\n{log[-3000:]}"
    assert "'finish_reason': 'finished'" in log, log[-3000:]
    assert spiders.procs[killed].returncode == -signal.SIGKILL
    logs = {name: spiders.log(name) for name in names}
    for text in logs.values():
        assert "cannot be sent to the frontier" not in text and "frontier/unencodable" not in text, text[-3000:]
        assert "its Scrapy request is not made" not in text, text[-3000:]  # every job's request rebuilt
    # every book an item, with what the rules gave it: lxml's link text (meta) and the rule's cb_kwargs
    items = {name: spiders.items(name) for name in names}
    every = items[killed] + items[survivor]
    expected = set().union(*(fleet.expected_books(h) for h in fleet.limits))
    got = {i["url"] for i in every}
    assert got == expected, f"missing {sorted(expected - got)[:5]}, unexpected {sorted(got - expected)[:5]}"
    for item in every:
        n_k = re.search(r"book-(\d+-\d+)\.html$", item["url"]).group(1)  # type: ignore[union-attr]
        want = {"title": f"Book {n_k}", "listing": f"book {n_k}", "shelf": "books"}
        assert {k: item[k] for k in want} == want and item["price"], item
    twice = [u for u, n in Counter(i["url"] for i in items[survivor]).items() if n > 1]
    assert not twice, f"books parsed twice in {survivor}: {twice[:5]}"
    # no page answered 200 twice, but as refetches() allows (each fetch's process told by its header)
    untagged = [h.path for s in fleet.sites for h in s.hits if h.path != "/robots.txt" and fleet.tag(h) not in names]
    assert not untagged, untagged[:5]
    over, again = refetches(fleet, killed, kill_at)
    assert not over, f"pages answered 200 more often than allowed: {over[:5]}"
    assert len(again) <= CONCURRENT, again
    parsed_twice = {u for u, n in Counter(i["url"] for i in every).items() if n > 1}
    refetched = {a.split(" ", 1)[0] for a in again}
    assert {u.split("//", 1)[1].replace(f":{fleet.port}", "") for u in parsed_twice} <= refetched, parsed_twice
    assert not politeness(fleet), politeness(fleet)
    pages_after = [h for s in fleet.sites for h in s.hits if h.start > kill_at and h.path != "/robots.txt"]
    assert len(pages_after) >= KILL_AFTER, "the kill was not mid-crawl"
    # process_links left the textless link out; the 404's errback ran (in whichever process parsed it)
    dropped = [h for s in fleet.sites for h in s.hits if h.path == TEXTLESS]
    assert not dropped, "a link the rule's process_links dropped was requested"
    latency = fleet.by_kind("latency")[0]
    assert [h.status for h in latency.hits if h.path == MISSING][:1] == [404], latency.hits
    assert any("book not fetched: HttpError" in text for text in logs.values()), "the rule's errback did not run"
    root_fetches = {h: sum(x.path == ROOT and x.status == 200 for x in fleet.site(h).hits) for h in fleet.limits}
    roots = {h: n for h, n in root_fetches.items() if n > 1}
    print(f"killed {killed} at {KILL_AFTER} items ({len(items[survivor])} items in {survivor}); fetched again after "
          f"the kill: {again}; roots answered 200 more than once: {roots}")  # fmt: skip


# -- SitemapSpider, XMLFeedSpider, CSVFeedSpider; unencodable meta -----------------------------------


Items = list[dict[str, Any]]


def run_spider(bootstrap: str, tmp_path: Path, spider: str, first_octet: int) -> tuple[FeedSite, str, Items]:
    """``scrapy runspider`` of one of :mod:`scrapy_spider_classes`' spiders against its own
    :class:`FeedSite`: (the site, the spider's log, its items). The spider exits 0, ``finished``."""
    site = FeedSite(first_octet)
    site.start()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=2)
    out, log_path = tmp_path / "items.jsonl", tmp_path / "spider.log"
    proc = None
    try:
        stack.create_topics()
        stack.start_frontier()
        env = {**os.environ, "FEED_BASE": site.base, "SPIDER_CLASS": spider}
        cmd = [sys.executable, "-m", "scrapy", "runspider", str(SPIDERS), "-O", str(out), "-s",
               f"CRAWL_FRONTIER_CONFIG={stack.config_path}", "-s", "LOG_LEVEL=INFO"]  # fmt: skip
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log_file, stderr=subprocess.STDOUT)

        def ended(running: subprocess.Popen[bytes] = proc) -> bool:
            stack.check_alive()
            return running.poll() is not None

        try:  # a few seconds when it works (a job that comes back forever would keep it open)
            wait_until(ended, timeout=150, interval=0.2, what=f"the {spider} spider to close by itself")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}:\n{log_path.read_text(errors='replace')[-3000:]}") from None
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        stack.stop_all()
        site.stop()
    log = log_path.read_text(errors="replace")
    assert proc is not None and proc.returncode == 0, log[-3000:]
    assert "'finish_reason': 'finished'" in log, log[-3000:]
    assert f"crawl {spider!r} on the frontier" in log, log[-3000:]  # the spider asked for, on the frontier
    items = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return site, log, items


def by_callback(items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        out[item["callback"]].append(item)
    return out


def no_errors(log: str) -> None:
    errors = [line for line in log.splitlines() if "] ERROR:" in line]
    assert not errors, errors[:5]


def test_a_sitemap_spider_follows_its_rules_and_only_the_sitemaps_it_follows(bootstrap: str, tmp_path: Path) -> None:
    site, log, items = run_spider(bootstrap, tmp_path, "sitemap", first_octet=233)
    no_errors(log)
    books = [f"/books/{n}" for n in range(1, feed_sites.BOOKS + 1)]
    authors = [f"/authors/{n}" for n in range(1, feed_sites.AUTHORS + 1)]
    # the index, the urlset sitemap_follow keeps, the URLs sitemap_rules match: once each (not the news
    # urlset nor its pages, not /about, which no rule matches)
    assert sorted(site.requested()) == sorted(["/sitemap_index.xml", "/sitemap-books.xml", *books, *authors])
    got = by_callback(items)
    assert set(got) == {"parse_book", "parse_author"}, items
    assert sorted(i["url"] for i in got["parse_book"]) == [site.base + p for p in books]
    assert sorted(i["url"] for i in got["parse_author"]) == [site.base + p for p in authors]
    assert all(i["heading"] == f"{i['url'].split('/')[-2][:-1].title()} {i['url'].split('/')[-1]}" for i in items)


def test_an_xml_feed_spider_yields_an_item_per_node_and_follows_each_nodes_link(bootstrap: str, tmp_path: Path) -> None:
    site, log, items = run_spider(bootstrap, tmp_path, "xmlfeed", first_octet=234)
    no_errors(log)
    articles = [f"/articles/{n}" for n in range(1, feed_sites.ARTICLES + 1)]
    assert sorted(site.requested()) == sorted(["/feed.xml", *articles])
    got = by_callback(items)
    assert set(got) == {"parse_node", "parse_article"}, items
    titles = [f"Article {n}" for n in range(1, feed_sites.ARTICLES + 1)]
    assert sorted(i["title"] for i in got["parse_node"]) == titles
    assert all(i["url"] == f"{site.base}/feed.xml" for i in got["parse_node"])
    # each node's request reached its callback with the node's title (cb_kwargs) at the node's link
    assert sorted((i["url"], i["title"], i["heading"]) for i in got["parse_article"]) == [
        (site.base + p, t, t) for p, t in zip(articles, titles, strict=True)
    ]


def test_a_csv_feed_spider_yields_an_item_per_row_and_follows_each_rows_url(bootstrap: str, tmp_path: Path) -> None:
    site, log, items = run_spider(bootstrap, tmp_path, "csvfeed", first_octet=235)
    no_errors(log)
    products = [f"/products/{n}" for n in range(1, feed_sites.PRODUCTS + 1)]
    assert sorted(site.requested()) == sorted(["/feed.csv", *products])
    got = by_callback(items)
    assert set(got) == {"parse_row", "parse_product"}, items
    names = [f"Product, no. {n}" for n in range(1, feed_sites.PRODUCTS + 1)]
    assert sorted((i["id"], i["name"]) for i in got["parse_row"]) == [(str(n), names[n - 1]) for n in range(1, 4)]
    assert sorted((i["url"], i["name"], i["heading"]) for i in got["parse_product"]) == [
        (site.base + p, name, f"Product {n}") for n, (p, name) in enumerate(zip(products, names, strict=True), 1)
    ]


def test_unencodable_meta_is_refused_at_yield_and_lxml_text_goes_as_a_str(bootstrap: str, tmp_path: Path) -> None:
    site, log, items = run_spider(bootstrap, tmp_path, "meta", first_octet=236)
    b = site.base
    for url, what, key in ((f"{b}/articles/2", "meta", "bad"), (f"{b}/articles/3", "meta", "when"),
                           (f"{b}/products/1", "cb_kwargs", "at")):  # fmt: skip
        assert f"request {url}: {what} key {key!r} cannot be sent to the frontier" in log, log[-3000:]
    assert "'frontier/unencodable': 3" in log, log[-3000:]
    # nothing refused was requested; the crawl went on past each refusal (the request after it)
    assert sorted(site.requested()) == ["/articles/1", "/products/2"]
    got = by_callback(items)
    assert [i["type"] for i in got["parse"]] == ["_ElementUnicodeResult"]  # what the spider yielded in meta
    want = {"callback": "parse_text", "url": f"{b}/products/2", "text": "Article 1", "type": "str",
            "texts": ["Article 1"], "types": ["str"]}  # fmt: skip
    assert got["parse_text"] == [want]

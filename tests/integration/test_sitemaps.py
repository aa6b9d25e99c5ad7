"""Sitemaps end to end (issue 25): ``crawl-frontier submit --sitemap`` with a site's root reads its
robots.txt's Sitemap lines; an index, a gzip sitemap and a text sitemap lead to every listed page,
each fetched once, politely (the sitemaps are throttled jobs of their host like any page). Hostile
sitemaps on the same site end in error pages with their reason and a bound: a gzip bomb, an
endless index chain, an XML bomb, another site's URLs (never requested). Judged from the sites'
logs and crawl.pages."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

from aiohttp import web

from frontier.demo.sites import Hit, Site, SiteFleet
from frontier.demo.stack import Stack
from tests.integration.helpers import crawling, politeness_failures

PAGES = 30


class SitemapSites(SiteFleet):
    """Site 0: robots.txt names /index.xml (good sitemaps) and /hostile.xml (an index of bad
    ones); site 1: another site, whose URLs site 0's sitemap lists (they must not be fetched)."""

    async def respond(self, site: Site, request: web.Request, hit: Hit) -> web.Response:
        me = f"http://{site.host}:{self.port}"
        other = f"http://{self.sites[1].host}:{self.port}"
        path = request.path
        xml = "application/xml"
        if site is self.sites[1]:
            return web.Response(text="other site", content_type="text/html")
        if path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nDisallow: /private\nSitemap: {me}/index.xml\n"
                                     f"Sitemap: {me}/hostile.xml\n")  # fmt: skip
        if path == "/index.xml":
            return web.Response(body=_index(f"{me}/a.xml.gz", f"{me}/b.txt"), content_type=xml)
        if path == "/a.xml.gz":
            urls = [f"{me}/page/{i}" for i in range(PAGES // 2)] + [f"{other}/stolen"]
            return web.Response(body=gzip.compress(_urlset(urls)), content_type="application/gzip")
        if path == "/b.txt":
            return web.Response(text="\n".join(f"{me}/page/{i}" for i in range(PAGES // 2, PAGES)))
        if path == "/hostile.xml":
            return web.Response(body=_index(f"{me}/bomb.xml.gz", f"{me}/chain/1", f"{me}/laughs.xml"), content_type=xml)
        if path == "/bomb.xml.gz":
            return web.Response(body=gzip.compress(b"<urlset>" + b" " * (60 * 2**20)), content_type="application/gzip")
        if path.startswith("/chain/"):
            n = int(path.rsplit("/", 1)[1])
            return web.Response(body=_index(f"{me}/chain/{n + 1}"), content_type=xml)
        if path == "/laughs.xml":
            entities = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))
            return web.Response(body=f'<!DOCTYPE u [<!ENTITY l0 "lol">{entities}]><urlset><url><loc>{me}/&l9;'
                                     "</loc></url></urlset>".encode(), content_type=xml)  # fmt: skip
        if path.startswith("/page/"):
            return web.Response(text=f"<html>{path}</html>", content_type="text/html")
        return web.Response(status=404)


def _index(*locs: str) -> bytes:
    return ("<sitemapindex>" + "".join(f"<sitemap><loc>{u}</loc></sitemap>" for u in locs) + "</sitemapindex>").encode()


def _urlset(urls: list[str]) -> bytes:
    return ("<urlset>" + "".join(f"<url><loc>{u}</loc><priority>0.8</priority></url>" for u in urls)
            + "</urlset>").encode()  # fmt: skip


SITEMAPS = ["/robots.txt", "/index.xml", "/a.xml.gz", "/b.txt", "/hostile.xml", "/bomb.xml.gz", "/laughs.xml",
            "/chain/1", "/chain/2"]  # robots.txt, depth 0 ... /chain/2, depth 3: the bound  # fmt: skip


def _crawl(bootstrap: str, tmp_path: Path, submit: list[str], wanted_paths: list[str]) -> SitemapSites:
    """Submit with the CLI; wait for a page of every sitemap and listed page; judge them, each once,
    politely, and the hostile sitemaps' clear errors."""
    fleet = SitemapSites(2, first_octet=226).start()
    me = f"http://{fleet.sites[0].host}:{fleet.port}"
    stack = Stack(bootstrap, tmp_path / "stack", partitions=2,
                  throttle={"delay": 0.2, "autothrottle": {"start_delay": 0}})  # fmt: skip
    with crawling(stack, fleet, concurrency=4, urls=[]) as pages:
        cli = [sys.executable, "-m", "frontier.cli", "--config", str(stack.config_path)]
        run = subprocess.run([*cli, "submit", *(a.replace("{me}", me) for a in submit)], capture_output=True,
                             text=True, timeout=60, check=False)  # fmt: skip
        assert run.returncode == 0, run.stderr
        wanted = {me + p for p in wanted_paths} | {f"{me}/page/{i}" for i in range(PAGES)}
        pages.wait_for(len(wanted), timeout=120, what="every sitemap and every page it lists")
        pages.settle()
        got = {p.url: p for p in pages.records}
        assert set(got) == wanted, sorted(set(got) ^ wanted)
        assert sorted(pages.urls) == sorted(wanted), "each once"
        assert all(got[f"{me}/page/{i}"].status == 200 for i in range(PAGES))
        errors = {u.removeprefix(me): (p.outcome, p.error) for u, p in got.items() if p.outcome != "fetched" or p.error}
        assert errors == {
            "/a.xml.gz": ("fetched", f"sitemap: 1 URLs left out: not of {fleet.sites[0].host} (or not URLs)"),
            "/bomb.xml.gz": ("error", "sitemap: over 50 MB uncompressed (gzip inflated no further)"),
            "/laughs.xml": ("error", errors.get("/laughs.xml", ("", ""))[1]),
            "/chain/2": ("error", "sitemap: index chain deeper than 3: 1 sitemaps not followed"),
        }, errors
        assert errors["/laughs.xml"][0] == "error" and "XML unreadable" in errors["/laughs.xml"][1]
        assert not fleet.sites[1].hits, "another site's URL listed in a sitemap was requested"
        requested = [h.path for h in fleet.sites[0].hits]
        assert requested.count("/page/0") == 1 and "/chain/3" not in requested
        assert not politeness_failures(fleet, 0.2, 1)
    return fleet


def test_a_sites_sitemaps_lead_to_its_pages_and_hostile_ones_end_in_clear_errors(
    bootstrap: str, tmp_path: Path
) -> None:
    """``submit --sitemap`` of a site's root: its robots.txt is read as a sitemap job (a page)."""
    _crawl(bootstrap, tmp_path, ["--sitemap", "{me}/"], SITEMAPS)


def test_a_page_given_with_discover_sitemaps_leads_to_its_sites_sitemaps_from_the_robots_txt_kept(
    bootstrap: str, tmp_path: Path
) -> None:
    """``submit --discover-sitemaps`` of one page: the Sitemap lines are read from the robots.txt the
    frontier fetched for politeness; robots.txt is requested once, and is no page of its own."""
    fleet = _crawl(bootstrap, tmp_path, ["--discover-sitemaps", "{me}/page/0"], SITEMAPS[1:])
    assert [h.path for h in fleet.sites[0].hits].count("/robots.txt") == 1

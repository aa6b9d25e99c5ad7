"""Redirects go back through the frontier as new URLs (so they are throttled too): an endless
chain stops after ``max_redirects`` hops and a loop is fetched once per URL (the seen-set)."""

from pathlib import Path

from aiohttp import web

from frontier.demo.sites import Hit, Site, SiteFleet
from frontier.demo.stack import Stack
from tests.integration.helpers import crawling, politeness_failures


class RedirectSite(SiteFleet):
    async def respond(self, site: Site, request: web.Request, hit: Hit) -> web.Response:
        path = request.path
        if path.startswith("/chain/"):
            return web.Response(status=302, headers={"Location": f"/chain/{int(path.rsplit('/', 1)[1]) + 1}"})
        if path == "/loop/a":
            return web.Response(status=301, headers={"Location": "/loop/b"})
        if path == "/loop/b":
            return web.Response(status=301, headers={"Location": f"http://{site.host}:{self.port}/loop/a"})
        return web.Response(status=404)


def test_redirect_chains_end_and_loops_are_fetched_once(bootstrap: str, tmp_path: Path) -> None:
    fleet = RedirectSite(1, first_octet=99).start()
    base = f"http://{fleet.sites[0].host}:{fleet.port}"
    stack = Stack(bootstrap, tmp_path / "stack", partitions=2,
                  throttle={"delay": 0.1, "autothrottle": {"start_delay": 0}})  # fmt: skip
    with crawling(stack, fleet, concurrency=8, urls=[f"{base}/chain/0", f"{base}/loop/a"]) as pages:
        expected = {f"{base}/chain/{i}" for i in range(6)} | {f"{base}/loop/a", f"{base}/loop/b"}
        pages.wait_for(len(expected), timeout=60, what="the redirect targets")
        pages.settle()
        assert sorted(pages.urls) == sorted(expected), "chain cut after 5 hops, each loop URL once"
        requested = [h.path for h in fleet.sites[0].hits if h.path != "/robots.txt"]
        assert sorted(requested) == sorted(u.removeprefix(base) for u in expected)
        assert not politeness_failures(fleet, 0.1, 1)

"""Revisits that learn (issue 25), end to end through Kafka: conditional requests from the
validators the frontier kept, unchanged pages published without their body, adaptive intervals
that grow for a page that does not change and shrink for one that does, the first interval from a
page's Last-Modified, and a revisit inherited by the links a page leads to. Judged from the site's
own log of every request (its headers) and from crawl.pages."""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from statistics import median

from aiohttp import web

from frontier.demo.sites import Hit, Site, SiteFleet
from frontier.demo.stack import Stack, wait_until
from tests.integration.helpers import crawling, politeness_failures

BOUNDS = [1.0, 8.0]  # the adaptive revisit's bounds: it starts at 8 ** 0.25 = 1.7 s


@dataclass
class Asked:
    path: str
    at: float
    if_none_match: str
    status: int


class ChangingSite(SiteFleet):
    """/static: an ETag, never changes; /same: no validators, the same body; /changing: no
    validators, a new body each time; /old: Last-Modified a day ago; /root links to /child."""

    asked: list[Asked]

    async def respond(self, site: Site, request: web.Request, hit: Hit) -> web.Response:
        path, inm = request.path, request.headers.get("If-None-Match", "")
        status, headers, body = 200, {}, b"<html>same</html>"
        if path == "/static":
            headers = {"ETag": '"s"'}
            status = 304 if inm == '"s"' else 200
        elif path == "/changing":
            body = f"<html>{time.time()}</html>".encode()
        elif path == "/old":
            headers = {"Last-Modified": email.utils.formatdate(time.time() - 86400, usegmt=True)}
        elif path == "/root":
            body = b'<html><a href="/child">child</a></html>'
        elif path not in ("/same", "/child"):
            status = 404
        self.asked.append(Asked(path, time.time(), inm, status))
        hit.status = status
        if status == 304:
            return web.Response(status=304, headers=headers)
        return web.Response(status=status, body=body, content_type="text/html", headers=headers)


def test_revisits_are_conditional_and_their_intervals_follow_the_pages(bootstrap: str, tmp_path: Path) -> None:
    fleet = ChangingSite(1, first_octet=225)
    fleet.asked = []
    fleet.start()
    base = f"http://{fleet.sites[0].host}:{fleet.port}"
    stack = Stack(bootstrap, tmp_path / "stack", partitions=2,
                  throttle={"delay": 0.2, "autothrottle": {"start_delay": 0}})  # fmt: skip
    urls = [f"{base}{p}" for p in ("/static", "/same", "/changing", "/old")]
    submissions = [{"url": u, "revisit": BOUNDS} for u in urls] + [{"url": f"{base}/root", "revisit": BOUNDS,
                                                                    "follow": 1}]  # fmt: skip
    with crawling(stack, fleet, concurrency=4, urls=submissions) as pages:

        def requests(path: str) -> list[Asked]:
            return [a for a in fleet.asked if a.path == path]

        def enough() -> bool:
            stack.check_alive()
            pages.poll()
            return len(requests("/static")) >= 6 and len(requests("/old")) >= 3 and len(requests("/child")) >= 3

        wait_until(enough, timeout=90, interval=0.5, what="six fetches of /static, three of /old and /child")
        pages.poll()
        static, changing = requests("/static"), requests("/changing")
        # conditional from the second fetch on, answered 304, published unchanged without a body
        assert static[0].if_none_match == "" and all(a.if_none_match == '"s"' and a.status == 304 for a in static[1:])
        gaps = [b.at - a.at for a, b in pairwise(static)]
        assert gaps[0] < 2.5 < gaps[1] < 4.5 < gaps[2] and min(gaps[3:]) > 7.0, gaps  # doubled: 1.7, 3.4, 6.7, 8
        assert len(changing) >= 2 * len(static), (len(changing), len(static))
        assert median(b.at - a.at for a, b in pairwise(changing[2:])) < 2.5  # shrunk to the bound
        old = requests("/old")
        assert old[1].at - old[0].at > 7.0  # a day-old page: the bound at once
        records = [p for p in pages.records if p.url == f"{base}/static"]
        assert records[0].body and not records[0].unchanged
        assert all(p.unchanged and p.status == 304 and not p.body for p in records[1 : len(static) - 1])
        same = [p for p in pages.records if p.url == f"{base}/same"]
        assert same[1:] and all(p.unchanged and p.status == 200 and not p.body and p.digest for p in same[1:])
        assert not any(p.unchanged for p in pages.records if p.url == f"{base}/changing")
        assert not politeness_failures(fleet, 0.2, 1)

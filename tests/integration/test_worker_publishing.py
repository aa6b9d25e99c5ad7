"""The worker's results on the real broker (issue 11, items 2, 6 and 17d): the feedback that closes
a lease never claims more than what is on Kafka, and every fetched URL is reported once.

- crawl.pages refuses a page (the topic's ``max.message.bytes`` is lowered; the body is random,
  so compression cannot save it): an error page ``page_not_published: MSG_SIZE_TOO_LARGE ...``
  is published instead and the feedback says "error" (before: "fetched" closed the lease and
  the page was lost).
- A redirect to ``http://[::1/x`` (an unparseable Location): the 3xx page and a "fetched" result,
  once (before: no feedback, the job came back after every lease, a duplicate page each time).
- A redirect to a URL already seen: the target is not fetched again, and the 3xx page carries
  the submitter's meta and the absolute target in its ``location`` header.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from aiohttp import web
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from frontier.demo.sites import Hit, Site, SiteFleet
from frontier.demo.stack import Stack, TopicReader, read_pages, wait_until
from topics.schemas import Feedback, FeedbackBatch, Page, decode

MAX_PAGE_RECORD = 16_384  # crawl.pages' max.message.bytes in this test
BIG = os.urandom(40_000)  # incompressible: its page can never fit


class PublishingSite(SiteFleet):
    async def respond(self, site: Site, request: web.Request, hit: Hit) -> web.Response:
        path = request.path
        if path == "/big":
            return web.Response(body=BIG, content_type="application/octet-stream")
        if path == "/poison":
            return web.Response(status=302, headers={"Location": "http://[::1/x"})
        if path == "/moved":
            return web.Response(status=301, headers={"Location": "/target"})
        if path == "/target":
            return web.Response(text="<p>the target</p>", content_type="text/html")
        return web.Response(status=404)


def limit_page_records(stack: Stack) -> None:
    admin = AdminClient(stack.client)
    entry = ConfigEntry("max.message.bytes", str(MAX_PAGE_RECORD), incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, stack.topics.pages, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def test_refused_pages_poison_redirects_and_seen_targets_are_reported(bootstrap: str, tmp_path: Path) -> None:
    fleet = PublishingSite(1, first_octet=211).start()
    base = f"http://{fleet.sites[0].host}:{fleet.port}"
    stack = Stack(bootstrap, tmp_path / "stack", partitions=2,
                  throttle={"delay": 0.2, "autothrottle": {"start_delay": 0}})  # fmt: skip
    submissions = [
        {"url": f"{base}/target", "meta": {"n": "target"}},
        {"url": f"{base}/big", "meta": {"n": "big"}},
        {"url": f"{base}/poison", "meta": {"n": "poison"}},
        {"url": f"{base}/moved", "meta": {"n": "moved"}},
    ]
    readers: list[TopicReader] = []
    try:
        stack.create_topics()
        limit_page_records(stack)
        stack.start_frontier()
        stack.start_worker("w1", concurrency=4)
        producer = Producer(stack.client)
        for s in submissions:
            producer.produce(stack.topics.urls, json.dumps(s).encode())
        assert producer.flush(30) == 0
        pages_reader = TopicReader(stack.client, stack.topics.pages)
        feedback_reader = TopicReader(stack.client, stack.topics.feedback)
        readers += [pages_reader, feedback_reader]
        pages: list[Page] = []
        feedback: list[Feedback] = []

        def read() -> None:
            pages.extend(read_pages(pages_reader))
            feedback.extend(fb for v in feedback_reader.poll() for fb in decode(v, FeedbackBatch).items)

        def all_reported() -> bool:
            stack.check_alive()
            read()
            reported = {fb.url for fb in feedback if fb.outcome in ("fetched", "error")}
            return {p.url for p in pages} >= {s["url"] for s in submissions} and reported >= {p.url for p in pages}

        wait_until(all_reported, timeout=90, what="a page and a final result for every URL")
        for _ in range(10):  # a short bounded look for late duplicates
            read()
        by_url = {p.url: p for p in pages}
        results = {fb.url: (fb.outcome, fb.error or fb.status) for fb in feedback if fb.outcome != "expired"}
        hits = Counter(h.path for h in fleet.sites[0].hits if h.path != "/robots.txt")
        print(f"[worker publishing] pages={[(p.url.removeprefix(base), p.outcome, p.error or p.status) for p in pages]}"
              f" results={ {u.removeprefix(base): r for u, r in results.items()} } hits={dict(hits)}")  # fmt: skip

        big = by_url[f"{base}/big"]
        assert big.outcome == "error" and big.error.startswith("page_not_published: MSG_SIZE_TOO_LARGE")
        assert (big.body, big.status, big.meta) == (b"", 200, {"n": "big"})
        assert results[f"{base}/big"] == ("error", big.error)

        poison = by_url[f"{base}/poison"]
        assert (poison.status, poison.meta, poison.headers["location"]) == (302, {"n": "poison"}, "http://[::1/x")
        assert results[f"{base}/poison"] == ("fetched", 302)

        moved = by_url[f"{base}/moved"]
        assert (moved.status, moved.meta, moved.headers["location"]) == (301, {"n": "moved"}, f"{base}/target")
        assert by_url[f"{base}/target"].meta == {"n": "target"}

        assert sorted(p.url for p in pages) == sorted(s["url"] for s in submissions), "each URL reported once"
        assert hits == {"/target": 1, "/big": 1, "/poison": 1, "/moved": 1}, "nothing fetched twice"
    finally:
        for reader in readers:
            reader.close()
        stack.stop_all()
        fleet.stop()

"""The per-IP scope on the real broker: with ``frontier.ip_scope`` the router resolves
``localhost`` to 127.0.0.1, so the URLs of ``http://localhost:PORT/`` and ``http://127.0.0.1:PORT/``
(one server) are keyed by that address, share one partition and the scope ``ip:127.0.0.1``, and
the server's own log shows every request spaced by the delay, across both names."""

from __future__ import annotations

from pathlib import Path

from frontier.demo.sites import SiteFleet
from frontier.demo.stack import Stack, TopicReader, wait_until
from frontier.intake.router import Router
from tests.integration.helpers import Pages, submit
from topics.partitioning import partition_for
from topics.schemas import UrlBatch, decode

DELAY = 0.5
TOLERANCE = 0.03  # seconds
PARTITIONS = 6  # localhost and 127.0.0.1 differ by murmur2 here


def test_two_names_of_one_server_share_its_politeness(bootstrap: str, tmp_path: Path) -> None:
    # by domain the two names would be two partitions and two scopes, dispatched side by side
    assert partition_for("localhost", PARTITIONS) != partition_for("127.0.0.1", PARTITIONS)
    fleet = SiteFleet(1, pages=3, latency=0.01, first_octet=1).start()  # 127.0.0.1:PORT
    site = fleet.sites[0]
    urls = [f"http://{name}:{fleet.port}{path}" for name in ("localhost", "127.0.0.1")
            for path in ("/", "/page/1", "/page/2")]  # fmt: skip
    throttle = {"delay": DELAY, "concurrency": 1, "autothrottle": {"enabled": False}}
    stack = Stack(bootstrap, tmp_path / "stack", partitions=PARTITIONS, throttle=throttle,
                  frontier={"embedded_router": False, "ip_scope": True})  # fmt: skip
    router = Router(stack.client, stack.topics, f"{stack.prefix}router", ip_scope=True)
    pages = bydomain = None
    try:
        stack.create_topics()
        router.start()
        stack.start_frontier()
        stack.start_worker("w1", concurrency=4)
        submit(stack, urls)
        pages = Pages(stack)
        bydomain = TopicReader(stack.client, stack.topics.bydomain)
        placed: dict[str, tuple[int, str]] = {}
        reader = bydomain

        def routed() -> bool:
            assert router.error is None, router.error
            for record in reader.poll(0.2):
                for item in decode(record, UrlBatch).items:
                    placed[item.url] = (partition_for(item.ip or item.domain, PARTITIONS), item.ip)
            return len(placed) == len(urls)

        wait_until(routed, timeout=30, what="every URL routed")
        assert set(placed.values()) == {(partition_for("127.0.0.1", PARTITIONS), "127.0.0.1")}, placed
        pages.wait_for(len(urls), timeout=40, what="every page of both names fetched")
        assert sorted(pages.urls) == sorted(urls)
        names = {h.path for h in site.hits}
        assert "/robots.txt" in names and len(site.hits) == len(urls) + 2  # each name's robots.txt, once
        gaps = site.gaps()
        assert min(gaps) >= DELAY - TOLERANCE, [round(g, 3) for g in gaps]
        stack.check_alive()
    finally:
        for reader_ in (pages, bydomain):
            if reader_ is not None:
                reader_.close()
        router.stop()
        stack.stop_all()
        fleet.stop()

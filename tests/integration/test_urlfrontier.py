"""The URLFrontier API (``crawl-frontier urlfrontier``) on the real broker:

- crawler-commons' own conformance suite (``../shared/urlfrontier/conformance.sh``, Java, built
  with Maven) passes against the gateway; then bad input, a queue's order, and a crawl nobody asks
  for (it must not hold its hosts from a crawl that is asked for);
- a URLFrontier crawler (tests/integration/urlfrontier_client.py: GetURLs, fetch, known-URL
  update with the response's status and headers in the metadata, as StormCrawler writes them)
  crawls local sites with hidden limits through a SIGKILL of the gateway and of the frontier:
  nothing lost, no request inside a window a site announced, Crawl-delay and robots.txt kept,
  a BlockQueueUntil kept across the frontier's restart.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc

from deploy.kafka import free_port
from frontier.demo.stack import Stack, TopicReader, read_rejected, wait_until
from tests.integration.hidden_sites import HiddenLimitFleet, Limits
from tests.integration.urlfrontier_client import Crawler, discovered, known, put, stub
from workers.urlfrontier.proto import urlfrontier_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
CRAWL_DELAY = 0.3
FLOOR_TOLERANCE = 0.01  # seconds; one machine's clock
GATE_TOLERANCE = 0.05


def suite_dir() -> Path:
    """crawler-commons' URLFrontier folder (API, client, reference service, conformance suite):
    ``$URLFRONTIER_DIR``, else ``shared/urlfrontier`` beside the repository or at /work/shared."""
    candidates = [os.environ.get("URLFRONTIER_DIR", ""), str(ROOT.parent / "shared" / "urlfrontier"),
                  "/work/shared/urlfrontier"]  # fmt: skip
    for candidate in candidates:
        if candidate and (Path(candidate) / "conformance.sh").exists():
            return Path(candidate)
    raise AssertionError(f"the URLFrontier conformance suite is not found (looked in {candidates}); "
                         "set URLFRONTIER_DIR to crawler-commons' url-frontier folder")  # fmt: skip


def wait_serving(port: int, timeout: float = 60.0) -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    finally:
        channel.close()


def test_the_conformance_suite_passes_against_the_gateway(bootstrap: str, tmp_path: Path) -> None:
    # the suite's URLs are public host names (urlfrontier.net, key1.com, ...): they are only stored
    # and handed out, never fetched; robots.txt is left to the client so that nothing leaves the machine
    port = free_port()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4, frontier={"robots_obey": False})
    try:
        stack.create_topics()
        stack.start_frontier()
        stack.start_gateway("gateway", port)
        wait_serving(port)
        run = subprocess.run(["bash", str(suite_dir() / "conformance.sh"), "127.0.0.1", str(port)],
                             capture_output=True, text=True, timeout=1200)  # fmt: skip
        summary = [line for line in run.stdout.splitlines() if "Tests run:" in line or "<<<" in line]
        assert run.returncode == 0, "\n".join(summary) + "\n" + run.stdout[-3000:] + stack.log("gateway")[-3000:]
        assert "Tests run: 7, Failures: 0, Errors: 0, Skipped: 0" in run.stdout, "\n".join(summary)
        bad_input_gets_clear_answers(stack, port)
        a_queue_is_handed_out_in_its_order_when_asked(port)
        a_crawl_nobody_asks_for_does_not_hold_its_hosts(port)
    finally:
        stack.stop_all()


def a_queue_is_handed_out_in_its_order_when_asked(port: int) -> None:
    """The suite's RightOrder with its two URLs apart in the put stream (as a client's updates
    come): the one due now reaches the frontier first and goes out alone; GetURLs, asked after the
    stream ended, still gets the one due long before."""
    client = stub(port)
    got = []
    for n in range(3):
        key = f"order{n}.test"

        def items(key: str = key) -> Iterator[pb.URLItem]:
            yield known(pb.URLInfo(url=f"http://{key}/later", key=key), int(time.time()), {})
            time.sleep(0.3)  # the client's pace, not a wait for the frontier: the first URL goes out alone
            yield known(pb.URLInfo(url=f"http://{key}/sooner", key=key), int(time.time()) - 10_000, {})

        assert len(list(client.PutURLs(items(), timeout=60))) == 2
        params = pb.GetParams(key=key, max_urls_per_queue=1, delay_requestable=2)
        got.append([u.url for u in client.GetURLs(params, timeout=30)])
    assert all(urls[:1] == [f"http://order{n}.test/sooner"] for n, urls in enumerate(got)), got


def a_crawl_nobody_asks_for_does_not_hold_its_hosts(port: int) -> None:
    """Two crawls queue URLs of one host, and a client asks only for one of them (found by a new
    user's trial: its GetURLs came back empty for over a minute, the other crawl's jobs waiting in
    the gateway with the host's slot until their job time ran out, 30 s each). The asked crawl's
    three URLs come out within 45 s (each reported done at once); the other crawl's stay queued."""
    client = stub(port)
    host = "shared-host.test"
    urls = {crawl: [f"http://{host}/{crawl}/{i}" for i in range(3)] for crawl in ("asked", "unasked")}
    items = [discovered(u, crawl) for crawl in ("unasked", "asked") for u in urls[crawl]]
    assert {a.status for a in put(client, items)} == {pb.AckMessage.Status.OK}
    got: list[str] = []
    began = time.monotonic()
    deadline = began + 45
    while len(got) < 3 and time.monotonic() < deadline:
        params = pb.GetParams(crawlID="asked", max_urls_per_queue=1, delay_requestable=30)
        for info in client.GetURLs(params, timeout=30):
            got.append(info.url)
            put(client, [known(info, 0, {"fetch.statusCode": "200"})])
    assert sorted(got) == urls["asked"], f"the asked crawl got {got} in 45 s"
    print(f"[a crawl nobody asks for] the asked crawl's 3 URLs in {time.monotonic() - began:.1f} s")
    stats = client.GetStats(pb.QueueWithinCrawlParams(crawlID="unasked"), timeout=30)
    assert stats.size == 3 and stats.inProcess == 0, stats


def bad_input_gets_clear_answers(stack: Stack, port: int) -> None:
    """Malformed or oversized input: SKIPPED (the reason on crawl.rejected) or a gRPC error, and the
    gateway keeps serving."""
    client = stub(port)
    big = {"k": pb.StringList(values=["v" * 70_000])}
    items = [pb.URLItem(ID="bad-url", discovered=pb.DiscoveredURLItem(info=pb.URLInfo(url="not a url"))),
             pb.URLItem(ID="big-meta", discovered=pb.DiscoveredURLItem(info=pb.URLInfo(url="http://a.test/",
                                                                                       metadata=big))),
             pb.URLItem(ID="bad-crawl", discovered=pb.DiscoveredURLItem(info=pb.URLInfo(url="http://a.test/",
                                                                                        crawlID="x" * 80))),
             pb.URLItem(ID="long-key", discovered=pb.DiscoveredURLItem(info=pb.URLInfo(url="http://a.test/",
                                                                                       key="k" * 300))),
             discovered("http://fine.test/")]  # fmt: skip
    acks = {a.ID: a.status for a in put(client, items)}
    skipped = pb.AckMessage.Status.SKIPPED
    assert acks == {"bad-url": skipped, "big-meta": skipped, "bad-crawl": skipped, "long-key": skipped,
                    "http://fine.test/": pb.AckMessage.Status.OK}, acks  # fmt: skip
    reader = TopicReader(stack.client, stack.topics.rejected)
    try:
        reasons: list[str] = []

        def four() -> bool:
            reasons.extend(r.reason for r in read_rejected(reader))
            return len(reasons) >= 4

        wait_until(four, timeout=30, what="the rejections on crawl.rejected")
        assert any("metadata larger" in r for r in reasons) and any("crawl name" in r for r in reasons), reasons
    finally:
        reader.close()
    for call, code in ((lambda: list(client.GetURLs(pb.GetParams(crawlID="x" * 80), timeout=15)),
                        grpc.StatusCode.INVALID_ARGUMENT),
                       (lambda: client.DeleteQueue(pb.QueueWithinCrawlParams(key=""), timeout=15),
                        grpc.StatusCode.INVALID_ARGUMENT),
                       (lambda: client.GetURLStatus(pb.URLStatusRequest(url="http://nowhere.test/x"), timeout=15),
                        grpc.StatusCode.NOT_FOUND)):  # fmt: skip
        try:
            call()
        except grpc.RpcError as exc:
            assert exc.code() == code, (exc.code(), exc.details())  # type: ignore[attr-defined]
        else:
            raise AssertionError(f"no error, {code} expected")
    assert client.GetActive(pb.Local(), timeout=15).state  # still serving
    # PurgeURLs: everything first recorded more than 0 days ago (the one URL put above) goes
    assert client.PurgeURLs(pb.PurgeUrlParams(days=0), timeout=15).value == 1
    assert client.CountURLs(pb.CountUrlParams(), timeout=15).value == 0


def test_a_urlfrontier_crawler_is_polite_and_loses_nothing_through_kills(bootstrap: str, tmp_path: Path) -> None:
    limits = [Limits("retry_after_seconds", rate=0.7, burst=1.0), Limits("ratelimit", quota=3, window=4.0),
              Limits("robots", crawl_delay=CRAWL_DELAY), Limits("bucket", rate=50.0, burst=5.0)]  # fmt: skip
    fleet = HiddenLimitFleet(limits, first_octet=176).start()
    host = {lim.kind: h for h, lim in fleet.limits.items()}
    counts = {"retry_after_seconds": 10, "ratelimit": 10, "robots": 8, "bucket": 6}
    urls = [f"http://{host[kind]}:{fleet.port}/page/{i}" for kind, n in counts.items() for i in range(n)]
    private = [f"http://{host['robots']}:{fleet.port}/private/{i}" for i in range(3)]
    port = free_port()
    # a lost lease comes back after 4 + 4 + 2 s (the defaults would take over a minute)
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4,
                  frontier={"job_ttl": 4.0, "fetch_timeout": 4.0, "lease_grace": 2.0})  # fmt: skip
    crawler = Crawler(port, expected=set(urls))
    thread: threading.Thread | None = None
    try:
        stack.create_topics()
        stack.start_frontier("frontier")
        stack.start_gateway("gateway", port)
        wait_serving(port)
        client = stub(port)
        blocked_until = time.time() + 25  # the plain site: nothing before then, across the frontier's restart
        client.BlockQueueUntil(pb.BlockQueueParams(key=host["bucket"], time=int(blocked_until)), timeout=15)
        acks = put(client, [discovered(u) for u in urls + private])
        assert [a.status for a in acks] == [pb.AckMessage.Status.OK] * len(urls + private)
        thread = threading.Thread(target=crawler.run, args=(time.monotonic() + 240,), daemon=True)
        thread.start()
        wait_until(lambda: len(crawler.fetched) >= 6, timeout=120, what="a few pages")
        assert stack.stop("frontier", sig=signal.SIGKILL) == -signal.SIGKILL  # holding leases, the block set
        stack.start_frontier("frontier-2")
        wait_until(lambda: len(crawler.fetched) >= len(urls) // 2, timeout=150, what="half the pages")
        assert stack.stop("gateway", sig=signal.SIGKILL) == -signal.SIGKILL  # URLs handed out by it
        stack.start_gateway("gateway-2", port)
        thread.join(timeout=250)
        assert not thread.is_alive(), "the crawler did not end"
        # a gateway stopped while a client holds URLs exits at once (the frontier keeps their leases)
        client = stub(port)
        put(client, [discovered(f"http://{host['bucket']}:{fleet.port}/held/{i}") for i in range(3)])
        held: list[str] = []
        wait_until(lambda: bool(held.extend(u.url for u in client.GetURLs(pb.GetParams(crawlID="DEFAULT"),
                                                                          timeout=15)) or held),
                   timeout=60, what="a URL handed out")  # fmt: skip
        stopping = time.monotonic()
        assert stack.stop("gateway-2") == 0, stack.log("gateway-2")[-2000:]
        assert time.monotonic() - stopping < 15, f"the gateway took {time.monotonic() - stopping:.0f} s to stop"
    finally:
        stack.stop_all()
        fleet.stop()
    missing = set(urls) - set(crawler.fetched)
    assert not missing, f"{len(missing)} URL(s) never handed out and fetched: {sorted(missing)[:5]} " \
        f"(client errors: {crawler.errors[-3:]})\n{stack.log('gateway-2')[-2000:]}"  # fmt: skip
    for h, lim in fleet.limits.items():
        site = fleet.site(h)
        assert not lim.gate_violations, f"{lim.kind}: {len(lim.gate_violations)} requests inside an announced window"
        assert not lim.disallowed_fetched and not any("/private/" in x.path for x in site.hits), "a disallowed URL"
        if lim.kind == "robots":
            hits = sorted((x for x in site.hits if x.path != "/robots.txt"), key=lambda x: x.start)
            floors = [b.start - a.end for a, b in itertools.pairwise(hits)]
            assert min(floors) >= CRAWL_DELAY - FLOOR_TOLERANCE, f"Crawl-delay not kept: {min(floors):.3f}"
        if lim.kind == "bucket":
            early = [x.start for x in site.hits if x.path != "/robots.txt" and x.start < blocked_until - GATE_TOLERANCE]
            assert not early, f"{len(early)} request(s) to a blocked queue before its block ended"
    refused = sum(1 for lim in fleet.limits.values() for _ in lim.gate_violations)
    print(f"urlfrontier crawl: {len(crawler.fetched)} URLs fetched, {crawler.refused} refused by the sites, "
          f"{sum(n - 1 for n in crawler.fetched.values())} fetched twice, {crawler.calls} GetURLs, "
          f"{len(crawler.errors)} client errors, gate violations {refused}")  # fmt: skip

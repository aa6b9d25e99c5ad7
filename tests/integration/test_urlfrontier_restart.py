"""A URLFrontier gateway ``kill -9``'d mid-crawl and restarted at once, under a client that behaves
as StormCrawler does (../shared/urlfrontier/STORMCRAWLER.md), on the real broker:

- its spout asks GetURLs (``max_urls_per_queue`` 10, ``max_queues`` 50, a ``delay_requestable``)
  with the stream left open, puts each URL in its fetcher as it comes, and asks again at most every
  2 s once the last query ended (waiting for the gateway to be back: ``withWaitForReady``);
- its fetcher keeps one queue per host and one request at a time per host
  (``fetcher.threads.per.queue`` 1; ``fetcher.server.delay`` 0: the pacing is left to the
  frontier), and some URLs wait in their queue before they are fetched (a busy fetcher: they are
  fetched later than usual, 2 s, some 12 s, within the hand-out deadline: those come back with
  their updates after the restart);
- its status updater writes each URL's update on one long-lived PutURLs stream and matches the
  acks by ID; when the gateway dies, what it writes into the dead stream is lost, until the
  channel is up again and a new stream is opened.

The gateway is killed while URLs are in the client's hands, fetched late and updated into the
dead stream. Judged from the sites' own logs: every host is fetched again (a URL handed out by
the restarted gateway) within the hand-out deadline (``frontier.fetch_timeout``) plus its delay
(plus the client's own query cycle) after its previous request, not after ``delay_requestable``;
no URL is fetched twice but those whose update was lost (they come back after their
``delay_requestable``, and are fetched again then); no two requests to a site closer than its
delay, never two at once. Then a SIGTERM stops the restarted gateway within seconds while jobs
are on their way to it.
"""

from __future__ import annotations

import collections
import http.client
import itertools
import queue
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from deploy.kafka import free_port
from frontier.demo.sites import SiteFleet
from frontier.demo.stack import Stack, wait_until
from tests.integration.helpers import politeness_failures
from tests.integration.test_urlfrontier import wait_serving
from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.proto import urlfrontier_pb2_grpc as pbg

SITES = 12
PAGES = 32  # per site
FIRST_OCTET = 212  # 127.0.0.212-223
DELAY = 1.0  # each host's delay
FETCH_TIMEOUT = 20.0  # the frontier's default: the hand-out deadline
# a job's time to be taken (30 s by default): the restarted gateway reads again, about 10 s after the kill
# (the group's session), the jobs the killed one held: handed out in the last 2 s before the kill, they are
# within their time (the code before handed them out a second time), the others are past it (their hosts
# waited for delay_requestable)
JOB_TTL = 12.0
DELAY_REQUESTABLE = 60  # StormCrawler's is its message timeout (300 s in its archetype): shorter, so that the
# URLs whose updates were lost come back within the test and are fetched again
QUERY_EVERY = 2.0  # StormCrawler's spout.min.delay.queries
LATE_EVERY = 5  # every 5th URL waits in its host's queue...
LATE_BY = 2.0  # ...this long before it is fetched,
LONG_LATE_EVERY = 23  # and every 23rd...
LONG_LATE_BY = 12.0  # ...this long: fetched once the gateway is back, its update to the restarted gateway
TRANSIT = 1.0  # seconds from a URL's release at the frontier to the client: Kafka, the gateway, the stream
SERVED_AGAIN = FETCH_TIMEOUT + DELAY + QUERY_EVERY + TRANSIT
STOP_WITHIN = 5.0  # seconds a SIGTERM'd gateway may take to exit


class _Stream:
    """One PutURLs call: what the updater writes goes to ``queue``; ``alive`` until the call fails.
    ``sent``: the IDs written into it; ``acked``: those it acknowledged OK."""

    def __init__(self, stub: pbg.URLFrontierStub, lock: threading.Lock) -> None:
        self.queue: queue.Queue[pb.URLItem | None] = queue.Queue()
        self.alive = True
        self.sent: set[str] = set()
        self.acked: set[str] = set()
        self._lock = lock
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(stub,), daemon=True)
        self._thread.start()

    def _items(self) -> Iterator[pb.URLItem]:
        while (item := self.queue.get()) is not None:
            yield item

    def _run(self, stub: pbg.URLFrontierStub) -> None:
        try:
            for ack in stub.PutURLs(self._items()):
                if ack.status == pb.AckMessage.Status.OK:
                    with self._lock:
                        self.acked.add(ack.ID)
        except (grpc.RpcError, ValueError):  # (ValueError: the channel closed)
            pass
        finally:
            with self._lock:
                self.alive = False
            self.done.set()

    def close(self) -> None:
        self.queue.put(None)


class StatusUpdater:
    """StormCrawler's StatusUpdaterBolt, as it behaves when its gateway goes away: one long-lived
    PutURLs stream; an item written while the stream is dead is lost; a new stream once the
    channel is ready again. ``dead``: the URLs whose update was written into a dead stream (lost);
    ``lost``: those and the URLs whose update a stream took and never acknowledged before it died
    (the gateway may have died with it)."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.channel = channel
        self.stub = pbg.URLFrontierStub(channel)  # type: ignore[no-untyped-call]
        self.lock = threading.Lock()
        self.lost: set[str] = set()
        self.dead: set[str] = set()
        self.streams: list[_Stream] = []
        self._closed = False
        self._stream = self._open()

    def _open(self) -> _Stream:
        stream = _Stream(self.stub, self.lock)
        self.streams.append(stream)
        threading.Thread(target=self._reopen_after, args=(stream,), daemon=True).start()
        return stream

    def _reopen_after(self, stream: _Stream) -> None:
        stream.done.wait()
        with self.lock:
            self.lost |= stream.sent - stream.acked
        while not self._closed:
            try:
                grpc.channel_ready_future(self.channel).result(timeout=1.0)
            except grpc.FutureTimeoutError:
                continue
            with self.lock:
                if not self._closed:
                    try:
                        self._stream = self._open()
                    except ValueError:  # the channel closed meanwhile
                        pass
            return

    def send(self, url: str, item: pb.URLItem) -> None:
        with self.lock:
            stream = self._stream
            if stream.alive:
                stream.queue.put(item)
                stream.sent.add(url)
            else:
                self.lost.add(url)  # written into a dead stream: gone (the URL comes back after its hold)
                self.dead.add(url)

    def close(self) -> None:
        with self.lock:
            self._closed = True
            self._stream.close()


@dataclass
class Handed:
    url: str
    host: str
    received: float  # epoch s
    info: pb.URLInfo
    waits: float = 0.0  # in its host's queue before it is fetched (a busy fetcher): 0, LATE_BY or LONG_LATE_BY


def late(n: int) -> float:
    """How long the ``n``-th URL handed out waits in its host's queue before it is fetched."""
    return LONG_LATE_BY if n % LONG_LATE_EVERY == 0 else LATE_BY if n % LATE_EVERY == 0 else 0.0


@dataclass
class StormLikeClient:
    """A StormCrawler-like topology of one spout, one fetcher and one status updater."""

    port: int
    fetchers: int = 16
    received: list[Handed] = field(default_factory=list)
    fetched: collections.Counter[str] = field(default_factory=collections.Counter)
    late_now: collections.Counter[float] = field(default_factory=collections.Counter)  # URLs waiting late now, by wait
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = pbg.URLFrontierStub(self.channel)  # type: ignore[no-untyped-call]
        self.updater = StatusUpdater(self.channel)
        self.lock = threading.Condition()
        self.queues: dict[str, collections.deque[Handed]] = collections.defaultdict(collections.deque)
        self.busy: set[str] = set()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._spout, daemon=True)]
        self.threads += [threading.Thread(target=self._fetch, daemon=True) for _ in range(self.fetchers)]
        for t in self.threads:
            t.start()

    # -- the spout -------------------------------------------------------------------------------
    def _spout(self) -> None:
        n = 0
        last_query = 0.0
        while not self.stop.is_set():
            wait = last_query + QUERY_EVERY - time.monotonic()
            if wait > 0:
                self.stop.wait(wait)
                continue
            last_query = time.monotonic()
            params = pb.GetParams(max_urls_per_queue=10, max_queues=50, delay_requestable=DELAY_REQUESTABLE,
                                  crawlID="DEFAULT")  # fmt: skip
            try:
                for info in self.stub.GetURLs(params, wait_for_ready=True, timeout=60):
                    n += 1
                    handed = Handed(info.url, info.url.split("/")[2].split(":")[0], time.time(), info,
                                    waits=late(n))  # fmt: skip
                    with self.lock:
                        self.received.append(handed)
                        self.queues[handed.host].append(handed)
                        self.lock.notify_all()
            except grpc.RpcError as exc:
                self.errors.append(f"GetURLs: {exc.code()}")  # type: ignore[attr-defined]
            except ValueError:  # the channel closed: the client stops
                return

    # -- the fetcher: one queue per host, one request at a time per host ----------------------------
    def _fetch(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                ready = [h for h, q in self.queues.items() if q and h not in self.busy]
                if not ready:
                    self.lock.wait(0.2)
                    continue
                host = ready[0]
                handed = self.queues[host].popleft()
                self.busy.add(host)
                if handed.waits:
                    self.late_now[handed.waits] += 1
            try:
                if handed.waits:  # a busy fetcher: it waits in its queue (holding its host's turn)
                    self.stop.wait(handed.waits)
                status = self._get(handed.url)
                self.fetched[handed.url] += 1
                meta = {"fetch.statusCode": pb.StringList(values=[str(status)])}
                info = pb.URLInfo(url=handed.info.url, key=handed.info.key, crawlID=handed.info.crawlID, metadata=meta)
                item = pb.URLItem(ID=handed.url, known=pb.KnownURLItem(info=info, refetchable_from_date=0))
                self.updater.send(handed.url, item)
            finally:
                with self.lock:
                    self.busy.discard(host)
                    if handed.waits:
                        self.late_now[handed.waits] -= 1
                    self.lock.notify_all()

    @staticmethod
    def _get(url: str) -> int:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                response.read()
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (OSError, http.client.HTTPException):
            return 599  # no answer: a FETCH_ERROR for StormCrawler

    def close(self) -> None:
        self.stop.set()
        with self.lock:
            self.lock.notify_all()
        self.updater.close()
        self.channel.close()  # (ends a GetURLs waiting for a gateway)
        for t in self.threads:
            t.join(timeout=15)


def put_all(port: int, urls: list[str]) -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        stub = pbg.URLFrontierStub(channel)  # type: ignore[no-untyped-call]
        items = [pb.URLItem(discovered=pb.DiscoveredURLItem(info=pb.URLInfo(url=u))) for u in urls]
        acks = list(stub.PutURLs(iter(items), timeout=120))
        assert {a.status for a in acks} == {pb.AckMessage.Status.OK} and len(acks) == len(urls)
    finally:
        channel.close()


def explained(client: StormLikeClient, url: str, lost: set[str], fetched: int) -> bool:
    """A URL fetched twice because its update was lost: handed out again once its first hold ended
    (``delay_requestable`` after it was handed out), not before."""
    received = sorted(h.received for h in client.received if h.url == url)
    return url in lost and fetched == 2 and len(received) == 2 and received[1] - received[0] >= DELAY_REQUESTABLE - 1


def hit_times(fleet: SiteFleet, url: str) -> list[float]:
    return [h.start for s in fleet.sites for h in s.hits if s.url(fleet.port, h.path) == url]


def served_again(
    fleet: SiteFleet, client: StormLikeClient, killed: float, gone: float
) -> dict[str, tuple[float, float]]:
    """Per host: (seconds between its first request of a URL the restarted gateway handed out and
    the request before it, seconds from the kill to that request), as the site saw them, less the
    time that URL waited in the client's queue when it was one fetched late (the client's doing)."""
    first_new: dict[str, Handed] = {}
    for handed in client.received:
        if handed.received > gone and handed.host not in first_new:
            first_new[handed.host] = handed
    out: dict[str, tuple[float, float]] = {}
    for site in fleet.sites:
        handed = first_new.get(site.host)
        if handed is None:
            continue
        path = handed.url.split(str(fleet.port), 1)[1]
        starts = sorted(h.start for h in site.hits)
        at = min(h.start for h in site.hits if h.path == path and h.start >= handed.received)
        before = max((s for s in starts if s < at), default=at)
        waited = handed.waits
        out[site.host] = (at - waited - before, at - waited - killed)
    return out


def test_a_gateway_killed_mid_crawl_serves_every_host_again_within_the_deadline(bootstrap: str, tmp_path: Path) -> None:
    fleet = SiteFleet(SITES, pages=PAGES, latency=0.02, first_octet=FIRST_OCTET).start()
    urls = fleet.all_urls()
    port = free_port()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4,
                  frontier={"fetch_timeout": FETCH_TIMEOUT, "job_ttl": JOB_TTL},
                  throttle={"delay": DELAY, "concurrency": 1, "autothrottle": {"enabled": False}})  # fmt: skip
    client: StormLikeClient | None = None
    began = time.monotonic()
    try:
        stack.create_topics()
        stack.start_frontier("frontier")
        stack.start_gateway("gateway", port)
        wait_serving(port)
        put_all(port, urls)
        client = StormLikeClient(port)
        c = client
        # crawl a while, then kill the gateway with URLs in the client's hands, some fetched late
        wait_until(lambda: sum(c.fetched.values()) >= SITES * 12 and c.late_now[LATE_BY] >= 2
                   and c.late_now[LONG_LATE_BY] >= 1, timeout=150, interval=0.05,
                   what="a crawl under way with URLs fetched late")  # fmt: skip
        killed = time.time()
        assert stack.stop("gateway", sig=signal.SIGKILL) == -signal.SIGKILL
        gone = time.time()  # (what the client got after this, the restarted gateway handed out)
        stack.start_gateway("gateway-2", port)
        fetched_at_kill = sum(c.fetched.values())
        # every URL fetched; those whose updates were lost come back after their hold, and are fetched again
        wait_until(lambda: set(urls) <= set(c.fetched) and all(c.fetched[u] >= 2 for u in c.updater.dead),
                   timeout=DELAY_REQUESTABLE + 120, interval=0.5,
                   what="every URL fetched, those whose update was lost twice")  # fmt: skip
        crawled = time.monotonic()
        lost, dead_stream = set(c.updater.lost), set(c.updater.dead)  # (at the kill: the SIGTERM below loses more)
        # a SIGTERM with jobs on their way to the gateway (more URLs put, being handed out)
        extra = [fleet.sites[i % SITES].url(fleet.port, f"/page/{PAGES + i // SITES}") for i in range(2 * SITES)]
        put_all(port, extra)
        wait_until(lambda: any(h.url in extra for h in c.received), timeout=30, what="the new URLs handed out")
        stopping = time.monotonic()
        code = stack.stop("gateway-2", timeout=60)
        stopped_in = time.monotonic() - stopping
    finally:
        if client is not None:
            client.close()
        stack.stop_all()
        fleet.stop()
    again = served_again(fleet, client, killed, gone)
    hits = collections.Counter(
        s.url(fleet.port, h.path) for s in fleet.sites for h in s.hits if h.path != "/robots.txt"
    )
    twice = {u: n for u, n in hits.items() if n > 1}
    unexplained = {u: n for u, n in twice.items() if not explained(client, u, lost, n)}
    worst = max(again.values(), key=lambda v: v[0]) if again else (0.0, 0.0)
    print(f"\n[gateway kill -9] {len(urls)} URLs, {fetched_at_kill} fetched at the kill, crawled in "
          f"{crawled - began:.0f} s; updates lost: {len(dead_stream)} written into the dead stream, "
          f"{len(lost - dead_stream)} unacknowledged by it; fetched twice: {len(twice)} ({len(unexplained)} "
          f"unexplained); PutURLs streams {len(client.updater.streams)}; errors {client.errors[:4]}")  # fmt: skip
    print(
        "[gateway kill -9] each host served again (seconds after its previous request, after the kill): "
        + ", ".join(f"{h.rsplit('.', 1)[1]}: {g:.1f}/{k:.1f}" for h, (g, k) in sorted(again.items()))
    )
    print(f"[gateway kill -9] longest: {worst[0]:.1f} s (bound {SERVED_AGAIN:.0f} s: fetch timeout {FETCH_TIMEOUT:.0f}"
          f" + delay {DELAY:.0f} + query cycle {QUERY_EVERY:.0f} + transit {TRANSIT:.0f}); SIGTERM'd gateway "
          f"exited {code} in {stopped_in:.1f} s")  # fmt: skip
    assert lost, "no update was lost at the kill: the scenario did not happen"
    assert len(again) == SITES, f"hosts never handed out by the restarted gateway: {SITES - len(again)}"
    slow = {h: v for h, v in again.items() if v[0] > SERVED_AGAIN}
    assert not slow, f"hosts served again only after (s since their previous request, since the kill): {slow}"
    assert not unexplained, (
        "fetched twice, no update of theirs lost (hits, handed out: s after the kill): "
        + "; ".join(
            f"{u}: {[round(h - killed, 2) for h in hit_times(fleet, u)]}, "
            f"{[round(h.received - killed, 2) for h in client.received if h.url == u]}"
            for u in sorted(unexplained)[:10]
        )
    )
    failures = politeness_failures(fleet, DELAY, concurrency=1)
    assert not failures, failures
    assert code == 0 and stopped_in < STOP_WITHIN, f"the gateway's SIGTERM took {stopped_in:.1f} s (exit {code})"
    gaps = [b - a for s in fleet.sites for a, b in itertools.pairwise(sorted(h.start for h in s.hits))]
    print(f"[gateway kill -9] smallest gap at any site {min(gaps):.3f} s, most at once "
          f"{max(s.max_active for s in fleet.sites)}; {time.monotonic() - began:.0f} s in all")  # fmt: skip

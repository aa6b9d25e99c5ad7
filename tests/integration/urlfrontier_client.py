"""A small URLFrontier crawler for the tests, as StormCrawler uses the API: GetURLs, fetch each URL
over HTTP (local test sites only), then a known-URL update with the response status and headers
in the metadata (``fetch.statusCode``, ``protocol.<header>``): done when fetched, due again at
once when the site refused it (429, 5xx), so the frontier decides when it goes again."""

from __future__ import annotations

import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import grpc

from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.proto import urlfrontier_pb2_grpc as pbg

CALL_TIMEOUT = 15.0


def stub(port: int) -> pbg.URLFrontierStub:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    return pbg.URLFrontierStub(channel)  # type: ignore[no-untyped-call]


def put(stub_: pbg.URLFrontierStub, items: Iterable[pb.URLItem]) -> list[pb.AckMessage]:
    return list(stub_.PutURLs(iter(list(items)), timeout=120))


def discovered(url: str, crawl: str = "", key: str = "") -> pb.URLItem:
    return pb.URLItem(discovered=pb.DiscoveredURLItem(info=pb.URLInfo(url=url, key=key, crawlID=crawl)))


def known(info: pb.URLInfo, refetch: int, metadata: dict[str, str]) -> pb.URLItem:
    meta = {k: pb.StringList(values=[v]) for k, v in metadata.items()}
    full = pb.URLInfo(url=info.url, key=info.key, crawlID=info.crawlID, metadata=meta)
    return pb.URLItem(known=pb.KnownURLItem(info=full, refetchable_from_date=refetch))


class Updates:
    """One long-lived PutURLs stream fed from a queue, its acks read in a thread (as StormCrawler's
    status updater keeps one)."""

    def __init__(self, stub_: pbg.URLFrontierStub) -> None:
        self._queue: queue.Queue[pb.URLItem | None] = queue.Queue()
        self.acked = 0
        self.error = ""
        self._thread = threading.Thread(target=self._run, args=(stub_,), daemon=True)
        self._thread.start()

    def _items(self) -> Iterator[pb.URLItem]:
        while (item := self._queue.get()) is not None:
            yield item

    def _run(self, stub_: pbg.URLFrontierStub) -> None:
        try:
            for _ in stub_.PutURLs(self._items(), timeout=600):
                self.acked += 1
        except grpc.RpcError as exc:
            self.error = f"{exc.code()}"  # type: ignore[attr-defined]

    def send(self, item: pb.URLItem) -> None:
        self._queue.put(item)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=60)


@dataclass
class Crawler:
    """Fetches what the frontier hands out, each URL as the GetURLs stream delivers it, until every
    URL of ``expected`` was fetched (2xx) or the deadline; survives a gateway that goes away
    (UNAVAILABLE: waits and asks again)."""

    port: int
    expected: set[str]
    delay_requestable: int = 6
    fetched: dict[str, int] = field(default_factory=dict)  # url → times fetched with a 2xx
    refused: int = 0
    errors: list[str] = field(default_factory=list)
    calls: int = 0

    def fetch(self, url: str) -> tuple[int, dict[str, str]]:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                response.read()
                return response.status, {k.lower(): v for k, v in response.headers.items()}
        except urllib.error.HTTPError as exc:
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}

    def step(self, stub_: pbg.URLFrontierStub, updates: Updates) -> None:
        self.calls += 1
        params = pb.GetParams(max_urls_per_queue=5, max_queues=50, delay_requestable=self.delay_requestable,
                              crawlID="DEFAULT")  # fmt: skip
        for info in stub_.GetURLs(params, timeout=CALL_TIMEOUT):
            status, headers = self.fetch(info.url)
            metadata = {"fetch.statusCode": str(status), **{f"protocol.{k}": v for k, v in headers.items()}}
            if 200 <= status < 300:
                self.fetched[info.url] = self.fetched.get(info.url, 0) + 1
                updates.send(known(info, 0, metadata))
            else:
                self.refused += 1
                updates.send(known(info, int(time.time()), metadata))  # again: when the frontier says
        if updates.error:
            raise RuntimeError(f"the updates stream failed: {updates.error}")

    def run(self, deadline: float) -> None:
        stub_ = stub(self.port)
        updates = Updates(stub_)
        try:
            while time.monotonic() < deadline and not self.expected <= set(self.fetched):
                try:
                    self.step(stub_, updates)
                except (grpc.RpcError, RuntimeError) as exc:  # the gateway is away (killed): ask again shortly
                    self.errors.append(str(exc)[:200])
                    time.sleep(0.5)
                    updates.close()
                    stub_ = stub(self.port)
                    updates = Updates(stub_)
        finally:
            updates.close()

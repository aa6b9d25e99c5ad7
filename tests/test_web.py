"""The live page is safe to expose: the token guard (bearer and basic), read-only GETs, watches
only by POST with a checked scope, the refusal to serve off loopback without a token; the
frontier's watch maps are bounded and age out; the page's history ages out and stays within its
memory bound (time injected, no Kafka; HTTP only on 127.0.0.1 servers started here)."""

from __future__ import annotations

import base64
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import FormData
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, Counter

from frontier.cli import main
from frontier.client.history import (
    HISTORY_BOUND_BYTES,
    HISTORY_POINTS,
    HISTORY_SCOPES,
    HISTORY_SECONDS,
    INSTANCE_SECONDS,
    MAX_TEXTS,
    OVERFLOW_TEXT,
    StatusHistory,
)
from frontier.config import Config, ConfigError, FrontierConfig
from frontier.core.control import control_record
from frontier.core.kv import MemoryKV
from frontier.observability.watch import (
    MAX_WATCH_SENT,
    MAX_WATCHED,
    WATCH_RESEND,
    WATCH_SECONDS,
    WatchBusy,
    watch_scope,
)
from frontier.observability.web import build_web, check_exposure
from frontier.partition import PartitionFrontier
from frontier.service.owned import _Owned
from frontier.service.service import FrontierService
from tests.fakes import FakeProducer
from topics.schemas import ControlCommand, Rejected, ScopeStatus, Status, UrlItem, decode, encode

TOKEN = "s3cret-token-0123456789"
BAD_SCOPES = ["", " ", "a b.test", "x" * 300, "-bad.test", "a..b.test", "bad_host!.test", "a/b.test",
              "www.example.com#api", "example.com#", "example.com#a#b", "example.com#" + "n" * 65,
              "example.com#tab\tname", "ip:example.com", "1.2.3.999", "[::1", "\x00.test"]  # fmt: skip


class FakeService:
    """What build_web uses of a FrontierService; records the watch calls."""

    instance = "test-instance"

    def __init__(self, busy: bool = False) -> None:
        self.watched: list[str] = []
        self.busy = busy
        registry = CollectorRegistry()
        Counter("crawl_test_total", "a metric", registry=registry).inc()
        self.metrics = SimpleNamespace(registry=registry)

    def watch(self, scope: str) -> bool:
        if self.busy:
            raise WatchBusy("1000 scopes asked for in the last 30 s: try again later")
        self.watched.append(scope)
        return True


def row(scope: str, sent: int = 0, reason: str = "ready", cause: str = "") -> ScopeStatus:
    return ScopeStatus(scope=scope, queued=3, inflight=1, delay=0.5, concurrency=1, gate_until=0.0, backoff=0.0,
                       reason=reason, sent=sent, cause=cause)  # fmt: skip


def snapshot(instance: str, at: float, rows: list[ScopeStatus]) -> bytes:
    return encode(Status(instance=instance, at=at, partitions=[0], totals={"fetched": 1}, scopes=rows))


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def page() -> AsyncIterator[tuple[TestClient[Any, Any], FakeService, StatusHistory]]:
    service, feed = FakeService(), StatusHistory()
    client = TestClient(TestServer(build_web(feed, service, TOKEN), host="127.0.0.1"))
    await client.start_server()
    try:
        yield client, service, feed
    finally:
        await client.close()


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def basic(password: str, user: str = "anyone") -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


# -- the token guard ----------------------------------------------------------------------------
async def test_the_token_guards_the_page_the_api_and_commands(page: Any) -> None:
    client, service, _ = page
    for method, path in (("GET", "/"), ("GET", "/api/status"), ("GET", "/api/history?scope=a.test"),
                         ("POST", "/api/watch"), ("GET", "/no/such/page")):  # fmt: skip
        for headers in ({}, bearer("wrong-token-0123456789"), basic("wrong"), basic(""), {"Authorization": "Basic !!"},
                        {"Authorization": TOKEN}, {"Authorization": "Bearer"}):  # fmt: skip
            resp = await client.request(method, path, headers=headers, json={"scope": "a.test"})
            assert resp.status == 401, (method, path, headers)
            assert resp.headers["WWW-Authenticate"].startswith("Basic realm=")  # a browser asks for it
    assert service.watched == []
    for headers in (bearer(), basic(TOKEN), basic(TOKEN, user="")):
        resp = await client.get("/", headers=headers)
        assert resp.status == 200 and "crawl frontier" in await resp.text()
        resp = await client.get("/api/status", headers=headers)
        assert resp.status == 200 and (await resp.json())["instance"] == "test-instance"


async def test_healthz_and_metrics_stay_open_and_carry_no_crawl_data(page: Any) -> None:
    client, _, _ = page
    resp = await client.get("/healthz")
    assert resp.status == 200 and await resp.text() == "ok\n"
    resp = await client.get("/metrics")
    assert resp.status == 200 and "crawl_test_total 1.0" in await resp.text()


async def test_without_a_token_everything_is_open_on_loopback() -> None:
    service = FakeService()
    async with TestClient(TestServer(build_web(StatusHistory(), service), host="127.0.0.1")) as client:
        assert (await client.get("/api/status")).status == 200
        assert (await client.post("/api/watch", json={"scope": "a.test"})).status == 202
        assert service.watched == ["a.test"]


async def test_without_a_token_a_host_that_is_not_loopback_is_refused() -> None:
    """DNS rebinding (issue 37): a page of evil.example whose name now points at 127.0.0.1 asks
    with ``Host: evil.example``; loopback names and addresses, with or without a port, pass."""
    async with TestClient(TestServer(build_web(StatusHistory(), FakeService()), host="127.0.0.1")) as client:
        for host in ("evil.example", "evil.example:8080", "10.0.0.1", "127.0.0.1.evil.example"):
            resp = await client.get("/api/status", headers={"Host": host})
            assert resp.status == 421, (host, resp.status)
        for host in ("localhost", "localhost:7070", "127.0.0.1:7070", "127.5.6.7", "[::1]:7070"):
            assert (await client.get("/api/status", headers={"Host": host})).status == 200, host


# -- read-only GETs, commands by POST --------------------------------------------------------------
async def test_history_is_read_only_and_checks_the_scope(page: Any) -> None:
    client, service, feed = page
    feed.apply(b"i", snapshot("i", feed.clock(), [row("a.test", sent=5)]))
    resp = await client.get("/api/history?scope=A.Test.", headers=bearer())
    assert resp.status == 200
    data = await resp.json()
    assert data["scope"] == "a.test" and [p["queued"] for p in data["points"]] == [3]
    for bad in BAD_SCOPES[:6]:
        resp = await client.get("/api/history", params={"scope": bad}, headers=bearer())
        assert resp.status == 400 and (await resp.json())["error"], bad
    assert service.watched == []  # no GET sent a watch
    assert (await client.get("/api/watch?scope=a.test", headers=bearer())).status == 405


async def test_post_watch_normalises_checks_and_guards_against_cross_site_requests(page: Any) -> None:
    client, service, _ = page
    for given, expected in (("Example.COM.", "example.com"), ("WWW.example.com", "www.example.com"),
                            ("example.com#API", "example.com#API"), ("0x7f.1", "127.0.0.1"), ("[::1]", "::1"),
                            ("ip:10.0.0.1", "ip:10.0.0.1"), ("bücher.de", "xn--bcher-kva.de")):  # fmt: skip
        resp = await client.post("/api/watch", json={"scope": given}, headers=bearer())
        assert resp.status == 202, (given, await resp.text())
        assert (await resp.json())["scope"] == expected
    assert service.watched == ["example.com", "www.example.com", "example.com#API", "127.0.0.1", "::1",
                               "ip:10.0.0.1", "xn--bcher-kva.de"]  # fmt: skip
    service.watched.clear()
    for bad in BAD_SCOPES:
        resp = await client.post("/api/watch", json={"scope": bad}, headers=bearer())
        assert resp.status == 400 and (await resp.json())["error"], bad
    for body in ({"scope": 7}, {"other": "a.test"}, ["a.test"]):
        assert (await client.post("/api/watch", json=body, headers=bearer())).status == 400
    resp = await client.post("/api/watch", data=b"{not json", headers={**bearer(), "Content-Type": "application/json"})
    assert resp.status == 400
    # a form (what a cross-site page can send) only with a bearer header, never with basic auth alone
    assert (await client.post("/api/watch", data={"scope": "a.test"}, headers=basic(TOKEN))).status == 415
    assert (await client.post("/api/watch", data="scope=a.test", headers={**basic(TOKEN), "Content-Type": "text/plain"})
            ).status == 415  # fmt: skip
    form = FormData({"scope": "b.test"})
    assert (await client.post("/api/watch", data=form, headers=bearer())).status == 202
    resp = await client.post("/api/watch", json={"scope": "c.test"},
                             headers={**basic(TOKEN), "Origin": "https://evil.example"})  # fmt: skip
    assert resp.status == 403
    same = f"http://{client.host}:{client.port}"
    resp = await client.post("/api/watch", json={"scope": "d.test"}, headers={**basic(TOKEN), "Origin": same})
    assert resp.status == 202
    assert service.watched == ["b.test", "d.test"]


async def test_a_busy_watch_map_answers_429() -> None:
    async with TestClient(TestServer(build_web(StatusHistory(), FakeService(busy=True)), host="127.0.0.1")) as client:
        resp = await client.post("/api/watch", json={"scope": "a.test"})
        assert resp.status == 429 and "try again" in (await resp.json())["error"]


# -- refusing to start ------------------------------------------------------------------------------
def test_no_live_page_off_loopback_without_a_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exposed = FrontierConfig(web_port=8080, web_bind="0.0.0.0")
    for cfg in (exposed, replace(exposed, web_bind="10.1.2.3"), replace(exposed, web_bind=""),
                replace(exposed, web_bind="frontier.internal"), replace(exposed, web_token="short")):  # fmt: skip
        with pytest.raises(ConfigError, match="web_token"):
            check_exposure(cfg)
    for cfg in (replace(exposed, web_token=TOKEN), replace(exposed, web_bind="127.0.0.1"),
                replace(exposed, web_bind="::1"), replace(exposed, web_bind="localhost"),
                replace(exposed, web_bind="127.0.0.2", web_token="short"), replace(exposed, web_port=0)):  # fmt: skip
        check_exposure(cfg)
    config = tmp_path / "crawl.toml"
    config.write_text('[frontier]\nweb_port = 8080\nweb_bind = "0.0.0.0"\n')
    assert main(["--config", str(config), "frontier"]) == 2  # before any Kafka client or port is opened
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "frontier.web_token" in err[0] and "CRAWL__FRONTIER__WEB_TOKEN" in err[0], err


# -- the frontier's watch maps ------------------------------------------------------------------------
class Event:
    acked = 0

    def ack(self) -> bool:
        Event.acked += 1
        return True


def service_with(clock: Clock, ip_scope: bool = False) -> tuple[FrontierService, FakeProducer]:
    cfg = Config()
    cfg = replace(cfg, frontier=replace(cfg.frontier, ip_scope=ip_scope))
    service = FrontierService(cfg, clock=clock)
    producer = FakeProducer()
    service._producer = producer  # type: ignore[assignment]
    return service, producer


def partition_of(scope: str, partitions: int) -> int:
    return control_record(ControlCommand(action="watch", scope=scope), partitions)[2]


def test_watch_checks_first_and_sends_one_command_per_scope_per_interval() -> None:
    clock = Clock()
    service, producer = service_with(clock)
    for bad in BAD_SCOPES:
        with pytest.raises(ValueError):
            service.reporting.watch(bad)
    assert producer.sent == [] and service.reporting._watch_sent == {}  # nothing stored or sent before the check
    assert service.reporting.watch("Books.Example.COM.")
    (topic, value, partition), = producer.sent  # fmt: skip
    assert topic == service.topics.control and partition == partition_of("example.com", service.topics.partitions)
    assert decode(value or b"", ControlCommand).scope == "books.example.com"
    clock.now += WATCH_RESEND - 1
    assert not service.reporting.watch("books.example.com") and len(producer.sent) == 1
    clock.now += 1
    assert service.reporting.watch("books.example.com") and len(producer.sent) == 2


def test_watch_sends_to_every_partition_with_ip_scope_except_for_an_address_scope() -> None:
    service, producer = service_with(Clock(), ip_scope=True)
    service.reporting.watch("a.example.com")
    assert sorted(p for _, _, p in producer.sent) == list(range(service.topics.partitions))
    producer.sent.clear()
    service.reporting.watch("ip:192.0.2.1")
    assert [p for _, _, p in producer.sent] == [partition_of("ip:192.0.2.1", service.topics.partitions)]


def test_a_full_ask_map_refuses_for_a_while_never_for_good() -> None:
    clock = Clock()
    service, _ = service_with(clock)
    for i in range(MAX_WATCH_SENT):
        clock.now += 0.001
        assert service.reporting.watch(f"h{i}.test")
    with pytest.raises(WatchBusy):
        service.reporting.watch("one-more.test")
    assert len(service.reporting._watch_sent) == MAX_WATCH_SENT
    clock.now += WATCH_RESEND  # the old asks age out and make room
    assert service.reporting.watch("one-more.test")
    assert len(service.reporting._watch_sent) == 1
    service.reporting.status(clock.now + WATCH_RESEND)  # each snapshot prunes as well
    assert service.reporting._watch_sent == {}


async def test_watch_commands_are_checked_bounded_and_age_out() -> None:
    clock = Clock()
    service, producer = service_with(clock)
    n = service.topics.partitions
    p = partition_of("example.com", n)
    bad = [ControlCommand(action="watch", scope=s) for s in ("bad_host!.test", "www.example.com#api", "1.2.3.999")]
    bad.append(ControlCommand(action="watch", scope="example.com"))  # on the wrong partition
    for cmd in bad:
        await service.handle_control((p + 1) % n if cmd.scope == "example.com" else p, cmd, Event())
    assert service.reporting.watched == {}
    rejected = [decode(v or b"", Rejected) for t, v, _ in producer.sent if t == service.topics.rejected]
    assert len(rejected) == len(bad) and all(r.reason.startswith("watch refused: ") for r in rejected)
    assert rejected[-1].reason.endswith(f"is in partition {p}, not {(p + 1) % n}")
    for i in range(MAX_WATCHED + 50):  # a full map never stops a new watch: the oldest makes room
        clock.now += 0.01
        scope = f"h{i}.test"
        await service.handle_control(partition_of(scope, n), ControlCommand(action="watch", scope=scope), Event())
        assert scope in service.reporting.watched and len(service.reporting.watched) <= MAX_WATCHED
    assert set(service.reporting.watched) == {f"h{i}.test" for i in range(50, MAX_WATCHED + 50)}
    service.reporting.status(clock.now + WATCH_SECONDS)  # expired at the next snapshot
    assert service.reporting.watched == {}


def test_status_reports_a_watched_scope_from_its_partition() -> None:
    clock = Clock(1000.0)
    service, _ = service_with(clock)
    n = service.topics.partitions
    p = partition_of("quiet.test", n)
    kv = MemoryKV()
    frontier = PartitionFrontier(p, kv, service.cfg.frontier, service.cfg.throttle, lambda k, v: None)
    service.partitions.owned[p] = _Owned(frontier=frontier, kv=kv, writer=None)  # type: ignore[arg-type]  # no writes here
    busy = [UrlItem(url=f"http://busy{i}.test/", host=f"busy{i}.test", domain=f"busy{i}.test") for i in range(30)]
    quiet = UrlItem(url="http://quiet.test/", host="quiet.test", domain="quiet.test", scopes=["api"])
    frontier.ingest([*busy, quiet], clock.now)
    assert "quiet.test" not in {r.scope for r in service.reporting.status(clock.now, top=5).scopes}
    service.reporting.add_watch("quiet.test#api", clock.now)
    rows = {r.scope: r for r in service.reporting.status(clock.now, top=5).scopes}
    assert rows["quiet.test#api"].queued == 1 and len(rows) == 6


# -- the page's history ---------------------------------------------------------------------------------
def test_history_ages_out_points_scopes_and_instances() -> None:
    clock = Clock()
    feed = StatusHistory(clock)
    start = clock.now
    for i in range(HISTORY_POINTS + 100):  # more points than kept
        clock.now = start + 2.0 * i
        rows = [row("busy.test", sent=4 * i)] + ([row("brief.test")] if i < 3 else [])
        feed.apply(b"a", snapshot("a", clock.now, rows))
    points = feed.history_json("busy.test")["points"]
    assert len(points) == HISTORY_POINTS and points[-1]["at"] == clock.now
    assert {p["rate"] for p in points[1:]} == {2.0}
    assert feed.history_json("brief.test")["points"] == []  # older than the window: gone
    assert set(feed.history) == {"busy.test"}
    feed.apply(b"old", snapshot("old", clock.now - HISTORY_SECONDS - 1, [row("ancient.test")]))
    assert "ancient.test" not in feed.history  # a snapshot older than the window adds no point
    assert b"old" in feed.latest and b"old" not in [s.instance.encode() for s in feed.live()]
    clock.now += 1.5
    feed.prune()
    assert b"old" not in feed.latest  # not live for INSTANCE_SECONDS
    clock.now += INSTANCE_SECONDS
    feed.prune()
    assert b"a" not in feed.latest
    clock.now += HISTORY_SECONDS
    assert feed.history_json("busy.test")["points"] == []
    feed.prune()
    assert len(feed.history) == 0
    feed.apply(b"b", snapshot("b", clock.now, [row("x.test")]))
    feed.apply(b"b", None)  # a tombstone removes the instance
    assert len(feed.latest) == 0


def test_history_keeps_the_most_recent_scopes_and_texts_within_their_limits() -> None:
    clock = Clock()
    feed = StatusHistory(clock)
    for i in range(HISTORY_SCOPES + 20):
        clock.now += 0.01
        feed.apply(b"a", snapshot("a", clock.now, [row(f"s{i}.test")]))
    assert len(feed.history) == HISTORY_SCOPES and "s0.test" not in feed.history and "s519.test" in feed.history
    for i in range(MAX_TEXTS + 10):  # more different texts than a scope's table holds
        clock.now += 2.0
        feed.apply(b"a", snapshot("a", clock.now, [row("t.test", reason=f"delay {i}", cause="c" * 500)]))
    points = feed.history_json("t.test")["points"]
    assert points[0]["reason"] == "delay 0" and points[0]["cause"] == "c" * 120
    assert points[-1]["reason"] == OVERFLOW_TEXT and len(feed.history["t.test"].texts) == MAX_TEXTS


def test_history_memory_stays_within_its_bound() -> None:
    """Worst case: every point's numbers distinct and large, every text new and non-ASCII. A
    tenth of the scopes are filled, measured under tracemalloc, and scaled to HISTORY_SCOPES."""
    clock = Clock()
    feed = StatusHistory(clock)
    scopes = HISTORY_SCOPES // 10
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for step in range(HISTORY_POINTS):
            clock.now += 2.0
            rows = [ScopeStatus(scope=f"scope-{j}.example.com", queued=10**9 + step, inflight=10**6 + j,
                                delay=1.5 + step, concurrency=1000 + j, gate_until=clock.now + 0.5, backoff=0.25 + j,
                                reason=f"ü{step}-{j}" + "é" * 200, sent=10**12 + step, limit=0.1 + step,
                                cause=f"ő{step}-{j}" + "x" * 200) for j in range(scopes)]  # fmt: skip
            feed.apply(b"a", snapshot("a", clock.now, rows))
        feed.latest.clear()  # only the histories are measured
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(feed.history) == scopes and all(len(s) == HISTORY_POINTS for s in feed.history.values())
    per_scope = used / scopes
    assert per_scope * HISTORY_SCOPES <= HISTORY_BOUND_BYTES, f"{per_scope:.0f} B per scope"
    assert per_scope >= HISTORY_POINTS * 76  # the measurement saw the points (it can fail both ways)


def test_watch_scope_is_the_one_spelling() -> None:
    assert watch_scope(" Example.COM. ") == "example.com"
    assert watch_scope("example.com#Api") == "example.com#Api"
    assert watch_scope("2130706433") == "127.0.0.1"
    assert watch_scope("ip:0:0::1") == "ip:::1"
    for bad in BAD_SCOPES:
        with pytest.raises(ValueError):
            watch_scope(bad)

"""The URLFrontier gateway's access and limits, their pure parts (no Kafka): the token kept a
string from the environment and never shown, the refusal to listen beyond loopback unguarded,
the peer addresses and the network list, the bearer check, the loggers SetLogLevel may change,
PutDiscovered's items in flight, the crawl cap on puts; and the interceptor on a real gRPC server
on 127.0.0.1 started here (a toy servicer): every kind of call refused without the token, a
client outside the networks refused, a call past its age ended."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from frontier.cli import main
from frontier.config import Config, ConfigError, UrlFrontierConfig, from_dict, load
from tests.fakes import FakeProducer
from topics.schemas import Rejected, decode
from workers.urlfrontier import security
from workers.urlfrontier.pool import Pools
from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.proto import urlfrontier_pb2_grpc as pbg
from workers.urlfrontier.security import (
    Guard,
    bearer_ok,
    check_exposure,
    own_logger,
    peer_address,
    peer_allowed,
    read_token,
)
from workers.urlfrontier.service import Gateway

TOKEN = "0x1F" + "0" * 14  # reads as a TOML number: it must stay this string
NUMERIC = ["0x1F", "12345", "1e3", "true", "inf", "[1]", TOKEN]


# -- the token in the configuration --------------------------------------------------------------------
@pytest.mark.parametrize("raw", NUMERIC)
def test_a_token_from_the_environment_stays_the_string_given(raw: str) -> None:
    cfg = load(None, {"CRAWL__URLFRONTIER__TOKEN": raw})
    assert cfg.urlfrontier.token == raw and isinstance(cfg.urlfrontier.token, str)
    # the same holds for every text key: the live page's token, a SASL password
    cfg = load(None, {"CRAWL__FRONTIER__WEB_TOKEN": raw, "CRAWL__KAFKA__EXTRA__SASL_PASSWORD": raw})
    assert cfg.frontier.web_token == raw and cfg.kafka.extra["sasl.password"] == raw


def test_a_token_is_never_shown_in_an_error_nor_a_repr() -> None:
    with pytest.raises(ConfigError) as exc:
        from_dict({"urlfrontier": {"token": 123456789}})  # a number in the file: refused, not shown
    assert "urlfrontier.token" in str(exc.value) and "123456789" not in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        from_dict({"frontier": {"web_token": 987654321}})
    assert "987654321" not in str(exc.value)
    cfg = load(None, {"CRAWL__URLFRONTIER__TOKEN": TOKEN})
    assert TOKEN not in repr(cfg) and TOKEN not in repr(cfg.urlfrontier)


def test_a_token_file_gives_its_first_line(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(f"{TOKEN}\n")
    assert read_token(UrlFrontierConfig(token_file=str(path))) == TOKEN
    path.write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        read_token(UrlFrontierConfig(token_file=str(path)))
    with pytest.raises(ConfigError, match="cannot read"):
        read_token(UrlFrontierConfig(token_file=str(tmp_path / "missing")))
    with pytest.raises(ConfigError, match="both set"):
        UrlFrontierConfig(token=TOKEN, token_file=str(path)).validate()


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"allow_clients": ["10.0.0.0/8", "nope"]}, "urlfrontier.allow_clients: 'nope' is not an IP network"),
        ({"allow_clients": "10.0.0.0/8"}, "urlfrontier.allow_clients: expected a list"),
        ({"tls_cert": "cert.pem"}, "tls_cert and urlfrontier.tls_key go together"),
        ({"tls_client_ca": "ca.pem"}, "tls_client_ca needs TLS"),
        ({"max_message_bytes": 100 * 1024 * 1024}, "urlfrontier.max_message_bytes"),
        ({"max_calls": 0}, "urlfrontier.max_calls"),
        ({"max_stream_age": -1}, "urlfrontier.max_stream_age"),
        ({"put_window": 0}, "urlfrontier.put_window"),
        ({"max_crawls": 5000}, "urlfrontier.max_crawls"),
        ({"keepalive": float("nan")}, "urlfrontier.keepalive"),
    ],
)
def test_bad_access_and_limit_settings_are_refused(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        from_dict({"urlfrontier": section})


def test_the_limits_have_defaults() -> None:
    gw = UrlFrontierConfig()
    assert (gw.max_message_bytes, gw.max_calls, gw.max_stream_age, gw.put_window, gw.max_crawls) == (
        4 * 1024 * 1024, 1000, 0.0, 1000, 100)  # fmt: skip
    assert from_dict({"urlfrontier": {"allow_clients": ["10.0.0.0/8"]}}).urlfrontier.allow_clients == ("10.0.0.0/8",)


# -- refusing to start -------------------------------------------------------------------------------
def test_no_gateway_beyond_loopback_that_anyone_may_call(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    exposed = UrlFrontierConfig(bind="0.0.0.0")
    for cfg in (exposed, replace(exposed, bind="10.1.2.3"), replace(exposed, bind="[::]"),
                replace(exposed, bind="gateway.internal"), replace(exposed, token="short"),
                replace(exposed, allow_clients=("0.0.0.0/0",)),
                replace(exposed, allow_clients=("::/0", "10.0.0.0/8"))):  # fmt: skip
        with pytest.raises(ConfigError, match=r"urlfrontier\.token") as exc:
            check_exposure(cfg)
        assert "short" not in str(exc.value).replace("shorter", "")  # a token is never shown
    for cfg in (replace(exposed, token=TOKEN), replace(exposed, bind="127.0.0.1"), replace(exposed, bind="::1"),
                replace(exposed, bind="localhost"), replace(exposed, bind="[::1]"),
                replace(exposed, allow_clients=("10.0.0.0/8",)),
                replace(exposed, tls_cert=str(ca), tls_key=str(ca), tls_client_ca=str(ca))):  # fmt: skip
        check_exposure(cfg)
    with pytest.raises(ConfigError, match=r"urlfrontier\.tls_client_ca: cannot read"):
        check_exposure(replace(exposed, tls_cert=str(ca), tls_key=str(ca), tls_client_ca=str(tmp_path / "nope")))


def test_loopback_is_the_live_pages_rule() -> None:
    from frontier.observability import web

    assert security.MIN_TOKEN_CHARS == web.MIN_TOKEN_CHARS
    for bind in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "0.0.0.0", "[::]", "", "10.0.0.1", "gw.local"):
        assert security.is_loopback(bind) == web.is_loopback(bind), bind


def test_the_command_refuses_in_one_line_with_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    config = tmp_path / "crawl.toml"
    config.write_text('[kafka]\nbootstrap = "127.0.0.1:1"\n')  # never reached: refused before any Kafka client
    assert main(["--config", str(config), "urlfrontier", "--bind", "0.0.0.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "urlfrontier.token" in err[0] and "CRAWL__URLFRONTIER__TOKEN" in err[0], err
    monkeypatch.setenv("CRAWL__URLFRONTIER__TOKEN", "12345")  # too short to guard a public port; never shown
    assert main(["--config", str(config), "urlfrontier", "--bind", "0.0.0.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "shorter than 16" in err[0] and "12345" not in err[0], err


# -- peers, tokens, loggers ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("peer", "address"),
    [
        ("ipv4:127.0.0.1:5000", "127.0.0.1"),
        ("ipv4:10.1.2.3:1", "10.1.2.3"),
        ("ipv6:%5B::1%5D:5000", "::1"),
        ("ipv6:[2001:db8::7]:443", "2001:db8::7"),
        ("ipv6:%5B::ffff:10.0.0.9%5D:5000", "10.0.0.9"),  # a dual-stack socket's IPv4 client
        ("ipv6:%5Bfe80::1%25eth0%5D:5000", "fe80::1"),
        ("unix:/tmp/socket", None),
        ("ipv4:not-an-address:5", None),
        ("", None),
    ],
)
def test_peer_addresses(peer: str, address: str | None) -> None:
    found = peer_address(peer)
    assert (str(found) if found is not None else None) == address


def test_the_network_list() -> None:
    nets = security.networks(UrlFrontierConfig(allow_clients=("10.0.0.0/8", "2001:db8::/32")))
    assert peer_allowed("ipv4:10.200.0.1:4000", nets)
    assert peer_allowed("ipv6:%5B::ffff:10.0.0.9%5D:5000", nets)
    assert peer_allowed("ipv6:%5B2001:db8::1%5D:4000", nets)
    assert not peer_allowed("ipv4:11.0.0.1:4000", nets)
    assert not peer_allowed("ipv6:%5B::1%5D:4000", nets)
    assert not peer_allowed("unix:/x", nets)


def test_the_bearer_token(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[bytes] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append(a)
        return bool(real(a, b))

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert bearer_ok([("authorization", f"Bearer {TOKEN}")], TOKEN)
    assert bearer_ok([("user-agent", "x"), ("authorization", f"bearer  {TOKEN} ")], TOKEN)
    assert compared  # compared in constant time
    for metadata in ([], None, [("authorization", "Bearer wrong")], [("authorization", TOKEN)],
                     [("authorization", f"Basic {TOKEN}")], [("x-token", f"Bearer {TOKEN}")],
                     [("authorization", f"Bearer {TOKEN}x")], [("authorization", "Bearer ")]):  # fmt: skip
        assert not bearer_ok(metadata, TOKEN), metadata


def test_only_the_projects_loggers() -> None:
    for name in ("frontier", "frontier.throttle", "workers.urlfrontier.service", "topics", "worker", "urlfrontier",
                 "background"):  # fmt: skip
        assert own_logger(name), name
    for name in ("", "grpc", "grpc._cython", "frontierx", "root", "crawlercommons.urlfrontier", "asyncio", "aiohttp"):
        assert not own_logger(name), name


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code, self.details = code, details


class FakeContext:
    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


def gateway(**section: Any) -> tuple[Gateway, FakeProducer]:
    cfg = Config(urlfrontier=UrlFrontierConfig(**section))
    producer = FakeProducer()
    return Gateway(cfg, None, producer, None, Pools(cfg, None), "test"), producer  # type: ignore[arg-type]


async def test_set_log_level_changes_the_projects_loggers_only() -> None:
    gw, _ = gateway()
    before = logging.getLogger("grpc").level, logging.getLogger().level
    for package in ("", "grpc", "crawlercommons"):
        with pytest.raises(Aborted) as exc:
            await gw.SetLogLevel(pb.LogLevelParams(package=package, level=pb.LogLevelParams.Level.DEBUG),
                                 FakeContext())  # fmt: skip
        assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT and "this project's loggers" in exc.value.details
    assert (logging.getLogger("grpc").level, logging.getLogger().level) == before
    own = logging.getLogger("frontier.test_security")
    await gw.SetLogLevel(pb.LogLevelParams(package=own.name, level=pb.LogLevelParams.Level.ERROR),
                         FakeContext())  # fmt: skip
    assert own.level == logging.ERROR


# -- PutDiscovered's items in flight, the crawl cap ---------------------------------------------------------
async def test_put_discovered_handles_at_most_the_window_of_items_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 300 URLs on a stream whose window is 100: never more than 100 URLs handled at
    once (before, every URL of a batch started at once and the window counted batches: 1,000
    batches of any size), each batch acknowledged with its statuses in its order."""
    gw, _ = gateway(put_window=100)
    running = peak = 0
    release = asyncio.Event()

    async def put(item: pb.URLItem) -> tuple[str, int]:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running >= 100:
            release.set()  # the window is full: let everything go
        await release.wait()
        running -= 1
        url = item.discovered.info.url
        return url, pb.AckMessage.Status.SKIPPED if url.endswith("/7") else pb.AckMessage.Status.OK

    async def applied() -> None:
        return None

    monkeypatch.setattr(gw.puts, "_put", put)
    monkeypatch.setattr(gw.puts, "_applied", applied)

    async def batches() -> AsyncIterator[pb.DiscoveredBatch]:
        for b in range(4):
            infos = [pb.URLInfo(url=f"http://h{b}.test/{i}") for i in range(300)]
            yield pb.DiscoveredBatch(ID=f"b{b}", items=infos)

    acks = [ack async for ack in gw.PutDiscovered(batches(), FakeContext())]
    assert peak <= 100, f"{peak} URLs handled at once"
    assert sorted(a.ID for a in acks) == ["b0", "b1", "b2", "b3"]
    for ack in acks:
        expected = [pb.AckMessage.Status.SKIPPED if i == 7 else pb.AckMessage.Status.OK for i in range(300)]
        assert list(ack.statuses) == expected


async def test_a_put_naming_a_crawl_past_the_cap_is_refused() -> None:
    """A gateway serving ``max_crawls`` crawls: an item of another crawl is SKIPPED with the reason
    on crawl.rejected (it would make a crawl, and a Kafka consumer here); its crawls' items pass."""
    gw, producer = gateway(max_crawls=2)
    gw.shared.pools.pools.update({"a": object(), "b": object()})  # type: ignore[dict-item]
    info = pb.URLInfo(url="http://x.test/", crawlID="c")
    for item in (pb.URLItem(ID="new", discovered=pb.DiscoveredURLItem(info=info)),
                 pb.URLItem(ID="known", known=pb.KnownURLItem(info=info))):  # fmt: skip
        assert await gw.puts._put(item) == (item.ID, pb.AckMessage.Status.SKIPPED)
    reasons = [decode(value, Rejected).reason for topic, value in producer.records if topic.endswith("rejected")]
    assert len(reasons) == 2 and all("urlfrontier.max_crawls" in r and "'c'" in r for r in reasons), reasons
    ok = pb.URLItem(ID="a", discovered=pb.DiscoveredURLItem(info=pb.URLInfo(url="http://x.test/", crawlID="a")))
    assert await gw.puts._put(ok) == ("a", pb.AckMessage.Status.OK)
    assert [t for t, _ in producer.records][-1].endswith("urls")


# -- the interceptor on a real gRPC server ------------------------------------------------------------------
class Toy(pbg.URLFrontierServicer):
    """A unary call, a server stream that sends one URL and then waits for ever, and a stream
    both ways that answers each item."""

    def __init__(self) -> None:
        self.served = 0

    async def GetActive(self, request: pb.Local, context: Any) -> pb.Boolean:
        self.served += 1
        return pb.Boolean(state=True)

    async def GetURLs(self, request: pb.GetParams, context: Any) -> AsyncIterator[pb.URLInfo]:
        self.served += 1
        yield pb.URLInfo(url="http://a.test/")
        await asyncio.Event().wait()

    async def PutURLs(self, request_iterator: AsyncIterator[pb.URLItem], context: Any) -> AsyncIterator[pb.AckMessage]:
        self.served += 1
        async for item in request_iterator:
            yield pb.AckMessage(ID=item.ID, status=pb.AckMessage.Status.OK)


class Served:
    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.toy = Toy()
        self.server = grpc.aio.server(interceptors=[guard])
        pbg.add_URLFrontierServicer_to_server(self.toy, self.server)  # type: ignore[no-untyped-call]
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    async def __aenter__(self) -> pbg.URLFrontierStub:
        await self.server.start()
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")
        return pbg.URLFrontierStub(self.channel)  # type: ignore[no-untyped-call]

    async def __aexit__(self, *_: Any) -> None:
        await self.channel.close()
        await self.server.stop(0)


def items() -> Iterator[pb.URLItem]:
    yield pb.URLItem(ID="1", discovered=pb.DiscoveredURLItem(info=pb.URLInfo(url="http://a.test/")))


async def calls(client: pbg.URLFrontierStub, metadata: Any = None) -> list[grpc.StatusCode]:
    """The code of each kind of call (OK when it answered)."""
    codes = []
    attempts = (lambda: client.GetActive(pb.Local(), metadata=metadata, timeout=10),
                lambda: _first(client.GetURLs(pb.GetParams(), metadata=metadata, timeout=10)),
                lambda: _all(client.PutURLs(items(), metadata=metadata, timeout=10)))  # fmt: skip
    for attempt in attempts:
        try:
            await attempt()
            codes.append(grpc.StatusCode.OK)
        except grpc.aio.AioRpcError as exc:
            codes.append(exc.code())
    return codes


async def _first(call: Any) -> Any:
    async for answer in call:
        call.cancel()
        return answer
    return None


async def _all(call: Any) -> list[Any]:
    return [answer async for answer in call]


async def test_every_kind_of_call_needs_the_token() -> None:
    served = Served(Guard(token=TOKEN))
    async with served as client:
        ok = grpc.StatusCode.OK
        assert await calls(client) == [grpc.StatusCode.UNAUTHENTICATED] * 3
        assert await calls(client, [("authorization", "Bearer nope")]) == [grpc.StatusCode.UNAUTHENTICATED] * 3
        assert served.toy.served == 0  # refused before any handler ran
        assert await calls(client, [("authorization", f"Bearer {TOKEN}")]) == [ok] * 3
        try:
            await client.GetActive(pb.Local(), timeout=10)
        except grpc.aio.AioRpcError as exc:
            assert "authorization: Bearer" in (exc.details() or "")


async def test_a_client_outside_the_networks_is_refused() -> None:
    outside = Served(Guard(allowed=security.networks(UrlFrontierConfig(allow_clients=("10.0.0.0/8",)))))
    async with outside as client:
        assert await calls(client) == [grpc.StatusCode.PERMISSION_DENIED] * 3
        assert outside.toy.served == 0
    with_token = Served(Guard(token=TOKEN, allowed=security.networks(UrlFrontierConfig(allow_clients=("10.0.0.0/8",)))))
    async with with_token as client:  # outside the networks, without the token: told only the former
        assert await calls(client) == [grpc.StatusCode.PERMISSION_DENIED] * 3
    inside = Served(Guard(allowed=security.networks(UrlFrontierConfig(allow_clients=("127.0.0.0/8", "::1/128")))))
    async with inside as client:
        assert await calls(client) == [grpc.StatusCode.OK] * 3


async def test_a_call_past_its_age_is_ended() -> None:
    async with Served(Guard(max_age=0.5)) as client:
        call = client.GetURLs(pb.GetParams(), timeout=30)
        got = []
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            async for info in call:
                got.append(info.url)
        assert got == ["http://a.test/"]
        assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "urlfrontier.max_stream_age" in (exc.value.details() or "")
        assert (await client.GetActive(pb.Local(), timeout=10)).state  # a short call is not touched

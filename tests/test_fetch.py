"""The worker's fetch against real local HTTP servers on loopback: latency, no redirect
following, body cap, and error kinds."""

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from email.utils import parsedate_to_datetime

import aiohttp
import pytest
from aiohappyeyeballs import AddrInfoType
from aiohttp import web

from deploy.kafka import free_port
from frontier.config import BACKOFF_CODES, Config
from workers.api.builtin import AiohttpFetcher
from workers.api.fetch import TimedRequest, bounded_sockets, fetch, send_tracer
from workers.api.links import same_site_links
from workers.api.outcome import is_retryable, throttle_headers

HOST = "127.0.0.77"


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text="<a href='/x'>x</a>", content_type="text/html")


async def _slow_headers(_: web.Request) -> web.Response:
    await asyncio.sleep(0.3)  # simulated server work before the headers
    return web.Response(text="late")


async def _redirect(_: web.Request) -> web.Response:
    return web.Response(status=302, headers={"Location": "/ok"})


async def _big(_: web.Request) -> web.Response:
    return web.Response(body=b"x" * 300_000)


async def _gzipped(_: web.Request) -> web.Response:
    response = web.Response(text="<p>" + "z" * 5000 + "</p>", content_type="text/html")
    response.enable_compression()
    return response


async def _hang(_: web.Request) -> web.Response:
    await asyncio.sleep(1.5)  # the client's timeout (0.3 s) must fire first
    return web.Response(text="never")


async def _unavailable(_: web.Request) -> web.Response:
    return web.Response(status=503, headers={"Retry-After": "7", "X-Other": "1"})


async def _status(request: web.Request) -> web.Response:
    return web.Response(status=int(request.match_info["code"]))


async def _reset(request: web.Request) -> web.Response:
    assert request.transport is not None
    request.transport.close()
    return web.Response(text="unreachable")


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = web.Application()
    for path, handler in {"/ok": _ok, "/slow": _slow_headers, "/redirect": _redirect, "/big": _big, "/gzip": _gzipped,
                          "/hang": _hang, "/503": _unavailable, "/reset": _reset}.items():  # fmt: skip
        app.router.add_get(path, handler)
    app.router.add_get("/status/{code}", _status)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, HOST, port).start()
    yield f"http://{HOST}:{port}"
    await runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def test_ok_and_latency_is_time_to_headers(server: str, session: aiohttp.ClientSession) -> None:
    r = await fetch(session, f"{server}/ok", 5, 1_000_000)
    assert (r.status, r.error, r.truncated) == (200, "", False) and b"href" in r.body
    assert "text/html" in r.content_type
    slow = await fetch(session, f"{server}/slow", 5, 1_000_000)
    assert 0.3 <= slow.latency < 2.0 and slow.latency > r.latency


async def test_redirect_is_reported_not_followed(server: str, session: aiohttp.ClientSession) -> None:
    r = await fetch(session, f"{server}/redirect", 5, 1_000_000)
    assert r.status == 302 and r.headers["location"] == "/ok"


async def test_body_is_capped(server: str, session: aiohttp.ClientSession) -> None:
    r = await fetch(session, f"{server}/big", 5, 100_000)
    assert r.truncated and len(r.body) == 100_000


async def test_a_body_that_came_with_its_headers_is_capped_and_decoded(
    server: str, session: aiohttp.ClientSession
) -> None:
    """A small body is in as soon as its headers are (taken at once): the same cap, the same decoding."""
    whole = await fetch(session, f"{server}/ok", 5, 1_000_000)
    cut = await fetch(session, f"{server}/ok", 5, 5)
    assert (cut.status, cut.error, cut.truncated, cut.body) == (200, "", True, whole.body[:5])
    exact = await fetch(session, f"{server}/ok", 5, len(whole.body))
    assert (exact.truncated, exact.body) == (False, whole.body)
    unzipped = await fetch(session, f"{server}/gzip", 5, 1_000_000)
    assert unzipped.headers["content-encoding"] in ("gzip", "deflate")
    assert unzipped.body == b"<p>" + b"z" * 5000 + b"</p>"
    capped = await fetch(session, f"{server}/gzip", 5, 100)
    assert (capped.truncated, capped.body) == (True, unzipped.body[:100])


async def test_a_body_cut_short_is_truncated() -> None:
    """Fewer bytes than its Content-Length, then the connection closes: an error, whatever came."""

    async def short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nContent-Type: text/html\r\n\r\n0123456789")
        await writer.drain()
        writer.close()

    listening = await asyncio.start_server(short, HOST, 0)
    port = listening.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession() as session:
            r = await fetch(session, f"http://{HOST}:{port}/", 5, 1_000_000)
    finally:
        listening.close()
    assert r.status == 200 and r.error == "truncated"


async def test_error_kinds(server: str, session: aiohttp.ClientSession) -> None:
    hang = await fetch(session, f"{server}/hang", 0.3, 1000)
    assert hang.error == "timeout" and is_retryable(hang)
    reset = await fetch(session, f"{server}/reset", 5, 1000)
    assert reset.error in ("reset", "truncated") and is_retryable(reset)
    refused = await fetch(session, f"http://{HOST}:{free_port()}/", 5, 1000)
    assert refused.error == "connect" and is_retryable(refused)
    unavailable = await fetch(session, f"{server}/503", 5, 1000)
    assert unavailable.status == 503 and is_retryable(unavailable)
    assert throttle_headers(unavailable.headers) == {"retry-after": "7", "date": unavailable.headers["date"]}


async def test_the_server_date_is_kept_for_the_frontier(server: str, session: aiohttp.ClientSession) -> None:
    """An HTTP-date Retry-After is read against the server's clock: its Date goes with the feedback."""
    r = await fetch(session, f"{server}/503", 5, 1000)
    date = throttle_headers(r.headers)["date"]
    assert parsedate_to_datetime(date).timestamp() == pytest.approx(time.time(), abs=5)


async def test_only_what_the_frontier_backs_off_on_is_retried(server: str, session: aiohttp.ClientSession) -> None:
    """Retries agree with frontier.config.BACKOFF_CODES: 500, 501, 505 are answers, not retried."""
    retried = {}
    for code in (200, 404, 429, 500, 501, 502, 503, 504, 505, 520, 524):
        retried[code] = is_retryable(await fetch(session, f"{server}/status/{code}", 5, 1000))
    assert sorted(code for code, yes in retried.items() if yes) == [429, 502, 503, 504, 520, 524]
    assert set(BACKOFF_CODES) == {429, 502, 503, 504, 520, 521, 522, 523, 524}
    five_hundred = await fetch(session, f"{server}/status/500", 5, 1000)
    assert is_retryable(five_hundred, codes=(500,)), "a scope's configured codes decide"


def test_same_site_links() -> None:
    html = """<base href="/dir/"><a href="a">a</a><a href="http://sub.example.com/b#f">b</a>
              <a href="http://other.org/c">c</a><a href="mailto:x@example.com">m</a><a href="a">dup</a><a>none</a>"""
    assert same_site_links("http://www.example.com/start", html) == [
        "http://www.example.com/dir/a",
        "http://sub.example.com/b",
    ]
    assert same_site_links("http://example.com/", "<a href='http://[bad/'>x</a><p") == []


async def test_send_time_is_when_the_headers_left(server: str) -> None:
    """With the tracer, sent_at is when the request headers were written (after connecting), and
    on_sent fires once, also when redirects are followed (robots.txt)."""
    times: list[float] = []
    async with aiohttp.ClientSession(trace_configs=[send_tracer()]) as traced:
        before = time.time()
        r = await fetch(traced, f"{server}/redirect", 5, 1_000_000, max_redirects=5, on_sent=times.append)
        after = time.time()
    assert r.status == 200 and len(times) == 1
    assert before <= times[0] == r.sent_at <= after
    async with aiohttp.ClientSession() as untraced:  # no tracer: the time before the request, no callback
        r = await fetch(untraced, f"{server}/ok", 5, 1_000_000, on_sent=times.append)
    assert r.status == 200 and len(times) == 1 and r.sent_at > 0


class _SlowResolver(aiohttp.abc.AbstractResolver):
    """Resolves any name to HOST after ``delay`` seconds: a connection set-up that takes time."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[aiohttp.abc.ResolveResult]:
        await asyncio.sleep(self.delay)
        return [{"hostname": host, "host": HOST, "port": port, "family": socket.AF_INET, "proto": 0,
                 "flags": socket.AI_NUMERICHOST}]  # fmt: skip

    async def close(self) -> None:
        pass


@pytest.mark.parametrize("timing", ["request_class", "tracer"])
async def test_the_send_time_is_read_after_the_connection_is_made(server: str, timing: str) -> None:
    """A session made with ``request_class=TimedRequest`` (the built-in fetcher's) times the send
    as the tracer does: after the connection set-up (here a slow resolution), once with redirects,
    and a refused connection is a ``connect`` error (the request never left)."""
    made = {"request_class": TimedRequest} if timing == "request_class" else {"trace_configs": [send_tracer()]}
    times: list[float] = []
    connector = aiohttp.TCPConnector(resolver=_SlowResolver(0.3), use_dns_cache=False)
    async with aiohttp.ClientSession(connector=connector, **made) as s:
        before = time.time()
        r = await fetch(s, server.replace(HOST, "slow.test") + "/redirect", 5, 1 << 20, max_redirects=5,
                        on_sent=times.append)  # fmt: skip
        after = time.time()
        assert r.status == 200 and r.error == "" and len(times) == 1
        assert before + 0.3 <= times[0] == r.sent_at <= after
        refused = await fetch(s, f"http://{HOST}:{free_port()}/", 5, 1000, on_sent=times.append)
        assert refused.error == "connect" and len(times) == 1


async def test_the_built_in_session_times_sends_without_aiohttps_tracing() -> None:
    """The built-in fetcher's session reads send times with TimedRequest, not aiohttp's tracing (a
    quarter of a fetch's CPU), and leaves the timeout to fetch() (the job's: one timer a request)."""
    fetcher = AiohttpFetcher(Config(), 4)
    s = fetcher.session()
    try:
        assert s._request_class is TimedRequest and not s.trace_configs
        assert s.timeout.total is None and s.timeout.sock_connect is None
    finally:
        await fetcher.close()


async def test_the_built_in_fetchers_sockets_drop_what_stays_unacknowledged(server: str) -> None:
    """Every connection the session makes carries the kernel's bound on unacknowledged bytes
    (TCP_USER_TIMEOUT): a request reaches its server within it or never (what it prevents, a
    request delivered when a dead link heals, is tests/integration/test_cluster.py's)."""
    made: list[socket.socket] = []
    factory = bounded_sockets(2.5)

    def make(info: AddrInfoType) -> socket.socket:
        made.append(factory(info))
        return made[-1]

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(socket_factory=make)) as s:
        r = await fetch(s, f"{server}/ok", 5.0, 1 << 20)
        assert r.status == 200 and r.error == ""
        assert made and all(m.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 2500 for m in made)

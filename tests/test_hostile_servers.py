"""Hostile and broken servers (raw sockets on loopback): the fetch always ends, within its
timeout and memory cap, with a clear error kind. Nothing here can hang or exhaust the worker."""

import asyncio
import gzip
import socket
import ssl
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
import trustme

from workers.api.fetch import fetch
from workers.api.outcome import is_retryable

HOST = "127.0.0.66"
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: Handler, ssl_ctx: ssl.SSLContext | None = None) -> tuple[asyncio.Server, str]:
    async def guarded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(guarded, HOST, 0, ssl=ssl_ctx)
    port = server.sockets[0].getsockname()[1]
    return server, f"{'https' if ssl_ctx else 'http'}://{HOST}:{port}/"


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def run(session: aiohttp.ClientSession, handler: Handler, timeout: float = 1.0, cap: int = 100_000,
              ssl_ctx: ssl.SSLContext | None = None):  # type: ignore[no-untyped-def]  # fmt: skip
    server, url = await _serve(handler, ssl_ctx)
    try:
        started = time.monotonic()
        result = await fetch(session, url, timeout, cap)
        return result, time.monotonic() - started
    finally:
        server.close()


async def test_a_body_that_trickles_forever_times_out(session: aiohttp.ClientSession) -> None:
    async def trickle(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n")
        for _ in range(100):  # bounded: 10 s at most, far beyond the client's timeout
            w.write(b"x")
            await w.drain()
            await asyncio.sleep(0.1)  # the simulated server's trickle

    result, took = await run(session, trickle, timeout=0.5)
    assert result.error == "timeout" and took < 1.5 and is_retryable(result)


async def test_a_compression_bomb_is_cut_at_the_cap(session: aiohttp.ClientSession) -> None:
    bomb = gzip.compress(b"\0" * 50_000_000)  # 50 MB of zeros in ~50 KB

    async def serve_bomb(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bomb) + bomb)
        await w.drain()

    result, _ = await run(session, serve_bomb, timeout=5, cap=1_000_000)
    assert result.truncated and len(result.body) == 1_000_000


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\nX-Huge: " + b"a" * 100_000 + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBroken header line without colon\r\n\r\n",
        b"HTTP/1.1 abc Nonsense\r\n\r\n",
        b"NOT HTTP AT ALL\r\n\r\n",
    ],
)
async def test_malformed_responses_are_an_error_kind(session: aiohttp.ClientSession, response: bytes) -> None:
    async def bad(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(response)
        await w.drain()

    result, _ = await run(session, bad)
    assert result.error in ("bad_response", "reset", "truncated") and result.status in (0, 200)


async def test_truncated_body(session: aiohttp.ClientSession) -> None:
    async def short(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly a little")
        await w.drain()

    result, _ = await run(session, short)
    assert result.error == "truncated" and is_retryable(result)


async def test_tls_errors_are_reported_not_retried(session: aiohttp.ClientSession) -> None:
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("some-other-name.test").configure_cert(server_ctx)  # wrong name, untrusted CA

    async def ok(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await w.drain()

    result, _ = await run(session, ok, ssl_ctx=server_ctx)
    assert result.error == "tls" and not is_retryable(result)


async def test_a_reset_before_the_response_headers_is_a_network_error(session: aiohttp.ClientSession) -> None:
    """The server reads the request, then resets the connection (RST: SO_LINGER 0) before any byte
    of the response: aiohttp raises ClientOSError, which must be the network error "reset" (backoff,
    retry), not a client error."""

    async def rst(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        w.transport.abort()

    result, took = await run(session, rst)
    assert (result.error, result.status) == ("reset", 0) and is_retryable(result) and took < 1.0

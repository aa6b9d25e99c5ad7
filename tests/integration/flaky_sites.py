"""Sites that fail before they answer, as a new user meets them: one that resets its first
connections (a TCP RST, no HTTP at all), one whose robots.txt answers 429 with Retry-After a few
times. Each serves a small linked site once it answers, and logs every request and reset with its
time, so a test judges the crawl from what the site saw."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

PAGES = 6  # the root and /page/1 .. /page/5, all linked from the root


@dataclass
class Seen:
    """One connection as the site saw it: when, what it asked (empty for a reset), what it got."""

    at: float
    path: str
    status: int  # 0: reset before any answer


@dataclass
class FlakySite:
    """A site on ``host``: ``resets`` connections are reset, from its ``reset_from``-th on (0: the
    first); robots.txt answers 429 with ``Retry-After: retry_after`` to its first ``robots_429``
    requests (then 404: no rules)."""

    host: str
    resets: int = 0
    reset_from: int = 0
    robots_429: int = 0
    retry_after: int = 2
    port: int = 0
    log: list[Seen] = field(default_factory=list)

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def urls(self) -> list[str]:
        return [self.url("/")] + [self.url(f"/page/{i}") for i in range(1, PAGES)]

    def answered(self, path: str) -> list[Seen]:
        return [s for s in self.log if s.path == path and s.status == 200]

    def complete(self) -> bool:
        return all(self.answered(u.split(str(self.port), 1)[1]) for u in self.urls())

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        now = time.time()
        if len(self.log) >= self.reset_from and sum(1 for s in self.log if s.status == 0) < self.resets:
            self.log.append(Seen(now, "", 0))
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()  # closed with a RST: the client sees a connection reset
            return
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        path = head.split(b" ", 2)[1].decode("latin-1") if head.count(b" ") >= 2 else "/"
        status, headers, body = self.answer(path)
        self.log.append(Seen(time.time(), path, status))
        lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Connection: close", *headers]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        try:
            await writer.drain()
        finally:
            writer.close()

    def answer(self, path: str) -> tuple[int, list[str], bytes]:
        if path == "/robots.txt":
            if sum(1 for s in self.log if s.path == path) < self.robots_429:
                return 429, [f"Retry-After: {self.retry_after}"], b"slow down"
            return 404, [], b""
        if path == "/" or (path.startswith("/page/") and path[6:].isdigit() and 0 < int(path[6:]) < PAGES):
            links = "".join(f'<a href="/page/{i}">{i}</a>' for i in range(1, PAGES))
            return 200, ["Content-Type: text/html"], f"<html><body>{links}</body></html>".encode()
        return 404, [], b"not found"


class FlakyFleet:
    """The sites, served from a background thread's event loop on one free port."""

    def __init__(self, sites: list[FlakySite]) -> None:
        self.sites = sites
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="flaky-sites", daemon=True)
        self._servers: list[asyncio.Server] = []

    def start(self) -> FlakyFleet:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    async def _start(self) -> None:
        port = 0
        for site in self.sites:
            server = await asyncio.start_server(site.serve, site.host, port)
            port = port or server.sockets[0].getsockname()[1]
            site.port = port
            self._servers.append(server)

    def stop(self) -> None:
        async def close() -> None:
            for server in self._servers:
                server.close()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

"""Hostile servers, through the whole stack on the real broker: the workers survive, every URL is
reported on crawl.pages with a clear error kind, and the frontier backs off where that is right
(network errors) and not where retrying helps no one (TLS, malformed responses)."""

import asyncio
import gzip
import ssl
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import trustme

from frontier.demo.stack import Stack, TopicReader, read_pages, wait_until
from tests.integration.helpers import submit

Handler = Callable[[asyncio.StreamWriter], Awaitable[None]]
BOMB = gzip.compress(b"\0" * 20_000_000)


async def trickle(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n")
    for _ in range(50):  # bounded: 10 s, far beyond the 1.5 s fetch timeout
        w.write(b"x")
        await w.drain()
        await asyncio.sleep(0.2)  # the simulated server's trickle


async def bomb(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(BOMB) + BOMB)
    await w.drain()


async def huge_headers(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nX-Huge: " + b"h" * 200_000 + b"\r\nContent-Length: 0\r\n\r\n")
    await w.drain()


async def reset(w: asyncio.StreamWriter) -> None:
    w.transport.abort()


async def garbage_retry_after(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 429 Too Many\r\nRetry-After: soon, maybe\r\nRateLimit: r=;t=x\r\nContent-Length: 0\r\n\r\n")
    await w.drain()


async def ok(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    await w.drain()


class HostileFleet:
    """One raw-socket server per behaviour, each on its own loopback address; robots.txt is a 404."""

    def __init__(self, behaviours: dict[str, Handler], tls: set[str]) -> None:
        self.behaviours = behaviours
        self.tls = tls
        self.hosts = {name: f"127.0.0.{121 + i}" for i, name in enumerate(behaviours)}
        self.hits: dict[str, list[float]] = defaultdict(list)
        self.ports: dict[str, int] = {}
        # Certificates are made here, on the main thread: importing (compiling) modules on two
        # threads at once trips CPython 3.11's AST recursion counter (gh-106905).
        ca = trustme.CA()
        self._tls_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("not-this-host.test").configure_cert(self._tls_ctx)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def url(self, name: str) -> str:
        scheme = "https" if name in self.tls else "http"
        return f"{scheme}://{self.hosts[name]}:{self.ports[name]}/page"

    def start(self) -> "HostileFleet":
        self._thread.start()
        assert self._ready.wait(20)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        tls_ctx = self._tls_ctx

        async def start() -> None:
            for name, handler in self.behaviours.items():
                server = await asyncio.start_server(self._handler(name, handler), self.hosts[name], 0,
                                                    ssl=tls_ctx if name in self.tls else None)  # fmt: skip
                self.ports[name] = server.sockets[0].getsockname()[1]

        self._loop.run_until_complete(start())
        self._ready.set()
        self._loop.run_forever()

    def _handler(
        self, name: str, behave: Handler
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                request = await reader.readuntil(b"\r\n\r\n")
                if request.startswith(b"GET /robots.txt"):
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                else:
                    self.hits[name].append(time.time())
                    await behave(writer)
            except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
                pass
            finally:
                writer.close()

        return handle


def test_hostile_servers_end_in_clear_error_kinds(bootstrap: str, tmp_path: Path) -> None:
    behaviours = {"trickle": trickle, "bomb": bomb, "huge_headers": huge_headers, "reset": reset,
                  "garbage_retry_after": garbage_retry_after, "tls": ok}  # fmt: skip
    fleet = HostileFleet(behaviours, tls={"tls"}).start()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=2,
                  # robots.txt over TLS fails too: disallow, retry after 1 s, give up after 3 s (not a day);
                  # a host failing as a whole is given 5 s (not 6 h) before its URL ends
                  frontier={"fetch_timeout": 1.5, "max_retries": 1, "robots_retry": 1.0, "robots_give_up": 3.0,
                            "retry_give_up": 5.0},
                  throttle={"delay": 0.1, "autothrottle": {"start_delay": 0}, "backoff": {"min_delay": 1.0}},
                  worker={"allow_networks": ["127.0.0.0/8"], "max_body_bytes": 1_000_000})  # fmt: skip
    reader = None
    try:
        stack.create_topics()
        stack.start_frontier()
        stack.start_worker("w1")
        submit(stack, [fleet.url(name) for name in behaviours])
        reader = TopicReader(stack.client, stack.topics.pages)
        pages = {}

        def all_reported() -> bool:
            stack.check_alive()  # the worker survives every one of them
            pages.update({p.url: p for p in read_pages(reader)})
            return len(pages) == len(behaviours)

        wait_until(all_reported, timeout=90, what="every hostile URL to be reported")
        by = {name: pages[fleet.url(name)] for name in behaviours}
        summary = {n: (p.outcome, p.error or p.status, len(fleet.hits[n])) for n, p in by.items()}
        print(f"[hostile servers] {summary}")
        assert (by["trickle"].outcome, by["trickle"].error) == ("error", "timeout")
        assert by["bomb"].truncated and len(by["bomb"].body) == 1_000_000
        assert by["huge_headers"].error == "bad_response"
        assert by["reset"].error in ("reset", "truncated")
        assert by["garbage_retry_after"].status == 429
        # RFC 9309: no usable robots.txt (here a TLS failure) means fetch nothing; in the end the URL
        # is reported with the reason instead of waiting forever
        assert by["tls"].outcome == "error" and "robots.txt unreachable" in by["tls"].error, by["tls"].error
        assert "last: tls" in by["tls"].error
        # retries, with backoff after network errors and 429s; none for TLS or malformed responses
        for name in ("trickle", "reset", "garbage_retry_after"):
            first, second = fleet.hits[name][:2]
            assert second - first >= 0.95, f"{name}: retried {second - first:.2f}s later, without backoff"
        assert len(fleet.hits["tls"]) == 0 and len(fleet.hits["huge_headers"]) == 1
    finally:
        if reader is not None:
            reader.close()
        stack.stop_all()
        fleet.stop()

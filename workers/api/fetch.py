"""One HTTP fetch, measured: latency from send to response headers, body capped, no redirects.

The worker never follows a redirect itself: a 3xx is a result like any other, and its
``Location`` goes back through the frontier as a new URL, so redirects are throttled too.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
from aiohappyeyeballs import AddrInfoType, SocketFactoryType

from workers.api.addresses import say_blocked
from workers.api.clock import SYSTEM, Clock
from workers.api.outcome import FetchResult
from workers.api.safety import BlockedAddress

log = logging.getLogger("worker")


def bounded_sockets(unacked: float) -> SocketFactoryType:
    """A socket factory for :class:`aiohttp.TCPConnector` (``socket_factory``): on each TCP socket
    the kernel gives up once bytes it sent stay unacknowledged for ``unacked`` seconds
    (``TCP_USER_TIMEOUT``: Linux), connection set-up included, whatever this process does then.

    So a request either reaches the server within ``unacked`` seconds of leaving, or never: one
    sent into a dead link (or by a process that then froze or lost its job) cannot be delivered
    by TCP's retransmissions when the link heals, after its job was given to another worker or
    retried (found by the cluster tests: requests landing in pairs at the heal). Bytes the server
    acknowledged are unaffected: a slow answer still has the whole fetch timeout.
    """
    millis = max(1, round(unacked * 1000))
    option = getattr(socket, "TCP_USER_TIMEOUT", None)

    def make(info: AddrInfoType) -> socket.socket:
        family, kind, proto, _, _ = info
        sock = socket.socket(family=family, type=kind, proto=proto)
        if option is not None and kind == socket.SOCK_STREAM:
            sock.setsockopt(socket.IPPROTO_TCP, option, millis)
        return sock

    return make


def send_tracer() -> aiohttp.TraceConfig:
    """Tells :func:`fetch` when a request's headers actually left: the moment the server counts.

    Sessions that fetch pass this in ``trace_configs`` (or, cheaper, are made with
    ``request_class=TimedRequest``); without either, the send time is taken just before the
    request starts (connection set-up and event-loop stalls then fall inside gaps).
    """
    tracer = aiohttp.TraceConfig()

    def calling(name: str) -> Callable[[Any, Any, Any], Awaitable[None]]:
        async def call(_session: Any, ctx: Any, _params: Any) -> None:
            hook = (ctx.trace_request_ctx or {}).get(name)
            if hook is not None:
                hook()

        return call

    tracer.on_request_headers_sent.append(calling("sent"))
    tracer.on_connection_create_end.append(calling("connected"))
    tracer.on_connection_reuseconn.append(calling("connected"))
    return tracer


# the hooks of the request being made in this task (fetch sets them; TimedRequest calls them)
_hooks: contextvars.ContextVar[dict[str, Callable[[], None]] | None] = contextvars.ContextVar("hooks", default=None)


class TimedRequest(aiohttp.ClientRequest):
    """What :func:`send_tracer` tells :func:`fetch`, for a fraction of its cost: a session made with
    ``request_class=TimedRequest`` calls the request's ``connected`` hook when a connection to the
    server is in hand, and ``sent`` once the request headers were handed to the socket. aiohttp's
    tracing builds an object per signal and awaits every signal of every request (measured: a
    quarter of a fetch's CPU on a keep-alive connection); this is two calls.

    The send time is read right after the headers were written (``ClientRequest.send`` writes them
    without waiting), so it is never before they left: a host's next request timed from it keeps
    at least its distance from this one.
    """

    async def send(self, conn: Any) -> aiohttp.ClientResponse:
        hooks = _hooks.get()
        if hooks is not None:
            hooks["connected"]()
        try:
            return await super().send(conn)
        finally:  # (raised: whether the headers left is not known, so they count as sent)
            if hooks is not None:
                hooks["sent"]()


async def fetch(
    session: aiohttp.ClientSession,
    url: str,
    timeout: float,
    max_body: int,
    max_redirects: int = 0,
    on_sent: Callable[[float], None] | None = None,
    on_headers: Callable[[FetchResult], None] | None = None,
    headers: Mapping[str, str] | None = None,
    clock: Clock = SYSTEM,
) -> FetchResult:
    """Fetch ``url``; redirects are followed only when ``max_redirects`` > 0 (no caller does:
    robots.txt hops come back as jobs of their own, throttled like any request).

    ``sent_at`` and the latency start when the request headers were sent (with a session made
    with ``request_class=TimedRequest``, or :func:`send_tracer` in its ``trace_configs``), and
    ``on_sent`` is called with that time.
    ``on_headers`` is called with the result as soon as the status and headers are in, before
    the body is read (a worker closes a host's window at once, see :meth:`~workers.api.holding.Holder.answered`).
    ``headers``: sent with the request (a revisit's conditional headers); ``clock``: send times
    are read on it (latencies on the event loop's).
    """
    loop = asyncio.get_running_loop()
    result = FetchResult(sent_at=clock.now())
    t0 = loop.time()

    first = True
    connected = False  # a connection to the server was made (known with send_tracer)

    def sent() -> None:
        nonlocal t0, first, connected
        connected = True
        if first:  # the first request, not a redirect hop
            first = False
            result.sent_at, t0 = clock.now(), loop.time()
            if on_sent is not None:
                on_sent(result.sent_at)

    def connection_made() -> None:
        nonlocal connected
        connected = True

    hooks = {"sent": sent, "connected": connection_made}
    token = _hooks.set(hooks)
    try:
        async with asyncio.timeout(timeout):
            follow = max_redirects > 0
            async with session.get(url, allow_redirects=follow, max_redirects=max(1, max_redirects), headers=headers,
                                   trace_request_ctx=hooks) as resp:  # fmt: skip
                result.latency = loop.time() - t0  # headers received
                result.status = resp.status
                hdrs: dict[str, str] = {}
                for k, v in resp.headers.items():
                    key = k.lower()
                    hdrs[key] = f"{hdrs[key]}, {v}" if key in hdrs else v
                result.headers = hdrs
                if on_headers is not None:
                    on_headers(result)
                content = resp.content
                if content.is_eof():  # the whole body came with the headers (most pages): taken as it is
                    body = content.read_nowait()
                    result.truncated = len(body) > max_body
                    result.body = body[:max_body]
                else:
                    chunks: list[bytes] = []
                    size = 0
                    async for chunk in content.iter_chunked(65536):
                        chunks.append(chunk)
                        size += len(chunk)
                        if size > max_body:
                            result.truncated = True
                            break
                    result.body = b"".join(chunks)[:max_body]
    except TimeoutError:
        result.error = "timeout"
    except (aiohttp.ClientSSLError, aiohttp.ClientConnectorCertificateError):
        result.error = "tls"  # before ClientConnectorError: they subclass it
    except (aiohttp.ClientConnectorError, ConnectionRefusedError):
        result.error = "connect"
    except (aiohttp.ServerDisconnectedError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
        result.error = "reset"
    except aiohttp.ClientPayloadError:
        result.error = "truncated"
    except BlockedAddress as exc:
        result.error = "blocked_address"
        say_blocked(log, exc.host, exc.addresses)
    except aiohttp.TooManyRedirects:
        result.error = "redirects"
    except aiohttp.ClientResponseError:
        result.error = "bad_response"  # malformed status line or headers, oversized headers
    except aiohttp.ClientOSError:
        # An OS error on an established connection (connect failures are ClientConnectorError),
        # e.g. a reset while the status line is read: the network failed.
        result.error = "reset"
    except OSError:
        result.error = "reset" if connected else "connect"
    except (aiohttp.ClientError, ValueError, UnicodeError) as exc:
        result.error = f"client:{type(exc).__name__}"
    finally:
        _hooks.reset(token)
    if result.error and not result.latency:
        result.latency = loop.time() - t0
    return result

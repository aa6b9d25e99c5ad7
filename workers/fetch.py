"""One HTTP fetch, measured: latency from send to response headers, body capped, no redirects.

The worker never follows a redirect itself: a 3xx is a result like any other, and its
``Location`` goes back through the frontier as a new URL, so redirects are throttled too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from topics.schemas import NETWORK_ERRORS
from workers.safety import BlockedAddress

# Headers the frontier's throttling reads (Retry-After, RateLimit drafts); kept in feedback.
THROTTLE_HEADERS = ("retry-after", "ratelimit", "ratelimit-policy", "ratelimit-limit", "ratelimit-remaining",
                    "ratelimit-reset", "x-ratelimit-remaining", "x-ratelimit-reset")  # fmt: skip


@dataclass
class FetchResult:
    sent_at: float  # epoch seconds
    status: int = 0
    latency: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    truncated: bool = False
    error: str = ""  # error kind when no response was received

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


def is_retryable(result: FetchResult) -> bool:
    """Network errors, 429 and 5xx are worth another attempt (bounded by the job's retries_left)."""
    return result.error in NETWORK_ERRORS or result.status == 429 or 500 <= result.status <= 599


def throttle_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k in THROTTLE_HEADERS}


def send_tracer() -> aiohttp.TraceConfig:
    """Tells :func:`fetch` when a request's headers actually left: the moment the server counts.

    Sessions that fetch pass this in ``trace_configs``; without it, the send time is taken just
    before the request starts (connection set-up and event-loop stalls then fall inside gaps).
    """
    tracer = aiohttp.TraceConfig()

    async def headers_sent(_session: Any, ctx: Any, _params: Any) -> None:
        hook = (ctx.trace_request_ctx or {}).get("sent")
        if hook is not None:
            hook()

    tracer.on_request_headers_sent.append(headers_sent)
    return tracer


async def fetch(
    session: aiohttp.ClientSession,
    url: str,
    timeout: float,
    max_body: int,
    max_redirects: int = 0,
    on_sent: Callable[[float], None] | None = None,
) -> FetchResult:
    """Fetch ``url``; redirects are followed only when ``max_redirects`` > 0 (robots.txt, RFC 9309).

    ``sent_at`` and the latency start when the request headers were sent (with
    :func:`send_tracer` on the session), and ``on_sent`` is called with that time.
    """
    loop = asyncio.get_running_loop()
    result = FetchResult(sent_at=time.time())
    t0 = loop.time()

    first = True

    def sent() -> None:
        nonlocal t0, first
        if first:  # the first request, not a redirect hop
            first = False
            result.sent_at, t0 = time.time(), loop.time()
            if on_sent is not None:
                on_sent(result.sent_at)

    try:
        async with asyncio.timeout(timeout):
            follow = max_redirects > 0
            async with session.get(url, allow_redirects=follow, max_redirects=max(1, max_redirects),
                                   trace_request_ctx={"sent": sent}) as resp:  # fmt: skip
                result.latency = loop.time() - t0  # headers received
                result.status = resp.status
                hdrs: dict[str, str] = {}
                for k, v in resp.headers.items():
                    key = k.lower()
                    hdrs[key] = f"{hdrs[key]}, {v}" if key in hdrs else v
                result.headers = hdrs
                chunks: list[bytes] = []
                size = 0
                async for chunk in resp.content.iter_chunked(65536):
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
    except aiohttp.ClientConnectorError:
        result.error = "connect"
    except (aiohttp.ServerDisconnectedError, ConnectionResetError):
        result.error = "reset"
    except aiohttp.ClientPayloadError:
        result.error = "truncated"
    except BlockedAddress:
        result.error = "blocked_address"
    except aiohttp.TooManyRedirects:
        result.error = "redirects"
    except aiohttp.ClientResponseError:
        result.error = "bad_response"  # malformed status line or headers, oversized headers
    except (aiohttp.ClientError, ValueError, UnicodeError) as exc:
        result.error = f"client:{type(exc).__name__}"
    if result.error and not result.latency:
        result.latency = loop.time() - t0
    return result

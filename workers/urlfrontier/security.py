"""Who may call the URLFrontier gateway, and the limits no client can exceed (docs/URLFRONTIER.md,
"Security").

- a bearer token in each call's metadata (``authorization: Bearer TOKEN``): ``urlfrontier.token``,
  or the first line of ``urlfrontier.token_file``; compared in constant time; a call without it
  ends with ``UNAUTHENTICATED`` before its handler runs;
- TLS on the port (``urlfrontier.tls_cert`` / ``tls_key``), and with ``urlfrontier.tls_client_ca``
  a client certificate signed by that CA required of every connection (the handshake fails
  without one);
- the clients' networks (``urlfrontier.allow_clients``): a call from another address ends with
  ``PERMISSION_DENIED``;
- a gateway listening beyond loopback with none of the token, client certificates or a network
  list refuses to start (:func:`check_exposure`: one line, exit status 2), as the live page does.

The token and the networks are checked by :class:`Guard`, a server interceptor: every method,
streams included, passes through it. It also ends a call that outlives
``urlfrontier.max_stream_age``. The other limits are the server's options
(:func:`server_options`) and the service's own (``put_window``, ``max_crawls``, the loggers
``SetLogLevel`` may change: :func:`own_logger`).
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import ipaddress
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import grpc

from frontier.config import ConfigError, UrlFrontierConfig
from frontier.config.exposure import MIN_TOKEN_CHARS, is_loopback

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
KEEPALIVE_TIMEOUT = 20.0  # seconds a ping may go unanswered before its connection is closed
# the loggers of this project (SetLogLevel may change these and their children, nothing else)
OWN_LOGGERS = ("frontier", "workers", "topics", "worker", "urlfrontier", "background")


def read_token(cfg: UrlFrontierConfig) -> str:
    """The token calls must carry ("" when none is configured). A token file's first line (a
    mounted Kubernetes secret) is read once, at start; its content is never shown."""
    if not cfg.token_file:
        return cfg.token.strip()
    try:
        text = Path(cfg.token_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"urlfrontier.token_file: cannot read {cfg.token_file!r} ({type(exc).__name__})") from None
    token = (text.splitlines() or [""])[0].strip()
    if not token:
        raise ConfigError(f"urlfrontier.token_file: {cfg.token_file!r} is empty")
    return token


def networks(cfg: UrlFrontierConfig) -> list[Network]:
    return [ipaddress.ip_network(n.strip(), strict=False) for n in cfg.allow_clients]


def check_exposure(cfg: UrlFrontierConfig) -> None:
    """Refuse (ConfigError, one line) a gateway on a non-loopback address that anyone reaching the
    port may call: no token (of at least MIN_TOKEN_CHARS characters), no client certificates, no
    network list short of every address. Also refuse TLS files that cannot be read."""
    for key in ("tls_cert", "tls_key", "tls_client_ca"):
        path = getattr(cfg, key)
        if path and not _readable(path):
            raise ConfigError(f"urlfrontier.{key}: cannot read {path!r}")
    token = read_token(cfg)
    if is_loopback(cfg.bind):
        return
    if len(token) >= MIN_TOKEN_CHARS or cfg.tls_client_ca:
        return
    if cfg.allow_clients and not any(net.prefixlen == 0 for net in networks(cfg)):
        return
    problem = "is not set" if not token else f"is shorter than {MIN_TOKEN_CHARS} characters"
    raise ConfigError(
        f"urlfrontier.bind = {cfg.bind!r} exposes the URLFrontier gateway beyond this machine and urlfrontier.token "
        f"{problem}, with neither urlfrontier.tls_client_ca nor urlfrontier.allow_clients: set one (e.g. "
        "CRAWL__URLFRONTIER__TOKEN from a secret) or bind to 127.0.0.1"
    )


def _readable(path: str) -> bool:
    try:
        Path(path).read_bytes()
    except OSError:
        return False
    return True


def credentials(cfg: UrlFrontierConfig) -> grpc.ServerCredentials | None:
    """TLS credentials of the port (None: plaintext); client certificates required with a CA."""
    if not cfg.tls_cert:
        return None
    key, cert = Path(cfg.tls_key).read_bytes(), Path(cfg.tls_cert).read_bytes()
    ca = Path(cfg.tls_client_ca).read_bytes() if cfg.tls_client_ca else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


def server_options(cfg: UrlFrontierConfig) -> list[tuple[str, Any]]:
    """The gRPC server's limits: message size, and pings that let go of a client gone silently
    (its calls end: a dead client's streams do not hold call slots)."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", cfg.max_message_bytes),
        ("grpc.max_send_message_length", cfg.max_message_bytes),
    ]
    if cfg.keepalive > 0:
        options += [
            ("grpc.keepalive_time_ms", int(cfg.keepalive * 1000)),
            ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT * 1000)),
            ("grpc.http2.max_pings_without_data", 0),  # keep pinging a connection whose streams are quiet
            ("grpc.keepalive_permit_without_calls", 1),
        ]
    return options


def peer_address(peer: str) -> Address | None:
    """The IP address in a gRPC peer (``ipv4:10.0.0.1:5000``, ``ipv6:%5B::1%5D:5000``); an IPv4
    address mapped into IPv6 (a dual-stack socket) as IPv4; None for anything else."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host = unquote(rest)
    if kind == "ipv6":
        host = host[1:].partition("]")[0] if host.startswith("[") else host.rpartition(":")[0]
        host = host.partition("%")[0]  # a zone (fe80::1%eth0)
    else:
        host = host.rpartition(":")[0]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def peer_allowed(peer: str, allowed: Sequence[Network]) -> bool:
    address = peer_address(peer)
    return address is not None and any(address.version == net.version and address in net for net in allowed)


def bearer_ok(metadata: Sequence[tuple[str, str | bytes]] | None, token: str) -> bool:
    """Does the call's metadata carry ``authorization: Bearer <token>``? (constant-time compare)"""
    expected = token.encode()
    found = False
    for key, value in metadata or ():
        if key.lower() != "authorization":
            continue
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        scheme, _, given = text.strip().partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected):
            found = True
    return found


def own_logger(name: str) -> bool:
    """May SetLogLevel change this logger? Only this project's (``frontier``, ``workers``,
    ``topics`` and their children, and the processes' own ``worker``, ``urlfrontier``,
    ``background``); not the root logger, nor gRPC's, Kafka's or any library's."""
    return any(name == own or name.startswith(own + ".") for own in OWN_LOGGERS)


Behaviour = Callable[..., Any]


class Guard(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Every call: its client's network (``PERMISSION_DENIED``), its token (``UNAUTHENTICATED``),
    and its age (``DEADLINE_EXCEEDED`` past ``max_age`` seconds, 0: no limit)."""

    def __init__(self, token: str = "", allowed: Sequence[Network] = (), max_age: float = 0.0) -> None:
        self.token = token
        self.allowed = list(allowed)
        self.max_age = max_age

    @property
    def active(self) -> bool:
        return bool(self.token or self.allowed or self.max_age)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        if self.token and not bearer_ok(handler_call_details.invocation_metadata, self.token):
            return _refusing(handler, grpc.StatusCode.UNAUTHENTICATED,
                             "this gateway needs a token: metadata 'authorization: Bearer TOKEN'",
                             self._check_peer)  # fmt: skip
        if not self.allowed and not self.max_age:
            return handler  # nothing to check per call: the handler as it is
        return _wrapped(handler, self._check_peer, self.max_age)

    async def _check_peer(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        if self.allowed and not peer_allowed(context.peer(), self.allowed):
            address = peer_address(context.peer())
            shown = address or context.peer()[:60]
            why = f"client {shown} is not in urlfrontier.allow_clients"
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)


Check = Callable[[grpc.aio.ServicerContext[Any, Any]], Awaitable[None]]


def _refusing(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, why: str, check: Check) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s kind that ends the call with ``code`` (after the network check:
    a client outside the list learns only that)."""

    async def refuse(_request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await check(context)
        await context.abort(code, why)

    return _rebuilt(handler, refuse)


def _wrapped(handler: grpc.RpcMethodHandler, check: Check, max_age: float) -> grpc.RpcMethodHandler:
    inner: Behaviour = _behaviour(handler)
    if handler.response_streaming:

        async def streaming(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            await check(context)
            answers = inner(request, context)
            if not inspect.isasyncgen(answers):  # a handler that writes with context.write
                await _within(answers, max_age, context)
                return
            try:
                async for answer in _aged(answers, max_age, context) if max_age else answers:
                    yield answer
            finally:
                await answers.aclose()

        return _rebuilt(handler, streaming)

    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await check(context)
        return await _within(inner(request, context), max_age, context)

    return _rebuilt(handler, unary)


async def _within(answer: Awaitable[Any], max_age: float, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
    """``answer``, unless it takes more than ``max_age`` seconds (0: no limit): DEADLINE_EXCEEDED."""
    if not max_age:
        return await answer
    try:
        return await asyncio.wait_for(answer, max_age)
    except TimeoutError:
        await _too_old(context, max_age)


async def _aged(answers: AsyncIterator[Any], max_age: float,
                context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:  # fmt: skip
    """``answers`` until ``max_age`` seconds have passed; then the call ends (DEADLINE_EXCEEDED)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_age
    iterator = answers.__aiter__()
    while True:
        try:
            answer = await asyncio.wait_for(iterator.__anext__(), max(0.0, deadline - loop.time()))
        except StopAsyncIteration:
            return
        except TimeoutError:
            await _too_old(context, max_age)
            return
        yield answer


async def _too_old(context: grpc.aio.ServicerContext[Any, Any], max_age: float) -> None:
    why = f"a call lasts {max_age:g} s at most here (urlfrontier.max_stream_age): open a new one"
    await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, why)


def _behaviour(handler: grpc.RpcMethodHandler) -> Behaviour:
    for name in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
        behaviour = getattr(handler, name)
        if behaviour is not None:
            return behaviour  # type: ignore[no-any-return]
    raise ValueError("a method handler without a behaviour")


def _rebuilt(handler: grpc.RpcMethodHandler, behaviour: Behaviour) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s kind (and (de)serializers) calling ``behaviour``."""
    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(bool(handler.request_streaming), bool(handler.response_streaming))]
    return make(behaviour, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)  # fmt: skip


__all__ = [
    "KEEPALIVE_TIMEOUT",
    "MIN_TOKEN_CHARS",
    "OWN_LOGGERS",
    "Guard",
    "bearer_ok",
    "check_exposure",
    "credentials",
    "is_loopback",
    "networks",
    "own_logger",
    "peer_address",
    "peer_allowed",
    "read_token",
    "server_options",
]

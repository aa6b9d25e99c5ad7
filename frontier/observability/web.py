"""The frontier's own HTTP server: a live page, its JSON API and Prometheus metrics.

- ``GET /``                     the live page (``frontier/observability/static/index.html``)
- ``GET /api/status?top=N``     totals and the busiest scopes of every live instance
- ``GET /api/history?scope=S``  the scope's delay, request rate, queue and gate over time (read-only)
- ``POST /api/watch``           ``{"scope": S}``: have the scope's owner report it for a while
- ``GET /metrics``              this process's Prometheus metrics (no token: labels name no host)
- ``GET /healthz``              liveness: ``ok`` while the event loop answers (no token, no data)

Access: with ``frontier.web_token`` set, everything but ``/healthz`` and ``/metrics`` needs
``Authorization: Bearer TOKEN`` or HTTP basic auth with the token as the password (any user
name; a browser asks for it: the 401 carries ``WWW-Authenticate: Basic``). The frontier refuses
to start (:func:`check_exposure`) when the server listens on a non-loopback address without a
token of at least :data:`MIN_TOKEN_CHARS` characters; without a token (so on loopback), a request
whose ``Host`` is not a loopback name or address is refused (421), so a site whose name an
attacker points at 127.0.0.1 (DNS rebinding) cannot read it from a browser. A POST must carry a JSON body, or a form
with a bearer token: a cross-site form can send neither (a basic-auth browser session would
otherwise lend it its credentials); a POST whose ``Origin`` is not this server is refused.

Status comes from the compacted ``crawl.frontier.status`` topic, tailed by a background thread
(:class:`StatusFeed`), so any instance's page shows all instances. A scope's history is built
from the snapshots in which it appears: the busiest ``status_top`` scopes of each instance, plus
the scopes a live page charts: the page POSTs ``/api/watch``, which sends a ``watch`` command
on ``crawl.control`` to whichever instance owns the scope (at most one per scope per
``WATCH_RESEND``), and that instance reports it for ``WATCH_SECONDS``.

The history it charts is :mod:`frontier.client.history` (pure, bounded); the status
topic is tailed by :class:`~frontier.client.feed.StatusFeed`.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from frontier.client.history import StatusHistory
from frontier.config import ConfigError, FrontierConfig
from frontier.config.exposure import MIN_TOKEN_CHARS, is_loopback
from frontier.observability.watch import WATCH_SECONDS, WatchBusy, watch_scope

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/healthz", "/metrics"})  # served without the token
REALM = 'Basic realm="crawl frontier", charset="UTF-8"'


def loopback_host(host: str) -> bool:
    """Is a request's ``Host`` (with or without its port) a name of this machine's loopback?"""
    name = host.strip().lower()
    if name.startswith("["):  # [::1]:8080
        name = name[1:].split("]", 1)[0]
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    return name in ("localhost", "localhost.") or is_loopback(name)


def check_exposure(cfg: FrontierConfig) -> None:
    """Refuse (ConfigError, one line) a web server on a non-loopback address without a token."""
    if not cfg.web_port or is_loopback(cfg.web_bind):
        return
    if len(cfg.web_token) < MIN_TOKEN_CHARS:
        problem = "is not set" if not cfg.web_token else f"is shorter than {MIN_TOKEN_CHARS} characters"
        raise ConfigError(
            f"frontier.web_bind = {cfg.web_bind!r} exposes the live page beyond this machine and frontier.web_token "
            f"{problem}: set one (e.g. CRAWL__FRONTIER__WEB_TOKEN from a secret) or bind to 127.0.0.1"
        )


def authorized(header: str, token: str) -> bool:
    """Does an ``Authorization`` header carry ``token`` (bearer, or basic auth's password)?"""
    scheme, _, value = header.strip().partition(" ")
    given = ""
    if scheme.lower() == "bearer":
        given = value.strip()
    elif scheme.lower() == "basic":
        try:
            given = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return False
    return bool(given) and hmac.compare_digest(given.encode(), token.encode())


def _error(status: int, reason: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": reason}, status=status, headers=headers)


def build_web(feed: StatusHistory, service: Any, token: str = "") -> web.Application:
    """The app. ``service`` needs ``instance``, ``metrics.registry`` and ``watch(scope) -> bool``."""
    page = resources.files("frontier.observability").joinpath("static/index.html").read_text(encoding="utf-8")

    @web.middleware
    async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Any:
        if not token and not loopback_host(request.host):  # (without a token the server is on loopback)
            return _error(421, f"Host {request.host[:100]!r} is not this machine's loopback: refused (a page of "
                          "another site whose name now points here, DNS rebinding, would read it)")  # fmt: skip
        if token and request.path not in OPEN_PATHS and not authorized(request.headers.get("Authorization", ""), token):
            return _error(401, "the token is needed: Authorization: Bearer TOKEN, or basic auth with it as the "
                          "password", {"WWW-Authenticate": REALM})  # fmt: skip
        if request.method == "POST":
            origin = request.headers.get("Origin")
            if origin is not None and urlsplit(origin).netloc.lower() != request.host.lower():
                return _error(403, f"cross-origin request from {origin[:100]!r} refused")
        return await handler(request)

    async def index(_: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/html", headers={"Cache-Control": "no-store"})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def status(request: web.Request) -> web.Response:
        top = _int(request.query.get("top"), 20, 1, 200)
        data = feed.overview_json(top)
        data["instance"] = service.instance
        return web.json_response(data)

    async def history(request: web.Request) -> web.Response:
        try:
            scope = watch_scope(request.query.get("scope", ""))
        except ValueError as exc:
            return _error(400, f"?scope=: {exc}")
        return web.json_response(feed.history_json(scope))  # read-only: POST /api/watch asks for reports

    async def watch(request: web.Request) -> web.Response:
        raw: Any = None
        bearer = request.headers.get("Authorization", "").strip().lower().startswith("bearer ")
        if request.content_type == "application/json":
            try:
                body = await request.json()
            except ValueError:
                return _error(400, "the body is not JSON")
            raw = body.get("scope") if isinstance(body, dict) else None
        elif bearer and request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            raw = (await request.post()).get("scope")
        else:
            return _error(415, 'send JSON {"scope": "..."} (a form only with an Authorization: Bearer header)')
        if not isinstance(raw, str):
            return _error(400, "give a scope: a host, a registrable domain or domain#name")
        try:
            scope = watch_scope(raw)
            sent = service.watch(scope)
        except WatchBusy as exc:
            return _error(429, str(exc))
        except ValueError as exc:
            return _error(400, str(exc))
        return web.json_response({"scope": scope, "sent": sent, "seconds": WATCH_SECONDS}, status=202)

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(service.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application(middlewares=[guard], client_max_size=64 * 1024)
    app.router.add_get("/", index)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/api/status", status)
    app.router.add_get("/api/history", history)
    app.router.add_post("/api/watch", watch)
    app.router.add_get("/metrics", metrics)
    return app


def _int(raw: str | None, default: int, lo: int, hi: int) -> int:
    try:
        return min(hi, max(lo, int(raw))) if raw is not None else default
    except ValueError:
        return default

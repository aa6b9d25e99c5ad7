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
token of at least :data:`MIN_TOKEN_CHARS` characters. A POST must carry a JSON body, or a form
with a bearer token: a cross-site form can send neither (a basic-auth browser session would
otherwise lend it its credentials); a POST whose ``Origin`` is not this server is refused.

Status comes from the compacted ``crawl.frontier.status`` topic, tailed by a background thread
(:class:`StatusFeed`), so any instance's page shows all instances. A scope's history is built
from the snapshots in which it appears: the busiest ``status_top`` scopes of each instance, plus
the scopes a live page charts: the page POSTs ``/api/watch``, which sends a ``watch`` command
on ``crawl.control`` to whichever instance owns the scope (at most one per scope per
``WATCH_RESEND``), and that instance reports it for ``WATCH_SECONDS``.

Memory (:class:`StatusHistory`, the pure part; time is injected):

- a scope's history is at most :data:`HISTORY_POINTS` points no older than
  :data:`HISTORY_SECONDS`, kept in columns: 9 numbers as 8-byte floats and 2 two-byte codes into
  the scope's table of at most :data:`MAX_TEXTS` distinct reason/cause texts, each cut to
  :data:`TEXT_CHARS` characters (beyond that, a point's text reads :data:`OVERFLOW_TEXT`):
  76 B per point, 67 KiB of points per scope; 89 KiB per scope measured in the worst case
  (every text different and non-ASCII, every number distinct);
- at most :data:`HISTORY_SCOPES` scopes (least recently updated dropped first; a scope without a
  point in the window is dropped);
- ``latest`` keeps one snapshot per instance seen within :data:`INSTANCE_SECONDS`, at most
  :data:`MAX_INSTANCES` of them.

Bound: 500 scopes x 89 KiB = 44 MiB measured; :data:`HISTORY_BOUND_BYTES` (64 MiB) is the
bound stated and tested (``tests/test_web.py`` fills every scope with worst-case points under
tracemalloc), plus the instances' latest snapshots (each one status record, ~0.5 KB per row).
The history it replaced kept ~486 B per point for 2,000 scopes: up to ~834 MiB.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import logging
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from confluent_kafka import TopicPartition
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from frontier.config import ConfigError, FrontierConfig
from frontier.kafka import Connection, Kafka
from frontier.observability.status import LIVE_SECONDS, overview
from frontier.observability.watch import WATCH_SECONDS, WatchBusy, watch_scope
from topics.schemas import SchemaError, ScopeStatus, Status, decode

log = logging.getLogger(__name__)

HISTORY_SECONDS = 1800.0  # a scope's points are kept this long (30 min)
HISTORY_POINTS = 900  # per scope: 30 min at the default 2 s status interval
HISTORY_SCOPES = 500  # scopes with a history, least recently updated dropped first
MAX_TEXTS = 64  # distinct reason/cause texts kept per scope (within its window)
TEXT_CHARS = 120  # a reason or cause is cut to this many characters in the history
INSTANCE_SECONDS = 10 * LIVE_SECONDS  # an instance without a snapshot for this long is forgotten
MAX_INSTANCES = 1000  # instances in ``latest`` (the oldest snapshot goes first)
HISTORY_BOUND_BYTES = 64 * 1024 * 1024  # the histories' memory at the limits above (measured by tests)
MIN_TOKEN_CHARS = 16  # a token that guards a non-loopback address
OPEN_PATHS = frozenset({"/healthz", "/metrics"})  # served without the token
REALM = 'Basic realm="crawl frontier", charset="UTF-8"'
OVERFLOW_TEXT = f"(more than {MAX_TEXTS} different texts in the window)"
_NUMS = 9  # per point: at, delay, gate_until, backoff, limit, sent, queued, inflight, concurrency
_CODES = 2  # per point: reason, cause


class _Series:
    """One scope's points, in columns (see the module docstring for their size)."""

    __slots__ = ("codes", "dropped", "nums", "text_codes", "texts")

    def __init__(self) -> None:
        self.nums = array("d")
        self.codes = array("H")
        self.texts: list[str] = [OVERFLOW_TEXT]
        self.text_codes: dict[str, int] = {OVERFLOW_TEXT: 0}
        self.dropped = 0  # points dropped since the text table was last compacted

    def __len__(self) -> int:
        return len(self.nums) // _NUMS

    def last_at(self) -> float:
        return self.nums[-_NUMS] if self.nums else float("-inf")

    def append(self, at: float, row: ScopeStatus) -> None:
        self.nums.extend((at, row.delay, row.gate_until, row.backoff, row.limit, row.sent, row.queued, row.inflight,
                          row.concurrency))  # fmt: skip
        self.codes.extend((self._code(row.reason), self._code(row.cause)))
        if len(self) > HISTORY_POINTS:
            self._drop(len(self) - HISTORY_POINTS)

    def drop_before(self, cutoff: float) -> None:
        n = 0
        while n < len(self) and self.nums[n * _NUMS] < cutoff:
            n += 1
        if n:
            self._drop(n)

    def _drop(self, n: int) -> None:
        del self.nums[: n * _NUMS]
        del self.codes[: n * _CODES]
        self.dropped += n

    def _code(self, text: str) -> int:
        text = text[:TEXT_CHARS]
        code = self.text_codes.get(text)
        if code is not None:
            return code
        if len(self.texts) >= MAX_TEXTS:
            if self.dropped >= HISTORY_POINTS // 8:  # else little could be freed: not O(points) per text
                self._compact()
            if len(self.texts) >= MAX_TEXTS:
                return 0
        self.texts.append(text)
        self.text_codes[text] = len(self.texts) - 1
        return len(self.texts) - 1

    def _compact(self) -> None:
        """Keep only the texts the kept points use (and the overflow text, code 0)."""
        used = sorted(set(self.codes) | {0})
        remap = {old: new for new, old in enumerate(used)}
        self.texts = [self.texts[old] for old in used]
        self.text_codes = {text: code for code, text in enumerate(self.texts)}
        self.codes = array("H", [remap[c] for c in self.codes])
        self.dropped = 0

    def points(self, since: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        prev: tuple[float, float] | None = None  # (at, sent)
        nums, codes, texts = self.nums, self.codes, self.texts
        for i in range(len(self)):
            at, delay, gate_until, backoff, limit, sent, queued, inflight, conc = nums[i * _NUMS : (i + 1) * _NUMS]
            if at < since:
                continue
            rate = None
            if prev is not None and at > prev[0] and sent >= prev[1]:
                rate = (sent - prev[1]) / (at - prev[0])
            out.append({"at": at, "delay": delay, "rate": rate, "queued": int(queued), "inflight": int(inflight),
                        "concurrency": int(conc), "gate_until": gate_until, "backoff": backoff,
                        "reason": texts[codes[i * _CODES]], "limit": limit,
                        "cause": texts[codes[i * _CODES + 1]]})  # fmt: skip
            prev = (at, sent)
        return out


class StatusHistory:
    """The latest snapshot per instance and a bounded, age-limited history per scope.

    Pure (no Kafka): fed with the status topic's records by :meth:`apply`; ``clock`` gives the
    current time (injected in tests)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.latest: OrderedDict[bytes, Status] = OrderedDict()  # oldest snapshot first
        self.history: OrderedDict[str, _Series] = OrderedDict()  # least recently updated first
        self._pruned_at = float("-inf")

    def apply(self, key: bytes, value: bytes | None) -> None:
        """One record of the status topic: an instance's snapshot, or its tombstone."""
        with self._lock:
            if value is None:
                self.latest.pop(key, None)
                return
            try:
                status = decode(value, Status)
            except SchemaError:
                return
            now = self.clock()
            self.latest.pop(key, None)
            self.latest[key] = status
            if len(self.latest) > MAX_INSTANCES:
                self.latest.popitem(last=False)
            if now - status.at <= HISTORY_SECONDS:
                for row in status.scopes:
                    self._add(row.scope, status.at, row)
            if now - self._pruned_at >= 1.0:
                self._prune(now)

    _apply = apply  # the name tests/test_status.py feeds

    def _add(self, scope: str, at: float, row: ScopeStatus) -> None:
        series = self.history.get(scope)
        if series is None:
            series = self.history[scope] = _Series()
            if len(self.history) > HISTORY_SCOPES:
                self.history.popitem(last=False)
        if at > series.last_at():
            series.append(at, row)
            self.history.move_to_end(scope)

    def _prune(self, now: float) -> None:
        """Drop instances gone for INSTANCE_SECONDS, points older than HISTORY_SECONDS, and the
        scopes left without a point."""
        self._pruned_at = now
        for key in [k for k, s in self.latest.items() if now - s.at > INSTANCE_SECONDS]:
            del self.latest[key]
        cutoff = now - HISTORY_SECONDS
        for scope in list(self.history):
            series = self.history[scope]
            series.drop_before(cutoff)
            if not len(series):
                del self.history[scope]

    def prune(self) -> None:
        with self._lock:
            self._prune(self.clock())

    def live(self) -> list[Status]:
        now = self.clock()
        return [s for s in self.latest.values() if now - s.at <= LIVE_SECONDS]

    def overview_json(self, top: int) -> dict[str, Any]:
        with self._lock:
            return overview(self.live(), top).to_json()

    def history_json(self, scope: str) -> dict[str, Any]:
        with self._lock:
            series = self.history.get(scope)
            points = series.points(self.clock() - HISTORY_SECONDS) if series is not None else []
        return {"scope": scope, "points": points}


class StatusFeed(StatusHistory):
    """Tails the status topic in a background thread into a :class:`StatusHistory`."""

    def __init__(self, kafka: Connection, topic: str, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock)
        self._consumer = Kafka.of(kafka).reader("web", {"enable.auto.commit": False})
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-feed", daemon=True)

    def start(self) -> None:
        self._consumer.assign([TopicPartition(self._topic, 0, 0)])
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    msgs = self._consumer.consume(500, timeout=0.5)
                except Exception as exc:  # noqa: BLE001 - the page shows stale data, the frontier goes on
                    log.warning("status feed: %s", exc)
                    self._stop.wait(1.0)
                    continue
                for msg in msgs:
                    if msg.error() is None:
                        self.apply(msg.key() or b"", msg.value())
                if not msgs:
                    self.prune()  # ages out even when nothing arrives
        finally:
            self._consumer.close()


class LagProbe:
    """Consumer lag of this instance's input partitions, read from its group's committed offsets."""

    def __init__(self, kafka: Connection, group: str) -> None:
        self._consumer = Kafka.of(kafka).reader("lag", {"enable.auto.commit": False}, group=group)

    def measure(self, topic: str, partitions: list[int]) -> int:
        if not partitions:
            return 0
        committed = self._consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=5)
        total = 0
        for tp in committed:
            low, high = self._consumer.get_watermark_offsets(tp, timeout=5, cached=False)
            position = tp.offset if tp.offset >= 0 else low
            total += max(0, high - position)
        return total

    def close(self) -> None:
        self._consumer.close()


def is_loopback(bind: str) -> bool:
    """Does ``bind`` listen on loopback only? ("" and host names other than localhost: no.)"""
    if bind.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind.strip().strip("[]")).is_loopback
    except ValueError:
        return False


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

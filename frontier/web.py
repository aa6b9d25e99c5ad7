"""The frontier's own HTTP server: a live page, its JSON API and Prometheus metrics.

- ``/``                     the live page (``frontier/static/index.html``)
- ``/api/status?top=N``     totals and the busiest scopes of every live instance
- ``/api/history?scope=S``  the scope's delay, request rate, queue and gate over time
- ``/metrics``              this process's Prometheus metrics

Status comes from the compacted ``crawl.frontier.status`` topic, tailed by a background thread
(:class:`StatusFeed`), so any instance's page shows all instances. A scope's history is built
from the snapshots in which it appears: the busiest ``status_top`` scopes of each instance, plus
the scopes anyone charts on a live page: the page sends a ``watch`` command on ``crawl.control``
to whichever instance owns the scope, and that instance reports it for a while.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict, deque
from importlib import resources
from typing import Any

from aiohttp import web
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from frontier.status import LIVE_SECONDS, overview
from topics.schemas import SchemaError, ScopeStatus, Status, decode

log = logging.getLogger(__name__)

HISTORY_POINTS = 900  # per scope (30 min at a 2 s status interval)
HISTORY_SCOPES = 2000  # scopes with a history, least recently updated dropped first


class StatusFeed:
    """Tails the status topic: the latest snapshot per instance and a bounded history per scope."""

    def __init__(self, client: dict[str, str], topic: str) -> None:
        self._consumer = Consumer({**client, "group.id": f"web-{uuid.uuid4().hex}", "enable.auto.commit": False})
        self._topic = topic
        self._lock = threading.Lock()
        self.latest: dict[bytes, Status] = {}
        self.history: OrderedDict[str, deque[tuple[float, ScopeStatus]]] = OrderedDict()
        self.totals: deque[tuple[float, dict[str, int]]] = deque(maxlen=HISTORY_POINTS)
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
                        self._apply(msg.key() or b"", msg.value())
        finally:
            self._consumer.close()

    def _apply(self, key: bytes, value: bytes | None) -> None:
        with self._lock:
            if value is None:
                self.latest.pop(key, None)
                return
            try:
                status = decode(value, Status)
            except SchemaError:
                return
            self.latest[key] = status
            for row in status.scopes:
                points = self.history.get(row.scope)
                if points is None:
                    points = self.history[row.scope] = deque(maxlen=HISTORY_POINTS)
                    if len(self.history) > HISTORY_SCOPES:
                        self.history.popitem(last=False)
                self.history.move_to_end(row.scope)
                if not points or status.at > points[-1][0]:
                    points.append((status.at, row))
            live = self.live()
            total: dict[str, int] = {}
            for s in live:
                for k, v in s.totals.items():
                    total[k] = total.get(k, 0) + v
            self.totals.append((status.at, total))

    def live(self) -> list[Status]:
        now = time.time()
        return [s for s in self.latest.values() if now - s.at <= LIVE_SECONDS]

    def overview_json(self, top: int) -> dict[str, Any]:
        with self._lock:
            return overview(self.live(), top).to_json()

    def history_json(self, scope: str) -> dict[str, Any]:
        with self._lock:
            points = list(self.history.get(scope, ()))
        out = []
        prev: tuple[float, ScopeStatus] | None = None
        for at, row in points:
            rate = None
            if prev is not None and at > prev[0] and row.sent >= prev[1].sent:
                rate = (row.sent - prev[1].sent) / (at - prev[0])
            out.append({"at": at, "delay": row.delay, "rate": rate, "queued": row.queued, "inflight": row.inflight,
                        "concurrency": row.concurrency, "gate_until": row.gate_until, "backoff": row.backoff,
                        "reason": row.reason, "limit": row.limit, "cause": row.cause})  # fmt: skip
            prev = (at, row)
        return {"scope": scope, "points": out}


class LagProbe:
    """Consumer lag of this instance's input partitions, read from its group's committed offsets."""

    def __init__(self, client: dict[str, str], group: str) -> None:
        self._consumer = Consumer({**client, "group.id": group, "enable.auto.commit": False})

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


def build_web(feed: StatusFeed, service: Any) -> web.Application:
    page = resources.files("frontier").joinpath("static/index.html").read_text(encoding="utf-8")

    async def index(_: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/html")

    async def status(request: web.Request) -> web.Response:
        top = _int(request.query.get("top"), 20, 1, 200)
        data = feed.overview_json(top)
        data["instance"] = service.instance
        return web.json_response(data)

    async def history(request: web.Request) -> web.Response:
        scope = request.query.get("scope", "").strip().lower()
        if not scope or len(scope) > 253:
            return web.json_response({"error": "give ?scope=NAME (a host, domain or domain#scope)"}, status=400)
        service.watch(scope)  # its owner (any instance) reports it in its snapshots from now on
        return web.json_response(feed.history_json(scope))

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(service.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/", index)
    app.router.add_get("/api/status", status)
    app.router.add_get("/api/history", history)
    app.router.add_get("/metrics", metrics)
    return app


def _int(raw: str | None, default: int, lo: int, hi: int) -> int:
    try:
        return min(hi, max(lo, int(raw))) if raw is not None else default
    except ValueError:
        return default

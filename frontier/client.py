"""The Python client of the frontier: submit URLs, read fetched pages, read status, steer scopes.

    from frontier.client import FrontierClient

    with FrontierClient("crawl.toml") as client:          # or FrontierClient(bootstrap="host:9092")
        client.submit(["https://example.com/"], priority=5, scopes=["api"], meta={"job": 7})
        for page in client.iter_pages(follow=False):
            print(page.url, page.status, len(page.body))
        print(client.status().totals["queued"])
        client.pause("example.com")

Everything goes through the same topics as the CLI (``crawl.urls``, ``crawl.pages``,
``crawl.frontier.status``, ``crawl.control``), so it works with any number of frontier instances.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import msgspec
from confluent_kafka import Consumer, Producer

from frontier.config import Config, load
from frontier.core.control import control_records
from frontier.kafka import producer_conf
from frontier.observability.status import Overview, overview, read_status
from topics.schemas import ControlCommand, Page, SchemaError, Submission, decode, encode


class SubmitError(RuntimeError):
    """Some submissions were not acknowledged by Kafka."""


class FrontierClient:
    """A typed handle on one frontier deployment (one topic prefix on one Kafka cluster)."""

    def __init__(self, config: Config | str | Path | None = None, *, bootstrap: str | None = None) -> None:
        cfg = config if isinstance(config, Config) else load(Path(config) if config is not None else None)
        if bootstrap is not None:
            cfg = cfg.with_bootstrap(bootstrap)
        self.config = cfg
        self.topics = cfg.topics
        self._client = cfg.kafka.client_conf()
        self._producer: Producer | None = None
        self._failures: list[str] = []

    # -- input ---------------------------------------------------------------------------------
    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(producer_conf(self._client, **{"linger.ms": 20}))
        return self._producer

    def submit(
        self,
        urls: Iterable[str],
        *,
        priority: int = 0,
        scopes: Iterable[str] = (),
        meta: dict[str, Any] | None = None,
        follow: int = 0,
        revisit: float = 0.0,
        recrawl: bool = False,
        flush: bool = True,
    ) -> int:
        """Publish ``urls`` to ``crawl.urls``; return how many were published.

        ``priority``: higher first within a host. ``scopes``: extra throttling scopes (e.g.
        ``["api"]``, qualified by each URL's registrable domain). ``meta`` comes back on the page.
        ``follow``: same-site link levels to follow. ``revisit``: seconds after a fetch when the
        URL is due again (0: fetch once). ``recrawl``: queue the URLs even if they were crawled
        before (a URL still queued or in flight is not queued twice). Invalid URLs are not
        refused here: the router puts them on ``crawl.rejected`` with the reason, as for any producer.
        With ``flush`` (default) this waits until Kafka acknowledged every record and raises
        :class:`SubmitError` if any failed.
        """
        base = Submission(url="", priority=priority, scopes=list(scopes), meta=dict(meta or {}), follow=follow,
                          revisit=revisit, recrawl=recrawl)  # fmt: skip
        return self._submit(base, urls, flush)

    def forget(self, urls: Iterable[str], *, flush: bool = True) -> int:
        """Remove ``urls`` from the seen set, so that a later submission crawls them again; return
        how many were published. Nothing is queued. A URL still queued or in flight is left
        alone (it is fetched anyway; forget it after its page is out). Forgetting a URL with a
        revisit interval ends its revisits. Goes through ``crawl.urls`` like a submission, so it
        reaches the partition owning the URL's domain; ``flush`` as for :meth:`submit`.
        """
        return self._submit(Submission(url="", forget=True), urls, flush)

    def _submit(self, base: Submission, urls: Iterable[str], flush: bool) -> int:
        count = 0
        for url in urls:
            value = encode(msgspec.structs.replace(base, url=url))
            self._produce(self.topics.urls, value)
            count += 1
        if flush:
            self.flush()
        return count

    def flush(self, timeout: float = 60.0) -> None:
        if self._producer is not None and self._producer.flush(timeout):
            raise SubmitError(f"records still unacknowledged after {timeout:.0f}s")
        if self._failures:
            failures, self._failures = self._failures, []
            raise SubmitError(f"{len(failures)} record(s) failed: {failures[:3]}")

    def _produce(self, topic: str, value: bytes, key: bytes | None = None, partition: int = -1) -> None:
        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                self._failures.append(str(err))

        while True:
            try:
                self.producer.produce(topic, value, key=key, partition=partition, on_delivery=delivered)
                return
            except BufferError:
                self.producer.poll(0.05)

    # -- output --------------------------------------------------------------------------------
    def iter_pages(
        self, follow: bool = True, *, group: str | None = None, idle: float = 5.0, limit: int = 0
    ) -> Iterator[Page]:
        """Pages from ``crawl.pages``: with ``follow``, forever; else until ``idle`` quiet seconds.

        Without ``group`` every call reads from the beginning; with a consumer ``group``, offsets
        are committed and a restarted reader continues where it stopped (several readers in one
        group share the pages). Undecodable records are skipped.
        """
        consumer = Consumer({**self._client, "group.id": group or f"pages-{uuid.uuid4().hex}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": group is not None})  # fmt: skip
        consumer.subscribe([self.topics.pages])
        quiet_since, count = time.monotonic(), 0
        try:
            while True:
                msg = consumer.poll(0.2)
                if msg is None or msg.error() is not None:
                    if not follow and time.monotonic() - quiet_since > idle:
                        return
                    continue
                quiet_since = time.monotonic()
                try:
                    page = decode(msg.value() or b"", Page)
                except SchemaError:
                    continue
                yield page
                count += 1
                if limit and count >= limit:
                    return
        finally:
            consumer.close()

    def status(self, top: int = 20) -> Overview:
        """Totals and the busiest scopes over every live frontier instance."""
        return overview(read_status(self._client, self.topics.status), top)

    # -- control -------------------------------------------------------------------------------
    def control(self, command: ControlCommand) -> None:
        """Send a scope command to the instance owning the scope's partition (acknowledged by Kafka)."""
        # with frontier.ip_scope a host's partition is not known from its name: every partition gets it
        for key, value, partition in control_records(command, self.topics.partitions, self.config.frontier.ip_scope):
            self._produce(self.topics.control, value, key, partition)
        self.flush()

    def pause(self, scope: str) -> None:
        self.control(ControlCommand(action="pause", scope=scope))

    def resume(self, scope: str) -> None:
        self.control(ControlCommand(action="resume", scope=scope))

    def drop(self, scope: str) -> None:
        """Remove every queued URL of the scope (URLs in flight finish)."""
        self.control(ControlCommand(action="drop", scope=scope))

    def set(self, scope: str, *, delay: float | None = None, concurrency: int | None = None) -> None:
        """Override the scope's delay and/or concurrency at run time (``clear`` to remove)."""
        self.control(ControlCommand(action="set", scope=scope, delay=delay, concurrency=concurrency))

    def clear(self, scope: str) -> None:
        self.control(ControlCommand(action="clear", scope=scope))

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        if self._producer is not None:
            self.flush()

    def __enter__(self) -> FrontierClient:
        return self

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

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
from collections.abc import Callable, Generator, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import msgspec
from confluent_kafka import KafkaException, Producer

from frontier.client.crawls import crawl_rows
from frontier.client.done import CrawlDone, wait_done
from frontier.client.feed import read_status
from frontier.client.status import LIVE_SECONDS, Overview, overview
from frontier.client.submission import submission_value
from frontier.config import Config, load
from frontier.core.control import control_records
from topics.kafka import Kafka, KafkaUnreachable
from topics.schemas import (
    DEFAULT_CRAWL,
    ControlCommand,
    CrawlStatus,
    Page,
    SchemaError,
    Status,
    Submission,
    decode,
    encode,
    valid_crawl,
)

__all__ = ["FrontierClient", "SubmitError"]

DELIVERY_TIMEOUT = 30.0  # a record Kafka has not acknowledged by then has failed (the broker went away)
CHECK_TIMEOUT = 3.0  # the first use asks the brokers for metadata, this long at most


class SubmitError(RuntimeError):
    """Some submissions were not acknowledged by Kafka."""


class FrontierClient:
    """A typed handle on one frontier deployment (one topic prefix on one Kafka cluster).

    ``kafka``: the connection to use (default: built from the configuration's client settings).
    The first operation checks that Kafka answers (:meth:`check`: :class:`KafkaUnreachable`,
    one line, within seconds); a record not acknowledged within ``delivery_timeout`` seconds
    (default :data:`DELIVERY_TIMEOUT`) fails the submission (:class:`SubmitError`) instead of
    waiting forever.
    """

    def __init__(
        self,
        config: Config | str | Path | None = None,
        *,
        bootstrap: str | None = None,
        kafka: Kafka | None = None,
        delivery_timeout: float | None = None,
        crawl: str = DEFAULT_CRAWL,
    ) -> None:
        self.crawl_name = valid_crawl(crawl)  # the crawl submissions go to and pages are read from, unless told
        cfg = config if isinstance(config, Config) else load(Path(config) if config is not None else None)
        if bootstrap is not None:
            cfg = cfg.with_bootstrap(bootstrap)
        self.config = cfg
        self.topics = cfg.topics
        self.kafka = kafka if kafka is not None else Kafka(cfg.kafka.client_conf())
        self.delivery_timeout = DELIVERY_TIMEOUT if delivery_timeout is None else delivery_timeout
        self._checked = False
        self._producer: Producer | None = None
        self._failures: list[str] = []

    def check(self, timeout: float = CHECK_TIMEOUT, wait: float = 0.0) -> None:
        """Raise :class:`KafkaUnreachable` unless a broker answers (asked once per client)."""
        if not self._checked:
            self.kafka.check(timeout, wait)
            self._checked = True

    # -- input ---------------------------------------------------------------------------------
    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self.check()
            timeout_ms = int(self.delivery_timeout * 1000)
            self._producer = self.kafka.producer(**{"linger.ms": 20, "message.timeout.ms": timeout_ms})
        return self._producer

    def submit(
        self,
        urls: Iterable[str],
        *,
        priority: int = 0,
        scopes: Iterable[str] = (),
        meta: dict[str, Any] | None = None,
        follow: int = 0,
        revisit: float | str | list[float] = 0.0,
        recrawl: bool = False,
        flush: bool = True,
        crawl: str | None = None,
    ) -> int:
        """Publish ``urls`` to ``crawl.urls``; return how many were published.

        ``priority``: higher first within a host. ``scopes``: extra throttling scopes (e.g.
        ``["api"]``, qualified by each URL's registrable domain). ``meta`` comes back on the page.
        ``follow``: same-site link levels to follow. ``revisit``: seconds after a fetch when the
        URL is due again (0: fetch once), or an interval that follows the page's changes:
        ``"adaptive"`` (an hour to 30 days) or ``[min, max]`` seconds; followed links inherit it.
        ``recrawl``: queue the URLs even if they were crawled before (a URL still queued or in
        flight is not queued twice). ``crawl``: the crawl they belong to (default: the client's);
        their follow-ups and pages stay in it. Invalid URLs are not
        refused here: the router puts them on ``crawl.rejected`` with the reason, as for any producer.
        With ``flush`` (default) this waits until Kafka acknowledged every record and raises
        :class:`SubmitError` if any failed.
        """
        base = Submission(url="", priority=priority, scopes=list(scopes), meta=dict(meta or {}), follow=follow,
                          revisit=revisit, recrawl=recrawl, crawl=valid_crawl(crawl or self.crawl_name))  # fmt: skip
        return self._submit((encode(msgspec.structs.replace(base, url=url)) for url in urls), flush)

    def forget(self, urls: Iterable[str], *, flush: bool = True) -> int:
        """Remove ``urls`` from the seen set, so that a later submission crawls them again; return
        how many were published. Nothing is queued. A URL still queued or in flight is left
        alone (it is fetched anyway; forget it after its page is out). Forgetting a URL with a
        revisit interval ends its revisits. Goes through ``crawl.urls`` like a submission, so it
        reaches the partition owning the URL's domain; ``flush`` as for :meth:`submit`.
        """
        base = Submission(url="", forget=True, crawl=self.crawl_name)
        return self._submit((encode(msgspec.structs.replace(base, url=url)) for url in urls), flush)

    def submit_lines(
        self, lines: Iterable[bytes], *, follow: int = 0, recrawl: bool = False, forget: bool = False,
        flush: bool = True, revisit: float | str | list[float] = 0.0, sitemap: bool = False,
        discover_sitemaps: bool = False,
    ) -> int:  # fmt: skip
        """Publish lines as ``crawl-frontier submit`` takes them (arguments, or a file's lines from
        :func:`read_lines`): each a URL or a :class:`Submission` JSON object, with the options of
        :func:`submission_value`; return how many were published. ``flush`` as for :meth:`submit`."""
        crawl = self.crawl_name
        values = (submission_value(line, follow=follow, recrawl=recrawl, forget=forget, crawl=crawl, revisit=revisit,
                                   sitemap=sitemap, discover_sitemaps=discover_sitemaps)
                  for line in lines)  # fmt: skip
        return self._submit(values, flush)

    def _submit(self, values: Iterable[bytes], flush: bool) -> int:
        count = 0
        for value in values:
            self._produce(self.topics.urls, value)
            count += 1
        if flush:
            self.flush()
        return count

    def flush(self, timeout: float | None = None) -> None:
        """Wait until Kafka acknowledged every record produced so far (by default a little longer
        than the delivery timeout); raise :class:`SubmitError` if any failed."""
        timeout = self.delivery_timeout + 5.0 if timeout is None else timeout
        if self._producer is not None and self._producer.flush(timeout):
            raise SubmitError(f"records still unacknowledged after {timeout:.0f}s")
        self._raise_failures()

    def _raise_failures(self) -> None:
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
            except BufferError:  # the local queue is full: wait for deliveries, stop at the first failure
                self.producer.poll(0.05)
                self._raise_failures()

    # -- output --------------------------------------------------------------------------------
    def iter_pages(
        self,
        follow: bool = True,
        *,
        group: str | None = None,
        idle: float = 5.0,
        limit: int = 0,
        on_error: Callable[[SchemaError], None] | None = None,
        crawl: str | None = None,
    ) -> Generator[Page, None, None]:
        """Pages from ``crawl.pages``: with ``follow``, forever; else until ``idle`` quiet seconds.
        ``crawl``: only that crawl's pages (``"*"``: every crawl's; default: the client's crawl).

        Without ``group`` every call reads from the beginning; with a consumer ``group``, offsets
        are committed and a restarted reader continues where it stopped (several readers in one
        group share the pages). Undecodable records are skipped (after ``on_error``, if given).
        """
        self.check()
        wanted = crawl or self.crawl_name
        settings = {"auto.offset.reset": "earliest", "enable.auto.commit": group is not None}
        consumer = self.kafka.reader("pages", settings, group=group)
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
                except SchemaError as exc:
                    if on_error is not None:
                        on_error(exc)
                    continue
                if wanted != "*" and page.crawl != wanted:
                    continue
                yield page
                count += 1
                if limit and count >= limit:
                    return
        finally:
            consumer.close()

    def statuses(self, max_age: float | None = LIVE_SECONDS) -> list[Status]:
        """The latest snapshot of every frontier instance (None: of silent ones too)."""
        self.check()
        try:
            return read_status(self.kafka, self.topics.status, max_age)
        except KafkaException:
            if not self.kafka.reachable(CHECK_TIMEOUT):  # the broker went away since the check
                raise KafkaUnreachable(self.kafka.bootstrap, "lost while reading the status") from None
            raise

    def status(self, top: int = 20) -> Overview:
        """Totals and the busiest scopes over every live frontier instance."""
        return overview(self.statuses(), top)

    # -- crawls ---------------------------------------------------------------------------------
    def crawls(self) -> list[CrawlStatus]:
        """Every crawl the live frontier instances know, added up over them, busiest first."""
        return crawl_rows(self.statuses())

    def crawl(self, name: str | None = None) -> CrawlStatus | None:
        """One crawl's counts over every live instance (None: no instance knows it)."""
        name = name or self.crawl_name
        return next((r for r in self.crawls() if r.crawl == name), None)

    def wait_done(self, name: str | None = None, timeout: float = 600.0, *, window: float = 0.0) -> CrawlDone:
        """Block until the crawl is finished: nothing of it queued, leased, on its way in
        (``crawl.urls`` routed, ``crawl.urls.bydomain`` applied) or waiting for a revisit due
        within ``window`` seconds, as every partition's owner reports it. Returns at once a
        :class:`CrawlDone` whose ``done`` is False, with what is left, when ``timeout`` came first."""
        return wait_done(self, name or self.crawl_name, timeout, window)

    def pause_crawl(self, name: str) -> None:
        """Hold the crawl's jobs (its URLs stay queued) until :meth:`resume_crawl`; other crawls go on."""
        self.control(ControlCommand(action="pause", crawl=name))

    def resume_crawl(self, name: str) -> None:
        self.control(ControlCommand(action="resume", crawl=name))

    def drop_crawl(self, name: str, *, forget: bool = False) -> None:
        """Remove the crawl's queued URLs and waiting revisits (jobs in flight finish); with
        ``forget`` its seen set too, so a later submission crawls its URLs again."""
        self.control(ControlCommand(action="drop", crawl=name, forget=forget))

    def limit_crawl(self, name: str, per_host: int) -> None:
        """At most ``per_host`` URLs of the crawl queued per host (0: no limit); more are not queued."""
        self.control(ControlCommand(action="limit", crawl=name, per_host=per_host))

    # -- control -------------------------------------------------------------------------------
    def control(self, command: ControlCommand) -> None:
        """Send a scope command to every partition that may hold the scope (acknowledged by Kafka):
        all of them for a host, domain or named scope, and for a crawl command
        (see :func:`control_records`)."""
        for key, value, partition in control_records(command, self.topics.partitions):
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

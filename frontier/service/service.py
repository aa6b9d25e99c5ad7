"""The frontier service of one process: input events, the dispatch loop, Kafka I/O.

Transport-facing glue around :class:`~frontier.partition.PartitionFrontier`: it applies URL
batches, feedback and control commands to the partitions this instance owns, and runs the
dispatch loop that turns due hosts into jobs. It owns its parts, each made with what it needs
(the arrows go one way: the parts share the partitions served here, and reach the service only
through the callables it gives them)::

    FrontierService ──> Lifecycle ──> Partitions (frontier.service.owned)
          │  ├────────> Reporting ──────^
          │  └────────> Questions ──────^
          └──────────────────────────────^

Partitions come and go in :mod:`frontier.service.lifecycle` (given Reporting's delay hook for
each partition it opens); what it reports (status snapshots, the gauges, the scopes a live page
watches) is :mod:`frontier.service.reporting`.

Every partition writes through its fenced writer (:mod:`frontier.service.writer`, Kafka
transactions): input events are acknowledged (and so their offsets committed) only once the
transaction holding the changes they caused committed, so a takeover never skips a change it
cannot restore; a dispatch round's leases, jobs and report pages commit together, so a worker
never holds a job whose lease a takeover would not know; and a report lease is deleted only once
its page committed. Each partition records how far it applied each input, in the same
transaction, so input delivered again after a rebalance is applied once.

A URLFrontier gateway's questions are answered by :mod:`frontier.service.questions` (a reading
question a slice per turn of the event loop). A probe measures how long the loop is held
(:mod:`frontier.observability.loop`, the ``crawl_frontier_loop_*`` metrics).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Callable

from frontier.config import Config
from frontier.intake.router import Router
from frontier.observability.loop import LoopProbe
from frontier.observability.process import fetch_class
from frontier.observability.watch import watch_scope
from frontier.partition import Dispatch, Refused
from frontier.service.crawls import CrawlDirectory
from frontier.service.inputs import CONTROL, FEEDBACK, URLS, Ackable, input_offset, record_offset
from frontier.service.lifecycle import REASSIGN_WAIT, Lifecycle
from frontier.service.owned import Partitions, _Owned
from frontier.service.questions import Questions
from frontier.service.reporting import Reporting
from frontier.service.trim import Trimmer
from topics.kafka import AsyncProducer, Kafka
from topics.schemas import (
    ControlCommand,
    EncodedUrlBatch,
    FeedbackBatch,
    Rejected,
    SchemaError,
    UrlItem,
    decode,
    encode,
)

log = logging.getLogger("frontier")

# seconds from the start of one dispatch round to the start of the next, at least: the input that
# comes meanwhile is applied first and served by one round (issue 39: with 50 crawls each small
# feedback record woke a round of its own over every partition; a partition's jobs wait for its
# writer's group window anyway, frontier.service.writer.GROUP_WINDOW)
ROUND_GAP = 0.02


class FrontierService:
    """One process's frontier service: the input handlers (:meth:`handle_urls`,
    :meth:`handle_feedback`, :meth:`handle_control`, :meth:`dead_letter`), the dispatch loop
    (:meth:`dispatch_loop`, :meth:`dispatch_once`) and :meth:`close`. Owns its parts, each given
    what it needs when made: ``partitions`` (:class:`Partitions`, the partitions served here,
    shared), ``reporting`` (:class:`Reporting`: status, gauges, watches; ``metrics`` is its),
    ``lifecycle`` (:class:`Lifecycle`: the group's rebalances, partitions opened and dropped) and
    ``questions`` (:class:`Questions`: the gateways' questions); and the process's producer, the
    loop probe, the rejected count. The app sets ``router`` (its rejections count here) and
    ``directory`` (the crawls' workers) once they are made."""

    def __init__(self, cfg: Config, clock: Callable[[], float] = time.time, kafka: Kafka | None = None) -> None:
        self.cfg = cfg
        self.topics = cfg.topics
        self.clock = clock
        self.kafka = kafka if kafka is not None else Kafka(cfg.kafka.client_conf())  # every client comes from it
        self.failure: Exception | None = None  # fatal: raised by the dispatch loop
        self._wake = asyncio.Event()
        self._producer: AsyncProducer | None = None
        self.running = False
        self.instance = f"{socket.gethostname()}-{os.getpid()}"
        self.router: Router | None = None  # the embedded router, if any (its rejections count here)
        self.rejected = 0  # records this process put on crawl.rejected (its router's and dead letters)
        self.directory: CrawlDirectory | None = None  # the crawls' topics and workers (started by the app)
        self._crawls_looked = 0.0  # when the partitions' crawls were last handed to the directory
        self.partitions = Partitions(self.topics.state, REASSIGN_WAIT)
        self.reporting = Reporting(
            cfg, clock, self.instance, self.partitions,
            producer=lambda: self.producer, rejected=self._rejected, directory=lambda: self.directory,
        )  # fmt: skip
        self.metrics = self.reporting.metrics
        self.lifecycle = Lifecycle(
            cfg, self.kafka, clock, self.partitions,
            on_change=self.reporting.delay_changed, wake=self._wake.set, fatal=self._fail,
            running=lambda: self.running, directory=lambda: self.directory,
        )  # fmt: skip
        self.questions = Questions(clock, self.topics, self.partitions, producer=lambda: self.producer,
                                   wake=self._wake.set)  # fmt: skip
        self.loop_probe = LoopProbe(self._loop_sampled)
        self.trimmer = Trimmer()  # free heap pages handed back after bursts of work
        self.metrics.loop_late_max.set_function(self.loop_probe.late.value)
        self.metrics.loop_busy_max.set_function(self.loop_probe.busy.value)

    @property
    def producer(self) -> AsyncProducer:
        if self._producer is None:
            self._producer = self.kafka.async_producer()
        return self._producer

    def _rejected(self) -> int:
        """The records this process put on crawl.rejected: its own and its router's."""
        return self.rejected + (self.router.rejected if self.router is not None else 0)

    def _fail(self, failure: Exception) -> None:
        """Fatal: the dispatch loop raises ``failure`` (the process exits, its supervisor restarts it)."""
        self.failure = failure
        self._wake.set()

    async def close(self) -> None:
        self.running = False
        self.questions.close()
        await self.lifecycle.close()
        if self.directory is not None:
            await asyncio.to_thread(self.directory.stop)
        self.producer.send_nowait(self.topics.status, None, key=self.instance.encode())  # gone: tombstone
        if self._producer is not None:
            await asyncio.to_thread(self._producer.close)

    # -- input events ----------------------------------------------------------------------------
    async def handle_urls(self, p: int, batch: EncodedUrlBatch, event: Ackable) -> None:
        """Queue a batch's URLs, each item's bytes as the router wrote them; an item that does not
        decode goes to crawl.rejected."""
        owned = await self.partitions.serving(p)
        if owned is None:
            return
        await owned.writer.room()
        if owned.applied_before(URLS, event):
            return
        items, encoded = await self._decode_items(p, batch, event)
        owned.frontier.ingest(items, self.clock(), encoded)
        for i, reason in owned.frontier.refused:  # (a new crawl past frontier.max_crawls)
            offset = record_offset(event)
            await self._reject(f"URL not queued: {reason}"[:500], encoded[i], self.topics.bydomain, p, offset)
        owned.note(URLS, event)
        owned.commit((event,))
        self._wake.set()

    async def _decode_items(self, p: int, batch: EncodedUrlBatch, event: Ackable) -> tuple[list[UrlItem], list[bytes]]:
        items: list[UrlItem] = []
        encoded: list[bytes] = []
        for raw in batch.items:
            data = bytes(raw)
            try:
                items.append(decode(data, UrlItem))
            except SchemaError as exc:
                offset = record_offset(event)
                await self._reject(f"URL not queued: {exc}"[:500], data, self.topics.bydomain, p, offset)
                continue
            encoded.append(data)
        return items, encoded

    async def handle_feedback(self, p: int, batch: FeedbackBatch, event: Ackable) -> None:
        owned = await self.partitions.serving(p)
        if owned is None:
            return
        await owned.writer.room()
        if owned.applied_before(FEEDBACK, event):
            return
        now = self.clock()
        applied: Counter[tuple[str, int]] = Counter()  # (outcome, status) → results applied: counted once a batch
        feedback = owned.frontier.feedback
        for fb in batch.items:
            try:
                feedback(fb, now)
            except Exception as exc:  # one bad result must not stop the others, nor come back forever
                log.exception("feedback for %s could not be applied", fb.url[:200])
                await self._reject(f"feedback not applied: {type(exc).__name__}: {exc}"[:500], encode(fb),
                                   self.topics.feedback, p, record_offset(event))  # fmt: skip
                continue
            applied[fb.outcome, fb.status] += 1
        for (outcome, status), n in applied.items():
            self.metrics.feedback.labels(fetch_class(outcome, status)).inc(n)
        offset = input_offset(event)
        owned.fed(owned.feedback_due if offset is None else offset)
        owned.note(FEEDBACK, event)
        owned.commit((event,))
        self._wake.set()

    async def handle_control(self, p: int, cmd: ControlCommand, event: Ackable) -> None:
        if cmd.query is not None:
            await self.questions.answer(p, cmd.query, event)
            return
        if cmd.action == "watch":  # no state: reported in status snapshots for a while
            try:  # anyone who can write crawl.control can send one: checked here too
                scope = watch_scope(cmd.scope)
                targets = self.reporting.watch_partitions(scope)
                if targets is not None and p not in targets:
                    raise ValueError(f"scope {scope!r} is in partition {min(targets)}, not {p}")
            except ValueError as exc:
                log.warning("watch %s refused: %s", cmd.scope[:100], exc)
                offset = record_offset(event)
                await self._reject(f"watch refused: {exc}", encode(cmd), self.topics.control, p, offset)
            else:
                self.reporting.add_watch(scope, self.clock())
            event.ack()
            return
        owned = await self.partitions.serving(p)
        if owned is None:
            return
        if owned.applied_before(CONTROL, event):
            return
        try:
            dropped = owned.frontier.control(cmd, self.clock())
        except Refused as exc:  # never silently dropped: the command and why go to crawl.rejected
            log.warning("control %s %s refused: %s", cmd.action, cmd.scope, exc)
            offset = record_offset(event)
            await self._reject(f"control refused: {exc}", encode(cmd), self.topics.control, p, offset)
            event.ack()
            return
        log.info("control %s %s%s (partition %d)", cmd.action, f"crawl {cmd.crawl!r}" if cmd.crawl else cmd.scope,
                 f": {dropped} queued URL(s) dropped" if cmd.action == "drop" else "", p)  # fmt: skip
        owned.note(CONTROL, event)
        owned.commit((event,))
        self._wake.set()

    def _loop_sampled(self, late: float, busy: float) -> None:
        self.metrics.loop_late.observe(late)
        self.metrics.loop_busy.observe(busy)

    async def dead_letter(self, topic: str, partition: int, offset: int, raw: bytes | None, exc: Exception) -> None:
        """Put an undecodable record on ``crawl.rejected`` with the reason (never silently dropped)."""
        log.error("undecodable record %s[%d]@%d: %s", topic, partition, offset, exc)
        await self._reject(f"undecodable: {exc}", raw or b"", topic, partition, offset)

    async def _reject(self, reason: str, original: bytes, topic: str, partition: int, offset: int) -> None:
        rejected = Rejected(reason=reason, original=original, topic=topic, partition=partition, offset=offset)
        self.rejected += 1
        try:
            await self.producer.send(self.topics.rejected, encode(rejected))
        except Exception as exc:  # noqa: BLE001 - refused: the reason, the length and the digest still go
            log.warning("rejection refused (%s): publishing it without its original", exc)
            minimal = rejected.minimal(f"{rejected.reason} (original not kept: {exc})"[:1000])
            await self.producer.send(self.topics.rejected, encode(minimal))

    # -- dispatch ----------------------------------------------------------------------------------
    def dispatch_once(self) -> float:
        """Lease every due job in every owned partition; return seconds until the next wakeup."""
        now = self.clock()
        wake: float | None = None
        if self.directory is not None:
            self._hold_idle_crawls(now)
        for owned in list(self.partitions.owned.values()):
            f = owned.frontier
            if owned.may_expire(now):  # not before the feedback waiting at open is applied
                f.expire_leases(now)
            f.sweep_due(now)  # forgets aged-out seen entries, a bounded slice every SWEEP_INTERVAL (10 s)
            result = f.dispatch(now)
            self._publish(owned, result)
            if owned.dirty or result.records or result.reports or result.submissions:
                # the round's leases, jobs and report pages commit together
                then = self._reported(f.partition, result) if result.reports else None
                owned.commit(then=then)
            nxt = f.next_wakeup()
            if nxt is not None and (wake is None or nxt < wake):
                wake = nxt
        if wake is None:
            return 0.5
        return min(0.5, max(0.0, wake - now))

    def _hold_idle_crawls(self, now: float) -> None:
        """Hand the partitions' crawls to the directory (twice a second at most) and hold the
        queues of crawls that have no worker (its last answer: never waited for); a crawl it has
        not answered for yet waits too."""
        directory = self.directory
        assert directory is not None
        if 0 <= now - self._crawls_looked < 0.5:
            return
        self._crawls_looked = now
        owned_map = self.partitions.owned
        directory.know(frozenset(c for owned in owned_map.values() for c in owned.frontier.crawl_names()))
        served = directory.served()
        for owned in owned_map.values():
            owned.frontier.set_served_crawls(served, now)

    def _publish(self, owned: _Owned, result: Dispatch) -> None:
        """A round's jobs and report pages, in the partition's open transaction after its leases;
        each job on its crawl's jobs topic (only that crawl's workers read it), in the partition of
        the same number (co-partitioned, docs/PROTOCOL.md): a transaction then touches one jobs
        partition per crawl, not every one (issue 39: the broker writes a marker to each partition
        a transaction touched, and with 50 crawls of 8 partitions that was up to 400 a commit)."""
        kinds: Counter[str] = Counter()  # counted once a round
        write, jobs_of, p = owned.writer.write, self.topics.jobs_of, owned.writer.partition
        # (a jobs topic not known to have the frontier's partition count: murmur2 of the host, as before)
        together = self.directory.copartitioned if self.directory is not None else frozenset()
        for record, (crawl, host, kind) in zip(result.records, result.routes, strict=True):
            write(jobs_of(crawl), record, host.encode(), p if crawl in together else None)
            kinds[kind] += 1
        for kind, n in kinds.items():
            self.metrics.jobs.labels(kind).inc(n)
        for report in result.reports:
            owned.writer.write(self.topics.pages, encode(report.page), report.page.url.encode())
        for sub in result.submissions:  # through intake like any submission (its router routes it)
            owned.writer.write(self.topics.urls, encode(sub), sub.url.encode())

    def _reported(self, p: int, result: Dispatch) -> Callable[[], None]:
        """Once a round's report pages committed, their report leases may go."""

        owned_map = self.partitions.owned

        def reported() -> None:
            owned = owned_map.get(p)
            if owned is None:  # the partition moved on: its new owner reports them again
                return
            for report in result.reports:
                owned.frontier.reported(report.lease)
            self._wake.set()  # the deletions go out with the next commit

        return reported

    async def dispatch_loop(self) -> None:
        self.running = True
        probe = asyncio.ensure_future(self.loop_probe.run())
        try:
            await self._dispatch_rounds()
        finally:
            probe.cancel()

    async def _dispatch_rounds(self) -> None:
        last_report = last_status = time.monotonic()
        while self.running:
            self.producer.raise_errors()  # a status or rejection record that failed is fatal
            if self.failure is not None:
                raise self.failure
            began = time.monotonic()
            timeout = self.dispatch_once()
            if timeout > 0:
                self._wake.clear()
                try:  # (a timeout in this task, not wait_for's task and futures: a wait a round)
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            rest = began + ROUND_GAP - time.monotonic()
            await asyncio.sleep(rest if rest > 0 else 0)  # (the input of that gap: served by one round)
            if time.monotonic() - last_status > self.cfg.frontier.status_interval:
                last_status = time.monotonic()
                self.reporting.publish_status(self.clock())
                self.trimmer.tick(self.partitions.transactions(), last_status)
            if time.monotonic() - last_report > 10:
                last_report = time.monotonic()
                log.info("stats %s", self.reporting.stats())

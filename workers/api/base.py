"""The worker API's state (``JobsBase``): the configuration, the Kafka connection, the per-host
gates, the slots, the offsets and the jobs in hand, and the two ways a job leaves them
(:meth:`JobsBase._leave` gives back its slot and gate; :meth:`JobsBase._done` ends it here). The
modules beside it add the behaviour as mixins over these fields: ``holding`` (until a job may be
sent), ``reporting`` (what is published, in the protocol's order), ``consuming`` (the Kafka
consumer); ``jobs`` assembles them into :class:`~workers.api.jobs.Jobs`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from confluent_kafka import Consumer, Message

from frontier.config import Config
from frontier.core.robots import MAX_ROBOTS_BYTES, agent_token
from frontier.kafka import Kafka
from frontier.observability.metrics import WorkerMetrics
from topics.schemas import DEFAULT_CRAWL, Job, valid_crawl
from workers.api.addresses import AddressCheck
from workers.api.gates import _HostGate
from workers.api.leased import LeasedJob, Outcome
from workers.api.membership import Membership
from workers.api.offsets import OffsetTracker
from workers.api.publishing import Publisher

log = logging.getLogger("worker")

CODES_CACHED = 10_000  # scope sets whose backoff codes are kept
CONFIRM_WAIT = 30.0  # seconds a held job waits for the group to confirm its partition after a stall
InternalFetcher = Callable[[LeasedJob], Awaitable[Outcome]]
Handler = Callable[[LeasedJob], Awaitable[Outcome | None]]


class JobsBase:
    def __init__(
        self,
        cfg: Config,
        *,
        concurrency: int | None = None,
        name: str | None = None,
        kafka: Kafka | None = None,
        kinds: Iterable[str] = ("page",),
        check_addresses: bool = True,
        internal: InternalFetcher | None = None,
        crawl: str = DEFAULT_CRAWL,
    ) -> None:
        self.cfg = cfg
        self.crawl = valid_crawl(crawl)  # this worker takes the jobs of this crawl only (its own topic and group)
        self.topics = cfg.topics
        self.concurrency = concurrency or cfg.worker.concurrency
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.agent = agent_token(cfg.worker.user_agent)
        self.kafka = kafka if kafka is not None else Kafka(cfg.kafka.client_conf())  # every client comes from it
        self.kinds = frozenset(kinds)
        self.addresses = AddressCheck(cfg.worker.allow_networks, cfg.worker.block_private) if check_addresses else None
        self.internal = internal
        self.handler: Handler | None = None
        self.tracker = OffsetTracker()
        self.membership: Membership | None = None  # set by start(): the consumer's partitions (None: all)
        # jobs marked done, waiting for the consumer's loop to commit the mark before they report
        self._marks: list[tuple[asyncio.Future[bool], float]] = []  # (mark, monotonic time asked)
        self.gates: dict[str, _HostGate] = defaultdict(_HostGate)
        self.metrics = WorkerMetrics()
        self.publisher: Publisher  # set by start() (tests set it directly)
        # how long a revoke waits for the jobs of the partitions it takes away; then they are cancelled
        self.revoke_grace = cfg.frontier.fetch_timeout + 30
        self.fetched = self.returned = self.skipped = self.dropped = 0
        self.skipped_reported = 0  # re-delivered jobs a previous owner had reported (not fetched again)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: asyncio.Semaphore | None = None
        self._ready: asyncio.Queue[LeasedJob] | None = None
        self._running: dict[tuple[str, int], set[asyncio.Task[None]]] = defaultdict(set)  # by (topic, partition)
        self._holding: set[asyncio.Task[None]] = set()  # tasks waiting for a job's slot
        self._entered: set[LeasedJob] = set()  # jobs holding a slot and their host's gate
        self._timers: dict[LeasedJob, asyncio.TimerHandle] = {}  # handed over: given up at expires_at + timeout
        self._stop = threading.Event()
        self._closing = False
        self._poller: asyncio.Task[None] | None = None
        self._consumer: Consumer | None = None
        self._codes: dict[tuple[str, ...], frozenset[int]] = {}  # backoff codes by scopes (bounded)
        self.failure: BaseException | None = None  # the consumer's, if it failed (raised by serve())
        self._builtin: Any = None  # the built-in fetcher, when internal kinds needed it

    def _bind(self) -> None:
        """Take the running event loop (tests that call :meth:`handle` directly use this alone)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._slots = asyncio.Semaphore(self.concurrency)
            self._ready = asyncio.Queue()

    # What the mixins call of each other (defined in jobs, reporting, holding)
    async def handle(self, msg: Message) -> None:
        """One consumed job, start to end (:class:`~workers.api.jobs.Jobs`)."""
        raise NotImplementedError

    async def _back(self, leased: LeasedJob) -> None:
        """Hand the job back unfetched (:class:`~workers.api.reporting.Reporting`)."""
        raise NotImplementedError

    def _abandon(self, leased: LeasedJob) -> None:
        """Give up a job never reported (:class:`~workers.api.jobs.Jobs`)."""
        raise NotImplementedError

    async def _report(self, leased: LeasedJob, outcome: Outcome) -> None:
        """Publish a job's outcome (:class:`~workers.api.reporting.Reporting`)."""
        raise NotImplementedError

    def prune_gates(self, now: float) -> int:
        """Forget idle hosts' gates (:class:`~workers.api.holding.Holding`)."""
        raise NotImplementedError

    def max_body(self, job: Job) -> int:
        return MAX_ROBOTS_BYTES if job.kind == "robots" else self.cfg.worker.max_body_bytes

    def backoff_codes(self, job: Job) -> frozenset[int]:
        """The statuses the frontier backs off on for this URL's scopes: only those are retried."""
        item = job.item
        key = (item.host, item.domain, *item.scopes)
        codes = self._codes.get(key)
        if codes is None:  # the configuration never changes: asked three times per job, built once
            if len(self._codes) >= CODES_CACHED:
                self._codes.clear()
            codes = self._codes[key] = frozenset(
                code for name in key for code in self.cfg.throttle.for_scope(name).backoff.codes
            )
        return codes

    def _leave(self, leased: LeasedJob) -> None:
        """Give back the job's slot and its host's gate (once)."""
        if leased not in self._entered:
            return
        self._entered.discard(leased)
        gate = self.gates.get(leased.gate_host)
        if gate is not None:
            if leased.holds_idle:  # its request never said it went out: the host's next may go now
                leased.holds_idle = False
                gate.idle.set()
            gate.leave()
        assert self._slots is not None
        self._slots.release()
        self.metrics.inflight.dec()

    async def mark_done(self, leased: LeasedJob) -> bool:
        """Before a job's report goes out: its offset is committed as done (the commit's metadata,
        :mod:`workers.api.offsets`), so a worker that takes the partition over never fetches a job whose
        report landed. False: the group refused the commit as from an expired member (the job is
        another worker's now: report nothing). Without a consumer (tests): at once, True."""
        self.tracker.finished(*leased._coords)
        if self._consumer is None or self._loop is None:
            return True
        mark: asyncio.Future[bool] = self._loop.create_future()
        self._marks.append((mark, time.monotonic()))
        return await mark

    def owns(self, leased: LeasedJob) -> bool | None:
        """Whether the job's partition is still this worker's (None: unknown, after a stall)."""
        if self.membership is None:
            return True
        return self.membership.owns(leased._coords[:2])

    async def still_owns(self, leased: LeasedJob, wait: float = CONFIRM_WAIT) -> bool:
        """Whether the job's partition is this worker's, waiting (up to ``wait``) for the group to
        confirm it after a stall; False: the job must go unsent and unreported (another worker has it)."""
        deadline = time.monotonic() + wait
        while (owned := self.owns(leased)) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return owned is True

    def _drop(self, leased: LeasedJob, finish: bool = False) -> None:
        """Over here, unsent and unreported. Its partition is another worker's: its offset is left
        uncommitted (the new owner gets the job again). ``finish``: the partition is not known to
        be another's (no confirmation came): its offset must not hold the commit point forever
        (the frontier's lease brings the job back)."""
        if not leased.reported:
            leased.reported = True
            self.dropped += 1
            log.info("%r dropped: its partition is another worker's", leased)
            if finish:
                self.tracker.finished(*leased._coords)
        self._leave(leased)
        timer = self._timers.pop(leased, None)
        if timer is not None:
            timer.cancel()

    def _done(self, leased: LeasedJob) -> None:
        """The job is over here: its slot freed, its offset may be committed."""
        self._leave(leased)
        timer = self._timers.pop(leased, None)
        if timer is not None:
            timer.cancel()
        self.tracker.finished(*leased._coords)

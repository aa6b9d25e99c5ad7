"""What GetURLs hands out: each crawl's jobs, taken from the frontier through the worker API.

The gateway is a worker of every crawl a client uses (one :class:`~workers.api.jobs.Jobs` per
crawl, in its worker group): a job comes to it only when the frontier's politeness says its host
may be sent to, and the worker API holds it until its send time. A job waits in the crawl's
*ready* list until a GetURLs takes it; then it is *handed out*: the frontier is told to keep its
lease until ``delay_requestable`` has passed (a ``hold`` query), after which the frontier queues
the URL again, whether or not this gateway still runs; the host's slot it keeps only until the
hand-out deadline (``frontier.fetch_timeout`` after the hold: the client must have fetched it by
then), so an update lost with a gateway holds the host no longer. A known-URL update of a URL
handed out here reports its job (status and throttling headers from its metadata: the host's
delay moves as for any worker's report), sent as late as the update came. A ready job past its
time is handed back to the frontier, and so is every ready job of a crawl no GetURLs asked for
in ``urlfrontier.unasked`` seconds (a job waiting here holds its host's slot for every crawl:
another crawl of the host that is asked for gets the host's next turn).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from frontier.config import Config
from frontier.core.lru import LRU
from topics.kafka import Kafka
from topics.schemas import DEFAULT_CRAWL
from workers.api import Jobs, LeasedJob, Outcome
from workers.urlfrontier.mapping import Signal, default_key

log = logging.getLogger("urlfrontier")
SWEEP = 0.5  # seconds between looks for ready jobs past their time
MAX_HANDED = 200_000  # URLs handed out remembered per crawl (their updates report them)


@dataclass
class Handed:
    job: LeasedJob
    at: float  # handed out then (epoch s)
    until: float  # the client has it until then


class CrawlPool:
    """One crawl's jobs in this gateway."""

    def __init__(self, cfg: Config, crawl: str, kafka: Kafka) -> None:
        self.crawl = crawl
        self.cfg = cfg
        self.jobs = Jobs(cfg, crawl=crawl, kafka=kafka, concurrency=cfg.urlfrontier.held, check_addresses=False,
                         name=f"urlfrontier-{crawl}")  # fmt: skip
        self.ready: list[LeasedJob] = []
        self.handed: LRU[str, Handed] = LRU(MAX_HANDED)  # url → its job in a client's hands
        self.arrived = asyncio.Event()
        self.asked = time.monotonic()  # when a GetURLs last asked for this crawl (made: as if asked)...
        self.asking = 0  # ...and how many are asking now
        self._task: asyncio.Task[None] | None = None
        self.failure: BaseException | None = None

    @contextlib.contextmanager
    def asking_for(self) -> Iterator[None]:
        """A GetURLs asks for this crawl's jobs while in this block."""
        self.asking += 1
        try:
            yield
        finally:
            self.asking -= 1
            self.asked = time.monotonic()

    @property
    def unasked(self) -> bool:
        """No GetURLs asked for this crawl in ``urlfrontier.unasked`` seconds: its jobs go back."""
        return not self.asking and time.monotonic() - self.asked > self.cfg.urlfrontier.unasked

    async def start(self) -> None:
        await self.jobs.start()
        self._task = asyncio.ensure_future(self._take())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        ready, self.ready = self.ready, []
        await release_all(ready)  # not handed out: back to the frontier at once
        for handed in self.handed.values():  # in clients' hands: their leases are held at the frontier
            self.jobs.endings.let_go(handed.job)
        self.handed.clear()
        await self.jobs.close()

    async def _take(self) -> None:
        last_sweep = time.monotonic()
        try:
            while True:
                job = await self.jobs.get(timeout=SWEEP)
                if job is not None:
                    self.ready.append(job)
                    self.arrived.set()
                if self.ready and self.unasked:
                    await self._give_back_unasked()
                if time.monotonic() - last_sweep >= SWEEP:
                    last_sweep = time.monotonic()
                    await self._sweep(time.time())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failure = exc
            log.exception("crawl %r: the jobs consumer failed", self.crawl)

    async def _give_back_unasked(self) -> None:
        """Nobody asks for this crawl: its ready jobs go back to the frontier, which queues them
        again (nothing was sent) and gives their hosts' turns to the next crawl."""
        ready, self.ready = self.ready, []
        await release_all(ready)
        log.debug("crawl %r: %d jobs handed back (no GetURLs asked for it)", self.crawl, len(ready))

    async def _sweep(self, now: float) -> None:
        """Ready jobs past their time go back to the frontier; handed-out ones past their client's
        time are forgotten here (the frontier queues them again)."""
        keep = [job for job in self.ready if not job.reported and now <= job.expires_at]
        late = [job for job in self.ready if not job.reported and now > job.expires_at]
        self.ready = keep
        await release_all(late)
        for url in [u for u, h in self.handed.items() if h.until <= now or h.job.reported]:
            del self.handed[url]

    def take(self, key: str | None, per_queue: int, queues: int, budget: int,
             counts: dict[str, int] | None = None) -> list[LeasedJob]:  # fmt: skip
        """Ready jobs for one GetURLs: at most ``per_queue`` of a queue key (0: no limit), from at
        most ``queues`` keys (0: no limit), of ``key`` only if given, ``budget`` in all; ``counts``
        (updated): what the call took so far, per key."""
        taken: list[LeasedJob] = []
        counts = {} if counts is None else counts
        left: list[LeasedJob] = []
        now = time.time()
        for job in self.ready:
            k = job_key(job)
            fits = (
                not job.reported
                and now <= job.expires_at
                and len(taken) < budget
                and (key is None or k == key)
                and (per_queue == 0 or counts.get(k, 0) < per_queue)
                and (queues == 0 or k in counts or len(counts) < queues)
            )
            if fits:
                taken.append(job)
                counts[k] = counts.get(k, 0) + 1
            elif not job.reported:
                left.append(job)
        self.ready = left
        return taken

    async def hand_out(self, job: LeasedJob, until: float) -> None:
        """Handed to a client until ``until`` (the frontier was told: :meth:`Gateway.GetURLs`)."""
        now = time.time()
        job.sent(now)  # the client sends it now: the host's next send is timed from here
        await job.hold(until, tell=False)
        self.handed.put(job.url, Handed(job, now, until))

    async def updated(self, url: str, signal: Signal) -> bool:
        """A known-URL update of ``url``: its job here, if any, is reported (True). Its send time is
        the latest moment the client could have fetched it: now, as the update comes (a client may
        fetch a URL it holds long after it was handed out: the host's next request keeps its delay
        from this one's, whenever it was sent)."""
        handed = self.handed.pop(url, None)
        if handed is None or handed.job.reported:
            return False
        status = signal.status or 200  # an update that says nothing: processed (no latency sample)
        outcome = Outcome(status=status, headers=signal.headers or {}, sent_at=time.time(), page=False,
                          follow_ups=[])  # fmt: skip
        try:
            await handed.job.finish(outcome)
        except Exception as exc:  # noqa: BLE001 - the frontier's lease brings it back
            log.warning("report of %s failed: %s", url[:200], exc)
            return False
        return True


async def release_all(jobs: list[LeasedJob]) -> None:
    """Hand ``jobs`` back to the frontier (unsent: queued again), all at once: each report waits for
    its done mark, committed in the consumer's next turn, so one at a time took a turn each (issue 39:
    200 ready jobs given back while no GetURLs asked took 7-10 s, during which the pool took no new
    job and a client's calls came back empty). A job already reported is skipped; a failure leaves
    the job to its lease."""

    async def one(job: LeasedJob) -> None:
        if not job.reported:
            with contextlib.suppress(Exception):
                await job.release()

    await asyncio.gather(*(one(job) for job in jobs))


def job_key(job: LeasedJob) -> str:
    """The queue key of a job's URL (a URL put by another route: its default key)."""
    return job.item.key or default_key(job.url)


class TooManyCrawls(RuntimeError):
    """A client named more crawls than a gateway serves (``urlfrontier.max_crawls``: each is a
    Kafka consumer in the gateway)."""


class Pools:
    """Every crawl's pool in this gateway, made when a client first names the crawl (or, at start,
    for the crawls the frontier knows)."""

    def __init__(self, cfg: Config, kafka: Kafka) -> None:
        self.cfg = cfg
        self.kafka = kafka
        self.pools: dict[str, CrawlPool] = {}
        self._lock = asyncio.Lock()

    async def of(self, crawl: str) -> CrawlPool:
        pool = self.pools.get(crawl)
        if pool is not None:
            return pool
        async with self._lock:
            pool = self.pools.get(crawl)
            if pool is None:
                self.check_room(crawl)
                pool = CrawlPool(self.cfg, crawl, self.kafka)
                await pool.start()
                self.pools[crawl] = pool
                log.info("serving GetURLs of crawl %r", crawl)
        return pool

    def check_room(self, crawl: str) -> None:
        """Raise :class:`TooManyCrawls` if ``crawl`` is not served here and there is no room for it."""
        limit = self.cfg.urlfrontier.max_crawls
        if crawl not in self.pools and len(self.pools) >= limit:
            raise TooManyCrawls(f"crawl {crawl[:64]!r} refused: this gateway serves {limit} crawls already, its "
                                "urlfrontier.max_crawls (each is a Kafka consumer here)")  # fmt: skip

    def known(self) -> list[CrawlPool]:
        return list(self.pools.values())

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.pools.values()), return_exceptions=True)
        self.pools.clear()


__all__ = ["DEFAULT_CRAWL", "CrawlPool", "Handed", "Pools", "TooManyCrawls", "job_key"]

"""The project's fetch worker: the worker API (:mod:`workers.api.jobs`) serving a fetcher, the built-in
aiohttp one (:mod:`workers.api.builtin`) unless another is named with ``--fetcher package.module:factory``
or ``worker.fetcher`` in the configuration.

The worker runs on uvloop's event loop when uvloop is installed (a dependency on Linux and macOS; its
loop, transports and timers are C: about a quarter less CPU a page than asyncio's own loop, measured
in issue 39), else on asyncio's; ``CRAWL_FRONTIER_EVENT_LOOP=asyncio`` keeps asyncio's.

A fetcher factory is called with the :class:`~frontier.config.Config` and returns either an object
with a ``fetch(job)`` method (and optionally ``close()``), or the fetch callable itself. ``fetch``
may be a coroutine function, given a :class:`~workers.api.leased.LeasedJob`, or a plain function, run
in a thread and given a :class:`~workers.api.blocking.BlockingJob`; it returns an
:class:`~workers.api.leased.Outcome` or reports through the job itself (docs/WORKERS.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import inspect
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

from frontier.config import Config, ConfigError
from frontier.observability.process import tune_collector
from topics.kafka import Kafka
from topics.schemas import DEFAULT_CRAWL
from workers.api import BlockingJob, Jobs, LeasedJob, Outcome
from workers.api.builtin import AiohttpFetcher
from workers.api.clock import SYSTEM, Clock

log = logging.getLogger("worker")
TIMEOUT_GRACE = 1.0  # seconds a user fetcher may run past the job's timeout before it counts as one
EVENT_LOOP_ENV = "CRAWL_FRONTIER_EVENT_LOOP"  # "asyncio": asyncio's own loop even with uvloop installed


class FetcherError(ConfigError):
    """A ``--fetcher`` that cannot be loaded; ``str(exc)`` says why, in one line."""


class Fetcher:
    """A user fetcher made uniform: ``await fetch(job)`` and ``await close()``. A plain function
    runs on a pool of its own, ``threads`` wide (the worker sets its concurrency): it starts as
    soon as its job is handed over, and never starves the worker's consumer of threads."""

    def __init__(self, made: Any, threads: int = 0) -> None:
        self.made = made
        self.threads = threads
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        fn = getattr(made, "fetch", made)
        if not callable(fn):
            raise FetcherError(f"{made!r} has no fetch(job) and is not callable")
        self._fn: Callable[..., Any] = fn
        self._async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)

    async def fetch(self, job: LeasedJob) -> Outcome | None:
        result: Outcome | None
        if self._async:
            result = await self._fn(job)
            return result
        loop = asyncio.get_running_loop()
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(self.threads or 16, "fetcher")
        running = loop.run_in_executor(self._pool, self._fn, BlockingJob(job, loop))
        try:
            result = await asyncio.shield(running)
        except asyncio.CancelledError:  # its timeout: a thread cannot be stopped, and may still send
            job.keep_gate_until(running)
            raise
        return result

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        close = getattr(self.made, "close", None)
        if close is None:
            return
        result = close()
        if inspect.isawaitable(result):
            await result


def load_fetcher(spec: str, cfg: Config) -> Fetcher:
    """``package.module:factory`` → the fetcher ``factory(cfg)`` makes."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise FetcherError(f"--fetcher {spec!r}: expected package.module:factory")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise FetcherError(f"--fetcher {spec!r}: cannot import {module_name}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise FetcherError(f"--fetcher {spec!r}: {module_name} has no callable {attr}")
    return Fetcher(factory(cfg))


class FetchWorker:
    """The worker API serving one fetcher; the built-in one takes every job kind itself and checks
    addresses at connect time, a user fetcher takes page jobs (robots.txt is fetched here) and
    gets the address check before each hand-over. ``clock``: the worker API's (a job's timeout is
    kept on it too)."""

    def __init__(
        self,
        cfg: Config,
        concurrency: int | None = None,
        name: str | None = None,
        kafka: Kafka | None = None,
        fetcher: Fetcher | None = None,
        crawl: str = DEFAULT_CRAWL,
        clock: Clock = SYSTEM,
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        concurrency = concurrency or cfg.worker.concurrency
        builtin = fetcher is None
        self.builtin = AiohttpFetcher(cfg, concurrency, clock)
        self.fetcher: Fetcher | AiohttpFetcher = self.builtin if fetcher is None else fetcher
        if fetcher is not None and not fetcher.threads:
            fetcher.threads = concurrency
        self.jobs = Jobs(cfg, concurrency=concurrency, name=name, kafka=kafka,
                         kinds=("page", "robots") if builtin else ("page",), check_addresses=not builtin,
                         internal=self.builtin.fetch, crawl=crawl, clock=clock)  # fmt: skip
        self.jobs.handler = self._fetch

    async def _fetch(self, job: LeasedJob) -> Outcome | None:
        if self.fetcher is self.builtin:
            return await self.builtin.fetch(job)  # it keeps the timeout itself
        try:  # a user fetcher gets the job's timeout (and a little more), as the built-in keeps it
            return await self.clock.wait_for(self.fetcher.fetch(job), job.timeout + TIMEOUT_GRACE)
        except TimeoutError:
            if job.reported:
                return None
            log.warning("%s: the fetcher took longer than the job's %.0f s timeout", job.url, job.timeout)
            return Outcome(error="timeout")

    def stop(self) -> None:
        self.jobs.stop()

    async def run(self) -> None:
        try:
            await self.jobs.serve(self._fetch)
        finally:
            await self.fetcher.close()
            await self.builtin.close()


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's ``new_event_loop`` when uvloop is installed and :data:`EVENT_LOOP_ENV` does not ask
    for asyncio's loop; None (asyncio's default) otherwise. Nothing the worker keeps depends on the
    loop: every send time is wall time re-read after each wait (a timer that fires early, as uvloop's
    millisecond timers may, waits again: :meth:`~workers.api.holding.Holder.hold`)."""
    if os.environ.get(EVENT_LOOP_ENV, "").strip().lower() == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_worker(
    cfg: Config,
    concurrency: int | None = None,
    kafka: Kafka | None = None,
    fetcher: Fetcher | None = None,
    crawl: str = DEFAULT_CRAWL,
) -> None:
    """Run a worker until SIGINT/SIGTERM (its clients from ``kafka``, default: built from ``cfg``);
    ``fetcher``: see :func:`load_fetcher` (default: ``worker.fetcher`` if set, else the built-in one);
    ``crawl``: the crawl whose jobs it takes (only those)."""
    if fetcher is None and cfg.worker.fetcher:
        fetcher = load_fetcher(cfg.worker.fetcher, cfg)
    worker = FetchWorker(cfg, concurrency, kafka=kafka, fetcher=fetcher, crawl=crawl)
    # (measured: a fetch's share of the collector's CPU 36 -> 16 us, about a tenth of the fetch)
    tune_collector()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, worker.stop)
        await worker.run()

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(main())

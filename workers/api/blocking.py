"""The worker API for blocking code: thread pools, task queues, any HTTP client that blocks.

:class:`BlockingJobs` runs :class:`~workers.api.jobs.Jobs` on an event loop in a thread of its own;
iterating it gives :class:`BlockingJob` handles, each once it may be sent, never more than
``concurrency`` at a time in user code's hands. Their methods block until done and may be
called from any thread::

    with BlockingJobs(cfg, concurrency=8) as jobs:
        jobs.serve(fetch_one, threads=8)   # or: for job in jobs: pool.submit(fetch_one, job)

A handler's exception is reported as an error and a job it leaves unreported is released, as
with the async shape; ``with job:`` does the same around a block.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import threading
from collections.abc import Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from frontier.config import Config
from topics.schemas import Job
from workers.api.jobs import Jobs
from workers.api.leased import JobFacts, LeasedJob, Outcome

log = logging.getLogger("worker")
T = TypeVar("T")
P = ParamSpec("P")


def _blocking(
    method: Callable[Concatenate[LeasedJob, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[BlockingJob, P], T]:
    """``method`` of the job in hand, as a blocking call from any thread."""

    def call(self: BlockingJob, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._call(method(self.leased, *args, **kwargs))

    functools.update_wrapper(call, method)  # its name and documentation
    return call


def _on_loop(method: Callable[Concatenate[LeasedJob, P], None]) -> Callable[Concatenate[BlockingJob, P], None]:
    """A plain ``method`` of the job in hand, run on the loop's thread (the gates' events are not
    thread-safe) and waited for."""

    async def run(leased: LeasedJob, /, *args: P.args, **kwargs: P.kwargs) -> None:
        method(leased, *args, **kwargs)

    def call(self: BlockingJob, /, *args: P.args, **kwargs: P.kwargs) -> None:
        self._call(run(self.leased, *args, **kwargs))

    functools.update_wrapper(call, method)
    return call


class BlockingJob(JobFacts):
    """A :class:`~workers.api.leased.LeasedJob` for blocking code: the same reports, as blocking calls."""

    __slots__ = ("_loop", "leased")

    def __init__(self, leased: LeasedJob, loop: asyncio.AbstractEventLoop) -> None:
        self.leased = leased
        self._loop = loop

    def __repr__(self) -> str:
        return f"Blocking{self.leased!r}"

    def _job(self) -> Job:
        return self.leased.job

    @property
    def addresses(self) -> list[str]:
        return self.leased.addresses

    @property
    def max_body_bytes(self) -> int:
        return self.leased.max_body_bytes

    @property
    def reported(self) -> bool:
        return self.leased.reported

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # LeasedJob's calls, each run on the loop's thread and waited for (the gates' events and the
    # publishing belong to the loop): the same signatures, documented there
    sent = _on_loop(LeasedJob.sent)
    answered = _on_loop(LeasedJob.answered)
    finish = _blocking(LeasedJob.finish)
    fetched = _blocking(LeasedJob.fetched)
    failed = _blocking(LeasedJob.failed)
    skip = _blocking(LeasedJob.skip)
    release = _blocking(LeasedJob.release)

    def __enter__(self) -> BlockingJob:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._call(self.leased.__aexit__(kind, exc, tb))


class BlockingJobs:
    """:class:`~workers.api.jobs.Jobs` (same arguments) behind a blocking iterator."""

    def __init__(self, cfg: Config, **kwargs: Any) -> None:
        self.jobs = Jobs(cfg, **kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def concurrency(self) -> int:
        return self.jobs.concurrency

    def __enter__(self) -> BlockingJobs:
        started = threading.Event()
        failure: list[BaseException] = []

        def loop_thread() -> None:
            loop = self._loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(self.jobs.start())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller of __enter__
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=loop_thread, name="worker-api", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise failure[0]
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stop(self) -> None:
        """Stop taking jobs (thread-safe; also from a signal handler)."""
        self.jobs.stop()

    def close(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self.jobs.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

    def __iter__(self) -> Iterator[BlockingJob]:
        loop = self._loop
        assert loop is not None, "use `with BlockingJobs(...) as jobs`"
        while True:
            try:
                leased = asyncio.run_coroutine_threadsafe(self.jobs.__anext__(), loop).result()
            except StopAsyncIteration:
                return
            yield BlockingJob(leased, loop)

    def get(self, timeout: float | None = None) -> BlockingJob | None:
        """The next job once it may be sent; None after ``timeout`` seconds without one, or once
        the worker stops (for a loop that also does other work)."""
        loop = self._loop
        assert loop is not None, "use `with BlockingJobs(...) as jobs`"
        leased = asyncio.run_coroutine_threadsafe(self.jobs.get(timeout), loop).result()
        return None if leased is None else BlockingJob(leased, loop)

    def serve(self, handler: Callable[[BlockingJob], Outcome | None], threads: int | None = None) -> None:
        """Until :meth:`stop`: each job to ``handler`` on a pool of ``threads`` (default
        ``concurrency``). A returned outcome is reported; an exception is reported as an error; a
        job left without a report is released."""
        with concurrent.futures.ThreadPoolExecutor(threads or self.concurrency, "worker-job") as pool:
            for job in self:
                pool.submit(run_one, handler, job)


def run_one(handler: Callable[[BlockingJob], Outcome | None], job: BlockingJob) -> None:
    """``handler(job)``, then its outcome reported; never raises (a failure is the job's error)."""
    try:
        try:
            outcome = handler(job)
        except Exception as exc:  # reported as an error, never silence (a poison URL)
            log.exception("job %s failed in user code", job.url)
            if not job.reported:
                job.failed(f"worker:{type(exc).__name__}")
            return
        if not job.reported:
            job.finish(outcome) if outcome is not None else job.release()
    except Exception:  # the report itself failed (already reported, worker closing): logged, not lost
        log.exception("job %s: report failed; the frontier's lease brings it back", job.url)

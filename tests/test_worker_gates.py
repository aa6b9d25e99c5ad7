"""Gates held by workers (THROTTLING.md v2 §4, case 26): a worker holding jobs of a host when
that host answers 429 + Retry-After sends none of them inside the window, even though the
frontier dispatched them before it heard of the 429; jobs whose lease ends inside the window are
handed back unfetched. Real local server on loopback; the producer is the in-memory stand-in of
test_worker_jobs (no broker: this is the worker's own logic)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import aiohttp
import pytest
from aiohttp import web
from msgspec.structs import replace

from frontier.config import Config
from tests.fakes import FakeProducer, JumpClock, message
from tests.test_worker_jobs import handle, make_worker, poll
from tests.test_worker_jobs import serving as serving_on
from topics.schemas import Job, UrlItem
from workers.api.clock import SYSTEM, Clock
from workers.fetcher.worker import FetchWorker

HOST = "127.0.0.94"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Limited:
    """Answers the first request with 429 + Retry-After: 2, then 200; records arrival times (on
    ``clock``: the worker's)."""

    def __init__(self, clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.arrivals: list[tuple[str, float]] = []
        self.answered_429_at = 0.0
        self.base = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.arrivals.append((request.path, self.clock.now()))
        if len(self.arrivals) == 1:
            self.answered_429_at = self.clock.now()
            return web.Response(status=429, headers={"Retry-After": "2"})
        return web.Response(text="ok")


def serving(handler: Handler) -> AbstractAsyncContextManager[str]:
    return serving_on(handler, HOST)


@pytest.fixture
async def limited() -> AsyncIterator[Limited]:
    state = Limited()
    async with serving(state.handle) as base:
        state.base = base
        yield state


def job(url: str, lease: str, not_before: float, expires_at: float) -> Job:
    return Job(lease=lease, item=UrlItem(url=url, host=HOST, domain=HOST), not_before=not_before,
               expires_at=expires_at, timeout=5)  # fmt: skip


async def test_case_26_held_jobs_are_not_sent_inside_the_window(limited: Limited) -> None:
    producer, clock = FakeProducer(), JumpClock()
    limited.clock = clock
    worker = make_worker(producer, clock=clock)
    now = clock.now()
    first = job(f"{limited.base}/0", "L0", now, now + 30)
    # dispatched before the frontier heard of the 429: due 0.3 s later, leases long enough to wait
    held = [job(f"{limited.base}/{n}", f"L{n}", now + 0.3, now + 30) for n in (1, 2, 3)]
    # and one whose lease ends inside the window: handed back, never sent
    short = job(f"{limited.base}/short", "LS", now + 0.3, now + 1.5)
    async with aiohttp.ClientSession() as session:
        handling = asyncio.gather(*(handle(worker, session, message(j, n)) for n, j in
                                    enumerate([first, *held, short])))  # fmt: skip
        gates = worker.jobs.holder.gates
        await poll(lambda: HOST in gates and gates[HOST].closed_until > 0, 5, "the 429's window")
        await clock.advance(5.0)  # past the window (2 s and its margin)
        await handling
        await worker.jobs.reporter.publisher.settled()
    window_end = limited.answered_429_at + 2.0
    later = [(path, at) for path, at in limited.arrivals if path != "/0"]
    assert sorted(p for p, _ in later) == ["/1", "/2", "/3"], "the short-lease job must not be sent"
    assert all(at >= window_end for _, at in later), [round(at - window_end, 3) for _, at in later]
    outcomes = {fb.lease: fb.outcome for fb in producer.feedback()}
    assert outcomes["LS"] == "expired" and outcomes["L1"] == outcomes["L2"] == outcomes["L3"] == "fetched"


async def test_a_server_stated_interval_counts_from_the_end_of_the_previous_response() -> None:
    """§9: Crawl-delay 0.5 (the job's floor) on a server that takes 0.3 s to answer: the next
    request arrives 0.5 s after the previous response ended, not 0.5 s after it was sent."""
    ends: list[float] = []
    arrivals: list[float] = []
    clock = JumpClock()  # the worker's and the server's

    async def slow(request: web.Request) -> web.StreamResponse:
        arrivals.append(clock.now())
        await clock.sleep(0.3)  # the simulated server's work before it answers
        response = web.Response(text="slow")
        ends.append(clock.now())
        return response

    async with serving(slow) as base:
        worker = make_worker(FakeProducer(), clock=clock)
        now = clock.now()
        jobs = [replace(job(f"{base}/{n}", f"F{n}", now, now + 30), floor=0.5) for n in range(3)]
        async with aiohttp.ClientSession() as session:
            await clock.lapse(asyncio.gather(*(handle(worker, session, message(j, n)) for n, j in
                                               enumerate(jobs))))  # fmt: skip
    assert len(arrivals) == 3
    gaps = [b - a for a, b in zip(ends, arrivals[1:], strict=False)]
    assert all(g >= 0.5 for g in gaps), gaps


async def test_a_robots_redirect_is_reported_not_followed() -> None:
    """robots.txt hops go back to the frontier one at a time (each through the host's throttling):
    the worker makes one request and reports where the redirect points."""
    hits: list[str] = []

    async def moved(request: web.Request) -> web.StreamResponse:
        hits.append(request.path)
        return web.Response(status=301, headers={"Location": "/elsewhere/robots.txt"})

    producer = FakeProducer()
    async with serving(moved) as base:
        worker = make_worker(producer)
        now = time.time()
        robots = replace(job(f"{base}/robots.txt", "R1", now, now + 30), kind="robots")
        async with aiohttp.ClientSession() as session:
            await handle(worker, session, message(robots))
            await worker.jobs.reporter.publisher.settled()
    assert hits == ["/robots.txt"]
    [fb] = producer.feedback()
    assert fb.status == 301 and fb.headers["location"] == "/elsewhere/robots.txt"


def test_idle_host_gates_are_forgotten_so_memory_does_not_grow_with_every_host() -> None:
    """100,000 hosts seen an hour ago, two still busy: the sweep keeps only the busy ones."""
    worker = FetchWorker(Config(), concurrency=4, name="prune")
    now = time.time()
    for n in range(100_000):
        worker.jobs.holder.gates[f"h{n}.test"].last_sent = now - 3600
    worker.jobs.holder.gates["recent.test"].last_sent = now - 5
    worker.jobs.holder.gates["window.test"].last_sent = now - 3600
    worker.jobs.holder.gates["window.test"].closed_until = now + 30  # the host asked for a pause: kept
    assert worker.jobs.holder.prune_gates(now) == 100_000
    assert set(worker.jobs.holder.gates) == {"recent.test", "window.test"}

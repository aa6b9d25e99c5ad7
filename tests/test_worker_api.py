"""The worker API without a broker: the same jobs, against the same real local server, fetched by
the built-in fetcher and by each example's HTTP client (requests on a thread, httpx, urllib),
give the same feedback (outcome, status, error, throttling headers; latencies at least the server's
own wait and at most 200 ms above it: a thread pool's first start on a loaded machine took 27 ms), and
that feedback moves the throttling policy exactly as the built-in's does. Also: the reports'
contracts (one report per job, skip and release, an exception in user code, a job never
reported), the default send time, and ``--fetcher`` loading.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

import httpx
import pytest
from aiohttp import web

from frontier.config import Config, ConfigError, WorkerConfig
from frontier.core import policy
from frontier.core.state import Done, ScopeState, Sent
from tests.fakes import FakeProducer, JumpClock, message
from tests.test_worker_jobs import poll, serving
from topics.schemas import Feedback, Job, Submission, UrlItem
from workers.api import AlreadyReported, BlockingJob, LeasedJob, Outcome
from workers.api.clock import SYSTEM, Clock
from workers.api.publishing import Publisher
from workers.examples import background, partial, threaded_requests
from workers.fetcher.worker import Fetcher, FetchWorker, load_fetcher

HOST = "127.0.0.95"
CFG = replace(Config(), worker=WorkerConfig(allow_networks=("127.0.0.0/8",)))
# what the server answers; the gating ones last (each closes the host's gate for a second)
ROUTES: dict[str, tuple[int, dict[str, str], float]] = {
    "/ok": (200, {"Content-Type": "text/html"}, 0.0),
    "/slow": (200, {"Content-Type": "text/html"}, 0.1),
    "/down": (503, {}, 0.0),
    "/moved": (301, {"Location": "/elsewhere"}, 0.0),
    "/gone": (404, {}, 0.0),
    "/budget": (200, {"RateLimit": '"default";r=0;t=1', "RateLimit-Policy": '"default";q=5;w=1'}, 0.0),
    "/limited": (429, {"Retry-After": "1"}, 0.0),
}


def make_job(url: str, lease: str, expires_in: float = 30.0, timeout: float = 5.0, clock: Clock = SYSTEM) -> Job:
    now = clock.now()
    return Job(lease=lease, item=UrlItem(url=url, host=HOST, domain=HOST), not_before=now,
               expires_at=now + expires_in, timeout=timeout)  # fmt: skip


@pytest.fixture
async def site() -> AsyncIterator[str]:
    async def answer(request: web.Request) -> web.Response:
        status, headers, wait = ROUTES.get(request.path, (404, {}, 0.0))
        await asyncio.sleep(wait)
        return web.Response(status=status, headers=headers, body=b"<html>page</html>")

    async with serving(answer, HOST) as base:
        yield base


def worker_with(fetcher: Fetcher | None, producer: FakeProducer, clock: Clock = SYSTEM) -> FetchWorker:
    worker = FetchWorker(CFG, concurrency=4, name="api-test", fetcher=fetcher, clock=clock)
    worker.jobs.reporter.publisher = Publisher(producer, CFG.topics)  # type: ignore[arg-type]
    worker.jobs._bind()
    return worker


async def until(condition: Callable[[], bool], what: str) -> None:
    """Let the event loop run (no time passes) until ``condition`` holds."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


async def got_within(worker: FetchWorker, clock: JumpClock, seconds: float) -> LeasedJob | None:
    """``worker.jobs.get(seconds)``, its wait jumped through on ``clock``."""
    getting = asyncio.ensure_future(worker.jobs.get(seconds))
    await clock.advance(seconds)
    return await getting


async def crawl(fetcher: Fetcher | None, base: str) -> list[Feedback]:
    producer, clock = FakeProducer(), JumpClock()
    worker = worker_with(fetcher, producer, clock)
    for n, path in enumerate(ROUTES):
        job = make_job(base + path, lease=path, clock=clock)
        await through_windows(worker, clock, worker.jobs.handle(message(job, n)))  # type: ignore[arg-type]
    await worker.jobs.reporter.publisher.settled()
    await worker.fetcher.close()
    await worker.builtin.close()
    return producer.feedback()


async def through_windows(worker: FetchWorker, clock: JumpClock, handling: Awaitable[None]) -> None:
    """Await ``handling``, jumping ``clock`` over the windows the host announced instead of waiting
    them out (polled while the request is on its way to the real local server)."""
    task = asyncio.ensure_future(handling)
    gates = worker.jobs.holder.gates
    while not task.done():
        closed = max((gate.closed_until for gate in gates.values()), default=0.0)
        if closed > clock.now():
            await clock.advance(closed - clock.now())
        await asyncio.wait({task}, timeout=0.01)
    await task


def said(fb: Feedback) -> tuple[str, str, int, str, dict[str, str]]:
    """What a result says, apart from times (``date`` is the server's clock: kept for HTTP-date
    Retry-After values, it differs between two fetches a second apart)."""
    return fb.lease, fb.outcome, fb.status, fb.error, {k: v for k, v in fb.headers.items() if k != "date"}


def replay(feedback: list[Feedback], latencies: dict[str, float]) -> ScopeState:
    """The policy's state after these results, on one synthetic clock (only what the worker
    reported matters: outcome, status, error, headers; latency taken from ``latencies``)."""
    s = CFG.throttle.for_scope(HOST)
    state, now = ScopeState(), 1000.0
    for fb in feedback:
        state = policy.apply(state, Sent(now), now, s)
        latency = latencies[fb.lease]
        done = Done(sent_at=now, done_at=now + latency, dispatched_at=now, status=fb.status, latency=latency,
                    error=fb.error, headers=fb.headers, outcome=fb.outcome)  # fmt: skip
        now += latency + 0.01
        state = policy.apply(state, done, now, s)
        now += 0.5
    return state


async def test_user_fetchers_report_what_the_built_in_reports_and_move_the_policy_alike(site: str) -> None:
    builtin = await crawl(None, site)
    async with httpx.AsyncClient(follow_redirects=False) as client:
        users = {
            "requests": await crawl(Fetcher(threaded_requests.fetch), site),
            "httpx": await crawl(Fetcher(functools.partial(partial.fetch, client)), site),
            "urllib": await crawl(Fetcher(functools.partial(background.fetch, agent="test")), site),
        }
    expected = [said(fb) for fb in builtin]
    assert [lease for lease, *_ in expected] == list(ROUTES)
    assert dict((lease, h) for lease, _, _, _, h in expected)["/limited"] == {"retry-after": "1"}
    latencies = {fb.lease: fb.latency for fb in builtin}
    state = replay(builtin, latencies)
    assert state.gate_until > 0 and state.backoff > 0  # the 429 and the 503 did move it
    for name, got in users.items():
        assert [said(fb) for fb in got] == expected, name
        for fb in got + builtin:
            wait = ROUTES[fb.lease][2]
            # the response's own time, not the job's hold nor its timeout (5 s); CI runs these tests
            # at the lowest priority beside the timed lanes, where a 0.1 s route took 0.53 s
            assert wait <= fb.latency < wait + 1.0, (name, fb.lease, fb.latency, wait)
            assert 0 < fb.sent_at <= fb.done_at, (name, fb)
        assert replay(got, latencies) == state, name


# -- the reports' contracts ---------------------------------------------------------------------------


async def run_with(handler: Fetcher, site: str, *paths: str, clock: Clock = SYSTEM) -> tuple[FakeProducer, FetchWorker]:
    producer = FakeProducer()
    worker = worker_with(handler, producer, clock)
    for n, path in enumerate(paths):
        await worker.jobs.handle(message(make_job(site + path, lease=path, clock=clock), n))  # type: ignore[arg-type]
    await worker.jobs.reporter.publisher.settled()
    return producer, worker


async def test_skip_ends_the_url_with_a_skipped_page_and_no_request(site: str) -> None:
    async def decline(job: LeasedJob) -> None:
        await job.skip("not for this worker")

    producer, worker = await run_with(Fetcher(decline), site, "/ok")
    [page] = producer.pages()
    assert (page.outcome, page.error, page.v) == ("skipped", "not for this worker", 2)
    [fb] = producer.feedback()
    assert (fb.outcome, fb.sent_at, fb.status) == ("skipped", 0.0, 0)
    assert worker.jobs.holder.gates[HOST].last_sent == 0.0, "no request went out: the host's last send is unchanged"
    assert worker.jobs.tracker.open_count() == 0


async def test_a_follow_up_that_does_not_encode_ends_its_job_as_an_error(site: str) -> None:
    """A handler's follow-up whose meta the encoder refuses (issue 36) is lost, said and counted: the
    job is reported as an error (never left to expire, to be fetched and refused forever); one whose
    meta holds subclasses of str, int and float (lxml's link text) goes as their base types."""

    class Text(str):
        pass

    async def follows(job: LeasedJob) -> Outcome:
        return Outcome(status=200, headers={}, body=b"", follow_ups=[
            Submission(url=site + "/a", meta={"text": Text("a link"), "n": True}),
            Submission(url=site + "/b", meta={"thing": object()}),
        ])  # fmt: skip

    producer, worker = await run_with(Fetcher(follows), site, "/ok")
    assert [(s.url, s.meta) for s in producer.submissions()] == [(site + "/a", {"text": "a link", "n": True})]
    [fb] = producer.feedback()
    assert fb.outcome == "error" and fb.error.startswith("follow_ups_not_published: 1 of 2"), fb
    assert "object" in fb.error, fb.error
    assert worker.jobs.reporter.metrics.unpublished._value.get() == 1
    assert worker.jobs.tracker.open_count() == 0


async def test_release_hands_the_job_back_and_an_exception_is_an_error(site: str) -> None:
    async def give_back(job: LeasedJob) -> None:
        await job.release()

    async def broken(job: LeasedJob) -> Outcome:
        raise ValueError("a bug in user code")

    async def silent(job: LeasedJob) -> None:
        return None  # neither reports nor returns an outcome: released

    for handler, outcome, error in ((give_back, "expired", ""), (broken, "error", "worker:ValueError"),
                                    (silent, "expired", "")):  # fmt: skip
        producer, worker = await run_with(Fetcher(handler), site, "/ok")
        assert [(fb.outcome, fb.error) for fb in producer.feedback()] == [(outcome, error)], handler
        assert worker.jobs.tracker.open_count() == 0 and not worker.jobs.holder.entered


async def test_a_job_is_reported_once(site: str) -> None:
    second: list[BaseException] = []

    async def twice(job: LeasedJob) -> None:
        await job.fetched(200, {})
        try:
            await job.fetched(200, {})
        except AlreadyReported as exc:
            second.append(exc)

    producer, _ = await run_with(Fetcher(twice), site, "/ok")
    assert len(second) == 1 and len(producer.feedback()) == 1


async def test_a_job_never_reported_is_given_up_after_its_lease_and_frees_its_slot(site: str) -> None:
    producer, clock = FakeProducer(), JumpClock()
    worker = worker_with(None, producer, clock)
    worker.jobs.handler = None  # the pull shape: taken from the queue, never reported
    job = make_job(site + "/ok", lease="H", expires_in=0.3, timeout=0.2, clock=clock)
    worker.jobs.consuming.take(message(job))  # type: ignore[arg-type]
    taken = await worker.jobs.get(1.0)
    assert taken is not None and worker.jobs.tracker.open_count() == 1
    await clock.advance(0.5)  # past expires_at + timeout
    assert worker.jobs.tracker.open_count() == 0 and not worker.jobs.holder.entered, "the job was never given up"
    assert producer.feedback() == [], "no feedback: the frontier's lease expires and the job comes back"
    with pytest.raises(AlreadyReported):
        await taken.fetched(200, {})


async def test_without_a_send_time_the_host_is_timed_from_the_report(site: str) -> None:
    """A fetcher that says nothing about when its request went out: the host's next request is
    timed from the report (a time the request surely went out by), never from the hand-over."""

    clock = JumpClock()

    async def slow_report(job: LeasedJob) -> Outcome:
        await clock.advance(0.2)  # the fetch takes its time
        return Outcome(status=200)

    producer, worker = await run_with(Fetcher(slow_report), site, "/ok", clock=clock)
    [fb] = producer.feedback()
    gate = worker.jobs.holder.gates[HOST]
    assert gate.last_sent >= fb.done_at - 0.001 and fb.sent_at == fb.done_at and fb.latency == 0.0


async def test_a_user_fetcher_past_the_jobs_timeout_is_a_timeout(site: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("workers.fetcher.worker.TIMEOUT_GRACE", 0.1)

    called = asyncio.Event()

    async def stuck(job: LeasedJob) -> Outcome:
        called.set()
        await asyncio.Event().wait()  # never answers
        return Outcome(status=200)

    producer, clock = FakeProducer(), JumpClock()
    worker = worker_with(Fetcher(stuck), producer, clock)
    started = time.monotonic()
    job = make_job(site + "/ok", lease="T", timeout=0.3, clock=clock)
    handling = asyncio.ensure_future(worker.jobs.handle(message(job)))  # type: ignore[arg-type]
    await called.wait()
    await clock.advance(0.4)  # the job's timeout and the grace
    await handling
    await worker.jobs.reporter.publisher.settled()
    assert time.monotonic() - started < 5
    assert [(fb.outcome, fb.error) for fb in producer.feedback()] == [("error", "timeout")]


def test_a_fetcher_is_loaded_from_module_colon_factory() -> None:
    made = load_fetcher("tests.test_worker_api:factory", CFG)
    assert made.made is factory_made
    for spec, why in (("nocolon", "expected package.module:factory"), ("no.such.module:f", "cannot import"),
                      ("tests.test_worker_api:missing", "no callable missing")):  # fmt: skip
        with pytest.raises(ConfigError, match=why):
            load_fetcher(spec, CFG)


async def factory_made(job: LeasedJob) -> None:
    await job.skip("example")


def factory(cfg: Config) -> object:
    return factory_made


# -- review findings (each failed before its fix) -------------------------------------------------------


async def test_a_host_is_not_opened_by_an_earlier_job_under_a_later_ones_feet(site: str) -> None:
    """A says it was sent; B is handed over and has not gone out yet; A's report must not let C
    go before B has gone out (C would be timed from B's hand-over, not from B's real send)."""
    producer, clock = FakeProducer(), JumpClock()
    worker = worker_with(None, producer, clock)
    worker.jobs.handler = None  # the pull shape
    jobs = [make_job(f"{site}/ok", lease=name, clock=clock) for name in "ABC"]
    tasks = [asyncio.create_task(worker.jobs.handle(message(j, n))) for n, j in enumerate(jobs)]  # type: ignore[arg-type]
    ready = worker.jobs._ready
    await until(lambda: ready is not None and not ready.empty(), "A handed over")
    a = await worker.jobs.get(0)  # a job that is waiting is taken without waiting
    assert a is not None and a.job.lease == "A"
    a.sent()
    b = await worker.jobs.get(2.0)
    assert b is not None and b.job.lease == "B"
    await a.fetched(200, {})
    assert await got_within(worker, clock, 0.3) is None, "C was handed over before B's request went out"
    b.sent()
    c = await worker.jobs.get(2.0)
    assert c is not None and c.job.lease == "C"
    for job in (b, c):
        await job.fetched(200, {})
    await asyncio.gather(*tasks)


async def test_a_job_given_up_while_waiting_to_be_taken_is_skipped_by_get(site: str) -> None:
    producer, clock = FakeProducer(), JumpClock()
    worker = worker_with(None, producer, clock)
    worker.jobs.handler = None
    job = make_job(site + "/ok", lease="G", expires_in=0.2, timeout=0.1, clock=clock)
    worker.jobs.consuming.take(message(job))  # type: ignore[arg-type]
    ready = worker.jobs._ready
    await until(lambda: ready is not None and not ready.empty(), "G handed over")
    await clock.advance(0.3)  # never taken: given up at expires_at + timeout
    assert worker.jobs.tracker.open_count() == 0
    assert await got_within(worker, clock, 0.3) is None  # no AlreadyReported from a job given up in the queue


async def test_a_window_announced_after_the_hand_over_sends_the_taken_job_back(site: str) -> None:
    producer, clock = FakeProducer(), JumpClock()
    worker = worker_with(None, producer, clock)
    worker.jobs.handler = None
    for n, name in enumerate("AB"):
        worker.jobs.consuming.take(message(make_job(site + "/ok", lease=name, clock=clock), n))  # type: ignore[arg-type]
    a = await worker.jobs.get(2.0)
    assert a is not None
    a.sent()
    ready = worker.jobs._ready
    await until(lambda: ready is not None and not ready.empty(), "B handed over behind A")
    a.answered(429, {"Retry-After": "30"})
    assert await got_within(worker, clock, 0.3) is None, "a job was handed out inside the window the host announced"
    await a.fetched(429, {"Retry-After": "30"})
    await worker.jobs.reporter.publisher.settled()
    assert {fb.lease: fb.outcome for fb in producer.feedback()}["B"] == "expired"


async def test_a_fetcher_cancelled_at_its_timeout_inside_async_with_job_reports_a_timeout(
    site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("workers.fetcher.worker.TIMEOUT_GRACE", 0.1)

    called = asyncio.Event()

    async def stuck(job: LeasedJob) -> None:
        async with job:  # as docs/WORKERS.md shows: a cancellation is not the job's error
            called.set()
            await asyncio.Event().wait()  # never answers

    producer, clock = FakeProducer(), JumpClock()
    worker = worker_with(Fetcher(stuck), producer, clock)
    job = make_job(site + "/ok", lease="T", timeout=0.3, clock=clock)
    handling = asyncio.ensure_future(worker.jobs.handle(message(job)))  # type: ignore[arg-type]
    await called.wait()
    await clock.advance(0.4)  # the job's timeout and the grace
    await handling
    await worker.jobs.reporter.publisher.settled()
    assert [(fb.outcome, fb.error) for fb in producer.feedback()] == [("error", "timeout")]


async def test_plain_function_fetchers_run_as_many_at_once_as_the_workers_concurrency(site: str) -> None:
    width = 8
    together = threading.Barrier(width, timeout=5)

    def fetch(job: BlockingJob) -> Outcome:
        together.wait()  # passes only when `width` fetches run at once (the default pool has 6 threads here)
        return Outcome(status=200)

    producer = FakeProducer()
    worker = FetchWorker(CFG, concurrency=width, name="wide", fetcher=Fetcher(fetch))
    worker.jobs.reporter.publisher = Publisher(producer, CFG.topics)  # type: ignore[arg-type]
    worker.jobs._bind()
    jobs = [Job(lease=f"W{n}", item=UrlItem(url=f"{site}/ok", host=f"h{n}.test", domain=f"h{n}.test"),
                not_before=time.time(), expires_at=time.time() + 30, timeout=10) for n in range(width)]  # fmt: skip
    await asyncio.gather(*(worker.jobs.handle(message(j, n)) for n, j in enumerate(jobs)))  # type: ignore[arg-type]
    await worker.jobs.reporter.publisher.settled()
    await worker.fetcher.close()
    assert sorted(fb.outcome for fb in producer.feedback()) == ["fetched"] * width


async def test_an_outcome_with_a_headers_object_is_published(site: str) -> None:
    async def answer(job: LeasedJob) -> Outcome:
        return Outcome(status=200, headers=httpx.Headers({"Retry-After": "1"}))  # type: ignore[arg-type]

    producer, _ = await run_with(Fetcher(answer), site, "/ok")
    assert [(fb.outcome, fb.status) for fb in producer.feedback()] == [("fetched", 200)]
    assert producer.pages()[0].status == 200


async def test_a_thread_past_its_timeout_keeps_the_host_closed_until_it_ends(
    site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain-function fetcher cannot be stopped: reported as a timeout, its request may still be
    on its way, so the host's next job waits for the thread, not for the report."""
    monkeypatch.setattr("workers.fetcher.worker.TIMEOUT_GRACE", 0.1)
    ended: dict[str, float] = {}
    started: dict[str, float] = {}
    connected = threading.Event()

    def fetch(job: BlockingJob) -> Outcome:
        started[job.leased.job.lease] = time.time()
        if job.leased.job.lease == "A":
            connected.wait(5)  # a connect that takes its time: nothing says the request left
        ended[job.leased.job.lease] = time.time()
        return Outcome(status=200)

    producer, clock = FakeProducer(), JumpClock()
    worker = worker_with(Fetcher(fetch), producer, clock)
    a = make_job(site + "/ok", lease="A", timeout=0.2, clock=clock)
    b = make_job(site + "/ok", lease="B", clock=clock)
    both = asyncio.gather(*(worker.jobs.handle(message(j, n)) for n, j in enumerate((a, b))))  # type: ignore[arg-type]
    await poll(lambda: "A" in started, 5, "A's thread to start")
    await clock.advance(0.3)  # A's timeout and the grace: reported as a timeout, its thread still connecting
    await poll(lambda: [fb.lease for fb in producer.feedback()] == ["A"], 5, "A's report")
    await clock.advance(0)  # B's chance to go while A's thread could still send
    connected.set()  # the thread outlives its report
    await both
    await worker.jobs.reporter.publisher.settled()
    await worker.fetcher.close()
    assert {fb.lease: fb.error for fb in producer.feedback()} == {"A": "timeout", "B": ""}
    assert started["B"] >= ended["A"], "the host's next job went while the timed-out thread could still send"

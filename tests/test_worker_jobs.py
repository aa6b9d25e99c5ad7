"""One job through the fetch worker (``Jobs.handle`` with the built-in fetcher), against real local HTTP servers on
loopback and an in-memory stand-in for the Kafka producer that can refuse or delay records:
what is published, in which order, and what the feedback says.

Covers: the feedback goes out only once the page and follow-ups are acknowledged; a refused page
becomes an error page and an "error" result, or no feedback at all; a poison ``Location`` or any
other exception after the fetch ends in a report; expiry is checked again after the waits for a
slot; a revoke cancels the jobs still running after its grace; retries agree with the frontier's
backoff codes; charsets, nofollow and what redirect follow-ups carry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from confluent_kafka import TopicPartition
from msgspec.structs import replace

from deploy.kafka import free_port
from frontier.config import BackoffSettings, Config, ScopeSettings, ThrottleConfig
from tests.fakes import FakeConsumer, FakeMessage, FakeProducer, JumpClock, message
from topics.schemas import Job, Page, Submission, UrlItem
from workers.api import Jobs
from workers.api.clock import SYSTEM, Clock
from workers.api.publishing import Publisher
from workers.fetcher.worker import FetchWorker

HOST = "127.0.0.93"
AGENT = "kafka-crawl-frontier"  # the agent token of the default user agent


@dataclass
class Site:
    """A local site; ``routes`` maps a path to (status, headers, body); ``/hold`` answers once ``release`` is set."""

    base: str
    routes: dict[str, tuple[int, dict[str, str], bytes]]
    hits: list[str] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str) -> str:
        return f"{self.base}{path}"


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    state = Site(base="", routes={})

    async def handle(request: web.Request) -> web.Response:
        state.hits.append(request.path)
        if request.path == "/hold":
            await state.release.wait()
            return web.Response(text="held")
        status, headers, body = state.routes.get(request.path, (404, {}, b"not found"))
        return web.Response(status=status, headers=headers, body=body)

    async with serving(handle) as base:
        state.base = base
        yield state
        state.release.set()


@asynccontextmanager
async def serving(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]], host: str = HOST
) -> AsyncIterator[str]:
    """A local site on ``host`` answering every GET with ``handler``; yields its base URL."""
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, host, port).start()
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def make_worker(
    producer: FakeProducer, cfg: Config | None = None, concurrency: int = 4, clock: Clock = SYSTEM
) -> FetchWorker:
    worker = FetchWorker(cfg or Config(), concurrency=concurrency, name="test-worker", clock=clock)
    worker.jobs.reporter.publisher = Publisher(producer, worker.cfg.topics)  # type: ignore[arg-type]
    worker.jobs._bind()
    return worker


def handle(worker: FetchWorker, session: aiohttp.ClientSession, msg: FakeMessage) -> Awaitable[None]:
    """One consumed job through the worker, fetched with ``session`` (no address policy: loopback)."""
    worker.builtin._session = session
    return worker.jobs.handle(msg)  # type: ignore[arg-type]


def start(worker: FetchWorker, session: aiohttp.ClientSession, msg: FakeMessage) -> asyncio.Task[None]:
    """As the consume loop starts a job: in a task tracked by its partition."""
    worker.builtin._session = session
    return worker.jobs.consuming.take(msg)  # type: ignore[arg-type]


def make_job(url: str, lease: str = "L1", clock: Clock = SYSTEM, **item: Any) -> Job:
    now = clock.now()
    return Job(lease=lease, item=UrlItem(url=url, host=HOST, domain=HOST, **item), not_before=now,
               expires_at=now + 30, timeout=5)  # fmt: skip


async def run_job(worker: FetchWorker, session: aiohttp.ClientSession, job: Job) -> None:
    """Handle ``job``, then let any feedback batch still lingering go out."""
    await handle(worker, session, message(job))
    await worker.jobs.reporter.publisher.settled()


async def poll(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


HTML = {"Content-Type": "text/html"}


# -- item 2: the feedback claims only what is on Kafka ---------------------------------------------


async def test_feedback_is_sent_only_after_the_page_and_follow_ups_are_acknowledged(
    site: Site, session: aiohttp.ClientSession
) -> None:
    site.routes["/"] = (200, HTML, b'<a href="/a">a</a><a href="/b">b</a>')
    producer = FakeProducer(ack_delay=0.2)  # the broker takes its time
    await run_job(make_worker(producer), session, make_job(site.url("/"), follow=1))
    assert [p.status for p in producer.pages()] == [200] and len(producer.submissions()) == 2
    assert [fb.outcome for fb in producer.feedback()] == ["fetched"]
    assert producer.unacked_at_feedback == [0], "feedback sent while the page or follow-ups were unacknowledged"


async def test_a_refused_page_becomes_an_error_page_and_an_error_result(
    site: Site, session: aiohttp.ClientSession
) -> None:
    site.routes["/big"] = (200, HTML, b"x" * 50_000)
    producer = FakeProducer(
        refuse=lambda topic, value: "too big" if "crawl.pages" in topic and len(value) > 4000 else None
    )
    await run_job(make_worker(producer), session, make_job(site.url("/big"), meta={"job": 7}))
    published = [p for p in producer.pages() if p.outcome == "error"]
    assert len(published) == 1, producer.pages()
    page = published[0]
    assert page.error.startswith("page_not_published: MSG_SIZE_TOO_LARGE") and page.body == b""
    assert (page.url, page.status, page.meta) == (site.url("/big"), 200, {"job": 7})
    [fb] = producer.feedback()
    assert (fb.outcome, fb.error, fb.status) == ("error", page.error, 200) and fb.sent_at > 0


async def test_no_feedback_when_not_even_the_error_page_is_published(
    site: Site, session: aiohttp.ClientSession
) -> None:
    site.routes["/"] = (200, HTML, b"hello")
    producer = FakeProducer(refuse=lambda topic, _value: "not authorized" if "crawl.pages" in topic else None)
    await run_job(make_worker(producer), session, make_job(site.url("/")))
    assert len(producer.values("crawl.pages")) == 2, "the page, then the error page, were tried"
    assert producer.feedback() == [], "no feedback: the lease must expire so that the job comes back"


async def test_a_refused_follow_up_ends_its_job_as_an_error_not_in_a_lease_that_expires(
    site: Site, session: aiohttp.ClientSession
) -> None:
    """Kafka refusing a follow-up (issue 36): the page and the other follow-ups are out, the job is
    reported as an error naming the reason, the loss counted; left to expire, the job would come
    back, be fetched again and be refused again, forever."""
    site.routes["/"] = (200, HTML, b'<a href="/a">a</a><a href="/big">b</a>')
    producer = FakeProducer(refuse=lambda topic, value: "too big" if topic.endswith("crawl.urls") and b"/big" in value
                            else None)  # fmt: skip
    worker = make_worker(producer)
    await run_job(worker, session, make_job(site.url("/"), follow=1))
    assert sorted(s.url for s in producer.submissions()) == [site.url("/a"), site.url("/big")]  # both tried
    assert [p.outcome for p in producer.pages()] == ["fetched"]
    [fb] = producer.feedback()
    assert fb.outcome == "error" and fb.status == 200, fb
    assert fb.error.startswith("follow_ups_not_published: 1 of 2 (") and "too big" in fb.error, fb.error
    assert worker.jobs.reporter.metrics.unpublished._value.get() == 1


# -- item 6: whatever happens after the fetch ends in a report ---------------------------------------


async def test_a_poison_location_is_skipped_and_the_job_reported(site: Site, session: aiohttp.ClientSession) -> None:
    site.routes["/poison"] = (302, {"Location": "http://[::1/x"}, b"")
    producer = FakeProducer()
    await run_job(make_worker(producer), session, make_job(site.url("/poison")))
    [page] = producer.pages()
    assert (page.status, page.headers["location"]) == (302, "http://[::1/x")
    assert producer.submissions() == []
    assert [(fb.outcome, fb.status) for fb in producer.feedback()] == [("fetched", 302)]


async def test_a_poison_base_href_is_skipped_and_the_job_reported(site: Site, session: aiohttp.ClientSession) -> None:
    site.routes["/"] = (200, HTML, b'<base href="http://[bad/"><a href="/a">a</a>')
    producer = FakeProducer()
    await run_job(make_worker(producer), session, make_job(site.url("/"), follow=1))
    assert [s.url for s in producer.submissions()] == [site.url("/a")]
    assert [fb.outcome for fb in producer.feedback()] == ["fetched"]


async def test_any_exception_after_the_fetch_ends_in_an_error_page_and_result(
    site: Site, session: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    site.routes["/"] = (200, HTML, b"hello")
    producer = FakeProducer()
    worker = make_worker(producer)

    def broken(*_: object) -> Page:
        raise RuntimeError("a bug")

    monkeypatch.setattr(worker.jobs.reporter, "_page", broken)
    await run_job(worker, session, make_job(site.url("/"), meta={"m": 1}))
    [page] = producer.pages()
    assert (page.outcome, page.error, page.meta) == ("error", "worker_error: RuntimeError", {"m": 1})
    assert [(fb.outcome, fb.error) for fb in producer.feedback()] == [("error", "worker_error: RuntimeError")]


# -- item 7: expiry after the waits; revoked partitions' jobs cancelled ------------------------------


async def test_a_job_that_expires_while_waiting_for_a_worker_slot_is_handed_back(
    site: Site, session: aiohttp.ClientSession
) -> None:
    producer, clock = FakeProducer(), JumpClock()
    worker = make_worker(producer, concurrency=1, clock=clock)  # one request at a time: the held job keeps the slot
    holder = asyncio.ensure_future(handle(worker, session, message(make_job(site.url("/hold"), "A", clock))))
    await poll(lambda: "/hold" in site.hits, 5, "the first job to hold the only slot")
    late = make_job(site.url("/late"), "B", clock)
    late = replace(late, expires_at=clock.now() + 0.3)
    waiting = asyncio.ensure_future(handle(worker, session, message(late, 1)))
    await clock.advance(0.31)  # the second job's expiry passes while it waits for the slot
    assert clock.now() > late.expires_at
    site.release.set()
    await asyncio.wait_for(asyncio.gather(holder, waiting), 10)
    await worker.jobs.reporter.publisher.settled()
    assert "/late" not in site.hits, "a request was sent after the job's lease had expired"
    assert {fb.lease: fb.outcome for fb in producer.feedback()} == {"A": "fetched", "B": "expired"}


async def test_a_job_whose_host_slot_comes_after_its_expiry_is_handed_back_at_once(
    site: Site, session: aiohttp.ClientSession
) -> None:
    site.routes["/1"] = site.routes["/2"] = (200, HTML, b"ok")
    producer = FakeProducer()
    worker = make_worker(producer)
    await run_job(worker, session, make_job(site.url("/1"), "A"))
    second = replace(make_job(site.url("/2"), "B"), min_gap=30.0)  # the host's next slot: 30 s after the first
    second = replace(second, expires_at=second.not_before + 1.0)
    started = time.monotonic()
    await asyncio.wait_for(run_job(worker, session, second), 10)
    assert time.monotonic() - started < 5, "waited for a slot after the job's expiry"
    assert site.hits == ["/1"]
    assert [(fb.lease, fb.outcome) for fb in producer.feedback()] == [("A", "fetched"), ("B", "expired")]


async def test_a_revoke_cancels_the_jobs_still_running_after_its_grace(
    site: Site, session: aiohttp.ClientSession
) -> None:
    producer = FakeProducer()
    worker = make_worker(producer)
    worker.jobs.consuming.revoke_grace = 0.3
    job = replace(make_job(site.url("/later"), "A"), not_before=time.time() + 60, expires_at=time.time() + 90)
    other = make_job(site.url("/hold"), "B")
    other = replace(other, item=replace(other.item, host="127.0.0.94"))  # another host: not behind A's host gate
    waiting = start(worker, session, message(job, offset=5))
    kept = start(worker, session, FakeMessage(message(other).data, offset_=9, partition_=1))
    await poll(lambda: "/hold" in site.hits, 5, "the job of partition 1 to be fetching")
    consumer = FakeConsumer()
    await asyncio.to_thread(worker.jobs.consuming.on_revoke, consumer, [TopicPartition("crawl.jobs", 0)])
    await asyncio.wait_for(asyncio.wait([waiting]), 5)
    assert waiting.cancelled(), "a job of a revoked partition kept running after the revoke"
    assert not kept.done(), "a job of a partition still owned was cancelled"
    assert consumer.commits == [[("crawl.jobs", 0, 5)]], "the cancelled job's offset must not be committed past"
    site.release.set()
    await asyncio.wait_for(kept, 10)
    await worker.jobs.reporter.publisher.settled()
    assert "/later" not in site.hits and producer.feedback()[0].lease == "B"


async def test_a_revoke_waits_for_a_job_in_user_codes_hands_and_commits_its_report(site: Site) -> None:
    """The pull shape (``async for``, the Scrapy add-on): a job handed over and not yet reported
    when its partition is revoked is waited for (up to the grace) like a handler's, so its done
    mark goes with the revoke's commit and the partition's next owner does not fetch it again."""
    producer, clock = FakeProducer(), JumpClock()
    jobs = Jobs(Config(), concurrency=4, name="pull", check_addresses=False, clock=clock)
    jobs.reporter.publisher = Publisher(producer, jobs.cfg.topics)  # type: ignore[arg-type]
    jobs._bind()
    jobs.consuming.revoke_grace = 5.0
    consumed = jobs.consuming.take(message(make_job(site.url("/x"), "A", clock), offset=5))  # type: ignore[arg-type]
    leased = await jobs.get(5)
    assert leased is not None and leased.job.lease == "A"
    consumer = FakeConsumer()
    revoking = asyncio.ensure_future(
        asyncio.to_thread(jobs.consuming.on_revoke, consumer, [TopicPartition("crawl.jobs", 0)])  # type: ignore[arg-type]
    )
    await clock.advance(0.3)
    assert not revoking.done(), "the revoke let the partition go with a job still in user code's hands"
    await leased.fetched(200, {}, b"ok")
    await asyncio.wait_for(revoking, 5)
    assert consumer.commits == [[("crawl.jobs", 0, 6)]], consumer.commits  # its report's offset goes with it
    await asyncio.wait_for(consumed, 5)
    await jobs.reporter.publisher.settled()
    assert [fb.lease for fb in producer.feedback()] == ["A"]


# -- item 16: retries agree with the frontier's backoff ---------------------------------------------


@pytest.mark.parametrize(("status", "outcome"), [(500, "fetched"), (501, "fetched"), (505, "fetched"),
                                                 (503, "retry"), (429, "retry"), (522, "retry")])  # fmt: skip
async def test_only_backoff_statuses_are_retried(
    site: Site, session: aiohttp.ClientSession, status: int, outcome: str
) -> None:
    site.routes["/"] = (status, {}, b"")
    producer = FakeProducer()
    await run_job(make_worker(producer), session, replace(make_job(site.url("/")), retries_left=3))
    assert [fb.outcome for fb in producer.feedback()] == [outcome]
    assert len(producer.pages()) == (0 if outcome == "retry" else 1)


async def test_retries_follow_the_configured_backoff_codes(site: Site, session: aiohttp.ClientSession) -> None:
    site.routes["/"] = (500, {}, b"")
    scoped = ScopeSettings(backoff=BackoffSettings(codes=(500,)))
    cfg = Config(throttle=ThrottleConfig(scopes={HOST: scoped}))
    producer = FakeProducer()
    await run_job(make_worker(producer, cfg), session, replace(make_job(site.url("/")), retries_left=3))
    assert [fb.outcome for fb in producer.feedback()] == ["retry"]


# -- item 17: what follow-ups and pages carry ---------------------------------------------------------


async def test_links_are_decoded_by_the_declared_charset(site: Site, session: aiohttp.ClientSession) -> None:
    site.routes["/latin"] = (200, {"Content-Type": "text/html; charset=iso-8859-1"},
                             '<a href="/café">c</a>'.encode("latin-1"))  # fmt: skip
    site.routes["/meta"] = (200, HTML, '<meta charset="windows-1251"><a href="/книги">k</a>'.encode("cp1251"))
    site.routes["/equiv"] = (200, HTML, ('<meta http-equiv="Content-Type" content="text/html; charset=koi8-r">'
                                         '<a href="/мир">m</a>').encode("koi8-r"))  # fmt: skip
    site.routes["/utf8"] = (200, HTML, '<a href="/ü">u</a>'.encode())
    producer = FakeProducer()
    worker = make_worker(producer)
    for path in ("/latin", "/meta", "/equiv", "/utf8"):
        await run_job(worker, session, make_job(site.url(path), follow=1))
    assert [s.url for s in producer.submissions()] == [site.url(p) for p in ("/café", "/книги", "/мир", "/ü")]


async def test_nofollow_is_honoured(site: Site, session: aiohttp.ClientSession) -> None:
    links = b'<a href="/followed">f</a><a rel="ugc NoFollow" href="/nofollow">n</a>'
    site.routes["/rel"] = (200, HTML, links)
    site.routes["/meta"] = (200, HTML, b'<meta name="robots" content="noindex, nofollow">' + links)
    site.routes["/ours"] = (200, HTML, f'<meta name="{AGENT}" content="none">'.encode() + links)
    site.routes["/others"] = (200, HTML, b'<meta name="otherbot" content="nofollow">' + links)
    site.routes["/header"] = (200, {**HTML, "X-Robots-Tag": "noarchive, nofollow"}, links)
    site.routes["/header-ours"] = (200, {**HTML, "X-Robots-Tag": f"{AGENT}: nofollow"}, links)
    site.routes["/header-others"] = (200, {**HTML, "X-Robots-Tag": "otherbot: nofollow"}, links)
    producer = FakeProducer()
    worker = make_worker(producer)
    followed: dict[str, list[str]] = {}
    for path in ("/rel", "/meta", "/ours", "/others", "/header", "/header-ours", "/header-others"):
        before = len(producer.submissions())
        await run_job(worker, session, make_job(site.url(path), follow=1))
        followed[path] = [s.url.removeprefix(site.base) for s in producer.submissions()[before:]]
    assert followed == {"/rel": ["/followed"], "/meta": [], "/ours": [], "/others": ["/followed"], "/header": [],
                        "/header-ours": [], "/header-others": ["/followed"]}  # fmt: skip


async def test_a_redirect_carries_cost_revisit_autothrottle_and_the_page_says_where(
    site: Site, session: aiohttp.ClientSession
) -> None:
    site.routes["/moved"] = (301, {"Location": "/new?x=1"}, b"")
    producer = FakeProducer()
    job = make_job(site.url("/moved"), meta={"job": 42}, cost=2.5, revisit=3600.0, adjust=False, scopes=["api"],
                   priority=3, follow=1)  # fmt: skip
    await run_job(make_worker(producer), session, job)
    [sub] = producer.submissions()
    assert sub == Submission(url=site.url("/new?x=1"), priority=3, meta={"job": 42}, follow=1, scopes=["api"],
                             redirects=1, cost=2.5, autothrottle=False, revisit=3600.0)  # fmt: skip
    [page] = producer.pages()
    assert (page.status, page.meta, page.headers["location"]) == (301, {"job": 42}, site.url("/new?x=1"))

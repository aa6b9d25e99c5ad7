"""The service's publishing order, driven without a broker (a recording producer stands in for
the transport; the ordering it checks is what the real broker tests rely on):

- a round's jobs and report pages leave only after its changelog records are acknowledged, so
  a job in a worker's hands always has a recorded lease (issue 11, defect 12);
- a report lease is deleted only once its page is acknowledged;
- one feedback item that cannot be applied goes to crawl.rejected; the rest of its batch is
  applied and the batch is acknowledged (defect 1).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from frontier.config import Config, FrontierConfig
from frontier.core.causes import Cause
from frontier.core.kv import MemoryKV
from frontier.core.urls import parse_input
from frontier.partition import PartitionFrontier
from frontier.partition import scopes as scopes_module
from frontier.partition.keys import ACK_KEY
from frontier.partition.records import crawl_dec
from frontier.service.crawls import CrawlDirectory
from frontier.service.owned import _Owned
from frontier.service.service import ROUND_GAP, FrontierService
from frontier.service.writer import PartitionWriter
from topics.partitioning import partition_for
from topics.schemas import (
    ControlCommand,
    EncodedUrlBatch,
    Feedback,
    FeedbackBatch,
    Job,
    Page,
    Rejected,
    decode,
    encode,
)


class Recorder:
    """The AsyncProducer surface the service uses (status, rejections: visible at once), and the
    transactional producer of its partitions' writers: their records become visible (``sent``)
    only when their transaction commits, which waits while ``hold`` is set."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None]] = []
        self.open: list[tuple[str, bytes | None, bytes | None]] = []  # the open transaction's records
        self.partitions: dict[str, set[int]] = {}  # topic -> the partitions its records were produced to
        self.hold = threading.Event()  # set: commits wait until released
        self.commits = 0
        self._callbacks: list[Callable[[], None]] = []

    # -- AsyncProducer (not transactional) ------------------------------------------------------
    def send_nowait(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None,
                    on_delivery: Callable[[Any], None] | None = None) -> None:  # fmt: skip
        self.sent.append((topic, key, value))

    def send(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None) -> Any:
        self.sent.append((topic, key, value))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    def raise_errors(self) -> None:
        pass

    # -- the writers' transactional producer --------------------------------------------------------
    def init_transactions(self, timeout: float) -> None:
        pass

    def begin_transaction(self) -> None:
        assert not self.open

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1,
                on_delivery: Any = None) -> None:  # fmt: skip
        self.open.append((topic, key, value))
        self.partitions.setdefault(topic, set()).add(partition)
        if on_delivery is not None:
            offset = len(self.sent) + len(self.open) - 1
            msg = type("Msg", (), {"offset": lambda _self: offset})()
            self._callbacks.append(lambda: on_delivery(None, msg))

    def commit_transaction(self, timeout: float) -> None:
        deadline = time.monotonic() + 5
        while self.hold.is_set() and time.monotonic() < deadline:
            time.sleep(0.002)
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb()
        self.sent.extend(self.open)
        self.open = []
        self.commits += 1

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0

    def purge(self) -> None:
        self.open = []

    def topics(self) -> list[str]:
        return [t for t, _, _ in self.sent]


class Event:
    def __init__(self) -> None:
        self.acked = False

    def ack(self) -> bool:
        self.acked = True
        return True


def serve(svc: FrontierService, rec: Recorder, f: PartitionFrontier, kv: Any) -> None:
    """Make ``f`` a partition ``svc`` owns, its writes going through ``rec`` in transactions."""
    svc._producer = rec  # type: ignore[assignment]
    writer = PartitionWriter(rec, svc.topics.state, f.partition, -1)
    svc.partitions.owned[f.partition] = _Owned(frontier=f, kv=kv, writer=writer)


def service(settings: FrontierConfig, partition: int = 0) -> tuple[FrontierService, Recorder, PartitionFrontier]:
    cfg = replace(Config(), frontier=settings)
    svc = FrontierService(cfg, clock=lambda: 1000.0)
    rec = Recorder()
    kv = MemoryKV()
    f = PartitionFrontier(partition, kv, settings, cfg.throttle, svc.partitions.changelog(0), user_agent="t")
    serve(svc, rec, f, kv)
    f.rebuild(1000.0)
    return svc, rec, f


async def settle(svc: FrontierService | None = None) -> None:
    """Let the event loop run, and every commit in flight end (they run on threads)."""
    deadline = time.monotonic() + 5
    while True:
        for _ in range(5):
            await asyncio.sleep(0)
        busy = svc is not None and any(o.writer._committing is not None for o in svc.partitions.owned.values())
        if not busy or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.002)


async def test_jobs_leave_only_after_their_leases_are_in_the_changelog() -> None:
    svc, rec, f = service(FrontierConfig(robots_obey=False, dispatch_lead=0.0))
    f.ingest([parse_input(b"http://a.test/1"), parse_input(b"http://b.test/1")], 1000.0)
    rec.hold.set()
    svc.dispatch_once()
    await settle()
    state, jobs = svc.topics.state, svc.topics.jobs
    assert rec.sent == []  # nothing in workers' hands (nor in the changelog) before the commit
    rec.hold.clear()  # the transaction commits: leases, jobs and the closing marker together
    await settle(svc)
    leases = [k for t, k, _ in rec.sent if t == state and k is not None and k.startswith(b"L")]
    assert len(leases) == 2 and rec.sent[-1][:2] == (state, ACK_KEY) and rec.commits == 1
    assert rec.topics().index(jobs) > max(i for i, (t, k, _) in enumerate(rec.sent) if k in leases)
    sent = [decode(v or b"", Job) for t, _, v in rec.sent if t == jobs]
    assert sorted(j.item.url for j in sent) == ["http://a.test/1", "http://b.test/1"]
    assert {b"L" + j.lease.encode() for j in sent} == set(leases)


async def test_a_partitions_jobs_go_to_the_jobs_partition_of_its_number_in_every_crawl() -> None:
    """Co-partitioned (docs/PROTOCOL.md): a transaction touches one jobs partition per crawl, whatever
    the hosts (murmur2 of these hosts would spread them over several of the 8)."""
    svc, rec, f = service(FrontierConfig(robots_obey=False, dispatch_lead=0.0), partition=5)
    svc.directory = directory = CrawlDirectory({}, svc.topics, "app")
    directory.know(frozenset({"default", "b"}))
    directory._made.add("b")
    directory.workers = {"default": 1, "b": 1}
    directory._answered_at = time.monotonic()
    directory.copartitioned = frozenset({"default", "b"})  # (its look found both topics with 8 partitions)
    hosts = {crawl: [f"h{i}.{crawl}.test" for i in range(12)] for crawl in ("default", "b")}  # (one crawl a host)
    docs = [{"url": f"http://{h}/", "crawl": c} for c, hs in hosts.items() for h in hs]
    f.ingest([parse_input(json.dumps(d).encode()) for d in docs], 1000.0)
    svc.dispatch_once()
    await settle(svc)
    topics = {svc.topics.jobs, svc.topics.jobs_of("b")}
    assert {t: len([1 for x, _, _ in rec.sent if x == t]) for t in topics} == {t: 12 for t in topics}
    assert {t: rec.partitions[t] for t in topics} == {t: {5} for t in topics}
    assert len({partition_for(h, svc.topics.partitions) for h in hosts["b"]}) > 1  # (the test can tell)
    directory.copartitioned = frozenset({"default"})  # b's topic made by other means, with another count
    f.ingest([parse_input(json.dumps({"url": f"http://n{i}.b.test/", "crawl": "b"}).encode()) for i in range(12)],
             1000.0)  # fmt: skip
    rec.partitions.clear()
    svc.dispatch_once()
    await settle(svc)
    assert rec.partitions == {svc.topics.jobs_of("b"): {-1}, svc.topics.state: {5}}  # -1: murmur2 of the key


async def test_a_report_lease_is_deleted_only_after_its_page_is_acknowledged() -> None:
    svc, rec, f = service(FrontierConfig(robots_obey=True, dispatch_lead=0.0))
    f.ingest([parse_input(b"http://r.test/private/1")], 1000.0)
    svc.dispatch_once()
    await settle(svc)
    [robots] = [decode(v or b"", Job) for t, _, v in rec.sent if t == svc.topics.jobs]
    i = robots.item
    f.feedback(Feedback(lease=robots.lease, host=i.host, domain=i.domain, url=i.url, outcome="fetched", status=200,
                        sent_at=1000.0, body=b"User-agent: *\nDisallow: /private\n"), 1000.1)  # fmt: skip
    rec.sent.clear()
    svc.clock = lambda: 1005.0
    rec.hold.set()
    svc.dispatch_once()
    await settle()
    assert svc.topics.pages not in rec.topics()  # the page and its report lease commit together
    report_keys = [k for k, _ in f.kv.scan(b"L")]
    assert len(report_keys) == 1  # still there: the page is not committed yet
    rec.hold.clear()
    await settle(svc)
    [page] = [decode(v or b"", Page) for t, _, v in rec.sent if t == svc.topics.pages]
    assert page.outcome == "disallowed"
    lease_at = next(i for i, (t, k, v) in enumerate(rec.sent) if t == svc.topics.state and k == report_keys[0])
    assert rec.topics().index(svc.topics.pages) > lease_at  # after its lease, in the same transaction
    assert list(f.kv.scan(b"L")) == []  # once committed, the report lease goes
    svc.dispatch_once()
    await settle(svc)
    assert (svc.topics.state, report_keys[0], None) in rec.sent  # the deletion is changelogged


async def test_one_bad_feedback_item_is_rejected_and_the_rest_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    svc, rec, f = service(FrontierConfig(robots_obey=False, dispatch_lead=0.0))
    f.ingest([parse_input(b"http://a.test/1"), parse_input(b"http://b.test/1")], 1000.0)
    out = f.dispatch(1000.0)
    original = f.feedback

    def fragile(fb: Feedback, now: float) -> bool:
        if fb.host == "a.test":
            raise OverflowError("int too large to convert to float")
        return original(fb, now)

    monkeypatch.setattr(f, "feedback", fragile)
    items = [Feedback(lease=j.lease, host=j.item.host, domain=j.item.domain, url=j.item.url, outcome="fetched",
                      status=200, sent_at=1000.0) for j in out.jobs]  # fmt: skip
    event = Event()
    await svc.handle_feedback(0, FeedbackBatch(items=items), event)
    rejected = [decode(v or b"", Rejected) for t, _, v in rec.sent if t == svc.topics.rejected]
    assert len(rejected) == 1 and "OverflowError" in rejected[0].reason and b"a.test" in rejected[0].original
    assert f.stats.completed == 1  # b.test's result was applied
    await settle(svc)
    assert event.acked  # the batch is not replayed forever


async def test_a_refused_rejection_is_published_without_its_original() -> None:
    svc, rec, _ = service(FrontierConfig(robots_obey=False))
    sent = rec.send

    def refuse_big(topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None) -> Any:
        if value is not None and len(value) > 2000:
            raise RuntimeError("MSG_SIZE_TOO_LARGE")
        return sent(topic, value, key, partition)

    rec.send = refuse_big  # type: ignore[method-assign]
    await svc.dead_letter("crawl.feedback", 0, 7, b"\xff" * 3000, ValueError("not JSON"))
    [minimal] = [decode(v or b"", Rejected) for t, _, v in rec.sent if t == svc.topics.rejected]
    assert minimal.original == b"" and minimal.original_length == 3000 and "original not kept" in minimal.reason


async def test_the_gates_gauge_map_is_pruned_with_every_status_snapshot() -> None:
    """Ended gates are forgotten at each status snapshot (every 2 s), not only when Prometheus
    scrapes: without a scraper (the default) the map grew with every host ever gated."""
    svc, _, _ = service(FrontierConfig(robots_obey=False))
    svc.reporting.clock = lambda: 900.0
    for n in range(10_000):
        until = 1000.0 + (n % 2) * 100  # half of them still open
        svc.reporting.delay_changed(f"h{n}.test", 0.1, 0.2, "gate", Cause.GATE, until)
    assert len(svc.reporting._gates) == 10_000
    svc.reporting.clock = lambda: 1050.0
    svc.reporting.publish_status(1050.0)
    assert len(svc.reporting._gates) == 5_000


async def test_a_refused_control_command_goes_to_rejected_and_is_acknowledged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scopes_module, "MAX_OVERRIDES", 1)
    svc, rec, f = service(FrontierConfig(robots_obey=False))
    first, second = Event(), Event()
    await svc.handle_control(0, ControlCommand(action="pause", scope="a.test"), first)
    await svc.handle_control(0, ControlCommand(action="pause", scope="b.test"), second)
    rejected = [decode(v or b"", Rejected) for t, _, v in rec.sent if t == svc.topics.rejected]
    assert len(rejected) == 1 and "at most 1" in rejected[0].reason and b"b.test" in rejected[0].original
    assert second.acked and sorted(f.overrides()) == ["a.test"]  # not replayed forever, nothing half-applied


async def test_the_routers_bytes_of_an_item_reach_the_worker_unchanged_and_a_bad_item_is_rejected_alone() -> None:
    """One encoding on a URL's way: the item's bytes in the router's batch are what the queue, the
    lease and the job carry; an item that does not decode goes to crawl.rejected, its batch-mates
    are queued (before, one bad item sent the whole batch there)."""
    svc, rec, f = service(FrontierConfig(robots_obey=False, dispatch_lead=0.0))
    good = encode(parse_input(b"http://a.test/1"))
    bad = b'{"url":"http://b.test/1","host":7}'
    record = b'{"v":1,"items":[' + good + b"," + bad + b"]}"
    event = Event()
    await svc.handle_urls(0, decode(record, EncodedUrlBatch), event)
    [rejected] = [decode(v or b"", Rejected) for t, _, v in rec.sent if t == svc.topics.rejected]
    assert rejected.original == bad and "URL not queued" in rejected.reason
    [(_, queued)] = list(f.kv.scan(b"Q"))
    assert queued == good
    svc.dispatch_once()
    await settle(svc)
    [(key, value)] = [(k, v or b"") for t, k, v in rec.sent if t == svc.topics.jobs]
    assert good in value and key == b"a.test"
    job = decode(value, Job)
    assert job.item == parse_input(b"http://a.test/1")
    [(_, lease)] = list(f.kv.scan(b"L"))
    assert good in lease


async def test_the_counters_and_crawl_records_are_saved_once_a_transaction_not_once_a_feedback_record() -> None:
    """Issue 39: with 50 crawls a worker's feedback comes in many small records, and each record's
    commit saved the counters and wrote every crawl record it touched again (0.55 crawl-record
    writes a job). They are saved as a transaction takes the writes: records applied while a
    commit is in flight share the next transaction's save, and each event is acknowledged only
    once that transaction, holding its changes, committed."""
    svc, rec, f = service(FrontierConfig(robots_obey=False, dispatch_lead=0.0))
    crawls = ["c0", "c1"]
    items = [parse_input(json.dumps({"url": f"http://h{n}.test/1", "crawl": crawls[n % 2]}).encode()) for n in range(8)]
    f.ingest(items, 1000.0)
    f.set_served_crawls(set(crawls), 1000.0)
    jobs = f.dispatch(1000.0).jobs
    assert len(jobs) == 8
    svc.partitions.owned[0].commit()  # the dispatch's writes
    await settle(svc)
    writer = svc.partitions.owned[0].writer
    crawl_writes = 0  # crawl records (K<crawl>) written to the partition's changelog
    write = writer.write

    def counted(topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None) -> None:
        nonlocal crawl_writes
        crawl_writes += key is not None and key.startswith(b"K")
        write(topic, value, key, partition)

    writer.write = counted  # type: ignore[method-assign]
    commits = rec.commits
    writer.window = 0.0  # (no group window: the next record's transaction begins at once)
    rec.hold.set()  # the first record's transaction stays in flight while the others come
    events = [Event() for _ in jobs]
    for job, event in zip(jobs, events, strict=True):
        i = job.item
        fb = Feedback(lease=job.lease, host=i.host, domain=i.domain, url=i.url, outcome="fetched", status=200,
                      sent_at=1000.0)  # fmt: skip
        await svc.handle_feedback(0, FeedbackBatch(items=[fb]), event)
    assert crawl_writes == 1  # the first record's transaction (c0's); the seven others wait for the next one
    assert not any(e.acked for e in events)
    rec.hold.clear()
    await settle(svc)
    assert crawl_writes == 3 and rec.commits == commits + 2 and all(e.acked for e in events)  # c0 and c1 once each
    state = svc.topics.state
    written = [crawl_dec.decode(v or b"") for t, k, v in rec.sent if t == state and k and k.startswith(b"K")]
    assert sorted(r.completed for r in written[-2:]) == [4, 4]  # the last transaction's: every result counted


async def test_input_that_comes_within_the_round_gap_is_served_by_one_dispatch_round() -> None:
    """Issue 39: with 50 crawls each small feedback record woke a dispatch round of its own over
    every partition. A round begins ``ROUND_GAP`` after the last one began at the earliest: the
    input of that gap is applied first, and one round serves it all."""
    svc, _, _ = service(FrontierConfig(robots_obey=False))
    rounds = 0

    def counted() -> float:
        nonlocal rounds
        rounds += 1
        return 0.5

    svc.dispatch_once = counted  # type: ignore[method-assign]
    loop = asyncio.ensure_future(svc.dispatch_loop())
    try:
        began = time.monotonic()
        for _ in range(100):  # an input every 2 ms, each waking the loop
            svc._wake.set()
            await asyncio.sleep(0.002)
        elapsed = time.monotonic() - began
    finally:
        svc.running = False
        svc._wake.set()
        await asyncio.wait_for(loop, 5)
    assert rounds <= elapsed / ROUND_GAP + 3  # about one a gap (it was one an input: 100)

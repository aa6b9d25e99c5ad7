"""Listing recorded URLs (issue 37, item 2): each page costs O(page) whatever its position, every
question is answered a slice at a time from the records as they were when it came (exact,
whatever is written meanwhile), and the service answers it between other work on its loop.

Pure where it can be: partitions over a ``MemoryKV`` (or RocksDB, for its cursors) with injected
time; the slices' budgets run on injected clocks; the gateway's listing over partitions answered
in-process. The end-to-end figure (a million records listed beside a crawl, the loop's largest
stall) is tests/integration/test_listing.py.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frontier.config import Config
from frontier.core.kv import Cursor, CursorClosed, MemoryKV
from frontier.core.urls import parse_input
from frontier.observability.loop import LoopProbe, RollingMax
from frontier.partition import PartitionFrontier
from frontier.partition.recorded import UNBOUNDED, Budget
from frontier.service.rocks import RocksKV
from frontier.service.service import FrontierService
from tests.fakes import FakeClock
from tests.test_service_protocol import Event, Recorder, serve
from tests.test_urlfrontier import SETTINGS, THROTTLE
from topics.catalog import Topics
from topics.schemas import ControlCommand, Query, Reply, UrlItem, decode, encode
from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.service import Gateway

T0 = 1_000_000.0


class CountingKV:
    """A store that counts the entries it hands out (by scans, cursors and lookups)."""

    def __init__(self, kv: MemoryKV | RocksKV) -> None:
        self.kv = kv
        self.reads = 0

    def get(self, key: bytes) -> bytes | None:
        self.reads += 1
        return self.kv.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.kv.put(key, value)

    def delete(self, key: bytes) -> None:
        self.kv.delete(key)

    def scan(self, prefix: bytes, after: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        for entry in self.kv.scan(prefix, after):
            self.reads += 1
            yield entry

    def first(self, prefix: bytes) -> tuple[bytes, bytes] | None:
        self.reads += 1
        return self.kv.first(prefix)

    def cursor(self, prefix: bytes, after: bytes = b"") -> Cursor:
        outer = self
        inner = self.kv.cursor(prefix, after)

        class Counted:
            def next(self) -> tuple[bytes, bytes] | None:
                entry = inner.next()
                outer.reads += entry is not None
                return entry

            def seek(self, after: bytes) -> None:
                inner.seek(after)

            def close(self) -> None:
                inner.close()

        return Counted()

    def close(self) -> None:
        self.kv.close()


def make(kv: Any) -> PartitionFrontier:
    return PartitionFrontier(0, kv, SETTINGS, THROTTLE, lambda k, v: None)


def known(url: str, key: str, crawl: str = "listing", refetch: float = 0.0) -> UrlItem:
    """A known URL of ``crawl`` under ``key`` (done when ``refetch`` is 0: recorded, never queued)."""
    doc = {"url": url, "key": key, "crawl": crawl, "refetch_at": refetch, "meta": {"n": url[-6:]}}
    return parse_input(json.dumps(doc).encode())


def recorded(f: PartitionFrontier, keys: int, per_key: int, first: int = 0) -> list[str]:
    """``keys`` times ``per_key`` known URLs recorded in ``f`` under keys ``k<first>.test`` on; their
    URLs in key order."""
    urls = [f"http://k{k:04d}.test/p/{i:06d}" for k in range(first, first + keys) for i in range(per_key)]
    items = [known(u, f"k{first + n // per_key:04d}.test") for n, u in enumerate(urls)]
    for i in range(0, len(items), 2000):
        f.ingest(items[i : i + 2000], T0)
    return urls


def query(kind: str, **fields: Any) -> Query:
    return Query(id="q", reply_to="g", kind=kind, crawl=fields.pop("crawl", "listing"), **fields)


# -- pages resume from their key --------------------------------------------------------------------
def test_a_page_of_urls_reads_its_own_records_wherever_it_is() -> None:
    kv = CountingKV(MemoryKV())
    f = make(kv)
    urls = recorded(f, keys=20, per_key=250)  # 5,000 records
    listed: list[str] = []
    reads: list[int] = []
    after = ""
    while True:
        kv.reads = 0
        reply = f.answer(query("urls", after=after, limit=100), T0)
        reads.append(kv.reads)
        listed.extend(r.url for r in reply.urls)
        if not reply.more:
            break
        after = reply.more
    assert listed == urls  # every record once, in order
    assert len(reads) == 50
    # a page reads its 100 records and the one after (to know whether more follow), wherever it is:
    # the code before rescanned from the crawl's first record (the 50th page read 5,000)
    assert max(reads) <= 101, reads


def test_a_page_of_queue_keys_reads_one_record_per_key_it_gives() -> None:
    kv = CountingKV(MemoryKV())
    f = make(kv)
    recorded(f, keys=300, per_key=20)  # 6,000 records under 300 keys, all done
    f.ingest([known("http://k0150.test/due", "k0150.test", refetch=T0 + 60)], T0)  # one key with a URL due
    pages: list[list[str]] = []
    reads: list[int] = []
    after = ""
    while True:
        kv.reads = 0
        reply = f.answer(query("queues", after=after, limit=50, inactive=True), T0)
        reads.append(kv.reads)
        pages.append(reply.queues)
        if not reply.more:
            break
        after = reply.more
    assert [k for page in pages for k in page] == [f"k{k:04d}.test" for k in range(300)]
    # a key taken, its other records are skipped (a seek): the code before read all 6,000 records
    # of the crawl for every page, and kept every key of the partition in memory
    assert max(reads) <= 51, reads
    assert f.answer(query("queues"), T0).queues == ["k0150.test"]  # without inactive: keys with a URL due


def test_listing_in_pages_reads_each_record_once_on_the_real_store(tmp_path: Path) -> None:
    kv = CountingKV(RocksKV(tmp_path / "db"))
    try:
        f = make(kv)
        urls = recorded(f, keys=10, per_key=300)
        kv.reads, listed, after, pages = 0, [], "", 0
        while True:
            reply = f.answer(query("urls", after=after, limit=250), T0)
            listed.extend(r.url for r in reply.urls)
            pages += 1
            if not reply.more:
                break
            after = reply.more
        assert listed == urls and pages == 12
        assert kv.reads <= len(urls) + pages  # O(N) in all: the code before read N²/2P (18,000 here)
    finally:
        kv.close()


# -- slices ------------------------------------------------------------------------------------------
def test_a_slice_ends_at_its_time_or_its_records() -> None:
    clock = FakeClock(0.0001)  # each look at the clock: 0.1 ms later
    budget = Budget(clock, seconds=0.002, records=UNBOUNDED)
    spent = 0
    while not budget.spend():
        spent += 1
    assert 300 <= spent + 1 <= 336  # 2 ms are over after about 20 looks at the clock, one every 16 records
    assert sum(1 for _ in iter(Budget(None, records=5).spend, True)) == 4  # the fifth record ends it


def test_a_count_over_many_records_is_answered_in_slices_and_exactly() -> None:
    f = make(MemoryKV())
    recorded(f, keys=10, per_key=1000)
    walk = f.walk(query("count"), T0)
    slices = 0
    while not walk.step(Budget(FakeClock(0.0001), seconds=0.002, records=UNBOUNDED)):
        slices += 1
    assert walk.reply.counts == {"count": 10_000}
    assert 25 <= slices <= 40  # about 320 records a slice (the code before: all 10,000 in one go)


@pytest.mark.parametrize("store", ["memory", "rocksdb"])
def test_a_question_answers_for_the_moment_it_came_whatever_is_written_between_its_slices(
    store: str, tmp_path: Path
) -> None:
    kv: MemoryKV | RocksKV = MemoryKV() if store == "memory" else RocksKV(tmp_path / "db")
    try:
        f = make(kv)
        urls = recorded(f, keys=4, per_key=500)
        f.ingest([known("http://k0001.test/due", "k0001.test", refetch=T0 + 60)], T0)
        count, stats = f.walk(query("count"), T0), f.walk(query("stats"), T0)
        page = f.walk(query("urls", limit=1000), T0)
        queues = f.walk(query("queues"), T0)
        for walk in (count, stats, page, queues):
            assert not walk.step(Budget(records=300))  # a first slice, not the whole answer
        # meanwhile: records added before and after where each walk stands, some removed
        f.ingest([known("http://k0000.test/a-new-one", "k0000.test"), known("http://k0003.test/zz", "k0003.test"),
                  known("http://k0002.test/due", "k0002.test", refetch=T0 + 60)], T0)  # fmt: skip
        assert f.change(query("delete_queue", key="k0003.test"), T0).counts == {"removed": 501}
        for walk in (count, stats, page, queues):
            walk.finish()
        assert count.reply.counts == {"count": 2001}
        assert stats.reply.counts == {"size": 1, "in_process": 0, "queues": 1, "completed": 2000}
        assert [r.url for r in page.reply.urls] == sorted([*urls, "http://k0001.test/due"])[:1000]
        assert queues.reply.queues == ["k0001.test"]
        assert f.answer(query("count"), T0).counts == {"count": 1503}  # a question now sees the changes
    finally:
        kv.close()


def test_a_page_goes_out_as_the_same_json_its_records_waiting_as_bytes() -> None:
    f = make(MemoryKV())
    recorded(f, keys=3, per_key=400)
    walk = f.walk(query("urls", limit=1000), T0)
    walk.finish()
    reply = walk.reply
    assert len(reply.urls) == 1000 and reply.more == "Ulisting\x1ek0002.test\x1fhttp://k0002.test/p/000199"
    assert walk.encoded() == encode(reply)  # what the gateway decodes is what it always was
    assert decode(walk.encoded(), Reply) == reply


# -- cursors -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("store", ["memory", "rocksdb"])
def test_a_cursor_reads_its_prefix_as_it_was_and_seeks_within_it(store: str, tmp_path: Path) -> None:
    kv: MemoryKV | RocksKV = MemoryKV() if store == "memory" else RocksKV(tmp_path / "db")
    try:
        for key in (b"a1", b"b1", b"b2", b"b3", b"b5", b"c1"):
            kv.put(key, key.upper())
        cursor = kv.cursor(b"b", after=b"b1")
        assert cursor.next() == (b"b2", b"B2")
        kv.put(b"b4", b"B4")  # ahead of the cursor: not in its view
        kv.delete(b"b5")
        kv.put(b"b3", b"changed")
        assert cursor.next() == (b"b3", b"B3")
        cursor.seek(b"b4")
        assert cursor.next() == (b"b5", b"B5")
        assert cursor.next() is None
        assert [k for k, _ in kv.scan(b"b")] == [b"b1", b"b2", b"b3", b"b4"]  # the store itself moved on
        cursor.close()
        with pytest.raises(CursorClosed):
            cursor.next()
    finally:
        kv.close()


KEYS = st.binary(min_size=1, max_size=3)
OPS = st.lists(st.one_of(st.tuples(st.just("put"), KEYS), st.tuples(st.just("delete"), KEYS),
                         st.tuples(st.just("next"), st.integers(0, 2)), st.tuples(st.just("seek"), KEYS)),
               max_size=40)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.lists(KEYS, max_size=20), prefix=st.binary(max_size=1), after=KEYS, ops=OPS)
def test_cursors_of_both_stores_read_the_same_view_under_writes(
    tmp_path: Path, first: list[bytes], prefix: bytes, after: bytes, ops: list[tuple[str, Any]]
) -> None:
    path = tmp_path / f"db{abs(hash((tuple(first), prefix, after, tuple(ops))))}"
    rocks, memory = RocksKV(path), MemoryKV()
    try:
        for kv in (rocks, memory):
            for key in first:
                kv.put(key, key[::-1])
        view = {k: k[::-1] for k in first if k.startswith(prefix) and k > after}  # what both must read
        cursors = [rocks.cursor(prefix, after), memory.cursor(prefix, after)]
        last = after
        for i, (op, arg) in enumerate(ops):
            if op in ("put", "delete"):
                for kv in (rocks, memory):
                    kv.put(arg, b"v%d" % i) if op == "put" else kv.delete(arg)
            elif op == "seek":
                for cursor in cursors:
                    cursor.seek(arg)
                last = max(last, arg)
            else:
                want = sorted(k for k in view if k > last)[:1]
                got = [cursor.next() for cursor in cursors]
                assert got[0] == got[1] == ((want[0], view[want[0]]) if want else None), (got, want)
                if want:
                    last = want[0]
    finally:
        rocks.close()
        RocksKV.destroy(path)


def test_a_store_closed_under_an_open_cursor_opens_again_at_once(tmp_path: Path) -> None:
    kv = RocksKV(tmp_path / "db")
    kv.put(b"U1", b"x")
    kv.put(b"U2", b"y")
    cursor = kv.cursor(b"U")
    assert cursor.next() == (b"U1", b"x")
    kv.close()  # the partition moves away while a question reads it
    with pytest.raises(CursorClosed):
        cursor.next()
    again = RocksKV(tmp_path / "db")  # an iterator left open would keep the database's lock
    try:
        assert again.get(b"U2") == b"y"
    finally:
        again.close()


# -- the service answers between other work ----------------------------------------------------------
def owned_service(f: PartitionFrontier, kv: MemoryKV) -> tuple[FrontierService, list[Reply]]:
    svc = FrontierService(replace(Config(), frontier=SETTINGS), clock=lambda: T0)
    serve(svc, Recorder(), f, kv)
    replies: list[Reply] = []
    svc.questions._reply = lambda reply, q: replies.append(decode(reply, Reply))  # type: ignore[method-assign]
    return svc, replies


async def test_the_service_answers_a_long_question_a_slice_per_turn_of_its_loop() -> None:
    kv = MemoryKV()
    f = make(kv)
    recorded(f, keys=10, per_key=2000)  # 20,000 records
    svc, replies = owned_service(f, kv)
    svc.questions.slice_clock = FakeClock(0.0001)  # each slice: ~320 records
    turns: list[int] = []  # the number of slices walked when another task had its turn

    async def other_work() -> None:
        while not replies:
            turns.append(len(turns))
            await asyncio.sleep(0)

    ticker = asyncio.ensure_future(other_work())
    event = Event()
    await svc.handle_control(0, ControlCommand(action="query", query=query("count")), event)
    assert event.acked and not replies  # acknowledged at once; answered later
    async with asyncio.timeout(10):
        await ticker
    assert replies[0].counts == {"count": 20_000}
    assert len(turns) >= 50  # it ran between the ~63 slices (the code before answered all 20,000 in one go)
    assert svc.questions._walker is None and not svc.questions._walks


async def test_a_question_of_a_partition_that_moved_is_given_up() -> None:
    kv = MemoryKV()
    f = make(kv)
    recorded(f, keys=2, per_key=2000)
    svc, replies = owned_service(f, kv)
    svc.questions.slice_clock = FakeClock(0.0001)
    await svc.handle_control(0, ControlCommand(action="query", query=query("count")), Event())
    walk = svc.questions._walks[0].walk
    del svc.partitions.owned[0]  # revoked while its question is walked
    async with asyncio.timeout(10):
        while svc.questions._walker is not None:
            await asyncio.sleep(0)
    assert not replies and walk._cursors == ()  # no answer (its asker times out), its cursor let go


# -- the loop probe ----------------------------------------------------------------------------------
def test_the_loop_probe_keeps_the_largest_stall_of_the_last_window() -> None:
    seen: list[tuple[float, float]] = []
    probe = LoopProbe(lambda late, busy: seen.append((late, busy)))
    probe.sample(0.004, 0.012, now=1.0)
    probe.sample(0.250, 0.240, now=3.0)  # the loop held for a quarter of a second
    probe.sample(-0.001, 0.001, now=5.0)  # early by a clock's rounding: not late
    assert seen[-1] == (0.0, 0.001)
    assert probe.late.value() == 0.250 and probe.busy.value() == 0.240
    probe.sample(0.002, 0.002, now=12.0)  # a new window: the one before is still counted
    assert probe.late.value() == 0.250
    probe.sample(0.002, 0.002, now=25.0)  # two windows later: forgotten
    assert probe.late.value() == 0.002
    stale = RollingMax(window=10.0)
    stale.add(1.0, 0.0)
    stale.add(0.5, 35.0)  # long after: the old window is not the one before
    assert stale.value() == 0.5


async def test_the_loop_probe_measures_late_and_busy_from_its_clocks() -> None:
    clock = itertools.chain([0.0, 0.035], itertools.repeat(1.0))  # asked to run after 10 ms, it ran after 35
    cpu = itertools.chain([1.0, 1.030], itertools.repeat(2.0))  # the loop's thread ran 30 ms meanwhile
    seen: list[tuple[float, float]] = []
    probe = LoopProbe(lambda late, busy: seen.append((late, busy)), tick=0.01,
                      clock=lambda: next(clock), cpu=lambda: next(cpu))  # fmt: skip
    task = asyncio.ensure_future(probe.run())
    async with asyncio.timeout(5):
        while not seen:
            await asyncio.sleep(0.001)
    task.cancel()
    assert seen[0] == pytest.approx((0.025, 0.030))


# -- the gateway's listing ---------------------------------------------------------------------------
class Partitions:
    """The gateway's asker over partitions answered in-process; counts the questions."""

    def __init__(self, frontiers: list[PartitionFrontier]) -> None:
        self.frontiers = frontiers
        self.asked = 0

    async def ask(self, q: Query, partitions: Any = None) -> dict[int, Reply]:
        asked = range(len(self.frontiers)) if partitions is None else partitions
        self.asked += len(asked)
        return {p: self.frontiers[p].answer(q, T0) for p in asked}


class Context:
    async def abort(self, code: Any, why: str) -> None:
        raise AssertionError(f"aborted: {code} {why}")


def gateway(frontiers: list[PartitionFrontier]) -> tuple[Gateway, Partitions]:
    asker = Partitions(frontiers)
    cfg = replace(Config(), topics=Topics(partitions=len(frontiers)))
    return Gateway(cfg, None, None, asker, None, "test"), asker  # type: ignore[arg-type]


async def collect(items: AsyncIterator[pb.URLItem]) -> list[str]:
    return [item.known.info.url async for item in items]


async def test_the_next_page_of_list_urls_resumes_where_the_last_one_ended() -> None:
    kvs = [CountingKV(MemoryKV()), CountingKV(MemoryKV())]
    frontiers = [PartitionFrontier(p, kv, SETTINGS, THROTTLE, lambda k, v: None) for p, kv in enumerate(kvs)]
    urls = recorded(frontiers[0], keys=10, per_key=300) + recorded(frontiers[1], keys=5, per_key=300, first=10)
    gw, _ = gateway(frontiers)
    listed: list[str] = []
    reads: list[int] = []
    for start in range(0, len(urls), 500):
        for kv in kvs:
            kv.reads = 0
        params = pb.ListUrlParams(crawlID="listing", start=start, size=500)
        listed.extend(await collect(gw.ListURLs(params, Context())))  # type: ignore[arg-type]
        reads.append(sum(kv.reads for kv in kvs))
    assert listed == urls
    # each call reads its own page (and the record after it, to know that more follow): the code
    # before read the ``start`` records before each page again (the last call: 4,500 and more)
    assert max(reads) <= 502, reads
    again = await collect(gw.ListURLs(pb.ListUrlParams(crawlID="listing", start=1200, size=10),  # type: ignore[arg-type]
                                      Context()))  # fmt: skip
    assert again == urls[1200:1210]  # a start nobody ended at: read from the beginning, still right


async def test_list_queues_merges_the_partitions_keys_a_page_at_a_time() -> None:
    frontiers = [make(MemoryKV()), PartitionFrontier(1, MemoryKV(), SETTINGS, THROTTLE, lambda k, v: None)]
    recorded(frontiers[0], keys=2500, per_key=1)
    frontiers[1].ingest([known(f"http://other{k}.test/", f"k{k:04d}.test") for k in range(1, 3000, 2)], T0)
    gw, asker = gateway(frontiers)
    every = sorted({f"k{k:04d}.test" for k in range(2500)} | {f"k{k:04d}.test" for k in range(1, 3000, 2)})
    got: list[str] = []
    for start in range(0, len(every) + 100, 700):
        page = await gw.ListQueues(pb.Pagination(crawlID="listing", start=start, size=700,  # type: ignore[arg-type]
                                                 include_inactive=True), Context())  # fmt: skip
        got.extend(page.values)
    assert got == every  # in order, a key of both partitions once
    asker.asked = 0
    await gw.ListQueues(pb.Pagination(crawlID="listing", start=0, size=10, include_inactive=True), Context())  # type: ignore[arg-type]
    assert asker.asked == 2  # one page of each partition (the code before asked pages until start + size each)

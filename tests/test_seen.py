"""The seen set's lifecycle (issue 13): retention sweep, recrawl, forget, legacy values, CLI.

Pure: every test drives ``PartitionFrontier`` with an injected time and a changelog recorder.
"""

import json
import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest

from frontier.cli import build_parser
from frontier.client import submission_value
from frontier.core.kv import KV, MemoryKV
from frontier.core.urls import parse_input, seen_fingerprint
from frontier.partition import (
    SEEN_DONE,
    SEEN_LEGACY,
    SEEN_OPEN,
    SEEN_REVISIT,
    SWEEP_INTERVAL,
    SWEEP_SLICES,
    SWEEP_SLICES_PER_CALL,
    PartitionFrontier,
    Sweep,
    read_seen,
    seen_value,
)
from frontier.service.rocks import RocksKV
from tests.test_partition import SETTINGS, THROTTLE, Log, fb, items
from topics.schemas import Submission, UrlItem, encode

DAY = 86400.0
RETENTION = 30 * DAY
CALLS_PER_CYCLE = SWEEP_SLICES // SWEEP_SLICES_PER_CALL  # calls that open every slice once (no limit hit)


@pytest.fixture(params=["memory", "rocksdb"])
def kv(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KV]:
    store: KV = MemoryKV() if request.param == "memory" else RocksKV(tmp_path / "p0")
    yield store
    store.close()


def make(kv: KV | None = None, log: Log | None = None, retention: float = RETENTION) -> PartitionFrontier:
    settings = replace(SETTINGS, seen_retention=retention)
    return PartitionFrontier(0, kv if kv is not None else MemoryKV(), settings, THROTTLE, log or Log())


def sub(url: str, **flags: object) -> UrlItem:
    return parse_input(encode(msgspec.convert({"url": url, **flags}, Submission)))


def seen(f: PartitionFrontier, item: UrlItem) -> tuple[int, float, int] | None:
    raw = f.kv.get(b"S" + seen_fingerprint(item))
    return read_seen(raw) if raw is not None else None


def cycle(f: PartitionFrontier, now: float, entries: int, limit: int = 2000) -> list[Sweep]:
    """Enough sweep calls for one full cycle over ``entries`` seen entries, from any cursor."""
    calls = CALLS_PER_CYCLE + entries // limit + 2
    return [f.sweep_seen(now, limit) for _ in range(calls)]


def fetch_all(f: PartitionFrontier, now: float) -> int:
    """Dispatch and complete everything due at ``now`` (one host each); return how many."""
    jobs = f.dispatch(now).jobs
    for job in jobs:
        assert f.feedback(fb(job, sent_at=now), now)
    return len(jobs)


# -- values --------------------------------------------------------------------------------------
def test_values_round_trip_and_legacy_values_are_read() -> None:
    assert read_seen(seen_value(SEEN_OPEN, 1234.9)) == (SEEN_OPEN, 1234.0, -1)
    assert read_seen(seen_value(SEEN_DONE, 5.0)) == (SEEN_DONE, 5.0, -1)
    assert read_seen(seen_value(SEEN_REVISIT, 7.0, 67_000)) == (SEEN_REVISIT, 7.0, 67_000)
    assert len(seen_value(SEEN_DONE, 1.8e9)) == 5 and len(seen_value(SEEN_REVISIT, 1.8e9, 2**40)) == 13
    assert read_seen(seen_value(SEEN_DONE, -3.0))[1] == 0.0 and read_seen(seen_value(SEEN_DONE, 1e12))[1] == 2**32 - 1
    assert read_seen(b"1") == (SEEN_LEGACY, -1.0, -1)
    assert read_seen(b"1763900000.125") == (SEEN_REVISIT, 1763900000.125, -1)
    for garbage in (b"", b"x", b"\x07\x00\x00\x00\x01", b"12abc", b"\x02\x00"):
        assert read_seen(garbage)[0] == SEEN_LEGACY  # stamped by the sweep, never a crash


def test_an_entry_is_open_while_queued_or_in_flight_and_done_when_its_fate_is_decided(kv: KV) -> None:
    f = make(kv)
    a, b, c = items("http://a.test/1", "http://b.test/1", "http://c.test/1")
    f.ingest([a, b, c], 100.0)
    assert seen(f, a) == (SEEN_OPEN, 100.0, -1)
    jobs = {j.item.host: j for j in f.dispatch(200.0).jobs}
    assert seen(f, a) == (SEEN_OPEN, 100.0, -1)  # in flight: still open
    f.feedback(fb(jobs["a.test"], sent_at=200.0), 250.0)
    f.feedback(fb(jobs["b.test"], outcome="error", sent_at=200.0), 260.0)
    f.feedback(fb(jobs["c.test"], outcome="retry", status=503, sent_at=200.0), 270.0)
    assert seen(f, a) == (SEEN_DONE, 250.0, -1) and seen(f, b) == (SEEN_DONE, 260.0, -1)
    assert seen(f, c) == (SEEN_OPEN, 100.0, -1)  # re-queued for a retry: still open


def test_a_dropped_url_and_a_reported_one_are_done() -> None:
    from topics.schemas import ControlCommand

    f = make()
    dropped, lost = items("http://drop.test/1", "http://lost.test/1")
    f.ingest([dropped, lost], 0.0)
    assert f.control(ControlCommand(action="drop", scope="drop.test"), 5.0) == 1
    assert seen(f, dropped) == (SEEN_DONE, 5.0, -1)
    now = 0.0
    for _ in range(SETTINGS.max_retries + 1):  # leases lost again and again: an error report
        assert len(f.dispatch(now).jobs) == 1
        now += 1000.0
        f.expire_leases(now)
    assert f.stats.failed == 1 and seen(f, lost) == (SEEN_DONE, now, -1)


# -- the retention sweep ---------------------------------------------------------------------------
def test_sweep_forgets_done_entries_after_the_retention_and_tombstones_them(kv: KV) -> None:
    log = Log()
    f = make(kv, log)
    old, recent, waiting = items("http://a.test/old", "http://b.test/recent", "http://c.test/waiting")
    f.ingest([old, waiting], 0.0)
    jobs = {j.item.host: j for j in f.dispatch(0.0).jobs}
    f.feedback(fb(jobs["a.test"], sent_at=0.0), 10.0)  # old: done at 10; waiting: in flight forever
    f.ingest([recent], 20 * DAY)
    fetch_all(f, 20 * DAY)

    assert sum(s.forgotten for s in cycle(f, 10.0 + RETENTION - 1, 3)) == 0  # one second short
    before = len(log.records)
    results = cycle(f, 10.0 + RETENTION, 3)
    assert sum(s.forgotten for s in results) == 1 and f.stats.forgotten == 1
    assert seen(f, old) is None and seen(f, recent) is not None and seen(f, waiting) == (SEEN_OPEN, 0.0, -1)
    assert log.records[before:] == [(b"S" + seen_fingerprint(old), None)]  # the tombstone, nothing else
    assert log.replay().get(b"S" + seen_fingerprint(old)) is None

    years = 10.0 + RETENTION + 5 * 365 * DAY  # an open entry is never forgotten, however old
    assert sum(s.forgotten for s in cycle(f, years, 3)) == 1 and seen(f, waiting) is not None
    assert f.ingest([old], years) == 1 and f.ingest([waiting], years) == 0  # crawled again; still a duplicate


def test_a_sweep_call_looks_at_its_limit_at_most_and_a_cycle_looks_at_each_entry_once(kv: KV) -> None:
    """Entries crowded into few slices (the first, a middle and the last: the cursor wraps past
    the end) make calls stop mid-slice and resume there."""
    log = Log()
    f = make(kv, log)
    rng = random.Random(7)
    keys = sorted(
        b"S" + prefix + rng.randbytes(14) for prefix in (b"\x00\x00", b"\x80\x00", b"\xff\xff") for _ in range(40)
    )
    for key in keys:
        kv.put(key, b"1")  # legacy entries: the first look stamps each (one changelog record per look)
    limit = 7
    results = cycle(f, 1000.0, len(keys), limit)
    assert all(s.looked <= limit for s in results) and max(s.looked for s in results) == limit
    assert sorted(k for k, _ in log.records) == keys  # every entry looked at exactly once in a cycle
    assert {read_seen(v) if v is not None else None for _, v in log.records} == {(SEEN_DONE, 1000.0, -1)}
    assert sum(s.forgotten for s in results) == 0

    # the next cycles go on round the wrap: all forgotten one retention later, each once
    later = [s for _ in range(2) for s in cycle(f, 1000.0 + RETENTION, len(keys), limit)]
    assert all(s.looked <= limit for s in later)
    assert sum(s.forgotten for s in later) == len(keys) == f.stats.forgotten
    assert not list(kv.scan(b"S"))


def test_legacy_entries_are_stamped_when_first_met_and_revisits_never_age_out() -> None:
    f = make()
    a, news = items("http://a.test/1", "http://news.test/")
    f.kv.put(b"S" + seen_fingerprint(a), b"1")
    f.kv.put(b"S" + seen_fingerprint(news), b"1000.000")  # a revisit URL's last fetch, before issue 13
    cycle(f, 5 * DAY, 2)
    assert seen(f, a) == (SEEN_DONE, 5 * DAY, -1) and seen(f, news) == (SEEN_REVISIT, 1000.0, -1)
    assert sum(s.forgotten for s in cycle(f, 5 * DAY + RETENTION - 1, 2)) == 0
    assert sum(s.forgotten for s in cycle(f, 5 * DAY + RETENTION, 2)) == 1
    assert seen(f, a) is None and seen(f, news) is not None
    assert sum(s.forgotten for s in cycle(f, 1000 * DAY, 2)) == 0


def test_a_revisit_url_stays_seen_and_a_legacy_revisit_entry_keeps_its_schedule() -> None:
    f = make(retention=100.0)
    news = sub("http://news.test/", revisit=60.0)
    f.ingest([news], 0.0)
    assert fetch_all(f, 0.0) == 1 and seen(f, news) == (SEEN_REVISIT, 0.0, 60_000)
    assert sum(s.forgotten for s in cycle(f, 10_000.0, 1)) == 0  # waiting for its revisit: never aged out
    # a store from before issue 13: a float-text seen entry names any V entry of its URL
    f.kv.put(b"S" + seen_fingerprint(news), b"0.000")
    (job,) = f.dispatch(60.0).jobs
    assert job.item.url == news.url and f.stats.revisits == 1 and seen(f, news) == (SEEN_OPEN, 60.0, -1)


def test_sweep_due_runs_at_most_once_per_interval_and_retention_zero_keeps_everything() -> None:
    f = make()
    f.kv.put(b"S" + bytes(16), seen_value(SEEN_DONE, 0.0))
    calls = [f.sweep_due(RETENTION + i * SWEEP_INTERVAL / 4) for i in range(4 * CALLS_PER_CYCLE + 8)]
    ran = [s for s in calls if s.looked]
    assert len(ran) == 1 and ran[0].forgotten == 1  # the one entry, found within a cycle of sweep_due runs
    g = make(retention=0.0)
    g.kv.put(b"S" + bytes(16), seen_value(SEEN_DONE, 0.0))
    assert all(g.sweep_seen(1e9) == Sweep(0, 0) for _ in range(CALLS_PER_CYCLE + 1))
    assert g.kv.get(b"S" + bytes(16)) is not None


def test_sweep_due_is_rate_limited() -> None:
    f = make()
    rng = random.Random(1)
    for _ in range(3000):  # enough entries that every run looks at some
        f.kv.put(b"S" + rng.randbytes(16), seen_value(SEEN_DONE, 0.0))
    first = f.sweep_due(10.0)
    assert first.looked > 0
    assert f.sweep_due(10.5) == Sweep(0, 0) and f.sweep_due(10.0 + SWEEP_INTERVAL - 0.01) == Sweep(0, 0)
    assert f.sweep_due(10.0 + SWEEP_INTERVAL).looked > 0
    assert f.sweep_due(5.0).looked > 0  # the clock went back: not stuck until it catches up


def test_the_forgotten_counter_survives_a_move() -> None:
    log = Log()
    f = make(log=log)
    (a,) = items("http://a.test/1")
    f.ingest([a], 0.0)
    fetch_all(f, 0.0)
    cycle(f, RETENTION, 1)
    f.save_stats()
    g = make(log.replay())
    g.rebuild(RETENTION)
    assert g.stats.forgotten == 1 == f.stats.forgotten and g.kv.get(b"S" + seen_fingerprint(a)) is None


# -- recrawl and forget ------------------------------------------------------------------------------
def test_recrawl_queues_a_done_url_again_but_never_an_open_one_twice(kv: KV) -> None:
    f = make(kv)
    (a,) = items("http://a.test/1")
    again = sub("http://a.test/1", recrawl=True)
    assert again.recrawl
    assert f.ingest([a], 0.0) == 1
    assert f.ingest([again], 1.0) == 0  # queued: a duplicate, not a second copy
    (job,) = f.dispatch(2.0).jobs
    assert f.ingest([again], 3.0) == 0  # in flight: the same
    f.feedback(fb(job, sent_at=2.0), 4.0)
    assert f.ingest([a], 5.0) == 0  # done and not recrawled: a duplicate
    assert f.ingest([again], 6.0) == 1 and seen(f, a) == (SEEN_OPEN, 6.0, -1)
    assert (f.stats.recrawls, f.stats.duplicates, f.stats.ingested) == (1, 3, 2)
    assert all(b"recrawl" not in v for _, v in kv.scan(b"Q"))  # the flag is a command, not stored
    (job2,) = f.dispatch(10.0).jobs
    assert job2.item.url == a.url and not job2.item.recrawl


def test_recrawl_of_a_revisit_url_does_not_start_a_second_revisit_chain() -> None:
    f = make()
    news = sub("http://news.test/", revisit=100.0)
    f.ingest([news], 0.0)
    fetch_all(f, 0.0)  # next revisit due at 100
    f.ingest([sub("http://news.test/", revisit=100.0, recrawl=True)], 30.0)
    assert fetch_all(f, 30.0) == 1  # fetched now; the next revisit due at 130
    assert len(list(f.kv.scan(b"V"))) == 2  # the old V entry is dropped when due, not re-queued
    fetched = [fetch_all(f, t) for t in (100.0, 130.0, 229.0, 230.0)]
    assert fetched == [0, 1, 0, 1] and f.stats.revisits == 2 and len(list(f.kv.scan(b"V"))) == 1


def test_forget_removes_a_done_url_and_leaves_an_open_one(kv: KV) -> None:
    log = Log()
    f = make(kv, log)
    a, b = items("http://a.test/1", "http://b.test/1")
    f.ingest([a, b], 0.0)
    jobs = {j.item.host: j for j in f.dispatch(0.0).jobs}
    f.feedback(fb(jobs["a.test"], sent_at=0.0), 1.0)
    forget_a, forget_b = sub(a.url, forget=True), sub(b.url, forget=True)
    before = len(log.records)
    assert f.ingest([forget_a, forget_b, sub("http://never.test/", forget=True)], 2.0) == 0
    assert log.records[before:] == [(b"S" + seen_fingerprint(a), None)]
    assert seen(f, a) is None and seen(f, b) == (SEEN_OPEN, 0.0, -1) and f.stats.forgotten == 1
    assert f.queued() == 0 and f.inflight == 1  # a forget queues nothing
    assert f.ingest([a], 3.0) == 1 and [j.item.url for j in f.dispatch(3.0).jobs] == [a.url]


def test_forget_ends_a_urls_revisits() -> None:
    f = make()
    news = sub("http://news.test/", revisit=60.0)
    f.ingest([news], 0.0)
    fetch_all(f, 0.0)
    f.ingest([sub(news.url, forget=True)], 10.0)
    assert seen(f, news) is None and f.stats.forgotten == 1
    assert fetch_all(f, 61.0) == 0 and f.stats.revisits == 0 and not list(f.kv.scan(b"V"))


def test_every_prefix_of_a_revisit_changelog_keeps_a_named_v_entry() -> None:
    """Crash anywhere: a revisit seen entry never names a V entry that is not there (the URL
    would be neither queued nor due, and never forgotten)."""
    log = Log()
    f = make(log=log)
    news = sub("http://news.test/", revisit=60.0)
    f.ingest([news], 0.0)
    fetch_all(f, 0.0)
    fetch_all(f, 60.0)
    for cut in range(len(log.records) + 1):
        replica = log.replay(cut)
        raw = replica.get(b"S" + seen_fingerprint(news))
        if raw is not None and read_seen(raw)[0] == SEEN_REVISIT:
            due = read_seen(raw)[2]
            assert any(key[1:9] == due.to_bytes(8, "big") for key, _ in replica.scan(b"V")), f"cut {cut}"


# -- command line --------------------------------------------------------------------------------------
def test_cli_submit_recrawl_and_forget_parse() -> None:
    args = build_parser().parse_args(["submit", "--recrawl", "http://a.test/", "http://b.test/"])
    assert args.recrawl and args.urls == ["http://a.test/", "http://b.test/"] and args.func.__name__ == "cmd_submit"
    assert not build_parser().parse_args(["submit", "http://a.test/"]).recrawl
    args = build_parser().parse_args(["forget", "http://a.test/", "--file", "-"])
    assert args.func.__name__ == "cmd_forget" and args.urls == ["http://a.test/"] and args.file == "-"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["forget", "--recrawl", "http://a.test/"])


def test_cli_records_carry_the_flags_and_decode_as_submissions() -> None:
    assert submission_value(b"http://a.test/") == b"http://a.test/"
    rec = parse_input(submission_value(b"http://a.test/", recrawl=True, follow=2))
    assert rec.recrawl and rec.follow == 2 and not rec.forget
    gone = parse_input(submission_value(b"http://a.test/x", forget=True))
    assert gone.forget and not gone.recrawl and gone.url == "http://a.test/x"
    line = b'{"url": "http://a.test/j", "priority": 3}'
    assert submission_value(line, follow=2) == line  # --follow: bare URLs only, as before
    obj = json.loads(submission_value(line, forget=True))
    assert obj == {"url": "http://a.test/j", "priority": 3, "forget": True}
    assert submission_value(b"{not json", forget=True) == b"{not json"  # the router rejects it
    assert json.loads(submission_value(b'"http://a.test/"', forget=True))["forget"] is True


# -- the service ---------------------------------------------------------------------------------------
async def test_the_service_dispatch_loop_sweeps_and_closes_the_tombstones_with_a_marker() -> None:
    from frontier.config import Config
    from frontier.partition.keys import ACK_KEY
    from frontier.service.service import FrontierService
    from tests.test_service_protocol import Recorder, serve, settle

    clock = [RETENTION + 10.0]
    cfg = replace(Config(), frontier=replace(SETTINGS, seen_retention=RETENTION))
    svc = FrontierService(cfg, clock=lambda: clock[0])
    rec = Recorder()
    kv = MemoryKV()
    f = PartitionFrontier(0, kv, cfg.frontier, cfg.throttle, svc.partitions.changelog(0))
    serve(svc, rec, f, kv)
    f.rebuild(clock[0])
    old, recent = b"S" + bytes(16), b"S" + b"\x80" + bytes(15)
    kv.put(old, seen_value(SEEN_DONE, 0.0))
    kv.put(recent, seen_value(SEEN_DONE, RETENTION))
    for _ in range(CALLS_PER_CYCLE + 2):  # one cycle of once-a-second sweeps, from any cursor
        svc.dispatch_once()
        await settle(svc)
        clock[0] += SWEEP_INTERVAL
    assert kv.get(old) is None and kv.get(recent) is not None and f.stats.forgotten == 1
    sent = [(key, value) for topic, key, value in rec.sent if topic == cfg.topics.state]
    tombstone = sent.index((old, None))
    assert (ACK_KEY, None) in sent[tombstone:]  # the round's marker closes it (acknowledged like any write)
    assert svc.reporting.stats()["forgotten"] == 1  # in the status totals


def test_a_lease_restored_after_a_crash_between_done_and_its_deletion_is_open_again() -> None:
    """feedback stamps the URL done, then deletes its lease; a crash between the two restores the
    lease with a done entry. When that lease expires the URL is queued again and must be open:
    else a recrawl would queue it twice, or the sweep forget it while it waits."""
    log = Log()
    f = make(log=log)
    (item,) = items("http://crash.test/a")
    f.ingest([item], 0.0)
    (job,) = f.dispatch(0.0).jobs
    f.kv.put(b"S" + seen_fingerprint(item), seen_value(SEEN_DONE, 1.0))  # the done stamp landed, the lease stays
    f.expire_leases(job.expires_at + 3600.0)
    assert f.queued() == 1 and seen(f, item) is not None and seen(f, item)[0] == SEEN_OPEN  # type: ignore[index]
    recrawl = msgspec.structs.replace(item, recrawl=True)
    assert f.ingest([recrawl], job.expires_at + 3601.0) == 0 and f.queued() == 1  # not queued twice

"""A frontier instance's partitions through failures (issue 27), without a broker:

- an event of a partition this instance does not serve (revoked, fenced) is left unacknowledged
  for its owner at once, never parked (a parked event stalls the agent and the group's rebalance);
- a store that cannot be opened is retried with backoff, shown in status ("partition N not
  served: ..."), and past the bound the dispatch loop raises (the process exits, a supervisor
  restarts it);
- restore order: a restored partition applies the feedback waiting for it before it expires
  leases, so a result already reported is not counted lost and fetched again;
- a fenced partition is dropped, its store closed without a clean marker;
- a second instance on one state_dir refuses at start in one line.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest
from confluent_kafka import KafkaError, KafkaException

from frontier.client.status import render
from frontier.config import Config, ConfigError, FrontierConfig
from frontier.core.kv import MemoryKV
from frontier.core.urls import parse_input
from frontier.partition import PartitionFrontier
from frontier.partition.counts import QueueCounts
from frontier.service import lifecycle as lifecycle_module
from frontier.service.lock import lock_state_dir
from frontier.service.service import FrontierService
from tests.test_service_protocol import Event, Recorder, serve, service, settle
from topics.schemas import ControlCommand, EncodedUrlBatch, Feedback, FeedbackBatch, encode


class Message:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class OffsetEvent(Event):
    def __init__(self, offset: int) -> None:
        super().__init__()
        self.message = Message(offset)


async def test_an_event_of_a_partition_not_served_is_left_for_its_owner_at_once() -> None:
    svc = FrontierService(Config(), clock=lambda: 1000.0)
    svc._producer = Recorder()  # type: ignore[assignment]
    event = Event()
    batch = EncodedUrlBatch(items=[])
    await asyncio.wait_for(svc.handle_urls(5, batch, event), 1)
    await asyncio.wait_for(svc.handle_feedback(5, FeedbackBatch(items=[]), event), 1)
    assert not event.acked


async def test_an_event_between_a_revoke_and_the_assignment_that_gives_its_partition_back_is_applied() -> None:
    """CI at b3c1869 (the chaos soak): a batch of 384 URLs was delivered while its partition was
    revoked here, before the assignment that gave it back; left unacknowledged, it was never
    delivered again (the consumer kept its position) and never crawled. Now it waits for the
    group's next assignment: given back, it is applied; given to another instance, it is left for
    it (read again from the committed offset)."""
    svc, _, f = service(FrontierConfig(robots_obey=False, dispatch_lead=0.0))
    owned = svc.partitions.owned[0]
    reopened: list[int] = []

    async def reopen(p: int) -> None:
        reopened.append(p)
        svc.partitions.owned[p] = owned  # (its store, opened again)

    svc.lifecycle._open_retrying = reopen  # type: ignore[method-assign]
    await svc.lifecycle.on_revoked({5})  # a rebalance begins (partition 0's close, done below, is not what is tested)
    svc.partitions.owned.pop(0)  # revoked: closed here
    svc.lifecycle._assigned = set()
    batch = EncodedUrlBatch(items=[encode(parse_input(b"http://a.test/1"))])
    event = OffsetEvent(7)
    waiting = asyncio.ensure_future(svc.handle_urls(0, batch, event))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # the assignment is not known yet
    svc.lifecycle.on_assigned({0})  # given back
    await asyncio.wait_for(waiting, 5)
    await settle(svc)
    assert reopened == [0] and event.acked and f.queued_hosts() == 1

    elsewhere = OffsetEvent(8)
    svc.partitions.owned.pop(0)
    await svc.lifecycle.on_revoked({0})
    waiting = asyncio.ensure_future(svc.handle_urls(0, batch, elsewhere))
    await asyncio.sleep(0.05)
    svc.lifecycle.on_assigned({1})  # given to another instance
    await asyncio.wait_for(waiting, 5)
    assert not elsewhere.acked


async def test_a_store_that_does_not_open_is_retried_shown_and_then_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle_module, "OPEN_BACKOFF", 0.01)
    svc = FrontierService(Config(), clock=lambda: 1000.0)
    svc._producer = Recorder()  # type: ignore[assignment]
    tries: list[int] = []

    async def failing(p: int) -> None:
        tries.append(p)
        raise RuntimeError("IO error: While lock file: /state/p3/LOCK: Resource temporarily unavailable")

    monkeypatch.setattr(svc.lifecycle, "_open", failing)
    svc.lifecycle.on_assigned({3})
    event = Event()
    waiting = asyncio.ensure_future(svc.handle_urls(3, EncodedUrlBatch(items=[]), event))
    await asyncio.sleep(0.02)
    assert 3 in svc.partitions.unserved and "While lock file" in svc.partitions.unserved[3]
    text = render([svc.reporting.status(1000.0)], now=1000.0)
    assert "partition 3 not served: RuntimeError: IO error: While lock file" in text
    assert svc.reporting.metric_totals()["partitions_unserved"] == 1
    await asyncio.wait_for(waiting, 5)  # the event is not parked forever: given up with the partition
    assert not event.acked and len(tries) == lifecycle_module.OPEN_ATTEMPTS
    assert svc.failure is not None and "partition 3 could not be opened" in str(svc.failure)
    with pytest.raises(RuntimeError, match="partition 3 could not be opened"):
        await asyncio.wait_for(svc.dispatch_loop(), 5)


async def test_a_store_that_opens_on_a_later_try_is_served(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle_module, "OPEN_BACKOFF", 0.01)
    svc = FrontierService(Config(), clock=lambda: 1000.0)
    rec = Recorder()
    svc._producer = rec  # type: ignore[assignment]
    tries: list[int] = []

    async def flaky(p: int) -> None:
        tries.append(p)
        if len(tries) < 3:
            raise OSError("standby copy not handed back in time")
        kv = MemoryKV()
        serve(svc, rec, PartitionFrontier(p, kv, svc.cfg.frontier, svc.cfg.throttle, svc.partitions.changelog(p)), kv)

    monkeypatch.setattr(svc.lifecycle, "_open", flaky)
    svc.lifecycle.on_assigned({1})
    await asyncio.wait_for(asyncio.gather(*svc.partitions.restoring.values()), 5)
    assert len(tries) == 3 and svc.partitions.unserved == {} and svc.partitions.served() == {1} and svc.failure is None


async def test_a_restored_partition_applies_waiting_feedback_before_expiring_leases() -> None:
    """After a takeover later than a lease's deadline, the worker's result (already on
    crawl.feedback) closes the lease; it is not counted lost, re-queued and fetched again."""
    now = [1000.0]
    svc, _, f = owned_service(lambda: now[0])
    f.ingest([parse_input(b"http://a.test/1")], now[0])
    [job] = f.dispatch(now[0]).jobs
    owned = svc.partitions.owned[0]
    owned.feedback_due, owned.expire_from = 41, now[0] + 3600  # the feedback waiting at open ends at 41
    now[0] = job.expires_at + 600  # the partition was unowned far past the lease's deadline
    svc.dispatch_once()
    await settle(svc)
    assert f.inflight == 1 and f.stats.lost == 0  # not expired before the waiting feedback is applied
    fb = Feedback(lease=job.lease, host="a.test", domain="a.test", url=job.item.url, outcome="fetched", status=200,
                  sent_at=job.not_before, done_at=job.not_before + 0.1)  # fmt: skip
    await svc.handle_feedback(0, FeedbackBatch(items=[fb]), OffsetEvent(41))
    svc.dispatch_once()
    await settle(svc)
    assert f.stats.completed == 1 and f.stats.lost == 0 and f.queued() == 0 and f.inflight == 0
    assert owned.may_expire(now[0])


async def test_waiting_feedback_holds_expiry_only_for_a_bounded_time() -> None:
    now = [1000.0]
    svc, _, f = owned_service(lambda: now[0])
    f.ingest([parse_input(b"http://b.test/1")], now[0])
    [job] = f.dispatch(now[0]).jobs
    svc.partitions.owned[0].feedback_due, svc.partitions.owned[0].expire_from = 99, job.expires_at + 700
    now[0] = job.expires_at + 600
    svc.dispatch_once()
    assert f.stats.lost == 0
    now[0] = job.expires_at + 701  # the feedback never came: the lease expires after the bound
    svc.dispatch_once()
    await settle(svc)
    assert f.stats.lost == 1 and f.stats.dispatched == 2  # re-queued and leased again


async def test_a_fenced_partition_is_dropped_without_a_clean_marker() -> None:
    class Fenced(Recorder):
        def commit_transaction(self, timeout: float) -> None:
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))

    settings = FrontierConfig(robots_obey=False, dispatch_lead=0.0)
    svc = FrontierService(replace(Config(), frontier=settings), clock=lambda: 1000.0)
    rec = Fenced()
    closed: list[str] = []

    class Store(MemoryKV):
        def close(self) -> None:
            closed.append("closed")

        def put(self, key: bytes, value: bytes) -> None:
            assert not key.startswith(b"\0clean"), "a fenced store must not be marked clean"
            super().put(key, value)

    kv = Store()
    f = PartitionFrontier(0, kv, settings, svc.cfg.throttle, svc.partitions.changelog(0))
    serve(svc, rec, f, kv)
    svc.partitions.owned[0].writer._on_failure = svc.lifecycle._write_failed
    f.ingest([parse_input(b"http://c.test/1")], 1000.0)
    event = Event()
    await svc.handle_urls(0, EncodedUrlBatch(items=[encode(parse_input(b"http://c.test/2"))]), event)
    deadline = asyncio.get_running_loop().time() + 5
    while not closed:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    assert not event.acked and svc.partitions.served() == set() and "fenced" in svc.partitions.unserved[0]
    assert 0 not in svc.partitions.restoring  # fenced: another instance owns it, not reopened here


async def _failed_commit(svc: FrontierService, code: int, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Partition 0 served by ``svc``, its next commit failing with ``code``; returns the partitions
    opened again (the open itself replaced: no broker here), once the failed store is closed."""

    class Failing(Recorder):
        def commit_transaction(self, timeout: float) -> None:
            raise KafkaException(KafkaError(code, "failed", fatal=True))

    monkeypatch.setattr(lifecycle_module, "RETAKE_AFTER", 0.0)
    settings = svc.cfg.frontier
    closed: list[str] = []

    class Store(MemoryKV):
        def close(self) -> None:
            closed.append("closed")

    kv = Store()
    f = PartitionFrontier(0, kv, settings, svc.cfg.throttle, svc.partitions.changelog(0))
    serve(svc, Failing(), f, kv)
    svc.partitions.owned[0].writer._on_failure = svc.lifecycle._write_failed
    opened: list[int] = []

    async def reopen(p: int) -> None:
        opened.append(p)

    svc.lifecycle._open_retrying = reopen  # type: ignore[method-assign]
    svc.running = True
    await svc.handle_urls(0, EncodedUrlBatch(items=[encode(parse_input(b"http://c.test/2"))]), Event())
    deadline = asyncio.get_running_loop().time() + 5
    while not closed or svc.lifecycle._dropping:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    await asyncio.gather(*svc.partitions.restoring.values())  # the opens started, run to their end
    return opened


@pytest.mark.parametrize("code", [KafkaError._FENCED, KafkaError._FATAL], ids=["fenced", "failed"])
async def test_a_partition_the_group_still_assigns_here_is_opened_again_after_a_failed_commit(
    code: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI at 97c3203: f2 thawed, its old writers failed, and while the group moved partitions an
    open of f1's that was under way took partition 3's transactional id after f2 had opened it
    again under its new assignment. f2 dropped it as fenced ('another instance owns it now') and
    nobody served it: 254 URLs never crawled. Fenced or failed, a partition the group still
    assigns here is opened again; one it does not (revoked meanwhile) is not."""
    settings = FrontierConfig(robots_obey=False, dispatch_lead=0.0)
    svc = FrontierService(replace(Config(), frontier=settings), clock=lambda: 1000.0)
    svc.lifecycle._assigned = {0}
    assert await _failed_commit(svc, code, monkeypatch) == [0]
    revoked = FrontierService(replace(Config(), frontier=settings), clock=lambda: 1000.0)
    revoked.lifecycle._assigned = set()  # revoked before the failed store was closed
    assert await _failed_commit(revoked, code, monkeypatch) == []


async def test_a_partition_fenced_again_after_it_was_taken_back_waits_for_the_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI at 871383b (test_cluster): f1, cut from the group's coordinator, still held partition 1
    as its own; f2, assigned it, opened it and fenced f1; f1 took it back and fenced f2; f2 took it
    back... both served it in turn. A partition is taken back once per assignment; fenced again,
    it is left to the other instance until the group assigns partitions again."""
    settings = FrontierConfig(robots_obey=False, dispatch_lead=0.0)
    svc = FrontierService(replace(Config(), frontier=settings), clock=lambda: 1000.0)
    svc.lifecycle._assigned = {0}
    assert await _failed_commit(svc, KafkaError._FENCED, monkeypatch) == [0]  # taken back
    svc.partitions.restoring.clear()  # (the open, replaced here, is over)
    assert await _failed_commit(svc, KafkaError._FENCED, monkeypatch) == []  # fenced again: left
    svc.lifecycle._open_retrying = lambda p: asyncio.sleep(0)  # type: ignore[method-assign,assignment,return-value]
    svc.lifecycle.on_assigned({0})  # the group spoke again
    await asyncio.gather(*svc.partitions.restoring.values())
    svc.partitions.restoring.clear()
    assert await _failed_commit(svc, KafkaError._FENCED, monkeypatch) == [0]
    svc.partitions.restoring.clear()
    assert await _failed_commit(svc, KafkaError._FATAL, monkeypatch) == [0]  # a failed commit: always rebuilt


async def test_the_assignment_is_what_the_group_said_last() -> None:
    svc = FrontierService(Config(), clock=lambda: 1000.0)
    svc.lifecycle._open_retrying = lambda p: asyncio.sleep(0)  # type: ignore[method-assign,assignment,return-value]
    svc.lifecycle.on_assigned({1, 2})
    await svc.lifecycle.on_revoked({2})
    assert svc.lifecycle._assigned == {1}
    svc.lifecycle.on_assigned({3})
    assert svc.lifecycle._assigned == {3}
    for task in list(svc.partitions.restoring.values()):
        await task


def test_a_second_instance_on_one_state_dir_refuses_in_one_line(tmp_path: Path) -> None:
    lock_state_dir(tmp_path, "app")
    lock_state_dir(tmp_path, "app")  # the same process again: fine
    code = f"from frontier.service.lock import lock_state_dir; lock_state_dir({str(tmp_path)!r}, 'app')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "is in use by another frontier instance (pid " in out.stderr
    with pytest.raises(ConfigError):  # a lock held elsewhere: here via a second open file description
        import fcntl

        other = tmp_path / "other"
        (other / "app").mkdir(parents=True)
        handle = open(other / "app" / "instance.lock", "a+")
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            lock_state_dir(other, "app")
        finally:
            handle.close()


def test_the_cli_refuses_a_second_frontier_on_one_state_dir(tmp_path: Path) -> None:
    config = tmp_path / "crawl.toml"
    config.write_text(f'[kafka]\nbootstrap = "127.0.0.1:1"\n[frontier]\nstate_dir = "{tmp_path / "state"}"\n')
    hold = (
        f"import time; from frontier.service.lock import lock_state_dir; "
        f"lock_state_dir({str(tmp_path / 'state')!r}, 'crawl-frontier'); print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        out = subprocess.run([sys.executable, "-m", "frontier.cli", "--config", str(config), "frontier"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "in use by another frontier instance" in lines[0], out.stderr


# -- records delivered again after a rebalance ------------------------------------------------------
def owned_service(clock: Callable[[], float] = lambda: 1000.0) -> tuple[FrontierService, Recorder, PartitionFrontier]:
    """A service owning partition 0 (no robots.txt, no dispatch lead), its writes in ``Recorder``."""
    settings = FrontierConfig(robots_obey=False, dispatch_lead=0.0)
    svc = FrontierService(replace(Config(), frontier=settings), clock=clock)
    rec = Recorder()
    kv = MemoryKV()
    f = PartitionFrontier(0, kv, settings, svc.cfg.throttle, svc.partitions.changelog(0))
    serve(svc, rec, f, kv)
    f.rebuild(clock())
    return svc, rec, f


async def test_feedback_delivered_again_counts_once() -> None:
    """A 429 applied twice would step the host's backoff twice (and a second application of its
    lease's result finds no lease: 'late', applied again to the host)."""
    svc, rec, f = owned_service()
    f.ingest([parse_input(b"http://a.test/1")], 1000.0)
    [job] = f.dispatch(1000.0).jobs
    fb = Feedback(lease=job.lease, host="a.test", domain="a.test", url=job.item.url, outcome="retry", status=429,
                  sent_at=1000.0, done_at=1000.1, headers={"retry-after": "30"})  # fmt: skip
    await svc.handle_feedback(0, FeedbackBatch(items=[fb]), OffsetEvent(10))
    await settle(svc)
    once = (f.scopes.state("a.test"), msgspec.structs.asdict(f.stats))
    again = OffsetEvent(10)
    await svc.handle_feedback(0, FeedbackBatch(items=[fb]), again)
    await settle(svc)
    assert again.acked and (f.scopes.state("a.test"), msgspec.structs.asdict(f.stats)) == once
    assert (svc.topics.state, b"If", b"10") in rec.sent  # committed with the feedback's effects
    newer = OffsetEvent(11)
    await svc.handle_feedback(0, FeedbackBatch(items=[fb]), newer)  # a later record is applied (late here)
    assert f.stats.stale_feedback == once[1]["stale_feedback"] + 1


async def test_a_drop_delivered_again_keeps_what_was_queued_since() -> None:
    svc, _, f = owned_service()
    await svc.handle_urls(0, EncodedUrlBatch(items=[encode(parse_input(b"http://spam.test/1"))]), OffsetEvent(3))
    drop = ControlCommand(action="drop", scope="spam.test")
    await svc.handle_control(0, drop, OffsetEvent(7))
    assert f.queued() == 0
    await svc.handle_urls(0, EncodedUrlBatch(items=[encode(parse_input(b"http://spam.test/2"))]), OffsetEvent(4))
    assert f.queued() == 1
    again = OffsetEvent(7)
    await svc.handle_control(0, drop, again)
    assert again.acked and f.queued() == 1  # the drop settled what was queued when it was issued
    replayed = OffsetEvent(3)  # a URL batch again: nothing applied twice (counted once)
    await svc.handle_urls(0, EncodedUrlBatch(items=[encode(parse_input(b"http://spam.test/1"))]), replayed)
    assert replayed.acked and f.stats.duplicates == 0 and f.queued() == 1


async def test_a_partition_restored_from_its_changelog_remembers_what_it_applied() -> None:
    svc, rec, f = owned_service()
    await svc.handle_control(0, ControlCommand(action="pause", scope="x.test"), OffsetEvent(5))
    await settle(svc)
    kv = MemoryKV()
    for topic, key, value in rec.sent:
        if topic == svc.topics.state and key is not None and not key.startswith(b"\0"):
            kv.put(key, value) if value is not None else kv.delete(key)
    restored = PartitionFrontier(0, kv, f.settings, f.throttle, lambda k, v: None)
    restored.rebuild(1000.0)
    assert restored.applied_input("c") == 5 and restored.applied_input("f") == -1


async def test_the_frontiers_faust_consumer_reads_committed_records_only() -> None:
    """Workers write reports in transactions; feedback of an aborted one (an expired worker's)
    must never be applied, so faust's consumer (read_uncommitted unless its own exactly-once mode
    is on) is made read_committed."""
    from frontier.service.app import build_app

    app, _ = build_app(Config())
    consumer = app.consumer._thread._create_worker_consumer(app.transport)
    try:
        assert consumer._isolation_level == "read_committed"
    finally:
        await consumer.stop()


def test_the_frontier_process_freezes_its_startup_objects_and_collects_young_objects_less_often() -> None:
    """The cyclic collector took ~8 % of the frontier's CPU in tests.bench.dispatch with Python's
    defaults (a young collection every 700 allocations, every startup object looked at again)."""
    import gc

    from frontier.observability.process import tune_collector
    from frontier.service.app import GC_YOUNG

    threshold = gc.get_threshold()
    try:
        tune_collector(GC_YOUNG)
        assert gc.get_threshold() == (GC_YOUNG, threshold[1], threshold[2]) and GC_YOUNG >= 10_000
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def fake_open(svc: FrontierService, monkeypatch: pytest.MonkeyPatch, order: list[str], fenced: threading.Event,
              counted: list[str], given: list[object] | None = None) -> None:  # fmt: skip
    """``svc``'s partition opens over fakes: a writer whose fence sets ``fenced`` (closed cleanly
    at offset 7), a standby whose release waits for it, a store opened empty; each step noted in
    ``order``, the thread that counted the queues (when no counts came) in ``counted``, and the
    counts each open was given in ``given``."""

    class Writer:
        applied = -1

        async def start(self) -> None:
            order.append("fence")
            fenced.set()

        async def close(self) -> int:
            return 7

    class Standby:
        def release(self, p: int, timeout: float = 60.0) -> bool:
            order.append("release")
            return fenced.wait(5)  # handed back only once the fence began: both under way at once

        def counts(self, p: int) -> None:
            return None

        def retention(self) -> float:
            return 3600.0

        def add(self, p: int) -> None:
            order.append(f"standby {p}")

    def opened(*_args: object, **kw: object) -> tuple[MemoryKV, int, int]:
        order.append("open")
        if given is not None:
            given.append(kw.get("counts"))
        return MemoryKV(), 0, -1

    def scan(_kv: object) -> QueueCounts:
        counted.append(threading.current_thread().name)
        return QueueCounts()

    monkeypatch.setattr(svc.lifecycle, "_new_writer", lambda _p: Writer())
    monkeypatch.setattr(svc.lifecycle, "standby", Standby())
    monkeypatch.setattr(svc.lifecycle, "_feedback_waiting", lambda _p: -1)
    monkeypatch.setattr(lifecycle_module, "open_partition", opened)
    monkeypatch.setattr(QueueCounts, "scan", staticmethod(scan))


async def test_a_takeover_fences_the_previous_owner_while_the_standby_hands_its_copy_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 39 (takeover): the standby's release of its copy and the writer's fence took turns
    (release, then fence); neither needs the other, so they run at once, and the changelog's end
    is read (the store opened) once both are done."""
    svc = FrontierService(Config(), clock=lambda: 1000.0)
    svc._producer = Recorder()  # type: ignore[assignment]
    order: list[str] = []
    fake_open(svc, monkeypatch, order, threading.Event(), [])
    await asyncio.wait_for(svc.lifecycle._open(2), 10)
    assert 2 in svc.partitions.owned and sorted(order[:2]) == ["fence", "release"] and order[2] == "open"


async def test_a_store_opened_without_counts_is_counted_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39 (rebuild): every queued URL of a store was walked on the event loop (its other
    partitions stood still meanwhile, and each open's walk waited for the others'); now a store
    whose queues were not counted ahead is counted in a thread, and the rebuild takes the counts."""
    svc = FrontierService(Config(), clock=lambda: 1000.0)
    svc._producer = Recorder()  # type: ignore[assignment]
    counted: list[str] = []
    fake_open(svc, monkeypatch, [], threading.Event(), counted)
    await asyncio.wait_for(svc.lifecycle._open(2), 10)
    assert len(counted) == 1 and counted[0] != threading.current_thread().name


async def test_a_partition_closed_by_a_rebalance_and_given_back_is_opened_with_the_counts_it_closed_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 39 (takeover): a rebalance revokes every partition and gives most back; each given
    back walked every queued URL of its store again (at 300,000 hosts on a loaded machine, the
    survivor's own partitions were unserved 13-15 s after a takeover). Its counts as it closed
    cleanly are kept for that open (which checks they are the store's, at its clean offset),
    and dropped if the next assignment does not give it back."""
    svc = FrontierService(Config(), clock=lambda: 1000.0)
    svc._producer = Recorder()  # type: ignore[assignment]
    counted: list[str] = []
    given: list[object] = []
    fake_open(svc, monkeypatch, [], threading.Event(), counted, given)
    lc = svc.lifecycle
    await asyncio.wait_for(lc._open(2), 10)
    await asyncio.wait_for(lc._open(3), 10)
    assert len(counted) == 2 and given == [None, None]
    await lc.on_revoked({2, 3})
    lc.on_assigned({2})  # 3 went elsewhere
    await asyncio.wait_for(asyncio.gather(*svc.partitions.restoring.values()), 10)
    assert len(counted) == 2, "walked again"
    kept = given[-1]
    assert isinstance(kept, QueueCounts) and kept.offset == 7
    assert 3 not in lc._kept and svc.partitions.served() == {2}

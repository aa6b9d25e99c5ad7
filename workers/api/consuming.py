"""The worker's Kafka consumer: one member of the workers' group on ``crawl.jobs``, taking jobs
while fewer than four times ``concurrency`` are open, committing what is finished every second, on a
revoke finishing (then cancelling) the jobs of the partitions it gives up before committing, and on a
lost assignment (or a stall of the process the group may have expired it for: ``membership``)
dropping the jobs it holds at once, unsent and unreported: another worker has them now."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Coroutine
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from topics.kafka import coordinates
from workers.api.caller import Abandoned, Caller, Serial
from workers.api.clock import Clock
from workers.api.leased import LeasedJob
from workers.api.membership import Membership
from workers.api.metrics import WorkerMetrics, lag
from workers.api.offsets import OffsetTracker

log = logging.getLogger("worker")

# a commit refused with these: the group has expired this member (its partitions are others' now).
# Not ILLEGAL_GENERATION: a cooperative rebalance bumps the generation while the member keeps its
# partitions, and a commit made meanwhile gets it (measured); asked again, it goes through.
LOST_CODES = frozenset({KafkaError.UNKNOWN_MEMBER_ID, KafkaError.FENCED_INSTANCE_ID})
# seconds a report waits for its done mark to be committed (a rebalance refuses commits until it
# ends), then goes anyway. Longer than a session timeout (10 s): a rebalance that waits for a
# stopped member to be expelled ends within it, and a report that went before would be sent again
# by the partition's next owner, which reads the job again (a page published twice; seen in CI)
MARK_PATIENCE = 15.0
# seconds a synchronous commit is waited for: librdkafka's waits for the group's coordinator with no
# limit (a frozen broker held a done mark's commit, so a job's report and a stopping worker, as long
# as it was frozen: measured); past the session's 10 s its answer comes too late to count anyway
COMMIT_WAIT = 10.0
CONFIRM_WAIT = 30.0  # seconds a held job waits for the group to confirm its partition after a stall

GATE_PRUNE_EVERY = 60.0  # seconds between two sweeps of idle gates
POLL_WAIT = 0.05  # seconds a poll waits for a job while jobs are in hand (their done marks wait for it)
IDLE_POLL_WAIT = 0.25  # ... while none is (a stop waits for it too)


class JobConsumer:
    """The consumer's side of a worker: the Kafka consumer (``consumer``, set by :meth:`start`;
    tests set it directly), whether the partitions are still this worker's (``membership``), the
    job tasks by partition (``running``) and those among them still held (``held``: not handed
    over, so a revoke or a loss may cancel them), and the done marks waiting to be committed
    (``marks``). Each consumed job goes to ``handle`` in a task of its own; ``prune_gates`` is
    called every minute; ``stopping`` ends the loop; every interval and wait is on ``clock``."""

    def __init__(
        self,
        tracker: OffsetTracker,
        handle: Callable[[Message], Coroutine[Any, Any, None]],
        prune_gates: Callable[[float], int],
        metrics: WorkerMetrics,
        *,
        concurrency: int,
        stopping: threading.Event,
        measure_lag: bool,
        revoke_grace: float,
        clock: Clock,
    ) -> None:
        self.clock = clock
        self.tracker = tracker
        self.handle = handle
        self.prune_gates = prune_gates
        self.metrics = metrics
        self.concurrency = concurrency
        self.stopping = stopping
        self.measure_lag = measure_lag
        # how long a revoke waits for the jobs of the partitions it takes away; then they are cancelled
        self.revoke_grace = revoke_grace
        self.consumer: Consumer | None = None
        self.membership: Membership | None = None  # set by start(): the consumer's partitions (None: all)
        self.loop: asyncio.AbstractEventLoop | None = None  # the jobs' event loop (set by Jobs)
        # jobs marked done, waiting for the consumer's loop to commit the mark before they report
        # (mark, monotonic time asked, the job's partition)
        self.marks: list[tuple[asyncio.Future[bool], float, tuple[str, int]]] = []
        self.running: dict[tuple[str, int], set[asyncio.Task[None]]] = defaultdict(set)  # by (topic, partition)
        self.held: set[asyncio.Task[None]] = set()  # tasks waiting for a job's slot
        self.skipped_reported = 0  # re-delivered jobs a previous owner had reported (not fetched again)
        self.finishing = threading.Event()  # set by the close: it commits the done marks from now on
        self.caller = Caller()  # the loop's polls and commits, on a thread of their own (not to_thread's)
        self.committer = Serial("commits")  # the synchronous commits, each waited for within a bound
        self.gave_up = False  # a stopping worker gave up waiting for the broker (give_up_marks)
        self._in_commit: list[
            tuple[asyncio.Future[bool], float, tuple[str, int]]
        ] = []  # the marks of a commit under way

    def start(self, consumer: Consumer, topic: str) -> asyncio.Task[None]:
        """Join the group on ``topic`` with ``consumer``; the loop that takes jobs, in a task."""
        self.consumer = consumer
        self.membership = Membership(clock=self.clock.monotonic)
        self.membership.start()
        consumer.subscribe([topic], on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost)
        return asyncio.ensure_future(self.run(consumer))

    def take(self, msg: Message) -> asyncio.Task[None]:
        """Handle one consumed job in a task, tracked by its partition (a revoke may cancel it)."""
        topic, partition, offset = coordinates(msg)
        self.tracker.started(topic, partition, offset)
        task = asyncio.ensure_future(self.handle(msg))
        running = self.running[(topic, partition)]
        running.add(task)
        task.add_done_callback(running.discard)
        return task

    async def run(self, consumer: Consumer) -> None:
        try:
            await self._take_jobs(consumer)
            # Stopped, not closed yet: no job is taken any more, but the jobs in hand may still report
            # (a request on its way when the worker was told to stop: a Scrapy spider's close waits for
            # it, then for its report, before it closes the worker): their done marks are committed
            # here until the close, which commits them itself, begins
            while not self.finishing.is_set():
                if self.marks:
                    await self.caller.call(self.commit_marks, consumer)
                await self.clock.sleep(0.05)
        finally:
            self.caller.close()

    async def _take_jobs(self, consumer: Consumer) -> None:
        clock = self.clock
        last_commit = last_lag = last_prune = clock.monotonic()
        cap = self.concurrency * 4
        while not self.stopping.is_set():
            held = self.tracker.open_count()
            want = cap - held
            # no job in hand and no mark waiting: nothing can ask for a commit before a job comes,
            # and a job ends the poll at once (an idle worker turns 4 times a second, not 20)
            wait = POLL_WAIT if held or self.marks else IDLE_POLL_WAIT
            last_commit = clock.monotonic() if self.marks else last_commit  # the marks committed in _take
            msgs: list[Message] = await self.caller.call(_take, consumer, want, wait, self) if want > 0 else []
            if want <= 0:
                await clock.sleep(0.02)
            for msg in msgs:
                if msg.error() is not None:
                    log.warning("consume error: %s", msg.error())
                    continue
                if self.tracker.reported_before(*coordinates(msg)):
                    self.skipped_reported += 1  # its previous owner's report landed: not fetched again
                    continue
                self.take(msg)
            if self.membership is not None and self.membership.suspect:
                await asyncio.to_thread(self.confirm, consumer)
            if self.marks and want <= 0:  # (else committed at the next turn's start, before its poll)
                last_commit = clock.monotonic()
                await self.caller.call(self.commit_marks, consumer)
            elif clock.monotonic() - last_commit > 1.0:
                last_commit = clock.monotonic()
                self._commit(consumer)
            if clock.monotonic() - last_prune > GATE_PRUNE_EVERY:
                last_prune = clock.monotonic()
                self.prune_gates(clock.now())
            if self.measure_lag and clock.monotonic() - last_lag > 2.0:
                last_lag = clock.monotonic()
                try:
                    self.metrics.lag.set(await asyncio.to_thread(lag, consumer, consumer.assignment()))
                except Exception as exc:  # noqa: BLE001 - a metric must never stop the worker
                    log.debug("consumer lag not measured: %s", exc)

    # -- whose the jobs are ---------------------------------------------------------------------
    def owns(self, leased: LeasedJob) -> bool | None:
        """Whether the job's partition is still this worker's (None: unknown, after a stall)."""
        if self.membership is None:
            return True
        return self.membership.owns(leased._coords[:2])

    async def still_owns(self, leased: LeasedJob, wait: float = CONFIRM_WAIT) -> bool:
        """Whether the job's partition is this worker's, waiting (up to ``wait``) for the group to
        confirm it after a stall; False: the job must go unsent and unreported (another worker has it)."""
        deadline = self.clock.monotonic() + wait
        while (owned := self.owns(leased)) is None and self.clock.monotonic() < deadline:
            await self.clock.sleep(0.02)
        return owned is True

    async def mark_done(self, leased: LeasedJob) -> bool:
        """Before a job's report goes out: its offset is committed as done (the commit's metadata,
        :mod:`workers.api.offsets`), so a worker that takes the partition over never fetches a job
        whose report landed. False: the job's partition was lost or given up before its mark was
        committed, or the group refused the commit as from an expired member: the job is another
        worker's now (it fetches and reports it again), and nothing is reported here; a request
        that was on its way when a frozen process lost its partitions ends so. Without a consumer
        (tests): at once, True."""
        mine = self.tracker.finished(*leased._coords)
        if self.consumer is None or self.loop is None:
            return True
        if self.gave_up:
            log.info("%r ended after the stopping worker gave up waiting for the broker: not reported", leased)
            return False
        if not mine:
            log.info("%r ended after its partition was given up: not reported (its new owner has it)", leased)
            return False
        mark: asyncio.Future[bool] = self.loop.create_future()
        self.marks.append((mark, self.clock.monotonic(), leased._coords[:2]))
        return await mark

    def give_up_marks(self) -> int:
        """A stopping worker gives up on the broker: the done marks waiting for their commit, and
        any asked from now on, are settled as not committed (their jobs are not reported); how
        many were waiting."""
        self.gave_up = True
        marks, self.marks = self.marks, []
        # (and those of a commit under way: it may never return)
        waiting = [mark for mark, _, _ in marks + self._in_commit if not mark.done()]
        for mark in waiting:
            mark.set_result(False)
        return len(waiting)

    # -- the group's callbacks and the commits --------------------------------------------------
    def on_assign(self, c: Consumer, parts: list[TopicPartition]) -> None:
        """On the consumer's thread: the partitions are this worker's; the jobs their previous owner
        reported above its committed offset (the commit's metadata) are not fetched again."""
        if self.membership is not None:
            self.membership.assigned((tp.topic, tp.partition) for tp in parts)
        if not parts:
            return
        try:
            skipped = self.tracker.skip(c.committed(parts, timeout=10))
        except KafkaException as exc:  # not known: those jobs may be fetched again (at least once)
            log.warning("committed offsets of %d assigned partitions not read: %s", len(parts), exc)
            return
        if skipped:
            log.info("%d jobs of the assigned partitions were reported by their previous owner", skipped)

    def commit_marks(self, consumer: Consumer, commit: bool = True) -> None:
        """On the consumer's thread (between polls, or in its revoke callback): commit the offsets
        with the jobs marked done, then let their reports go. Refused as from an expired member:
        the partitions are lost, and those reports are not sent (their jobs are others' now); any
        other failure lets them go anyway (a later commit covers the marks; until then a new owner
        could fetch them again: at least once)."""
        marks, self.marks = self.marks, []
        if not marks:
            return
        points = self.tracker.commit_points() if commit else []
        go = True
        self._in_commit = marks
        try:
            error, lost = sync_commit(consumer, points, self.committer) if points else (None, False)
        finally:
            self._in_commit = []
        if lost and self.membership is not None:
            self.lose(self.membership.owned(), f"the group refused this worker's commit ({error})")
            go = False
        elif error is not None:
            # e.g. a rebalance moving the generation: asked again at the next turn, for a while
            now = self.clock.monotonic()
            waiting = [m for m in marks if now - m[1] < MARK_PATIENCE]
            if waiting:
                self.marks[:0] = waiting
            marks = [m for m in marks if now - m[1] >= MARK_PATIENCE]
            if marks:
                log.warning("done marks not committed (%s): their reports go anyway", error)
        loop = self.loop
        if loop is None or loop.is_closed() or not marks:
            return
        # a mark whose partition was forgotten meanwhile (lost, or given up) was not committed by
        # this member: the partition's new owner reads the job again, and reports it
        settled = [(mark, go and self.tracker.tracks(*tp)) for mark, _, tp in marks]

        def settle() -> None:
            for mark, going in settled:
                if not mark.done():
                    mark.set_result(going)

        loop.call_soon_threadsafe(settle)

    def on_lost(self, c: Consumer, parts: list[TopicPartition]) -> None:
        """On the consumer's thread: the group expired this member. Its held jobs are dropped at
        once (their partitions' new owners send them); nothing is committed (the group refuses it)."""
        self.lose({(tp.topic, tp.partition) for tp in parts}, "the group's assignment was lost")

    def lose(self, tps: set[tuple[str, int]], why: str) -> None:
        if self.membership is not None:
            self.membership.revoked(tps)
        self.tracker.forget(tps)
        loop = self.loop
        if loop is None or loop.is_closed() or not tps:
            return
        log.warning("%s: partitions %s; their held jobs are dropped unsent", why, sorted(tps))

        def drop() -> None:  # held (not handed over) tasks: cancelled; handed-over ones finish and report
            for tp in tps:
                for task in self.running.get(tp, set()) & self.held:
                    task.cancel()

        loop.call_soon_threadsafe(drop)

    def confirm(self, consumer: Consumer) -> None:
        """After a stall: ask the group, with a synchronous commit, whether this member is still in
        it. Accepted: its partitions are still its own. Refused as an expired member: lost."""
        assert self.membership is not None
        asked = self.membership.now()
        points = self.tracker.commit_points()
        if not points:
            assigned = consumer.assignment()
            points = [tp for tp in consumer.position(assigned) if tp.offset is not None and tp.offset >= 0]
        if not points:
            self.membership.confirmed(asked)  # nothing consumed, nothing held: nothing to send from before
            return
        error, lost = sync_commit(consumer, points, self.committer)
        if error is None:
            self.membership.confirmed(asked)
            log.info("the group confirmed this worker's partitions after a stall")
        elif lost:
            self.lose(self.membership.owned(), f"the group expired this worker during a stall ({error})")
        else:  # e.g. a rebalance in progress: asked again at the next turn
            log.info("membership not confirmed yet after a stall: %s", error)
            self.clock.pause(0.2)

    def on_revoke(self, c: Consumer, parts: list[TopicPartition]) -> None:
        """On the consumer's thread: drop the jobs of these partitions not sent yet (the new owner
        sends them), finish the ones sent (up to ``revoke_grace``), commit, then let them go.
        Jobs still running then are cancelled: once the partition is given up, they must not send
        requests any more. Dropped and cancelled jobs' offsets stay uncommitted."""
        tps = {(tp.topic, tp.partition) for tp in parts}
        if self.membership is not None:
            self.membership.revoked(tps)  # from now on nothing held of them is sent
        self._cancel(tps, held_only=True)
        deadline = self.clock.monotonic() + self.revoke_grace
        while self._running_in(tps) and self.clock.monotonic() < deadline:  # (jobs dropped unsent end at once)
            # reports waiting for their done marks go now: the commit below, before the partitions
            # move (the callback has not returned), carries the marks (a commit per turn in here
            # blocked the rebalance for the whole grace: measured)
            self.commit_marks(c, commit=False)
            self.clock.pause(0.05)
        self.commit_marks(c, commit=False)
        if self._running_in(tps):
            self._cancel(tps)
        self._commit_before_revoke(c, tps)
        self.tracker.forget(tps)

    def _commit_before_revoke(self, c: Consumer, tps: set[tuple[str, int]]) -> None:
        """Commit what was finished on ``tps`` before they go. On the callback's own thread: the same
        commit made from another thread while a close's revoke callback ran got no answer within 5 s
        (CI: a gateway's SIGTERM took 7.6 s); a broker that does not answer holds it, and the close
        that called it is bounded above it (``Jobs.close``)."""
        try:
            if points := self.tracker.commit_points(tps):
                c.commit(offsets=points, asynchronous=False)
        except Exception as exc:  # noqa: BLE001 - the new owner re-fetches: at least once
            log.warning("commit on revoke failed: %s", exc)

    def _running_in(self, tps: set[tuple[str, int]]) -> int:
        return sum(1 for tp in tps for task in list(self.running.get(tp, ())) if not task.done())

    def _cancel(self, tps: set[tuple[str, int]], held_only: bool = False) -> None:
        """Cancel the running jobs of ``tps`` (``held_only``: those not handed over yet) on the
        event loop; return once that is done."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        cancelled: list[int] = []
        requested = threading.Event()

        def cancel() -> None:
            for tp in tps:
                tasks = self.running.get(tp, set())
                for task in list(tasks & self.held if held_only else tasks):
                    cancelled.append(int(task.cancel()))
                    tasks.discard(task)
            requested.set()

        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            cancel()
        else:
            loop.call_soon_threadsafe(cancel)
            if not requested.wait(10):
                log.error("the event loop did not cancel the jobs of revoked partitions %s", sorted(tps))
                return
        if held_only:
            if sum(cancelled):
                log.info("dropped %d held jobs of revoked partitions %s (their new owner sends them)", sum(cancelled),
                         sorted(tps))  # fmt: skip
            return
        log.warning("cancelled %d jobs of revoked partitions %s, still running after %.0f s", sum(cancelled),
                    sorted(tps), self.revoke_grace)  # fmt: skip

    def _commit(self, consumer: Consumer) -> None:
        points = self.tracker.commit_points()
        if points:
            try:
                consumer.commit(offsets=points, asynchronous=True)
            except Exception as exc:  # noqa: BLE001 - retried at the next commit
                log.debug("commit failed: %s", exc)


def _commit_now(consumer: Consumer, points: list[TopicPartition]) -> list[TopicPartition]:
    """A synchronous commit (it waits for the group's coordinator, with no time limit)."""
    return consumer.commit(offsets=points, asynchronous=False) or []


def sync_commit(consumer: Consumer, points: list[TopicPartition], committer: Serial) -> tuple[object | None, bool]:
    """Commit ``points`` (through ``committer``) and wait for the answer up to ``COMMIT_WAIT``:
    (the first error or None, whether the group refused it as from an expired member). No answer
    by then is an error like any other (the marks wait, then their reports go: ``MARK_PATIENCE``)."""
    errors: list[object] = []
    try:
        results = committer.within(COMMIT_WAIT, _commit_now, consumer, points)
        errors = [tp.error for tp in results if tp.error is not None]
    except KafkaException as exc:
        errors = [exc.args[0] if exc.args else exc]
    except Abandoned as exc:
        errors = [KafkaError(KafkaError._TIMED_OUT, str(exc))]
    lost = any(isinstance(e, KafkaError) and e.code() in LOST_CODES for e in errors)
    return (errors[0] if errors else None), lost


def _take(consumer: Consumer, most: int, wait: float = POLL_WAIT, jobs: JobConsumer | None = None) -> list[Message]:
    """The done marks of ``jobs`` committed first (their reports go; one call to the consumer's thread
    a turn, not two: issue 39), then wait up to ``wait`` seconds for the first job (marks that come
    meanwhile are committed at the next turn's start), then take whatever else is already there.

    (``consume(n, timeout)`` alone would hold a lone job until ``n`` arrive or the timeout ends.)
    """
    if jobs is not None and jobs.marks:
        jobs.commit_marks(consumer)
    first = consumer.poll(wait)
    if first is None:
        return []
    if most <= 1:
        return [first]
    taken = [first, *consumer.consume(most - 1, timeout=0)]
    # A revoke served inside consume() committed its partitions before ``first`` was tracked: their
    # new owner gets that job again, so this worker must drop it (two workers fetching one job, each
    # with its own host gate, could send to the host closer than its delay).
    owned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
    return [m for m in taken if m.error() is not None or (m.topic(), m.partition()) in owned]

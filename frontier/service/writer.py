"""The writes of one owned partition, fenced by the broker: a transactional producer per partition.

Every record a partition's owner sends (changelog records, the jobs of its dispatch rounds, its
report pages) goes through its :class:`PartitionWriter`, inside Kafka transactions whose
``transactional.id`` names the partition (``<app_id>-p<N>``). The instance that opens a
partition calls ``init_transactions`` first: the broker bumps the id's epoch, aborts whatever
the previous owner left open, and from then on refuses that owner's writes (``_FENCED``). So an
instance that froze past its session and carries on (a zombie) can neither change the changelog
nor hand workers a job: readers (restores, standby copies, workers, page readers) read committed
records only, librdkafka's default.

Writes are group-committed: records accumulate for the next transaction and one commit (on a
thread of its own, about a round trip) closes them; the callbacks registered for them (acks of
input events, report leases) run once it committed. Records written while a commit is in flight
wait for the next transaction, which begins ``GROUP_WINDOW`` after the last one began at the
earliest (``window``), unless a commit someone waits on asks for no window (``commit(urgent=True)``:
a gateway's hold or deletion, answered once committed). The last record of each transaction is a marker on the changelog
partition (``ACK_KEY``, a tombstone never stored) whose offset tells how far the store is in the
changelog: the offset a clean close records (``applied``). The store's own writes of a transaction
(``generations``, :mod:`frontier.service.pending`) reach RocksDB with that offset once it committed.

The changelog records of one transaction are coalesced: only the last value written to a key goes
(a host's state written by a result and again by its next job's send is one record). A transaction
is applied whole by every reader (restores and standby copies read committed records, to the end
of the changelog), so its last value per key is all they ever keep of it. The other records (jobs,
pages, submissions) go in the order written, after the transaction's changelog records. Each goes
with a positional ``produce`` (no keyword dict per record).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Message

from frontier.partition.keys import ACK_KEY
from topics.kafka import produce

log = logging.getLogger("frontier")

MAX_PENDING = 20_000  # records held while a commit is in flight before input waits for it
COMMIT_TIMEOUT = 60.0  # seconds one commit may take (then the partition's writes have failed)
# seconds from the start of one transaction to the start of the next, at least: what is written
# meanwhile waits for one larger transaction (issue 39: with 50 crawls the workers' feedback came in
# many small records, each starting a transaction of a few jobs as soon as the last one ended, 128
# transactions per 1,000 jobs against 2 with one crawl; the broker writes a marker to every
# partition of every transaction). A write after a quiet spell still goes at once.
GROUP_WINDOW = 0.05
FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


class TransactionalProducer(Protocol):
    """What the writer uses of a confluent-kafka ``Producer`` with a ``transactional.id``."""

    def init_transactions(self, timeout: float) -> None: ...
    def begin_transaction(self) -> None: ...
    def commit_transaction(self, timeout: float) -> None: ...
    def produce(self, topic: str, value: bytes | None = ..., *args: Any, **kwargs: Any) -> None: ...
    def poll(self, timeout: float) -> int: ...
    def flush(self, timeout: float) -> int: ...
    def purge(self) -> None: ...


class Generations(Protocol):
    """The partition store's writes held until their transaction commits
    (:class:`~frontier.service.pending.Pending`): sealed as the writer opens a transaction with the
    same changelog records, written to the store once it committed (never when it failed)."""

    def seal(self) -> Any: ...
    def committed(self, gens: list[Any], offset: int, at: float | None = None) -> None: ...


def _end(window: asyncio.Future[None]) -> None:
    if not window.done():
        window.set_result(None)


class WriteFailed(RuntimeError):
    """The partition's writes did not commit; ``fenced``: another instance owns it now."""

    def __init__(self, partition: int, cause: BaseException) -> None:
        self.fenced = fenced(cause)
        what = "fenced: another instance owns it now" if self.fenced else "its transaction failed"
        super().__init__(f"partition {partition}: {what} ({cause})")
        self.partition = partition


def fenced(exc: BaseException) -> bool:
    """Whether ``exc`` says this producer's transactional id was taken by a newer instance."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and err.code() in FENCED_CODES


class PartitionWriter:
    """One owned partition's fenced writes (see the module's docstring).

    ``on_failure`` is called (on the event loop) once, when a commit fails: the partition's
    in-memory writes then hold what the changelog does not, and must not be served any more.
    """

    def __init__(
        self,
        producer: TransactionalProducer,
        state_topic: str,
        partition: int,
        applied: int,
        on_failure: Callable[[WriteFailed], None] | None = None,
    ) -> None:
        self._producer = producer
        self._topic = state_topic
        self.partition = partition
        self.applied = applied  # offset of the last changelog record the store holds (-1: none)
        self._on_failure = on_failure
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"txn-p{partition}")
        self._open = False  # a transaction is open on the producer
        self._written = 0  # records in the open transaction
        self._then: list[Callable[[], None]] = []  # run once the open transaction commits
        # written since the last commit began, for the next transaction: the changelog records by key
        # (the last value written wins), the other records in order
        self._log: dict[bytes, bytes | None] = {}
        self._held: list[tuple[str, bytes | None, bytes | None, int | None]] = []
        self._held_then: list[Callable[[], None]] = []  # registered during a commit: for the next one
        self._committing: asyncio.Task[None] | None = None
        self._committed = asyncio.Event()  # set after each commit round (room for held records)
        self.failed: WriteFailed | None = None
        self.commits = 0
        self.generations: Generations | None = None  # the store's writes of each transaction
        self._sealed: list[Any] = []  # their generations in the open transaction
        # called as a transaction takes what was written (the partition's counters and crawl
        # records, saved once a transaction instead of once per input record)
        self.prepare: Callable[[], None] | None = None
        self.window = GROUP_WINDOW  # seconds between the starts of two transactions, at least
        self.clock: Callable[[], float] = time.monotonic  # the window's clock (a test's to set)
        self._began = -GROUP_WINDOW  # (monotonic) when the last transaction began
        self._window: asyncio.Future[None] | None = None  # the group window under way
        self._urgent = False  # a commit someone waits on is asked for: the next transaction takes no window

    # -- life ---------------------------------------------------------------------------------
    async def start(self, timeout: float = 60.0) -> None:
        """Take the partition's transactional id: fences every earlier owner and aborts what it
        left open. Call before reading the changelog, so that the end read is final."""
        await self._run(self._producer.init_transactions, timeout)

    async def close(self) -> int | None:
        """Commit what is open and let the producer go; the changelog offset the store is complete
        up to, or None when its writes did not all commit (then it is opened again from its last committed marker)."""
        self.window = 0.0  # closing: what is left goes at once (a rebalance waits for it)
        self._end_window()
        try:
            while (self._committing is not None or self._written or self._then or self._log or self._held
                   or self._held_then):  # fmt: skip
                if self.failed is not None:
                    break
                if self._committing is None:
                    self._kick()
                if self._committing is not None:
                    await asyncio.shield(self._committing)
        finally:
            await self._run(self._release)
            self._executor.shutdown(wait=False)
        return None if self.failed is not None else self.applied

    def _release(self) -> None:
        try:
            if self.failed is not None:
                self._producer.purge()  # a fenced producer's records never count: do not wait for them
            self._producer.flush(5.0)
        except KafkaException as exc:  # a fenced producer raises its fatal error again: nothing is left to send
            log.debug("partition %d: writer released after %s", self.partition, exc)
        except SystemError as exc:
            # confluent-kafka raised the fatal error while a purged record's delivery callback was
            # still to run: the callback's first call into the client saw that exception pending
            # (seen at CI, test_fencing). A fenced producer's records never count either way.
            if not isinstance(exc.__cause__, KafkaException):
                raise
            log.debug("partition %d: writer released after %s", self.partition, exc.__cause__)

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- writing ------------------------------------------------------------------------------
    def write(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None) -> None:
        """Write one record in the partition's next transaction (a changelog record replaces the one
        written to its key since the last commit began; any other goes after every earlier one)."""
        if self.failed is not None:
            return  # the partition is being dropped: nothing it writes counts
        if key is not None and partition == self.partition and topic == self._topic:
            self._log[key] = value
        else:
            self._held.append((topic, value, key, partition))

    def _produce_held(self) -> None:
        """Put what was written since the last commit began into the open transaction: the
        changelog records first (one per key), then the others in order."""
        log, self._log = self._log, {}
        held, self._held = self._held, []
        if self.generations is not None:  # the store's writes of these changelog records
            self._sealed.append(self.generations.seal())
        producer = self._producer
        try:
            if not self._open:
                producer.begin_transaction()
                self._open = True
            topic, partition = self._topic, self.partition
            for key, value in log.items():
                self._send(topic, value, key, partition)
            for record in held:
                self._send(*record)
        except KafkaException as exc:
            # the producer went fatal between two commits (fenced by the partition's new owner after
            # a freeze, say): the partition's writes have failed, as if its commit had; never a crash
            # of the whole instance from the write of one partition
            self._fail(exc)
            return
        self._written += len(log) + len(held)

    def _send(self, topic: str, value: bytes | None, key: bytes | None, partition: int | None) -> None:
        """One record, positional (no keyword dict per record); a full local queue: wait for room."""
        try:
            self._producer.produce(topic, value, key, -1 if partition is None else partition)
        except BufferError:
            produce(self._producer, topic, value, key, partition)  # type: ignore[arg-type]

    def commit(self, then: Callable[[], None] | None = None, urgent: bool = False) -> None:
        """Commit everything written so far; run ``then`` (on the event loop) once it has committed.
        ``urgent``: someone waits for this commit (a gateway's answer): it takes no group window
        (a window under way ends now; one in flight is followed at once by the next)."""
        if self.failed is not None:
            return
        if then is not None:
            (self._held_then if self._committing is not None else self._then).append(then)
        if urgent:
            self._urgent = True
            self._end_window()
        self._kick()

    def _end_window(self) -> None:
        """A group window under way ends now (its transaction begins)."""
        if self._window is not None:
            _end(self._window)

    @property
    def crowded(self) -> bool:
        """Too many records wait for the commit in flight: input should wait (:meth:`room`)."""
        return self._committing is not None and len(self._log) + len(self._held) > MAX_PENDING

    async def room(self) -> None:
        while self.crowded and self.failed is None:
            self._committed.clear()
            await self._committed.wait()

    def _kick(self) -> None:
        if self._committing is not None or self.failed is not None:
            return
        if not (self._log or self._held or self._then or self._written):
            return
        wait = 0.0 if self._urgent else self._began + self.window - self.clock()
        if wait > 0:  # the last transaction began a moment ago: this one takes what comes meanwhile
            self._committing = asyncio.ensure_future(self._after(wait))
            return
        if self.prepare is not None:
            self.prepare()  # (its writes go in this transaction)
        if self._log or self._held:
            self._produce_held()
            if self.failed is not None:
                return
        if self._written or self._then:
            self._began = self.clock()
            self._urgent = False
            self._committing = asyncio.ensure_future(self._commit_round())

    async def _after(self, wait: float) -> None:
        """The group window: what is written meanwhile (and the callbacks registered for it)
        goes in the transaction that begins when it ends."""
        loop = asyncio.get_running_loop()
        self._window = window = loop.create_future()
        timer = loop.call_later(wait, _end, window)
        try:
            await window  # (ended early by close)
        finally:
            timer.cancel()
            self._committing = self._window = None
        self._then, self._held_then = self._then + self._held_then, []
        self._kick()

    async def _commit_round(self) -> None:
        then, self._then = self._then, []
        sealed, self._sealed = self._sealed, []
        try:
            if self._written:
                at = time.time()  # every record of the transaction was written before
                offsets: list[int] = []

                def marked(err: KafkaError | None, msg: Message) -> None:
                    if err is None and (offset := msg.offset()) is not None:  # (a failed one: not touched)
                        offsets.append(offset)

                # the marker closes the transaction on the changelog: its offset is the store's position
                produce(self._producer, self._topic, None, ACK_KEY, self.partition, marked)  # type: ignore[arg-type]
                await self._run(self._producer.commit_transaction, COMMIT_TIMEOUT)
                self._open, self._written = False, 0
                self.commits += 1
                if offsets:
                    self.applied = max(self.applied, offsets[0])
                if sealed and self.generations is not None:  # committed: the store gets them now
                    self.generations.committed(sealed, self.applied, at)
        except Exception as exc:  # noqa: BLE001 - any failure: the store holds what the changelog does not
            self._fail(exc)
            return
        finally:
            self._committing = None
            self._committed.set()
        self._then, self._held_then = self._then + self._held_then, []
        for fn in then:
            fn()
        self._kick()

    def _fail(self, exc: BaseException) -> None:
        self.failed = WriteFailed(self.partition, exc)
        self._then, self._log, self._held, self._held_then, self._sealed = [], {}, [], [], []
        log.error("%s", self.failed)
        if self._on_failure is not None:
            self._on_failure(self.failed)

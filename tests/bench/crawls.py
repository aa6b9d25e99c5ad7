"""Crawls (issue 20), dispatch round trip over many crawls: jobs per second through the frontier
when the URLs belong to many crawls, each crawl's jobs on its own topic read by its own worker
group. As benchmark 3 (``tests.bench.dispatch``): a null worker answers every job at once with
synthetic feedback (no HTTP), delay 0, concurrency 1, robots off; here one null worker per crawl
(a consumer in the crawl's group, subscribed to the crawl's jobs topic, in a thread of this
process), and the ratio to the raw Kafka ceiling (benchmark 1) measured in the same run.

The crawls share hosts: most domains' URLs are split over several crawls (the first 4/5 of the
crawls), and the other crawls are alone on their domains. At the end every job is checked to have
come on the topic of its own crawl (the item's crawl and the crawl the bench gave its URL), every
URL to have come once, and the default crawl's jobs topic to have stayed empty.

    python -m tests.bench.crawls [--smoke | --full] [--bootstrap HOST:PORT] [--crawls N]
        [--job-partitions N] [--pool-feedback] [--py-spy OUT]
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.cimpl import NewTopic

from frontier.client.feed import read_status
from frontier.client.status import overview
from frontier.demo.stack import Stack
from tests.bench.common import broker, parser, process_cpu_s, report, size
from tests.bench.dispatch import answer, jobs_consumer
from tests.bench.kafka_ceiling import echo_loop
from tests.bench.status_tail import StatusTail
from topics.admin import create_crawl_jobs
from topics.catalog import JOBS
from topics.kafka import Kafka
from topics.schemas import Feedback, FeedbackBatch, Job, Submission, decode, encode

FRONTIER = {"robots_obey": False, "status_interval": 0.2, "dispatch_lead": 0.0}
PARTITIONS = 8  # of the frontier's topics (and of each crawl's jobs topic, unless --job-partitions)
THROTTLE = {"delay": 0.0, "concurrency": 1, "autothrottle": False}
ALONE_EVERY = 5  # one domain in 5 belongs to one crawl alone (when there are crawls for that)
ERRORS = re.compile(r"\bERROR\b|\bCRITICAL\b|Traceback")  # lines of the frontier's log (its own and faust's formats)
SHARED_STRIDE = 7  # a shared domain's j-th URL goes to crawl (d + 7j) mod shared: distinct crawls


@dataclass(frozen=True)
class Layout:
    """Which crawl each URL belongs to. URL ``i`` is ``http://d{i % domains}.bench.example/p{i}``
    (as ``tests.bench.common.produce_urls``): domain ``d = i % domains``, its ``j = i // domains``-th
    URL. Crawls ``0 .. shared-1`` share domains (a domain's URLs go to several of them); crawls
    ``shared .. crawls-1`` are each alone on their domains (one domain in :data:`ALONE_EVERY`)."""

    crawls: int
    domains: int
    per_domain: int

    @property
    def shared(self) -> int:
        return self.crawls if self.crawls < 2 else max(1, self.crawls * 4 // 5)

    def name(self, k: int) -> str:
        return f"c{k:02d}"

    def names(self) -> list[str]:
        return [self.name(k) for k in range(self.crawls)]

    def crawl_of(self, i: int) -> str:
        d, j = i % self.domains, i // self.domains
        alone = self.crawls - self.shared
        if alone and d % ALONE_EVERY == 0:
            return self.name(self.shared + (d // ALONE_EVERY) % alone)
        return self.name((d + SHARED_STRIDE * j) % self.shared)

    def url(self, i: int) -> str:
        return f"http://d{i % self.domains}.bench.example/p{i}"

    @property
    def n(self) -> int:
        return self.domains * self.per_domain


def produce_submissions(bootstrap: str, topic: str, layout: Layout) -> Counter[str]:
    """Every URL as a Submission naming its crawl; return the URLs per crawl."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    expected: Counter[str] = Counter()
    for i in range(layout.n):
        crawl = layout.crawl_of(i)
        expected[crawl] += 1
        value = encode(Submission(url=layout.url(i), crawl=crawl))
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return expected


@dataclass
class Tally:
    """What one crawl's null worker saw (its thread's own: no lock)."""

    crawl: str
    jobs: int = 0  # records consumed, duplicates included
    urls: set[str] = field(default_factory=set)
    wrong_item: int = 0  # the job's item names another crawl
    wrong_url: int = 0  # the bench gave the job's URL to another crawl
    examples: list[str] = field(default_factory=list)
    feedback_records: int = 0  # FeedbackBatch records produced


class FeedbackPool:
    """A diagnostic (``--pool-feedback``): the crawls' null workers hand their feedback here and
    one thread sends it every 0.1 s, one FeedbackBatch per feedback partition, as one null worker
    of a single crawl would (instead of one record per crawl per partition per consumed batch)."""

    def __init__(self, stack: Stack, producer: Producer) -> None:
        self.stack, self.producer = stack, producer
        self.lock = threading.Lock()
        self.batches: dict[int, list[Feedback]] = defaultdict(list)
        self.records = 0

    def add(self, batches: dict[int, list[Feedback]]) -> None:
        with self.lock:
            for p, items in batches.items():
                self.batches[p].extend(items)

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(0.1):
            self.send()
        self.send()

    def send(self) -> None:
        with self.lock:
            batches, self.batches = self.batches, defaultdict(list)
        for p, items in batches.items():
            self.producer.produce(self.stack.topics.feedback, encode(FeedbackBatch(items=items)), partition=p)
        self.records += len(batches)
        self.producer.poll(0)


def null_worker(stack: Stack, layout: Layout, tally: Tally, producer: Producer, stop: threading.Event,
                pool: FeedbackPool | None = None) -> None:  # fmt: skip
    """Answer every job of one crawl immediately: one FeedbackBatch per feedback partition per
    consumed batch (the producer is shared by all the crawls' threads), or handed to ``pool``."""
    crawl = tally.crawl
    consumer = jobs_consumer(stack, crawl)
    now = time.time()
    while not stop.is_set():
        batches: dict[int, list[Feedback]] = defaultdict(list)
        for msg in consumer.consume(5000, timeout=0.1):
            if msg.error() is not None:
                continue
            job = decode(msg.value() or b"", Job)
            i = job.item
            tally.jobs += 1
            tally.urls.add(i.url)
            wrong_item, wrong_url = i.crawl != crawl, layout.crawl_of(int(i.url.rsplit("/p", 1)[1])) != crawl
            tally.wrong_item += wrong_item
            tally.wrong_url += wrong_url
            if (wrong_item or wrong_url) and len(tally.examples) < 3:
                tally.examples.append(f"{i.url} (item's crawl {i.crawl}) on {msg.topic()}")
            p, fb = answer(job, now, stack.partitions)
            batches[p].append(fb)
        if pool is not None:
            pool.add(batches)
        else:
            for p, items in batches.items():
                producer.produce(stack.topics.feedback, encode(FeedbackBatch(items=items)), partition=p)
            tally.feedback_records += len(batches)
            producer.poll(0)
        now = time.time()
    consumer.close()


def own_cpu_s() -> float:
    """User + system CPU-seconds of this process alone (its threads: the null workers), without
    its children (the frontier, counted on its own)."""
    t = os.times()
    return t.user + t.system


def thread_cpu_s(pid: int) -> Counter[str]:
    """CPU-seconds of each kind of thread of ``pid`` (``/proc/PID/task``, the thread's name up to
    a colon or a dash: ``rdk`` for librdkafka's, ``python`` for the main one), a diagnostic of where
    a process's CPU goes that a profiler holding the GIL does not see."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: Counter[str] = Counter()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            comm = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        out[re.split(r"[:\-]", comm, maxsplit=1)[0]] += (int(fields[11]) + int(fields[12])) / ticks
    return out


def records_on(stack: Stack, topic: str) -> int:
    """Offsets used on ``topic`` (records and transaction markers): 0 when nothing was written."""
    consumer = Consumer({**stack.client, "group.id": f"{stack.app_id}-bench-watermarks"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(stack.partitions)
        )
    finally:
        consumer.close()


def per_1000_completed(log: list[str], key: str) -> float | None:
    """``key`` of the frontier's periodic ``stats`` lines per 1,000 results completed between the
    first line that counts a completion and the last line (a diagnostic: e.g. ``transactions``)."""
    rows = []
    for line in log:
        _, found, rest = line.partition(" stats {")
        if found:
            try:
                rows.append(ast.literal_eval("{" + rest.strip()))
            except (ValueError, SyntaxError):
                continue
    rows = [r for r in rows if r.get("completed", 0) > 0 and key in r]
    if len(rows) < 2 or rows[-1]["completed"] <= rows[0]["completed"]:
        return None
    return round(1000 * (rows[-1][key] - rows[0][key]) / (rows[-1]["completed"] - rows[0]["completed"]), 2)


def make_jobs_topics(stack: Stack, names: list[str], partitions: int) -> None:
    """The crawls' jobs topics, as ``topics.admin.create_crawl_jobs`` makes them but with
    ``partitions`` partitions each (a diagnostic: fewer partitions in each transaction)."""
    admin = Kafka.of(stack.client).admin()
    config = {"cleanup.policy": "delete", "max.message.bytes": str(JOBS.max_message_bytes)}
    new = [NewTopic(stack.topics.jobs_of(c), num_partitions=partitions, replication_factor=1, config=config)
           for c in names]  # fmt: skip
    for fut in admin.create_topics(new, operation_timeout=30).values():
        fut.result()


def py_spy(pid: int, out: str) -> subprocess.Popen[bytes]:
    """py-spy attached to ``pid`` (the frontier) until stopped with SIGINT: raw samples with the GIL
    held, 100 a second, into ``out`` (a diagnostic: the profiler of the whole bench falls behind
    with its 50 threads)."""
    spy = Path(sys.executable).with_name("py-spy")
    cmd = [str(spy), "record", "-p", str(pid), "--gil", "--format", "raw", "--rate", "100", "-o", out]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_crawls(
    bootstrap: str, layout: Layout, job_partitions: int = 0, pool_feedback: bool = False, broker_pid: int = 0,
    profile: str = "",
) -> tuple[float, dict[str, object]]:  # fmt: skip
    """Jobs/s over the middle 90 % of the run, one frontier, one null worker per crawl; and the
    checks. Diagnostics: ``job_partitions``, the crawls' jobs topics have that many partitions
    (0: the frontier's partition count, as the frontier and the workers make them);
    ``pool_feedback``, the workers' feedback goes out through one :class:`FeedbackPool`;
    ``broker_pid``, that process's CPU is measured too (a broker of this machine); ``profile``, the
    frontier's py-spy samples from the workers' start to the last completion go to that file."""
    n = layout.n
    with tempfile.TemporaryDirectory(prefix="bench-crawls-") as tmp:
        stack = Stack(bootstrap, Path(tmp), prefix=f"b{uuid.uuid4().hex[:6]}.", partitions=PARTITIONS,
                      frontier=FRONTIER, throttle=THROTTLE)  # fmt: skip
        stack.create_topics()
        names = layout.names()
        if job_partitions:
            make_jobs_topics(stack, names, job_partitions)
        create_crawl_jobs(stack.client, stack.topics, names)
        expected = produce_submissions(bootstrap, stack.topics.urls, layout)
        stop = threading.Event()
        producer = Producer({**stack.client, "linger.ms": 2})
        tallies = [Tally(crawl) for crawl in names]
        pool = FeedbackPool(stack, producer) if pool_feedback else None
        workers = [threading.Thread(target=null_worker, args=(stack, layout, t, producer, stop, pool), name=t.crawl)
                   for t in tallies]  # fmt: skip
        if pool is not None:
            workers.append(threading.Thread(target=pool.run, args=(stop,), name="feedback"))
        tail = StatusTail(stack.client, stack.topics.status)  # polled while it runs: only what is new is read
        try:
            frontier = stack.start_frontier()
            tail.wait("ingested", n, 600, stack.check_alive)
            at, totals = tail.snapshot()
            cpu_before = process_cpu_s(frontier.pid), own_cpu_s(), process_cpu_s(broker_pid)
            threads_before = thread_cpu_s(frontier.pid), thread_cpu_s(os.getpid())
            spy = py_spy(frontier.pid, profile) if profile else None
            for w in workers:  # only now: the clock measures dispatch round trips, not ingest
                w.start()
            rate = tail.rate("completed", n, 900, stack.check_alive, before=(at, totals.get("completed", 0)))
            tail.wait("completed", n, 900, stack.check_alive)
            cpu_after = process_cpu_s(frontier.pid), own_cpu_s(), process_cpu_s(broker_pid)
            threads = thread_cpu_s(frontier.pid), thread_cpu_s(os.getpid())
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            for now_, then_ in zip(threads, threads_before, strict=True):
                now_.subtract(then_)
            rows = {r.crawl: r for r in overview(read_status(stack.client, stack.topics.status, max_age=10)).crawls}
        finally:
            stop.set()
            for w in workers:
                if w.is_alive():
                    w.join()
            producer.flush(30)
            tail.close()
            on_default = records_on(stack, stack.topics.jobs)
            stack.stop_all()
        log = stack.log("frontier").splitlines()
        errors = [line for line in log if ERRORS.search(line)]
        warnings = [line for line in log if "WARNING" in line]
    completed = {c: rows[c].completed if c in rows else 0 for c in names}
    per = 1000.0 / max(n, 1)
    return rate, {
        # CPU-seconds per 1,000 jobs from the workers' start to the last completion, each process's own accounting
        "cpu_s_per_1000_jobs_frontier": round((cpu_after[0] - cpu_before[0]) * per, 3),
        "cpu_s_per_1000_jobs_bench": round((cpu_after[1] - cpu_before[1]) * per, 3),
        "frontier_threads_cpu_s_per_1000_jobs": {k: round(v * per, 3) for k, v in threads[0].most_common(6)},
        "bench_threads_cpu_s_per_1000_jobs": {k: round(v * per, 3) for k, v in threads[1].most_common(6)},
        **({"cpu_s_per_1000_jobs_broker": round((cpu_after[2] - cpu_before[2]) * per, 3)} if broker_pid else {}),
        # the frontier's transactions per 1,000 jobs completed (from its stats lines, every 10 s)
        "transactions_per_1000_jobs": per_1000_completed(log, "transactions"),
        "jobs_consumed": sum(t.jobs for t in tallies),
        "duplicates": sum(t.jobs - len(t.urls) for t in tallies),
        "feedback_records": sum(t.feedback_records for t in tallies) + (pool.records if pool is not None else 0),
        "wrong_crawl_items": sum(t.wrong_item for t in tallies),
        "wrong_crawl_urls": sum(t.wrong_url for t in tallies),
        "wrong_examples": [e for t in tallies for e in t.examples][:5],
        "missing": sum(max(0, expected[t.crawl] - len(t.urls)) for t in tallies),
        "crawls_short": sorted(t.crawl for t in tallies if len(t.urls) != expected[t.crawl]),
        "on_default_topic": on_default,
        "urls_per_crawl": [min(expected.values()), max(expected.values())],
        "completed_per_crawl": [min(completed.values()), max(completed.values())],
        "status_mismatch": sorted(c for c in names if completed[c] != expected[c]),
        "frontier_errors": len(errors),
        "frontier_warnings": len(warnings),
        # librdkafka's retries for a transactional id while a fresh broker loads its coordinator are left out
        "frontier_log_excerpt": (errors + [w for w in warnings if "GETPID" not in w])[:5],
    }


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--crawls", type=int, default=50)
    p.add_argument(
        "--job-partitions",
        type=int,
        default=0,
        help="diagnostic: partitions of each crawl's jobs topic (default: as the frontier makes them)",
    )
    p.add_argument(
        "--pool-feedback",
        action="store_true",
        help="diagnostic: one sender batches all the crawls' feedback every 0.1 s",
    )
    p.add_argument("--broker-pid", type=int, default=0, help="with --bootstrap: the broker's process, its CPU measured")
    p.add_argument("--py-spy", default="", help="diagnostic: the frontier's py-spy samples (raw) into this file")
    args = p.parse_args()
    domains = size(args, smoke=200, default=20_000, full=100_000)
    per_domain = size(args, smoke=2, default=5, full=5)
    layout = Layout(crawls=args.crawls, domains=domains, per_domain=per_domain)
    with broker(args) as bootstrap:
        ceiling = echo_loop(bootstrap, min(layout.n, 200_000))
        rate, checks = run_crawls(
            bootstrap, layout, args.job_partitions, args.pool_feedback, args.broker_pid, args.py_spy
        )
    report("crawls", crawls=layout.crawls, shared_crawls=layout.shared, alone_crawls=layout.crawls - layout.shared,
           job_partitions=args.job_partitions or PARTITIONS, pool_feedback=args.pool_feedback, domains=domains,
           jobs=layout.n, jobs_per_s=round(rate), kafka_ceiling_per_s=round(ceiling),
           ratio_to_ceiling=round(rate / ceiling, 3), **checks)  # fmt: skip


if __name__ == "__main__":
    main()

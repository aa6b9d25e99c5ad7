"""Benchmark 3, dispatch round trip: jobs per second through the frontier with a null worker
that answers every job at once with synthetic feedback (no HTTP), many domains at delay 0 and
concurrency 1 — and the ratio to the raw Kafka ceiling (benchmark 1) measured in the same run.

    python -m tests.bench.dispatch [--smoke | --full] [--bootstrap HOST:PORT] [--frontiers N]
"""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

from confluent_kafka import Consumer, Producer

from frontier.demo.stack import Stack
from tests.bench.common import broker, measure_rate, parser, produce_urls, report, size, snapshot, wait_total
from tests.bench.kafka_ceiling import echo_loop
from topics.catalog import workers_group
from topics.partitioning import partition_for
from topics.schemas import Feedback, FeedbackBatch, Job, decode, encode

FRONTIER = {"robots_obey": False, "status_interval": 0.2, "dispatch_lead": 0.0}
THROTTLE = {"delay": 0.0, "concurrency": 1, "autothrottle": False}


def jobs_consumer(stack: Stack, crawl: str = "default") -> Consumer:
    """A member of the crawl's workers' group on its jobs topic (a null worker's consumer)."""
    consumer = Consumer({**stack.client, "group.id": workers_group(stack.app_id, crawl),
                         "auto.offset.reset": "earliest", "enable.auto.commit": True})  # fmt: skip
    consumer.subscribe([stack.topics.jobs_of(crawl)])
    return consumer


def answer(job: Job, now: float, partitions: int) -> tuple[int, Feedback]:
    """A synthetic ``fetched`` result for ``job``, and the feedback partition it goes to."""
    i = job.item
    return partition_for(i.domain, partitions), Feedback(
        lease=job.lease, host=i.host, domain=i.domain, url=i.url, outcome="fetched", status=200, latency=0.001,
        sent_at=now)  # fmt: skip


def null_worker(stack: Stack, stop: threading.Event) -> None:
    """Answer every job immediately: one FeedbackBatch per feedback partition per consumed batch."""
    consumer = jobs_consumer(stack)
    producer = Producer({**stack.client, "linger.ms": 2})
    now = time.time()
    while not stop.is_set():
        batches: dict[int, list[Feedback]] = defaultdict(list)
        for msg in consumer.consume(5000, timeout=0.1):
            if msg.error() is not None:
                continue
            p, fb = answer(decode(msg.value() or b"", Job), now, stack.partitions)
            batches[p].append(fb)
        for p, items in batches.items():
            producer.produce(stack.topics.feedback, encode(FeedbackBatch(items=items)), partition=p)
        producer.poll(0)
        now = time.time()
    producer.flush(30)
    consumer.close()


def run_dispatch(bootstrap: str, frontiers: int, domains: int, per_domain: int) -> float:
    """Jobs/s over the middle 90 % of the run, with ``frontiers`` instances and a null worker."""
    n = domains * per_domain
    with tempfile.TemporaryDirectory(prefix="bench-dispatch-") as tmp:
        stack = Stack(bootstrap, Path(tmp), prefix=f"b{uuid.uuid4().hex[:6]}.", partitions=8, frontier=FRONTIER,
                      throttle=THROTTLE)  # fmt: skip
        stack.create_topics()
        produce_urls(bootstrap, stack.topics.urls, n, domains)
        stop = threading.Event()
        worker = threading.Thread(target=null_worker, args=(stack, stop))
        try:
            for i in range(frontiers):
                stack.start_frontier(f"f{i}", own_state=frontiers > 1)
            wait_total(bootstrap, stack.topics.status, "ingested", n, 600, stack.check_alive)
            at, totals = snapshot(bootstrap, stack.topics.status)
            worker.start()  # only now: the clock measures dispatch round trips, not ingest
            rate = measure_rate(bootstrap, stack.topics.status, "completed", 0, n, 900, stack.check_alive,
                                before=(at, totals.get("completed", 0)))  # fmt: skip
        finally:
            stop.set()
            if worker.is_alive():
                worker.join()
            stack.stop_all()
    return rate


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--frontiers", type=int, default=1)
    args = p.parse_args()
    domains = size(args, smoke=200, default=20_000, full=100_000)
    per_domain = size(args, smoke=2, default=5, full=5)
    with broker(args) as bootstrap:
        ceiling = echo_loop(bootstrap, min(domains * per_domain, 200_000))
        rate = run_dispatch(bootstrap, args.frontiers, domains, per_domain)
    report("dispatch", frontiers=args.frontiers, domains=domains, jobs=domains * per_domain, jobs_per_s=round(rate),
           kafka_ceiling_per_s=round(ceiling), ratio_to_ceiling=round(rate / ceiling, 3))  # fmt: skip


if __name__ == "__main__":
    main()

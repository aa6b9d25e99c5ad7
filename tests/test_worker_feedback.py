"""Feedback records stay under the topic's limit: robots.txt bodies (up to 500 KiB each) from a
burst of robots jobs are cut into several FeedbackBatch records, each acknowledged on its own."""

import asyncio

from tests.fakes import FakeProducer
from tests.test_worker_jobs import make_worker
from topics.schemas import Feedback, FeedbackBatch, decode
from workers.api.publishing import FEEDBACK_RECORD_BYTES


async def test_a_burst_of_robots_bodies_is_cut_into_records_the_broker_takes() -> None:
    producer = FakeProducer()
    worker = make_worker(producer)
    body = b"User-agent: *\nDisallow: /x\n" * 18_000  # ~500 KiB
    results = [Feedback(lease=f"L{n}", host=f"h{n}.test", domain="d.test", url=f"http://h{n}.test/robots.txt",
                        outcome="fetched", status=200, body=body) for n in range(30)]  # fmt: skip
    await asyncio.gather(*(worker.jobs.reporter.publisher.feedback(fb) for fb in results))
    records = producer.values("crawl.feedback")
    assert len(records) > 1 and all(len(r) <= FEEDBACK_RECORD_BYTES * 1.1 for r in records)
    assert sorted(fb.lease for r in records for fb in decode(r, FeedbackBatch).items) == sorted(
        f"L{n}" for n in range(30)
    )

"""The queues' heads kept in memory (``frontier.partition.heads``, issue 39): what a queue has in
the cache is always its first entries in the store, through random entries in and out, with the
cache bounded; and a job of a host shared by many crawls costs no seek in the store."""

from __future__ import annotations

import random
from collections.abc import Iterator

from frontier.config import FrontierConfig
from frontier.core.kv import MemoryKV
from frontier.partition import PartitionFrontier
from frontier.partition.crawls import Crawls
from frontier.partition.heads import Heads
from frontier.partition.keys import QUEUE, queue_id, queue_prefix
from frontier.partition.queues import Queues
from frontier.partition.store import Store
from tests.test_crawls import SETTINGS, THROTTLE, Log, feedback_of, subs
from topics.schemas import UrlItem


class SeekKV(MemoryKV):
    """A MemoryKV that counts the reads of queue entries (each ``scan``/``first`` is a seek)."""

    def __init__(self) -> None:
        super().__init__()
        self.seeks = 0

    def scan(self, prefix: bytes, after: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        self.seeks += prefix.startswith(QUEUE)
        return super().scan(prefix, after)


def test_the_heads_kept_are_the_stores_first_entries_through_random_changes() -> None:
    rnd = random.Random(39)
    kv = MemoryKV()
    store = Store(kv, lambda k, v: None)
    queues = Queues(store, Crawls(0, store, FrontierConfig()))
    queues.heads = heads = Heads(kv, limit=7, depth=3)  # small: evictions, refills, partial lists
    qids = [queue_id([f"h{n}.test"], crawl) for n in range(4) for crawl in ("default", "news")]
    n = 0
    for step in range(3000):
        qid = rnd.choice(qids)
        entries = [k for k, _ in kv.scan(queue_prefix(qid))]
        op = rnd.random()
        if op < 0.45 or not entries:
            n += 1
            item = UrlItem(url=f"http://x/{n}", host="x", domain="x", priority=rnd.choice((0, 0, 1, 5)),
                           crawl="news" if "\x1e" in qid else "default")  # fmt: skip
            due = rnd.random() < 0.3
            qkey = queues.qkey_due(qid, item, rnd.uniform(0, step)) if due else queues.qkey(qid, item, float(step))
            queues.enqueue(qkey, item, float(step))
        elif op < 0.75:
            head = queues.heads.head(qid)
            assert head is not None
            store.delete(head[0])  # sent (the dispatcher: lease, then dequeued with its key)
            queues.dequeued(qid, head[0])
        elif op < 0.9:
            key = rnd.choice(entries)  # one from anywhere (a removal)
            store.delete(key)
            queues.dequeued(qid, key if rnd.random() < 0.7 else None)
        elif op < 0.95:
            queues.remove_if(qid, lambda item: rnd.random() < 0.5, float(step))
        else:
            for key in entries:
                store.delete(key)
            queues.emptied(qid, len(entries))
        assert len(heads) <= heads.limit
        for q in qids:
            first = kv.first(queue_prefix(q))
            known = heads.known(q)
            assert known is None or known == first, (step, q)
            assert sum(1 for _ in kv.scan(queue_prefix(q))) == queues.count(q)
        assert heads.head(qid) == kv.first(queue_prefix(qid))


def test_a_job_of_a_host_shared_by_many_crawls_costs_no_seek() -> None:
    """Issue 39: each turn between 20 crawls of one host read the chosen queue's head from the
    store twice (the turn, then the send): 2 seeks a job. The heads that came in are kept."""
    kv = SeekKV()
    f = PartitionFrontier(0, kv, SETTINGS, THROTTLE, Log())
    names = [f"c{n:02d}" for n in range(20)]
    f.ingest([item for name in names for item in subs(name, "a.test", 3)], 0.0)
    before, now, jobs = kv.seeks, 0.0, 0
    while jobs < 3 * len(names):
        out = f.dispatch(now).jobs
        for job in out:
            assert f.feedback(feedback_of(job), now + 0.1)
        jobs += len(out)
        now += 1.0
    assert kv.seeks - before == 0

"""The queues' heads kept in memory (``frontier.partition.heads``, issue 39): what a queue has in
the cache is always its first entries in the store, through random entries in and out, with the
cache bounded; and a job of a host shared by many crawls costs no seek in the store. The largest
queues kept as they grow (``frontier.partition.largest``): the ranking a full one gives, without
ranking every queue at every status snapshot."""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Iterator

from frontier.config import FrontierConfig
from frontier.core.kv import MemoryKV
from frontier.partition import PartitionFrontier
from frontier.partition.crawls import Crawls
from frontier.partition.heads import Heads
from frontier.partition.keys import QUEUE, QueueId, queue_id, queue_prefix
from frontier.partition.largest import Largest
from frontier.partition.queues import Queues
from frontier.partition.store import Store
from tests.test_crawls import SETTINGS, THROTTLE, Log, cmd, feedback_of, subs
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


def test_the_largest_queues_kept_as_they_grow_rank_as_a_full_ranking_does() -> None:
    """Issue 39: a status snapshot ranked every queue (``nlargest`` over all of them, every 0.2 s
    in the crawls benchmark). The candidates kept as queues grow give the same counts, and a
    ranking looks at every queue only when a candidate it needs has shrunk below the floor."""
    rnd = random.Random(7)
    counts: Counter[QueueId] = Counter()
    largest = Largest(counts, keep=40)
    qids = [QueueId(f"h{n}.test") for n in range(600)]
    rankings = 0
    for step in range(20_000):
        qid = rnd.choice(qids)
        if rnd.random() < 0.55 or counts.get(qid, 0) == 0:
            counts[qid] = counts.get(qid, 0) + rnd.choice((1, 1, 1, 5))  # (several at once: a grow of more than one)
            largest.grew(qid, counts[qid])
        elif rnd.random() < 0.95:
            counts[qid] -= 1
        else:
            del counts[qid]  # forgotten
        if step % 50 == 0:
            rankings += 1
            n = rnd.choice((1, 10, 20, 40))
            got = largest.largest(n)
            want = heapq.nlargest(n, counts.items(), key=lambda kv: kv[1])
            assert [c for _, c in got] == [c for _, c in want], step
            assert all(counts[q] == c for q, c in got)
    assert largest.rescans < rankings / 4, (largest.rescans, rankings)


def test_a_status_ranking_of_many_queues_does_not_rank_every_queue() -> None:
    kv = MemoryKV()
    store = Store(kv, lambda k, v: None)
    queues = Queues(store, Crawls(0, store, FrontierConfig()))
    for n in range(3000):
        host = f"h{n}.test"
        for i in range(1 + n % 7):
            item = UrlItem(url=f"http://{host}/{i}", host=host, domain=host)
            queues.enqueue(queues.qkey(queue_id([host]), item, 1.0), item, 1.0)
    first = queues.largest(80)
    assert [c for _, c in first] == [7] * 80
    for q, _ in first[:30]:  # some of the largest send one each
        queues.dequeued(q)
    for _ in range(20):
        assert [c for _, c in queues.largest(80)] == [7] * 80
    assert queues._largest.rescans == 1


def test_the_candidates_gone_from_the_counts_leave_the_set() -> None:
    """Issue 39: with 50 crawls most queues hold one URL and go with it; the candidates kept held
    the gone ones, each looked up and sorted again at every status snapshot (the most of a
    ranking's cost). They leave the set at the next ranking, which still gives the full one's counts."""
    counts: Counter[QueueId] = Counter({QueueId(f"h{n}.test"): 1 + (n % 3 == 0) for n in range(3000)})
    largest = Largest(counts, keep=100)
    assert [c for _, c in largest.largest(10)] == [2] * 10
    kept = list(largest._top)
    for q in kept[:60]:
        del counts[q]  # gone with their last URL
    want = heapq.nlargest(10, counts.items(), key=lambda kv: kv[1])
    assert [c for _, c in largest.largest(10)] == [c for _, c in want]
    assert len(largest._top) == len(kept) - 60 and largest.rescans == 1


def test_the_queued_total_is_the_crawls_counts_added_up() -> None:
    """The status snapshot's ``queued`` total: the crawls' counts added up (O(crawls)), the same as
    every queue's count added up, through URLs in, sent and dropped."""
    f = PartitionFrontier(0, MemoryKV(), SETTINGS, THROTTLE, Log())
    f.ingest(subs("news", "a.test", 3) + subs("books", "a.test", 2) + subs(None, "b.test", 4), 0.0)

    class Watched(Counter[QueueId]):
        def values(self):  # type: ignore[no-untyped-def, override]
            raise AssertionError("every queue's count read for the total")

    counts = f.queues._queued
    f.queues._queued = Watched(counts)
    assert f.queued() == 9
    f.queues._queued = counts
    for step in range(1, 6):
        for job in f.dispatch(2.0 * step).jobs:
            assert f.feedback(feedback_of(job), 2.0 * step + 0.1)
        assert f.queued() == sum(f.queues._queued.values())
    f.control(cmd("drop", "books"), 20.0)
    assert f.queued() == sum(f.queues._queued.values())


def test_a_queue_whose_last_url_is_sent_leaves_at_once() -> None:
    """Issue 39: a queue whose last URL was sent stayed scheduled, popped again only to be found
    empty (with 50 crawls sharing hosts most queues hold one URL: a pop and a turn wasted a job)."""
    f = PartitionFrontier(0, MemoryKV(), SETTINGS, THROTTLE, Log())
    f.ingest(subs("news", "a.test", 1), 0.0)
    alone = queue_id(["a.test"], "news")
    jobs = f.dispatch(0.0, limit=1).jobs
    assert [j.item.host for j in jobs] == ["a.test"]
    assert not f.queues.has(alone) and alone not in f.queues.scheduler
    f.ingest(subs("news", "b.test", 1) + subs("books", "b.test", 2), 0.0)
    news, books = queue_id(["b.test"], "news"), queue_id(["b.test"], "books")
    for job in jobs:
        assert f.feedback(feedback_of(job), 0.1)
    for step in range(1, 10):  # (the host's delay is 1 s: one send every 2 s here)
        for j in f.dispatch(2.0 * step).jobs:
            assert f.feedback(feedback_of(j), 2.0 * step + 0.1)
    assert not f.queues.has(news) and not f.queues.has(books) and len(f.queues.scheduler) == 0
    assert not f.queues._served  # (no stamp left behind for a queue gone)

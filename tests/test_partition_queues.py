"""The partition's ``Queues`` alone, on a ``MemoryKV``: places, counts, the scope index, parked
queues, turns between crawls and removals (not through PartitionFrontier)."""

from collections.abc import Iterator

import pytest

import frontier.partition.counts as counts_module
from frontier.config import FrontierConfig
from frontier.core.kv import MemoryKV
from frontier.partition.crawls import Crawls
from frontier.partition.keys import QUEUE, queue_id, queue_of, queue_seq
from frontier.partition.queues import Queues
from frontier.partition.store import Store
from topics.schemas import UrlItem


def make() -> tuple[MemoryKV, Crawls, Queues]:
    kv = MemoryKV()
    store = Store(kv, lambda k, v: None)
    crawls = Crawls(0, store, FrontierConfig())
    return kv, crawls, Queues(store, crawls)


def url(host: str, n: int, crawl: str = "default", priority: int = 0) -> UrlItem:
    return UrlItem(url=f"http://{host}/{n}", host=host, domain=host, crawl=crawl, priority=priority)


def put(queues: Queues, scopes: list[str], item: UrlItem, now: float) -> bytes:
    qkey = queues.qkey(queue_id(scopes, item.crawl), item, now)
    queues.enqueue(qkey, item, now)
    return qkey


def test_entries_keep_fifo_places_and_due_time_places_apart() -> None:
    kv, _, queues = make()
    qid = queue_id(["a.test"])
    keys = [put(queues, ["a.test"], url("a.test", n), 1.0) for n in range(3)]
    assert keys == sorted(keys) and all(queue_seq(k) % 2 == 0 for k in keys)
    due = queues.qkey_due(qid, url("a.test", 9), 0.5)  # due before the others were queued
    assert queue_seq(due) % 2 == 1 and due < keys[0]
    assert [k for k, _ in kv.scan(QUEUE)] == keys
    assert queues.count(qid) == 3 and queues.crawl_queued("default") == 3 and queues.queued() == 3


def test_a_lease_coming_back_to_a_taken_place_moves_within_its_millisecond() -> None:
    kv, _, queues = make()
    qkey = put(queues, ["a.test"], url("a.test", 1), 1.0)
    queues.enqueue_back(qkey, url("a.test", 2), 1.0)  # its place is taken (by /1)
    entries = [k for k, _ in kv.scan(QUEUE)]
    assert len(entries) == 2 and qkey in entries and queues.count(queue_of(qkey)) == 2


def test_multi_scope_queues_are_indexed_under_each_scope_until_forgotten() -> None:
    _, _, queues = make()
    put(queues, ["a.test"], url("a.test", 1), 0.0)
    put(queues, ["a.test", "a.test#api"], url("a.test", 2), 0.0)
    multi = queue_id(["a.test", "a.test#api"])
    assert queues.of_scope("a.test", queue_id(["a.test"])) == [(1, multi), (1, queue_id(["a.test"]))]
    assert queues.of_scope("a.test#api", queue_id(["a.test#api"])) == [(1, multi)]
    queues.dequeued(multi)
    queues.forget(multi)
    assert queues.of_scope("a.test#api", queue_id(["a.test#api"])) == [] and not queues.has(multi)
    assert queues.queued_in("default", "a.test") == 1


def test_a_waiting_crawl_parks_its_queues_until_it_is_released() -> None:
    _, crawls, queues = make()
    crawls.record("books").paused = True
    crawls.rehold()
    put(queues, ["a.test"], url("a.test", 1, crawl="books"), 0.0)
    assert queues.queued_hosts() == 0  # put aside, out of the scheduler
    queues.unpark(crawls.waits, 1.0)
    assert queues.queued_hosts() == 0  # still paused
    crawls.record("books").paused = False
    crawls.rehold()
    queues.unpark(crawls.waits, 1.0)
    assert queues.scheduler.pop_due(1.0) == queue_id(["a.test"], "books")


def test_crawls_of_the_same_scopes_take_turns_highest_priority_first() -> None:
    _, _, queues = make()
    put(queues, ["a.test"], url("a.test", 1), 0.0)
    put(queues, ["a.test"], url("a.test", 2, crawl="books"), 0.0)
    put(queues, ["a.test"], url("a.test", 3, crawl="news"), 0.0)
    base = queue_id(["a.test"])
    group = queues.groups[base]
    assert group == {queue_id(["a.test"], "books"), queue_id(["a.test"], "news")}
    turns = []
    for _ in range(3):
        chosen = queues.choose(base, group)
        queues.took_turn(chosen)
        turns.append(chosen)
    assert len(set(turns)) == 3  # round robin among equal priorities
    put(queues, ["a.test"], url("a.test", 4, crawl="news", priority=5), 0.0)
    assert queues.choose(base, group) == queue_id(["a.test"], "news")


def test_remove_if_drops_the_entries_that_are_gone_and_the_queue_with_the_last() -> None:
    kv, _, queues = make()
    for n in range(3):
        put(queues, ["a.test"], url("a.test", n), 0.0)
    qid = queue_id(["a.test"])
    queues.remove_if(qid, lambda item: item.url.endswith("/1"), 1.0)
    assert queues.count(qid) == 2 and len(list(kv.scan(QUEUE))) == 2
    queues.remove_if(qid, lambda item: True, 1.0)
    assert not queues.has(qid) and not list(kv.scan(QUEUE))


def test_load_counts_the_stored_entries_and_places_new_ones_after_them() -> None:
    kv, _, queues = make()
    keys = [put(queues, ["a.test"], url("a.test", n), 100.0) for n in range(3)]
    store = Store(kv, lambda k, v: None)
    crawls = Crawls(0, store, FrontierConfig())
    again = Queues(store, crawls)
    again.load(0.0, 0)
    assert again.count(queue_id(["a.test"])) == 3 and again.queued_hosts() == 1
    assert again.qkey(queue_id(["a.test"]), url("a.test", 9), 0.0) > keys[-1]  # its clock is behind: after them
    assert list(crawls.names()) == ["default"]  # the crawl queued here has a record now


class CountingKV(MemoryKV):
    """A MemoryKV that counts the reads of queue entries (``first`` or ``scan``: each a seek)."""

    def __init__(self) -> None:
        super().__init__()
        self.firsts = 0

    def scan(self, prefix: bytes, after: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        self.firsts += prefix.startswith(QUEUE)  # (MemoryKV.first scans: counted once)
        return super().scan(prefix, after)


def test_a_turn_between_crawls_reads_only_the_heads_that_changed() -> None:
    """Issue 39: a host's turn between crawls read every crawl's queue head from the store (50
    crawls: 50 seeks a turn). A head's priority is kept until an entry leaves its queue, raised
    when a higher one comes in: the choices are the same, the seeks one per queue that changed."""
    kv = CountingKV()
    store = Store(kv, lambda k, v: None)
    crawls = Crawls(0, store, FrontierConfig())
    queues = Queues(store, crawls)
    names = [f"c{n:02d}" for n in range(20)]
    qkeys = {name: [put(queues, ["a.test"], url("a.test", n, crawl=name), 0.0) for n in range(3)] for name in names}
    base = queue_id(["a.test"])
    group = queues.groups[base]
    chosen = queues.choose(base, group)
    assert kv.firsts <= len(names)  # each head read once at most (kept as it came in: none)
    for turn in range(10):
        qid = chosen
        name = next(n for n in names if queue_id(["a.test"], n) == qid)
        kv.delete(qkeys[name].pop(0))  # the chosen queue sends its head (as the dispatcher does)
        queues.dequeued(qid)
        queues.took_turn(qid)
        before = kv.firsts
        chosen = queues.choose(base, group)
        assert kv.firsts - before <= 1, f"turn {turn}: {kv.firsts - before} heads read"
        assert chosen != qid  # round robin: another crawl's turn
    late = names[-1]
    before = kv.firsts
    put(queues, ["a.test"], url("a.test", 99, crawl=late, priority=7), 0.0)
    assert queues.choose(base, group) == queue_id(["a.test"], late) and kv.firsts == before


def test_a_turn_among_queues_of_the_default_priority_reads_no_head() -> None:
    """Issue 39: a turn read the head of every crawl's queue of the host to compare priorities;
    with more one-URL queues than the heads kept in memory (50 crawls sharing hosts), most were
    seeks. When every live queue holds URLs of the default priority only, the turn goes round
    robin without a read; a queue with another priority (put here, or loaded from the store,
    whose priorities are not known) has its head read, and wins its turn as before."""
    kv = CountingKV()
    store = Store(kv, lambda k, v: None)
    crawls = Crawls(0, store, FrontierConfig())
    queues = Queues(store, crawls)
    queues.heads.limit = 0  # nothing kept: every head a turn reads is a seek
    names = [f"c{n:02d}" for n in range(20)]
    for name in names:
        put(queues, ["a.test"], url("a.test", 0, crawl=name), 0.0)
    base = queue_id(["a.test"])
    group = queues.groups[base]
    order = []
    for _ in names:
        chosen = queues.choose(base, group)
        order.append(chosen)
        queues.took_turn(chosen)
    assert kv.firsts == 0
    assert sorted(order) == sorted(queue_id(["a.test"], n) for n in names)  # each crawl in turn
    put(queues, ["a.test"], url("a.test", 1, crawl="c07", priority=3), 0.0)  # its head now, known as it came in
    assert queues.choose(base, group) == queue_id(["a.test"], "c07") and kv.firsts == 0
    again = Queues(store, Crawls(0, store, FrontierConfig()))  # a restart: the store's priorities unknown
    again.heads.limit = 0
    again.load(0.0, 0)
    before = kv.firsts
    assert again.choose(base, again.groups[base]) == queue_id(["a.test"], "c07") and kv.firsts > before
    put(again, ["b.test"], url("b.test", 0, priority=2), 0.0)  # the default crawl's queue: always read
    put(again, ["b.test"], url("b.test", 1, crawl="c01"), 0.0)
    assert again.choose(queue_id(["b.test"], "c01"), again.groups[queue_id(["b.test"])]) == queue_id(["b.test"])


def test_load_reads_each_queue_id_once_and_finds_the_highest_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39 (takeover): a rebuild parsed the queue id of every entry (1.25M a partition at 1M
    hosts); a queue's entries are contiguous, so its id is parsed at its first entry. The counts
    and the highest sequence (here not the last key: a higher priority sorts first) are the same."""
    kv, _, queues = make()
    expected: dict[str, int] = {}
    top = 0
    for n in range(40):
        host = f"h{n % 7}.test"
        scopes = [host, "api.h0.test"] if n % 5 == 0 else [host]
        crawl = "other" if n % 3 == 0 else "default"
        qkey = put(queues, scopes, url(host, n, crawl, priority=n % 4), 100.0 + n)
        expected[queue_of(qkey)] = expected.get(queue_of(qkey), 0) + 1
        top = max(top, queue_seq(qkey))
    parsed: list[bytes] = []

    def counting(key: bytes) -> str:
        parsed.append(key)
        return queue_of(key)

    monkeypatch.setattr(counts_module, "queue_of", counting)  # (the walk is QueueCounts.scan's)
    store = Store(kv, lambda k, v: None)
    again = Queues(store, Crawls(0, store, FrontierConfig()))
    again.load(0.0, 0)
    assert len(parsed) == len(expected)  # once per queue, not once per entry
    assert {q: again.count(q) for q in again.ids()} == expected
    assert again.crawl_queued("other") == sum(n for q, n in expected.items() if q.startswith("other"))
    assert again.queued_hosts() == len(expected)
    item = url("h1.test", 99)
    assert queue_seq(again.qkey(queue_id(["h1.test"]), item, 0.0)) > top  # new places after every stored one

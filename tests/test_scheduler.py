import heapq
import random

import pytest

from frontier.core.scheduler import Scheduler


def test_pops_in_time_order_and_only_when_due() -> None:
    s = Scheduler()
    s.schedule("b", 2.0)
    s.schedule("a", 1.0)
    s.schedule("c", 3.0)
    assert s.pop_due(0.5) is None
    assert s.pop_due(2.5) == "a"
    assert s.pop_due(2.5) == "b"
    assert s.pop_due(2.5) is None
    assert s.next_time() == 3.0 and len(s) == 1


def test_reschedule_replaces_entry_both_ways() -> None:
    s = Scheduler()
    s.schedule("a", 5.0)
    s.schedule("a", 1.0)
    assert s.pop_due(1.0) == "a" and s.pop_due(10.0) is None
    s.schedule("b", 1.0)
    s.schedule("b", 5.0)
    assert s.pop_due(2.0) is None and s.next_time() == 5.0


def test_discard() -> None:
    s = Scheduler()
    s.schedule("a", 1.0)
    s.discard("a")
    assert "a" not in s and s.pop_due(9.0) is None and s.next_time() is None


class TupleHeap:
    """The reference: one ``(time, host)`` tuple per schedule, stale ones skipped on pop."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, str]] = []
        self.at: dict[str, float] = {}

    def schedule(self, host: str, at: float) -> None:
        if self.at.get(host) != at:
            self.at[host] = at
            heapq.heappush(self.heap, (at, host))

    def next_time(self) -> float | None:
        while self.heap:
            at, host = self.heap[0]
            if self.at.get(host) == at:
                return at
            heapq.heappop(self.heap)
        return None

    def pop_due(self, now: float) -> str | None:
        while self.heap and self.heap[0][0] <= now:
            at, host = heapq.heappop(self.heap)
            if self.at.get(host) == at:
                del self.at[host]
                return host
        return None


@pytest.mark.parametrize("seed", range(20))
def test_same_order_as_one_tuple_per_host_under_random_operations(seed: int) -> None:
    """Few hosts and few distinct times: ties, re-schedules to the same and other times, discards
    and stale entries all come out exactly as (time, host) tuples in a heap would."""
    rng = random.Random(seed)
    s, ref = Scheduler(), TupleHeap()
    hosts = [f"h{n}" for n in range(12)]
    popped = 0
    for _ in range(3000):
        op = rng.random()
        if op < 0.5:
            host, at = rng.choice(hosts), float(rng.randrange(8))
            s.schedule(host, at)
            ref.schedule(host, at)
        elif op < 0.6:
            host = rng.choice(hosts)
            s.discard(host)
            ref.at.pop(host, None)
        elif op < 0.75:
            assert s.next_time() == ref.next_time()
        else:
            now = float(rng.randrange(9))
            got = s.pop_due(now)
            assert got == ref.pop_due(now)
            popped += got is not None
        assert len(s) == len(ref.at) and all(s.scheduled_at(h) == ref.at.get(h) for h in hosts)
    assert popped > 100  # the comparison covered real pops


def test_hosts_scheduled_at_one_time_share_one_heap_entry() -> None:
    s = Scheduler()
    for n in range(1000):
        s.schedule(f"h{n:04d}", 5.0)
    s.schedule("late", 9.0)
    assert len(s._times) == 2 and len(s) == 1001
    assert [s.pop_due(5.0) for _ in range(3)] == ["h0000", "h0001", "h0002"]
    s.schedule("h0500", 1.0)  # moved earlier: comes first, its old entry is skipped later
    assert s.pop_due(5.0) == "h0500" and s.next_time() == 5.0
    assert len([h for h in iter(lambda: s.pop_due(5.0), None)]) == 996
    assert s.pop_due(8.0) is None and s.next_time() == 9.0 and s.pop_due(9.0) == "late"
    assert not s._times and not s._buckets

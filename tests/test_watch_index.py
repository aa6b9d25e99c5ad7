"""The watch index of a partition: ``scope_row(scope, now)`` finds a scope's queues through an
index (scope → multi-scope queue ids) in O(its queues), never by scanning every queue, and gives
the answer the old scan gave, whatever happened to the queues (ingest, dispatch, retries, drops,
a rebuild from the store)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from frontier.config import AutoThrottleSettings, FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core.kv import MemoryKV
from frontier.partition import PartitionFrontier
from frontier.partition.keys import is_multi, queue_scopes
from topics.schemas import ControlCommand, Feedback, Job, UrlItem

THROTTLE = ThrottleConfig(
    default=ScopeSettings(delay=0.0, concurrency=2, autothrottle=AutoThrottleSettings(enabled=False)),
    scopes={"dom.test": ScopeSettings(delay=0.0, concurrency=2)},  # a domain with settings: a scope of its own
)
SETTINGS = FrontierConfig(robots_obey=False, dispatch_lead=0.0, max_retries=3)
HOSTS = ["a.dom.test", "b.dom.test", "dom.test", "c.other.test", "other.test"]
NAMES = ["api", "img", "x"]


def _noop(_key: bytes, _value: bytes | None) -> None:
    pass


def make() -> PartitionFrontier:
    return PartitionFrontier(0, MemoryKV(), SETTINGS, THROTTLE, _noop)


def item(host: str, n: int, names: list[str]) -> UrlItem:
    domain = host.split(".", 1)[1] if host.count(".") > 1 else host
    return UrlItem(url=f"http://{host}/{n}", host=host, domain=domain, scopes=names)


def old_scan(f: PartitionFrontier, scope: str) -> tuple[int, str]:
    """What scope_row counted before the index: every queue id scanned."""
    mine = [(n, q) for q, n in f.queues._queued.items() if scope in queue_scopes(q)]
    return sum(n for n, _ in mine), max(mine)[1] if mine else ""


def every_scope(f: PartitionFrontier) -> set[str]:
    scopes = {s for q in f.queues._queued for s in queue_scopes(q)} | set(HOSTS)
    return scopes | {f"{d}#{n}" for d in ("dom.test", "other.test") for n in NAMES}


def check(f: PartitionFrontier, now: float) -> None:
    expected: dict[str, set[str]] = {}
    for qid in f.queues._queued:
        if is_multi(qid):
            for scope in queue_scopes(qid):
                expected.setdefault(scope, set()).add(qid)
    assert f.queues._multi == expected  # the index is exactly the multi-scope queue ids, no stale entry
    for scope in every_scope(f):
        queued, qid = old_scan(f, scope)
        row = f.scope_row(scope, now)
        assert row.queued == queued, scope
        assert row == f.scope_row(scope, now, queued, qid)  # the same row as from the scan's figures


urls = st.lists(st.tuples(st.sampled_from(HOSTS), st.lists(st.sampled_from(NAMES), max_size=2)), min_size=1, max_size=6)
op = st.one_of(
    st.tuples(st.just("ingest"), urls),
    st.tuples(st.just("dispatch"), st.integers(1, 5)),
    st.tuples(st.just("feedback"), st.sampled_from(["fetched", "retry", "expired"])),
    st.tuples(st.just("drop"), st.sampled_from([*HOSTS, "dom.test#api", "other.test#img"])),
    st.tuples(st.just("rebuild"), st.none()),
    st.tuples(st.just("expire"), st.none()),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(op, min_size=1, max_size=25))
def test_scope_row_through_the_index_equals_the_old_scan(ops: list[tuple[str, Any]]) -> None:
    f = make()
    now, n = 1000.0, 0
    jobs: list[Job] = []
    for name, arg in ops:
        now += 1.0
        if name == "ingest":
            batch = []
            for host, names in arg:
                n += 1
                batch.append(item(host, n, names))
            f.ingest(batch, now)
        elif name == "dispatch":
            jobs.extend(f.dispatch(now, limit=arg).jobs)
        elif name == "feedback" and jobs:
            job = jobs.pop(0)
            i = job.item
            f.feedback(Feedback(lease=job.lease, host=i.host, domain=i.domain, url=i.url, outcome=arg,
                                status=200 if arg == "fetched" else 503, sent_at=now), now)  # fmt: skip
        elif name == "drop":
            f.control(ControlCommand(action="drop", scope=arg), now)
        elif name == "rebuild":
            f.rebuild(now)
            jobs.clear()  # their leases expire (they are in the store; feedback would still apply)
        elif name == "expire":
            f.expire_leases(now + 3600.0)
        check(f, now)


class NoScan(Counter[str]):
    """A ``_queued`` that refuses to be iterated and counts the lookups of single entries."""

    lookups = 0

    def __getitem__(self, key: str) -> int:
        NoScan.lookups += 1
        return super().__getitem__(key)

    def __iter__(self) -> Any:
        raise AssertionError("scope_row iterated over every queue")

    def items(self) -> Any:
        raise AssertionError("scope_row iterated over every queue")

    def keys(self) -> Any:
        raise AssertionError("scope_row iterated over every queue")

    def values(self) -> Any:
        raise AssertionError("scope_row iterated over every queue")


def test_scope_row_costs_its_own_queues_not_all_queues() -> None:
    f = make()
    batch = [item(f"h{i}.many.test", i, ["api"] if i % 10 == 0 else []) for i in range(10_000)]
    batch += [item("a.dom.test", n, names) for n, names in enumerate(([], ["api"], ["img"], ["api", "img"]))]
    batch += [item("a.dom.test", n, ["api"]) for n in range(4, 7)]  # more URLs, same queue
    f.ingest(batch, 0.0)
    assert len(f.queues._queued) == 10_000 + 4
    counts = NoScan(f.queues._queued)
    f.queues._queued = counts
    NoScan.lookups = 0
    row = f.scope_row("a.dom.test", 1.0)
    assert row.queued == 7
    assert NoScan.lookups == 4  # one lookup per own queue (all four with dom.test, which has settings)
    NoScan.lookups = 0
    assert f.scope_row("dom.test#api", 1.0).queued == 5  # the api and the api+img queues of a.dom.test
    assert NoScan.lookups == 2
    NoScan.lookups = 0
    assert f.scope_row("h7.many.test", 1.0).queued == 1 and NoScan.lookups <= 2
    assert f.scope_row("nobody.test", 1.0).queued == 0

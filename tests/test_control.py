"""Operators' scope commands and recrawl, on the partition layer (no Kafka, injected time)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontier.core.control import control_record, covers, scope_domain
from frontier.core.kv import MemoryKV
from frontier.core.urls import parse_input, url_fingerprint
from frontier.partition import SEEN_REVISIT, PartitionFrontier, Refused, read_seen
from frontier.partition import scopes as scopes_module
from tests.test_partition import SETTINGS, THROTTLE, Log, fb, items
from topics.partitioning import partition_for
from topics.schemas import ControlCommand, Submission, encode


def make(kv: MemoryKV | None = None, log: Log | None = None) -> PartitionFrontier:
    return PartitionFrontier(0, kv or MemoryKV(), SETTINGS, THROTTLE, log or Log())


def cmd(action: str, scope: str, **kw: float) -> ControlCommand:
    c = ControlCommand(action=action, scope=scope, **kw)  # type: ignore[arg-type]
    c.validate()
    return c


def urls_of(f: PartitionFrontier, now: float) -> list[str]:
    return sorted(j.item.url for j in f.dispatch(now).jobs)


def test_pause_holds_every_host_under_a_domain_until_resume() -> None:
    f = make()
    f.ingest(items("http://www.a.test/1", "http://img.a.test/1", "http://b.test/1"), 0.0)
    f.control(cmd("pause", "a.test"), 0.0)
    assert urls_of(f, 0.0) == ["http://b.test/1"]
    assert urls_of(f, 100.0) == []  # still paused, however long
    rows = {r.scope: r.reason for r in f.scope_rows(100.0)}
    assert rows["www.a.test"] == "paused (a.test)"
    f.control(cmd("resume", "a.test"), 101.0)
    assert urls_of(f, 101.0) == ["http://img.a.test/1", "http://www.a.test/1"]


def test_pause_survives_a_rebuild_from_the_changelog() -> None:
    log = Log()
    f = make(log=log)
    f.ingest(items("http://a.test/1"), 0.0)
    f.control(cmd("pause", "a.test"), 0.0)
    replica = log.replay()
    g = make(replica)
    g.rebuild(1.0)
    assert urls_of(g, 1.0) == []
    g.control(cmd("resume", "a.test"), 2.0)
    assert urls_of(g, 2.0) == ["http://a.test/1"]
    assert replica.get(b"Oa.test") is None or g.overrides() == {}


def test_drop_removes_queued_urls_of_the_scope_only() -> None:
    f = make()
    f.ingest(items(*(f"http://a.test/{i}" for i in range(5)), "http://b.test/1"), 0.0)
    assert f.control(cmd("drop", "a.test"), 0.0) == 5
    assert f.queued() == 1 and f.stats.dropped == 5
    assert urls_of(f, 0.0) == ["http://b.test/1"]
    assert f.ingest(items("http://a.test/1"), 1.0) == 0  # dropped means: not crawled, not re-queued


def test_set_overrides_delay_and_concurrency_and_clear_restores() -> None:
    f = make()  # default: delay 1.0, concurrency 1
    f.ingest(items(*(f"http://a.test/{i}" for i in range(6))), 0.0)
    f.control(cmd("set", "a.test", delay=0.0, concurrency=3), 0.0)
    jobs = f.dispatch(0.0).jobs
    assert len(jobs) == 3  # three at once now
    for job in jobs:
        f.feedback(fb(job, sent_at=0.0), 0.1)
    f.control(cmd("set", "a.test", delay=10.0), 0.2)  # concurrency stays overridden, delay changes
    assert f.scope_settings("a.test").delay == 10.0 and f.scope_settings("a.test").concurrency == 3
    assert urls_of(f, 5.0) == []
    f.control(cmd("clear", "a.test"), 5.0)
    assert f.scope_settings("a.test") == THROTTLE.for_scope("a.test")
    assert f.overrides() == {}


def test_every_named_scope_a_submission_may_name_can_be_paused() -> None:
    """Named scopes may hold spaces and "/" (a submission accepts them): commands must reach them."""
    f = make()
    sub = Submission(url="http://a.test/1", scopes=["books/api v2"])
    f.ingest([parse_input(encode(sub))], 0.0)
    f.control(cmd("pause", "a.test#books/api v2"), 0.0)
    assert urls_of(f, 100.0) == []  # paused, however long
    f.control(cmd("resume", "a.test#books/api v2"), 100.0)
    assert urls_of(f, 100.0) == ["http://a.test/1"]


def test_commands_are_validated() -> None:
    for bad in (
        ControlCommand(action="explode", scope="a.test"),
        ControlCommand(action="pause", scope=""),
        ControlCommand(action="pause", scope="a.test#x\x1fy"),
        ControlCommand(action="set", scope="a.test"),
        ControlCommand(action="set", scope="a.test", delay=-1),
        ControlCommand(action="set", scope="a.test", concurrency=0),
    ):
        with pytest.raises(ValueError):
            bad.validate()


def test_control_records_go_to_the_domains_partition() -> None:
    assert scope_domain("www.books.example.co.uk") == "example.co.uk"
    assert scope_domain("example.com#api") == "example.com"
    key, _, partition = control_record(ControlCommand(action="pause", scope="shop.example.com"), 8)
    assert key == b"example.com" and partition == partition_for("example.com", 8)
    assert covers("example.com", "www.example.com") and not covers("example.com", "badexample.com")


def test_recrawl_requeues_a_url_when_its_revisit_interval_passes() -> None:
    f = make()
    item = parse_input(encode(Submission(url="http://a.test/news", revisit=60.0)))
    f.ingest([item], 0.0)
    (job,) = f.dispatch(0.0).jobs
    f.feedback(fb(job, sent_at=0.0), 1.0)
    seen = f.kv.get(b"S" + url_fingerprint(item.url))  # the seen entry keeps the last fetch time and the due time
    assert seen is not None and read_seen(seen) == (SEEN_REVISIT, 1.0, 61_000)
    wake = f.next_wakeup()
    assert f.dispatch(30.0).jobs == [] and wake is not None and wake <= 61.0
    (again,) = f.dispatch(61.0).jobs
    assert again.item.url == "http://a.test/news" and f.stats.revisits == 1
    f.feedback(fb(again, sent_at=61.0), 62.0)
    assert f.dispatch(100.0).jobs == [] and [j.item.url for j in f.dispatch(122.0).jobs] == [item.url]
    assert f.ingest([item], 123.0) == 0  # a re-submission while it is scheduled is still a duplicate


def test_a_url_without_revisit_is_fetched_once() -> None:
    f = make()
    f.ingest(items("http://a.test/1"), 0.0)
    (job,) = f.dispatch(0.0).jobs
    f.feedback(fb(job, sent_at=0.0), 1.0)
    assert f.dispatch(10_000.0).jobs == [] and f.queued() == 0 and not list(f.kv.scan(b"V"))


LABELS = ["a", "b", "test", "www", "api"]


@settings(max_examples=200, deadline=None)
@given(
    names=st.lists(st.lists(st.sampled_from(LABELS), min_size=1, max_size=3), max_size=6),
    scope=st.lists(st.sampled_from(LABELS), min_size=1, max_size=4),
    named=st.booleans(),
    delays=st.lists(st.floats(0, 10), min_size=6, max_size=6),
)
def test_overrides_found_by_suffix_match_the_covers_rule(
    names: list[list[str]], scope: list[str], named: bool, delays: list[float]
) -> None:
    f = make()
    for i, labels in enumerate(names):
        name = ".".join(labels) + ("#x" if named and i % 2 else "")
        f.control(cmd("set", name, delay=delays[i]), 0.0)
        if i % 3 == 0:
            f.control(cmd("pause", name), 0.0)
    target = ".".join(scope) + ("#x" if named else "")
    # the rule as written in frontier.core.control: every covering name applies, the longest wins
    covering = sorted((n, o) for n, o in f.overrides().items() if covers(n, target))
    covering.sort(key=lambda kv: len(kv[0]))
    expected = f.throttle.for_scope(target.rsplit("#", 1)[-1]).delay
    for _, o in covering:
        expected = o.delay if o.delay is not None else expected
    assert f.scope_settings(target).delay == expected
    paused = [n for n, o in covering if o.paused]
    assert (f.scopes.paused_by([target]) is not None) == bool(paused)


def test_overrides_are_bounded_per_partition_and_refused_beyond(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scopes_module, "MAX_OVERRIDES", 3)
    f = make()
    for host in ("a.test", "b.test", "c.test"):
        f.control(cmd("pause", host), 0.0)
    with pytest.raises(Refused, match="at most 3"):
        f.control(cmd("pause", "d.test"), 0.0)
    assert "d.test" not in f.overrides()
    f.control(cmd("set", "a.test", delay=2.0), 0.0)  # an existing name can still change
    assert f.overrides()["a.test"].delay == 2.0
    f.control(cmd("resume", "b.test"), 0.0)  # an emptied override frees its place
    f.control(cmd("pause", "d.test"), 0.0)
    assert sorted(f.overrides()) == ["a.test", "c.test", "d.test"]

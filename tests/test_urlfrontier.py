"""The URLFrontier API's pure parts: recorded URLs in a partition (known updates, the questions,
deletions, held leases, blocks), and the API's terms (crawl IDs, keys, fetch status in metadata).

Pure: a ``PartitionFrontier`` over a ``MemoryKV`` with an injected clock; nothing talks to Kafka.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from frontier.config import AutoThrottleSettings, FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core.kv import MemoryKV
from frontier.core.urls import Rejection, parse_input
from frontier.partition import PartitionFrontier
from frontier.partition.keys import lease_key
from frontier.partition.records import item_dec, lease_dec
from topics.schemas import ControlCommand, Feedback, Job, Query, UrlItem, decode, encode
from workers.urlfrontier.mapping import (
    BadItem,
    api_crawl,
    default_key,
    fetch_signal,
    frontier_crawl,
    queue_key,
    submission,
)

FIXED = AutoThrottleSettings(enabled=False)
THROTTLE = ThrottleConfig(default=ScopeSettings(delay=1.0, concurrency=1, autothrottle=FIXED))
SETTINGS = FrontierConfig(job_ttl=30.0, fetch_timeout=20.0, lease_grace=10.0, robots_obey=False, dispatch_lead=0.0)
T0 = 1_000_000.0


def make(kv: MemoryKV | None = None) -> PartitionFrontier:
    return PartitionFrontier(0, kv if kv is not None else MemoryKV(), SETTINGS, THROTTLE, lambda k, v: None)


def item(url: str, key: str = "", refetch: float | None = None, crawl: str = "default", **meta: Any) -> UrlItem:
    doc: dict[str, Any] = {"url": url, "key": key or default_key(url), "crawl": crawl, "meta": meta}
    if refetch is not None:
        doc["refetch_at"] = refetch
    return parse_input(json.dumps(doc).encode())


def ask(f: PartitionFrontier, kind: str, now: float, **fields: Any) -> Any:
    return f.answer(Query(id="q", reply_to="g", kind=kind, **fields), now)


def change(f: PartitionFrontier, kind: str, now: float, **fields: Any) -> Any:
    return f.change(Query(id="q", reply_to="g", kind=kind, **fields), now)


def jobs(f: PartitionFrontier, now: float) -> list[Job]:
    return f.dispatch(now).jobs


def done(f: PartitionFrontier, job: Job, now: float, status: int = 200, outcome: str = "fetched") -> None:
    it = job.item
    f.feedback(Feedback(lease=job.lease, host=it.host, domain=it.domain, url=it.url, outcome=outcome, status=status,
                        sent_at=now - 0.1, done_at=now), now)  # fmt: skip


def test_discovered_urls_are_recorded_once_and_listed_with_their_metadata() -> None:
    f = make()
    f.ingest([item("http://a.test/1", source="seed"), item("http://a.test/1", source="again"),
              item("http://b.test/", key="mine")], T0)  # fmt: skip
    assert ask(f, "count", T0).counts == {"count": 2}
    stats = ask(f, "stats", T0).counts
    assert stats["size"] == 2 and stats["queues"] == 2 and stats["in_process"] == 0
    listed = ask(f, "urls", T0).urls
    assert [(r.url, r.key, r.meta) for r in listed] == [("http://a.test/1", "a.test", {"source": "seed"}),
                                                       ("http://b.test/", "mine", {})]  # fmt: skip
    assert listed[0].refetch_at == T0 and listed[0].created == T0  # a discovered URL is due when queued
    assert ask(f, "queues", T0).queues == ["a.test", "mine"]
    status = ask(f, "status", T0, key="a.test", url="http://a.test/1").urls
    assert status and status[0].meta == {"source": "seed"}
    assert not ask(f, "status", T0, key="a.test", url="http://a.test/2").urls


def test_a_key_other_than_the_host_is_a_named_scope_on_top_of_the_host() -> None:
    it = item("http://www.b.test/x", key="b-queue")
    assert it.key == "b-queue" and it.scopes == ["b-queue"]
    assert item("http://b.test/x").scopes == []  # the default key is the host: no extra scope


def test_known_urls_are_decided_not_queued_and_come_due_at_their_date() -> None:
    f = make()
    f.ingest([item("http://a.test/done", refetch=0), item("http://a.test/later", refetch=T0 + 100),
              item("http://a.test/sooner", refetch=T0 - 10)], T0)  # fmt: skip
    got = jobs(f, T0)
    assert [j.item.url for j in got] == ["http://a.test/sooner"]  # due now; done never; later not yet
    done(f, got[0], T0 + 0.5)
    assert not jobs(f, T0 + 50)
    assert [j.item.url for j in jobs(f, T0 + 100)] == ["http://a.test/later"]
    refetch = {r.url: r.refetch_at for r in ask(f, "urls", T0).urls}
    assert refetch["http://a.test/done"] == 0 and refetch["http://a.test/later"] == T0 + 100
    stats = ask(f, "stats", T0 + 100).counts
    assert stats["completed"] == 1 and stats["size"] == 2


def test_a_known_update_while_queued_or_in_flight_decides_the_url() -> None:
    f = make()
    f.ingest([item("http://a.test/1"), item("http://a.test/2")], T0)
    [job] = jobs(f, T0)
    f.ingest([item(job.item.url, refetch=0)], T0 + 0.1)  # the client's update before the job's report
    done(f, job, T0 + 0.2)
    other = "http://a.test/2" if job.item.url.endswith("1") else "http://a.test/1"
    f.ingest([item(other, refetch=T0 + 500)], T0 + 0.3)  # queued: decided, its queued entry goes
    assert not jobs(f, T0 + 10), "a URL decided done, or due later, is not handed out now"
    assert [j.item.url for j in jobs(f, T0 + 500)] == [other]


def test_a_lease_lost_after_its_clients_update_does_not_bring_the_url_back() -> None:
    f = make()
    f.ingest([item("http://a.test/1")], T0)
    [job] = jobs(f, T0)
    f.ingest([item(job.item.url, refetch=0)], T0 + 1)  # the update reached the frontier, the report never came
    f.expire_leases(T0 + 1000)
    assert not jobs(f, T0 + 1000), "a URL its client said is done is not sent out again"
    assert f.inflight == 0


def test_a_held_lease_lasts_its_clients_time_then_the_url_is_handed_out_again() -> None:
    f = make()
    f.ingest([item("http://a.test/1")], T0)
    [job] = jobs(f, T0)
    assert change(f, "hold", T0 + 1, leases=[job.lease], until=T0 + 300).counts == {"held": 1}
    assert ask(f, "stats", T0 + 1).counts["in_process"] == 1
    f.expire_leases(T0 + 100)  # past the lease's own deadline (30 + 20 + 10 s), inside the hold
    assert ask(f, "stats", T0 + 100).counts["in_process"] == 1 and not jobs(f, T0 + 100)
    # a replayed job handed back by a restarted gateway does not end a lease its client holds
    it = job.item
    assert not f.feedback(Feedback(lease=job.lease, host=it.host, domain=it.domain, url=it.url, outcome="expired"),
                          T0 + 150)  # fmt: skip
    assert ask(f, "stats", T0 + 301).counts["in_process"] == 0  # its client's time is over
    f.expire_leases(T0 + 301)
    again = jobs(f, T0 + 301)
    assert [j.item.url for j in again] == ["http://a.test/1"]
    assert f.stats.lost == 0, "a client's time running out is not a failure of the host"


def test_a_client_takes_the_queues_first_url_as_it_stands_when_it_asks() -> None:
    # the conformance suite's RightOrder, with its two URLs reaching the frontier apart: the one due
    # now went out alone before the one due long ago arrived; when GetURLs takes it, the frontier
    # holds it no longer, queues it again, and hands out the earlier one next
    f = make()
    f.ingest([item("http://key1.test/later", key="key1", refetch=T0)], T0)
    [first] = jobs(f, T0)
    assert first.item.url.endswith("/later")
    f.ingest([item("http://key1.test/sooner", key="key1", refetch=T0 - 10_000)], T0 + 0.1)
    assert not jobs(f, T0 + 0.2), "the key's one slot is out"
    reply = change(f, "hold", T0 + 0.3, leases=[first.lease], until=T0 + 2)
    assert reply.counts == {"held": 0} and reply.leases == []
    assert ask(f, "stats", T0 + 0.3).counts["in_process"] == 0
    order = []
    now = T0 + 0.3
    while len(order) < 2 and now < T0 + 30:
        for job in jobs(f, now):
            reply = change(f, "hold", now, leases=[job.lease], until=now + 2)
            assert reply.leases == [job.lease], "the queue's first URL is held"
            order.append(job.item.url)
            done(f, job, now + 0.1)
        now += 0.25
    assert order == ["http://key1.test/sooner", "http://key1.test/later"]
    # feedback for the job given back (the gateway hands it back) closes nothing
    it = first.item
    assert not f.feedback(Feedback(lease=first.lease, host=it.host, domain=it.domain, url=it.url, outcome="expired"),
                          now)  # fmt: skip


def test_urls_that_come_due_are_queued_in_the_order_they_came_due() -> None:
    f = make()
    f.ingest([item("http://a.test/new")], T0)  # discovered: due when queued
    f.ingest([item(f"http://a.test/r{n}", refetch=T0 - 100 + n) for n in (3, 1, 2)], T0 + 1)
    f.ingest([item("http://a.test/newer")], T0 + 2)
    order = []
    now = T0 + 2
    while len(order) < 5 and now < T0 + 60:
        for job in jobs(f, now):
            order.append(job.item.url.rsplit("/", 1)[1])
            done(f, job, now + 0.1)
        now += 0.5
    assert order == ["r1", "r2", "r3", "new", "newer"]


def test_a_lease_coming_back_to_a_place_taken_meanwhile_moves_and_loses_nothing() -> None:
    f = make()
    f.ingest([item("http://a.test/1", refetch=T0 - 5)], T0)
    [job] = jobs(f, T0)
    raw = f.kv.get(lease_key(job.lease))
    assert raw is not None
    place = lease_dec.decode(raw).qkey
    f.queues._due_low -= 2  # the next due-time key of that millisecond is the one the leased URL had
    f.ingest([item("http://a.test/2", refetch=T0 - 5)], T0 + 0.1)
    f.dispatch(T0 + 0.1)  # moves /2 into the queue (the key's slot is out)
    taken = f.kv.get(place)
    assert taken is not None and b"/2" in taken, "the leased URL's place was given to another"
    f.expire_leases(T0 + 1000)  # the lease comes back: its place is taken
    got = []
    now = T0 + 1000
    while len(got) < 2 and now < T0 + 1060:
        for j in jobs(f, now):
            got.append(j.item.url)
            done(f, j, now + 0.1)
        now += 0.5
    assert sorted(got) == ["http://a.test/1", "http://a.test/2"], got


def test_a_crowded_due_millisecond_after_a_restart_overwrites_no_queued_url() -> None:
    # a new instance (its monotonic sequence from 0) queues revisits due in a millisecond whose
    # due-time places are all taken and where a URL was also queued when it was put: the fallback
    # place is a free one, not that URL's
    kv = MemoryKV()
    f = make(kv)
    f.ingest([item("http://a.test/put")], T0)  # its place: T0's millisecond (an even sequence)
    f.ingest([item(f"http://a.test/r{n}", refetch=T0) for n in range(70)], T0)
    f.revisits.requeue(T0)  # due now: queued, by their due time
    again = make(kv)  # restored from the same store: its sequences start from 0
    again.rebuild(T0 + 1)
    again.ingest([item(f"http://a.test/s{n}", refetch=T0) for n in range(70)], T0 + 1)
    again.revisits.requeue(T0 + 1)
    urls = queued_urls(again)
    assert len(urls) == len(set(urls)) == 141, f"{141 - len(set(urls))} queued URLs overwritten"
    assert again.queued() == 141


def test_an_instance_whose_clock_is_behind_the_previous_owners_queues_after_every_url_in_use() -> None:
    # the previous owner's clock ran 60 s ahead; the instance taking the partition over queues
    # after every place in use, queued or leased, not at its own clock's millisecond
    kv = MemoryKV()
    ahead = make(kv)
    ahead.ingest([item(f"http://a.test/{n}") for n in range(5)], T0 + 60)
    [out] = jobs(ahead, T0 + 60)
    behind = make(kv)
    behind.rebuild(T0)
    behind.ingest([item(f"http://a.test/new{n}") for n in range(5)], T0)
    urls = queued_urls(behind)
    assert len(urls) == 9 and out.item.url not in urls and behind.queued() == 9
    assert urls[:4] == [f"http://a.test/{n}" for n in range(5) if f"http://a.test/{n}" != out.item.url]


def test_a_lease_of_a_dropped_crawl_is_not_queued_again_by_a_clients_take() -> None:
    # its crawl dropped while the job is out, then a URL of its queue due earlier: the take does
    # not put the dropped URL back in the queue (its drop ends it when the lease does)
    f = make()
    f.ingest([item("http://a.test/1", crawl="c1")], T0)
    [job] = jobs(f, T0)
    f.control(ControlCommand(action="drop", crawl="c1"), T0 + 0.1)
    f.ingest([item("http://a.test/0", refetch=T0 - 100, crawl="c1")], T0 + 0.2)
    f.dispatch(T0 + 0.2)  # /0 is queued (the slot is out)
    assert "http://a.test/0" in queued_urls(f)
    change(f, "hold", T0 + 0.3, leases=[job.lease], until=T0 + 2)
    assert "http://a.test/1" not in queued_urls(f), "a dropped crawl's URL came back"


def queued_urls(f: PartitionFrontier) -> list[str]:
    return [item_dec.decode(raw).url for _, raw in f.kv.scan(b"Q")]


def test_a_url_not_handed_out_is_not_in_process() -> None:
    f = make()
    f.ingest([item("http://a.test/1")], T0)
    assert jobs(f, T0)
    assert ask(f, "stats", T0).counts["in_process"] == 0  # with the gateway, not yet with a client


def test_delete_queue_and_crawl_remove_recorded_queued_and_leased_urls() -> None:
    f = make()
    f.ingest([item(f"http://a.test/{i}") for i in range(3)] + [item("http://b.test/1"),
              item("http://c.test/1", crawl="other")], T0)  # fmt: skip
    leased = jobs(f, T0)
    assert {j.item.host for j in leased} == {"a.test", "b.test", "c.test"}
    assert change(f, "delete_queue", T0 + 1, key="a.test").counts == {"removed": 3}
    assert ask(f, "count", T0 + 1, key="a.test").counts == {"count": 0}
    assert not [j for j in jobs(f, T0 + 60) if j.item.host == "a.test"], "nothing of the deleted queue comes back"
    f.ingest([item("http://a.test/0")], T0 + 61)  # forgotten: a later put adds it again
    assert [j.item.url for j in jobs(f, T0 + 61)] == ["http://a.test/0"]
    assert change(f, "delete_crawl", T0 + 62, crawl="other").counts == {"removed": 1}
    assert ask(f, "crawls", T0 + 62, crawl="").crawls == ["default"]


def test_purge_removes_the_urls_recorded_before_its_cutoff() -> None:
    f = make()
    f.ingest([item("http://a.test/old"), item("http://b.test/old")], T0)
    old = jobs(f, T0)  # both in flight
    f.ingest([item("http://a.test/new"), item("http://a.test/newer", refetch=T0 + 500)], T0 + 100)
    assert change(f, "purge", T0 + 101, key="a.test", until=T0 + 50).counts == {"removed": 1}
    assert {r.url for r in ask(f, "urls", T0 + 101).urls} == {"http://b.test/old", "http://a.test/new",
                                                             "http://a.test/newer"}  # fmt: skip
    assert f.inflight == 1  # its lease ended with it; b.test/old's stays
    assert change(f, "purge", T0 + 102, until=T0 + 200).counts == {"removed": 3}
    assert ask(f, "count", T0 + 102).counts == {"count": 0}
    assert not jobs(f, T0 + 600), "nothing purged comes back"
    assert len(old) == 2


def test_a_block_holds_the_scope_until_its_time() -> None:
    f = make()
    f.control(ControlCommand(action="block", scope="a.test", until=T0 + 20), T0)
    f.ingest([item("http://a.test/1"), item("http://b.test/1")], T0)
    assert [j.item.host for j in jobs(f, T0)] == ["b.test"]
    assert not jobs(f, T0 + 19.9)
    assert [j.item.host for j in jobs(f, T0 + 20)] == ["a.test"]
    f.control(ControlCommand(action="block", scope="b.test", until=0), T0 + 21)  # 0 lifts it


def test_records_rebuild_from_the_store() -> None:
    kv = MemoryKV()
    f = make(kv)
    f.ingest([item("http://a.test/1", refetch=T0 + 50), item("http://a.test/2")], T0)
    g = make(kv)
    g.rebuild(T0 + 1)
    assert ask(g, "count", T0 + 1).counts == {"count": 2}
    assert [j.item.url for j in jobs(g, T0 + 50)][:1] in (["http://a.test/2"], ["http://a.test/1"])


def test_queries_and_replies_travel_as_json() -> None:
    cmd = ControlCommand(action="query", query=Query(id="1", reply_to="g", kind="urls", after="x", limit=10))
    cmd.validate()
    assert decode(encode(cmd), ControlCommand) == cmd
    for bad in (Query(id="1", reply_to="g", kind="nope"), Query(id="", reply_to="g", kind="stats"),
                Query(id="1", reply_to="g", kind="urls", limit=10**6)):  # fmt: skip
        with pytest.raises(ValueError):
            ControlCommand(action="query", query=bad).validate()
    with pytest.raises(ValueError):
        ControlCommand(action="block", scope="a.test").validate()  # no until


# -- the API's terms -------------------------------------------------------------------------------
def test_crawl_ids_and_default_keys_as_the_reference_service_makes_them() -> None:
    assert frontier_crawl("") == frontier_crawl("DEFAULT") == "default" and api_crawl("default") == "DEFAULT"
    assert frontier_crawl("BESPOKE") == "BESPOKE" and api_crawl("BESPOKE") == "BESPOKE"
    with pytest.raises(ValueError):
        frontier_crawl("x" * 65)
    assert default_key("http://gac.icann.org?language_id=9") == "gac.icann.org"
    assert default_key("https://Key1.COM:8080/a") == "key1.com"  # no port, lower case: as StormCrawler's keys
    assert default_key("http://a.test&b") == "a.test"
    with pytest.raises(BadItem):
        queue_key("http:///nohost", "")
    with pytest.raises(BadItem):
        queue_key("http://a.test/", "k" * 256)


def test_a_fetch_status_and_throttling_headers_are_read_from_stormcrawler_metadata() -> None:
    signal = fetch_signal({"fetch.statusCode": ["429"], "protocol.Retry-After": ["30"], "protocol.server": ["x"],
                           "depth": ["1"]})  # fmt: skip
    assert signal.status == 429 and signal.headers == {"retry-after": "30"}
    assert fetch_signal({"depth": ["1"]}).status == 0
    assert fetch_signal({"fetch.statusCode": ["oops"]}).status == 0


def test_a_clients_date_comes_with_its_retry_after_as_a_workers_does() -> None:
    """One header list (frontier.core.headers.THROTTLE_HEADERS): a StormCrawler update's
    ``protocol.Date`` reaches the frontier, so an HTTP-date Retry-After is read against the server's
    clock, as from a worker's feedback (the gateway's own list had no ``date``: the wait was read
    against the frontier's clock)."""
    from frontier.core.headers import THROTTLE_HEADERS, gate_seconds

    signal = fetch_signal({"fetch.statusCode": ["429"], "protocol.Retry-After": ["Wed, 21 Oct 2015 07:28:30 GMT"],
                           "protocol.Date": ["Wed, 21 Oct 2015 07:28:00 GMT"]})  # fmt: skip
    assert signal.headers == {"retry-after": "Wed, 21 Oct 2015 07:28:30 GMT", "date": "Wed, 21 Oct 2015 07:28:00 GMT"}
    gate = gate_seconds(signal.status, signal.headers, True, now=T0)  # the frontier's clock years later
    assert gate is not None and gate[0] == pytest.approx(30.0)
    every = {f"protocol.{name}": ["1"] for name in THROTTLE_HEADERS}
    assert set(fetch_signal(every).headers or {}) == set(THROTTLE_HEADERS)


def test_submissions_are_bounded_and_never_move_autothrottle() -> None:
    sub = submission("http://a.test/", "a.test", "default", {"k": ["v"]}, None)
    assert sub.autothrottle is False and sub.key == "a.test"
    with pytest.raises(BadItem):
        submission("http://a.test/", "a.test", "default", {"k": ["v" * 60_000]}, None)
    with pytest.raises(Rejection):
        parse_input(json.dumps({"url": "http://a.test/", "refetch_at": 5}).encode())  # known needs a key


def test_a_url_its_client_completes_after_its_hold_ran_out_counts_as_done_for_its_crawl() -> None:
    """A new user's trial (2026-11-27): a URL completed by its client (a known update) after its
    GetURLs hold had run out, so queued again meanwhile, was done for GetStats but not in the
    crawl's counts (``crawl-frontier crawls``: done 2 against completed 3). Its queued entry goes when
    its turn comes, and counts as done then."""
    f = make()
    f.ingest([item("http://a.test/1")], T0)
    [job] = jobs(f, T0)
    change(f, "hold", T0 + 1, leases=[job.lease], until=T0 + 30)
    f.expire_leases(T0 + 31)  # the hold ran out: queued again
    f.ingest([item(job.item.url, refetch=0)], T0 + 35)  # the client's update, late
    assert not jobs(f, T0 + 40), "decided done: not handed out again"
    [row] = [r for r in f.crawl_rows(T0 + 40) if r.crawl == "default"]
    assert row.completed == 1 and f.stats.completed == 1, row
    assert ask(f, "stats", T0 + 40).counts["completed"] == 1

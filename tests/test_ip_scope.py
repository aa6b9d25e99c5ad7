"""The optional per-IP scope (``frontier.ip_scope``) with an injected resolver and injected time:
hosts on one address share one partition and one scope ``ip:<address>``; a host that does not
resolve (or not in time) goes by its domain; the answers are cached with a bound and an age
limit; feedback, robots jobs and operators' commands reach the partition holding the URLs.
Also: follow-ups are re-validated by the router (scope limits)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import replace

import msgspec
import pytest
from confluent_kafka import Message

from frontier.config import AutoThrottleSettings, FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core.control import control_record, control_records
from frontier.core.kv import MemoryKV
from frontier.core.lru import TtlCache
from frontier.intake.addresses import Resolver, ip_literal, preferred
from frontier.intake.router import route
from frontier.partition import PartitionFrontier
from topics.partitioning import partition_for, partition_key, partition_of
from topics.schemas import ControlCommand, Feedback, Job, UrlItem, decode, encode
from workers.api.followups import follow_ups
from workers.api.outcome import FetchResult

PARTITIONS = 64
TOPIC = "t.urls"
DNS = {
    "a.test": ["10.0.0.7", "2001:db8::7"],
    "www.b.test": ["10.0.0.7"],  # another domain on the same server as a.test
    "c.test": ["10.0.0.9"],
    "v6.test": ["2001:db8::1", "2001:db8::a"],
}


class Table:
    """A resolver lookup from a table; counts lookups; unknown names raise like getaddrinfo."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = dict(table)  # a copy: tests change their own
        self.calls: list[str] = []

    def __call__(self, host: str) -> Sequence[str]:
        self.calls.append(host)
        if host not in self.table:
            raise OSError(-2, "Name or service not known")
        return self.table[host]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def msgs(*values: bytes) -> list[Message]:
    return [Message(topic=TOPIC, partition=0, offset=i, value=v) for i, v in enumerate(values)]


def routed_items(values: list[bytes], resolver: Resolver | None) -> dict[int, list[UrlItem]]:
    routed, rejected = route(msgs(*values), PARTITIONS, TOPIC, resolver)
    assert rejected == []
    return {p: [item for item, _ in entries] for p, entries in routed.items()}


# -- choosing and caching addresses -----------------------------------------------------------------
def test_one_address_per_server_ipv4_first_then_the_lowest() -> None:
    assert preferred(["2001:db8::1", "10.0.0.9", "10.0.0.10", "10.0.0.2"]) == "10.0.0.2"
    assert preferred(["10.0.0.10", "10.0.0.2"]) == preferred(["10.0.0.2", "10.0.0.10"])  # round-robin order
    assert preferred(["2001:db8::a", "2001:DB8::1"]) == "2001:db8::1"
    assert preferred(["::ffff:10.0.0.3", "10.0.0.4"]) == "10.0.0.3"  # IPv4-mapped counts as IPv4
    assert preferred(["fe80::1%eth0"]) == "fe80::1"
    assert preferred(["junk"]) == "" and preferred([]) == ""
    assert (ip_literal("127.0.0.1"), ip_literal("[::1]"), ip_literal("::ffff:7f00:1")) == (
        "127.0.0.1",
        "::1",
        "127.0.0.1",
    )
    assert ip_literal("example.com") == ""


def test_the_cache_keeps_its_bound_over_a_million_hosts() -> None:
    cache = TtlCache(max_entries=1000)
    for i in range(1_000_000):
        cache.put(f"h{i}.test", "10.0.0.1", expires=10.0)
        assert len(cache) <= 1000
    assert len(cache) == 1000
    assert cache.get("h999999.test", 0.0) == "10.0.0.1" and cache.get("h0.test", 0.0) is None
    assert cache.get("h999000.test", 0.0) == "10.0.0.1"  # read: now the most recent
    cache.put("new.test", "10.0.0.2", expires=10.0)
    assert cache.get("h999000.test", 0.0) is not None and cache.get("h999001.test", 0.0) is None  # LRU out
    assert cache.get("new.test", 10.0) is None and len(cache) == 999  # expired, and gone when read


def test_answers_are_cached_until_their_ttl_failures_shorter() -> None:
    table, clock = Table(DNS), Clock()
    resolver = Resolver(table, ttl=600.0, negative_ttl=60.0, clock=clock)
    try:
        first = resolver.addresses(["a.test", "www.b.test", "nx.test", "127.0.0.1", "::1"])
        assert first == {"a.test": "10.0.0.7", "www.b.test": "10.0.0.7", "nx.test": "", "127.0.0.1": "127.0.0.1",
                         "::1": "::1"}  # fmt: skip
        assert sorted(table.calls) == ["a.test", "nx.test", "www.b.test"]  # IP literals need no lookup
        clock.now += 59.0
        assert resolver.addresses(["a.test", "nx.test"]) == {"a.test": "10.0.0.7", "nx.test": ""}
        assert len(table.calls) == 3
        clock.now += 2.0  # the failure is looked up again, the answer is still fresh
        table.table["nx.test"] = ["10.0.0.8"]
        assert resolver.addresses(["a.test", "nx.test"]) == {"a.test": "10.0.0.7", "nx.test": "10.0.0.8"}
        assert table.calls[3:] == ["nx.test"]
        clock.now += 600.0
        table.table["a.test"] = ["10.0.0.99"]
        assert resolver.addresses(["a.test"]) == {"a.test": "10.0.0.99"}
    finally:
        resolver.close()


def test_lookups_run_concurrently_and_a_batch_waits_at_most_its_timeout() -> None:
    """Four lookups that each wait until all four have started: they finish only if they run at
    once. A fifth never answers in time: the batch returns after the timeout without it, and its
    answer, once there, is cached for the next batch."""
    started = threading.Barrier(4, timeout=5)
    release_slow = threading.Event()

    def lookup(host: str) -> Sequence[str]:
        if host == "slow.test":
            assert release_slow.wait(10)
            return ["10.0.0.5"]
        started.wait()
        return [f"10.0.1.{host[1]}"]

    resolver = Resolver(lookup, timeout=0.5, threads=8)
    try:
        t0 = time.monotonic()
        out = resolver.addresses(["h1.test", "h2.test", "h3.test", "h4.test", "slow.test"])
        elapsed = time.monotonic() - t0
        assert out == {"h1.test": "10.0.1.1", "h2.test": "10.0.1.2", "h3.test": "10.0.1.3", "h4.test": "10.0.1.4",
                       "slow.test": ""}  # fmt: skip
        assert 0.5 <= elapsed < 3.0, elapsed
        assert resolver.unresolved == 1
        release_slow.set()
        deadline = time.monotonic() + 5
        while resolver.addresses(["slow.test"]) != {"slow.test": "10.0.0.5"}:
            assert time.monotonic() < deadline, "the slow answer never reached the cache"
        assert resolver.lookups == 5  # the slow host was looked up once, not once per batch
    finally:
        release_slow.set()
        resolver.close()


def test_lookups_in_flight_are_bounded() -> None:
    gate = threading.Event()

    def stuck(host: str) -> Sequence[str]:
        gate.wait(10)
        return ["10.0.0.1"]

    resolver = Resolver(stuck, timeout=0.05, threads=2, max_pending=3)
    try:
        out = resolver.addresses([f"h{i}.test" for i in range(10)])
        assert set(out.values()) == {""} and resolver.lookups == 3
        resolver.addresses([f"g{i}.test" for i in range(10)])
        assert resolver.lookups == 3  # no more while three are in flight
    finally:
        gate.set()
        resolver.close()


# -- routing ------------------------------------------------------------------------------------
def test_without_ip_scope_nothing_is_resolved_and_urls_go_by_domain() -> None:
    routed = routed_items([b"http://a.test/1", b"http://www.b.test/1"], None)
    items = [i for batch in routed.values() for i in batch]
    assert all(i.ip == "" for i in items)
    assert {p: [i.domain for i in b] for p, b in routed.items()} == {
        partition_for(i.domain, PARTITIONS): [i.domain] for i in items}  # fmt: skip
    assert b'"ip"' not in encode(items[0])  # omitted when empty: older readers never see it


def test_domains_on_one_address_share_a_partition() -> None:
    table = Table(DNS)
    resolver = Resolver(table)
    try:
        values = [b"http://a.test/1", b"http://www.b.test/1", b"http://c.test/1", b"http://nx.test/1",
                  b"http://2130706433/x", b"http://[2001:db8::7]/", b"http://v6.test/"]  # fmt: skip
        assert partition_for("a.test", PARTITIONS) != partition_for("b.test", PARTITIONS)  # else proves nothing
        routed = routed_items(values, resolver)
        by_host = {i.host: (p, i.ip) for p, batch in routed.items() for i in batch}
        assert by_host == {
            "a.test": (partition_for("10.0.0.7", PARTITIONS), "10.0.0.7"),
            "www.b.test": (partition_for("10.0.0.7", PARTITIONS), "10.0.0.7"),
            "c.test": (partition_for("10.0.0.9", PARTITIONS), "10.0.0.9"),
            "nx.test": (partition_for("nx.test", PARTITIONS), ""),  # does not resolve: by its domain
            "127.0.0.1": (partition_for("127.0.0.1", PARTITIONS), "127.0.0.1"),
            "2001:db8::7": (partition_for("2001:db8::7", PARTITIONS), "2001:db8::7"),
            "v6.test": (partition_for("2001:db8::1", PARTITIONS), "2001:db8::1"),
        }
        routed_items(values, resolver)
        assert sorted(table.calls) == ["a.test", "c.test", "nx.test", "v6.test", "www.b.test"]  # once each
    finally:
        resolver.close()


def test_feedback_goes_where_its_url_went() -> None:
    """The worker keys a job's feedback with the same function as the router keyed the URL."""
    item = UrlItem(url="http://a.test/", host="a.test", domain="a.test", ip="10.0.0.7")
    fb = Feedback(lease="l", host=item.host, domain=item.domain, ip=item.ip, url=item.url, outcome="fetched")
    assert partition_key(fb) == partition_key(item) == "10.0.0.7"
    assert partition_of(fb, PARTITIONS) == partition_of(item, PARTITIONS) == partition_for("10.0.0.7", PARTITIONS)
    plain = msgspec.structs.replace(item, ip="")
    assert partition_of(plain, PARTITIONS) == partition_for("a.test", PARTITIONS)
    old = decode(b'{"url":"http://a.test/","host":"a.test","domain":"a.test"}', UrlItem)  # before the field
    assert old.ip == "" and partition_key(old) == "a.test"


# -- the partition: one scope per address ----------------------------------------------------------
FIXED = AutoThrottleSettings(enabled=False)
POLITE = ScopeSettings(delay=1.0, concurrency=1, autothrottle=FIXED)
NO_ROBOTS = FrontierConfig(robots_obey=False, max_inflight=10_000, dispatch_lead=0.0)


def frontier(settings: FrontierConfig = NO_ROBOTS) -> PartitionFrontier:
    return PartitionFrontier(0, MemoryKV(), settings, ThrottleConfig(POLITE, {}), lambda k, v: None,
                             user_agent="testbot/1.0")  # fmt: skip


def resolved(values: list[bytes]) -> list[UrlItem]:
    resolver = Resolver(Table(DNS))
    try:
        return [i for batch in routed_items(values, resolver).values() for i in batch]
    finally:
        resolver.close()


def done(f: PartitionFrontier, job: Job, now: float, status: int = 200) -> None:
    i = job.item
    f.feedback(Feedback(lease=job.lease, host=i.host, domain=i.domain, ip=i.ip, url=i.url, outcome="fetched",
                        status=status, latency=0.01, sent_at=now, done_at=now), now)  # fmt: skip


def test_two_domains_on_one_address_share_one_scope_spaced_by_one_delay() -> None:
    f = frontier()
    items = resolved([b"http://a.test/1", b"http://www.b.test/1", b"http://c.test/1"])
    assert {tuple(f.scopes_of(i)) for i in items} == {
        ("a.test", "ip:10.0.0.7"), ("www.b.test", "ip:10.0.0.7"), ("c.test", "ip:10.0.0.9")}  # fmt: skip
    f.ingest(items, 0.0)
    first = f.dispatch(0.0).jobs
    assert sorted(j.item.host for j in first) in (["a.test", "c.test"], ["c.test", "www.b.test"])
    for job in first:
        done(f, job, 0.01)
    assert f.dispatch(0.5).jobs == []  # the other host of 10.0.0.7 waits for the address's delay
    [second] = f.dispatch(1.01).jobs
    assert second.item.ip == "10.0.0.7" and second.item.host not in {j.item.host for j in first}
    assert (f.scope_row("ip:10.0.0.7", 1.01).sent, f.scope_row("ip:10.0.0.9", 1.01).sent) == (2, 1)


def test_without_an_address_there_is_no_address_scope() -> None:
    f = frontier()
    items = routed_items([b"http://a.test/1", b"http://www.b.test/1"], None)
    plain = [i for batch in items.values() for i in batch]
    assert [f.scopes_of(i) for i in plain] == [[i.host] for i in plain]
    f.ingest(plain, 0.0)
    assert len(f.dispatch(0.0).jobs) == 2  # two servers as far as the frontier knows: both at t=0


def test_robots_jobs_carry_the_address_so_their_feedback_comes_back() -> None:
    f = frontier(replace(NO_ROBOTS, robots_obey=True))
    [item] = resolved([b"http://a.test/page"])
    f.ingest([item], 0.0)
    [robots] = f.dispatch(0.0).jobs
    assert robots.kind == "robots" and robots.item.ip == "10.0.0.7"
    assert partition_of(robots.item, PARTITIONS) == partition_of(item, PARTITIONS)


def test_a_late_answer_still_throttles_the_address() -> None:
    f = frontier()
    [item] = resolved([b"http://a.test/1"])
    f.ingest([item], 0.0)
    [job] = f.dispatch(0.0).jobs
    late = Feedback(lease="gone", host="a.test", domain="a.test", ip="10.0.0.7", url=item.url, outcome="fetched",
                    status=429, latency=0.1, sent_at=0.5, done_at=0.6, headers={"retry-after": "30"})  # fmt: skip
    f.feedback(late, 1.0)
    before = f.scope_row("ip:10.0.0.9", 1.0)  # another address: untouched
    row = f.scope_row("ip:10.0.0.7", 1.0)
    assert row.gate_until >= 30.0 and before.gate_until < 30.0, (row, before)
    del job


# -- operators' commands ----------------------------------------------------------------------------
def test_commands_on_names_go_to_every_partition_whatever_the_senders_config() -> None:
    """Whether the frontier keys URLs by address is its configuration, not the sender's: a host,
    domain or named scope command reaches every partition (a command stored in the domain's
    partition alone would change nothing with ip_scope on); an address scope has one partition."""
    pause = ControlCommand(action="pause", scope="www.example.com")
    every = control_records(pause, 8)
    assert sorted(p for _, _, p in every) == list(range(8)) and {k for k, _, _ in every} == {b"example.com"}
    assert control_record(pause, 8)[2] == partition_for("example.com", 8)  # its key is still the domain
    named = control_records(ControlCommand(action="pause", scope="example.com#api"), 8)
    assert len(named) == 8
    by_address = ControlCommand(action="set", scope="ip:10.0.0.7", delay=5.0)
    [(key, _, partition)] = control_records(by_address, 8)
    assert (key, partition) == (b"10.0.0.7", partition_for("10.0.0.7", 8))


# -- follow-ups are validated again by the router --------------------------------------------------
PAGE = FetchResult(sent_at=1.0, status=200, headers={"content-type": "text/html"},
                   body=b'<a href="/next">n</a><a href="/other">o</a>')  # fmt: skip


def followed(item: UrlItem) -> list[bytes]:
    return [encode(sub) for sub in follow_ups(item, PAGE, 5, "testbot")]


def test_follow_ups_of_a_url_at_the_scope_limits_are_accepted_as_they_are() -> None:
    scopes = [f"{i}" + "s" * 31 for i in range(8)]
    [item] = [i for b in routed_items([json.dumps({"url": "http://a.test/", "scopes": scopes, "follow": 2})
                                       .encode()], None).values() for i in b]  # fmt: skip
    routed, rejected = route(msgs(*followed(item)), PARTITIONS, TOPIC)
    assert rejected == []
    out = [i for entries in routed.values() for i, _ in entries]
    assert len(out) == 2 and all(i.scopes == scopes and i.follow == 1 for i in out)


def test_follow_ups_over_the_limits_are_rejected_by_the_router() -> None:
    """An item queued before the limits (or forged) cannot spread its scopes to its links."""
    item = UrlItem(url="http://a.test/", host="a.test", domain="a.test", follow=2, scopes=[f"s{i}" for i in range(50)])
    routed, rejected = route(msgs(*followed(item)), PARTITIONS, TOPIC)
    assert routed == {} and len(rejected) == 2
    assert all(r.reason == "too many scopes (50 > 8)" for r in rejected)


@pytest.mark.parametrize("scopes", [["api", "api"], ["b", "a", "b"]])
def test_duplicate_scopes_make_one_queue(scopes: list[str]) -> None:
    f = frontier()
    [item] = [i for b in routed_items([json.dumps({"url": "http://a.test/", "scopes": scopes}).encode()], None)
              .values() for i in b]  # fmt: skip
    assert f.scopes_of(item) == ["a.test", *(f"a.test#{s}" for s in sorted(set(scopes)))]


def test_commands_on_an_address_scope_use_the_routers_spelling() -> None:
    """ip:2001:0DB8::0:1, ip:[2001:db8::1] and ip:2001:db8::1 are one scope in one partition (the
    router's key), not three names nothing has."""
    canonical = control_record(ControlCommand(action="pause", scope="ip:2001:db8::1"), 12)
    for spelled in ("ip:2001:0db8:0:0:0:0:0:1", "ip:[2001:db8::1]", "ip:2001:DB8::1"):
        key, value, partition = control_record(ControlCommand(action="pause", scope=spelled), 12)
        assert (key, partition) == (canonical[0], canonical[2]) and b'"ip:2001:db8::1"' in value

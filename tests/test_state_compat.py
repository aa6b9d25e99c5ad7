"""State written before crawls still loads: the version-1 partition store and its changelog
(``topics/fixtures/state_v1``, written by ``tests/make_state_v1.py`` at the last commit before
crawls; never regenerated) rebuilt by the current code.

Every URL of that store is in the default crawl. Checked against the fixture's ``expected``
section: the queues and their order, the lease in flight, the done and revisit URLs, the
operators' overrides, the counters; then what the current code adds: ``crawl_rows`` shows the
default crawl, a URL seen in the default crawl is new in another crawl. Each check runs on the
store as it was and on a restore from the changelog. Pure: injected time, no Kafka.
"""

from __future__ import annotations

import base64
import heapq
import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import msgspec
import pytest

from frontier.config import FrontierConfig, ThrottleConfig
from frontier.core.kv import MemoryKV
from frontier.core.urls import parse_input, seen_fingerprint
from frontier.partition import SEEN_DONE, SEEN_OPEN, SEEN_REVISIT, PartitionFrontier, read_seen
from frontier.partition.keys import LEASE, QUEUE, REVISIT, queue_prefix
from frontier.partition.records import item_dec
from topics.schemas import DEFAULT_CRAWL, SCHEMA_VERSION, ControlCommand, CrawlStatus, Feedback, Job, UrlItem

FIXTURE = Path(__file__).resolve().parent.parent / "topics" / "fixtures" / "state_v1"
STATE: dict[str, Any] = json.loads((FIXTURE / "partition.json").read_text(encoding="utf-8"))
CHANGELOG: list[dict[str, Any]] = json.loads((FIXTURE / "changelog.json").read_text(encoding="utf-8"))["records"]
SRC: dict[str, Any] = STATE["source"]
EXP: dict[str, Any] = STATE["expected"]
START = SRC["clock_end"] + 1.0  # the rebuild's clock: a second after the version-1 code stopped
(LEASE_ID, LEASED) = next(iter(EXP["inflight"].items()))  # the one page in flight
LATENCY = 0.3  # a simulated worker answers this long after the send
SOURCES = ["store", "changelog"]
STATE_NAMES = {SEEN_OPEN: "open", SEEN_DONE: "done", SEEN_REVISIT: "revisit"}


def store_kv() -> MemoryKV:
    kv = MemoryKV()
    for entry in STATE["entries"]:
        kv.put(bytes.fromhex(entry["key"]), base64.b64decode(entry["value"]))
    return kv


def changelog_kv(upto: int | None = None) -> MemoryKV:
    """A restore from the changelog (its first ``upto`` records)."""
    kv = MemoryKV()
    for record in CHANGELOG[:upto]:
        key = bytes.fromhex(record["key"])
        if record["value"] is None:
            kv.delete(key)
        else:
            kv.put(key, base64.b64decode(record["value"]))
    return kv


def load(kv: MemoryKV, now: float = START) -> PartitionFrontier:
    f = PartitionFrontier(SRC["partition"], kv, FrontierConfig(), ThrottleConfig(), lambda k, v: None,
                          user_agent=SRC["user_agent"])  # fmt: skip
    f.rebuild(now)
    return f


@pytest.fixture(params=SOURCES)
def f(request: pytest.FixtureRequest) -> PartitionFrontier:
    return load(store_kv() if request.param == "store" else changelog_kv())


def item(url: str, crawl: str | None = None) -> UrlItem:
    return parse_input(url.encode() if crawl is None else json.dumps({"url": url, "crawl": crawl}).encode())


def seen_state(f: PartitionFrontier, url: str) -> str:
    raw = f.kv.get(b"S" + seen_fingerprint(item(url)))
    return "absent" if raw is None else STATE_NAMES.get(read_seen(raw)[0], "legacy")


def rows(f: PartitionFrontier, now: float = START) -> dict[str, CrawlStatus]:
    return {r.crawl: r for r in f.crawl_rows(now)}


def answer(job_or_lease: Job | str, url: str, now: float, sent_at: float) -> Feedback:
    host = url.split("/")[2]
    lease = job_or_lease if isinstance(job_or_lease, str) else job_or_lease.lease
    domain = ".".join(host.split(".")[-2:])
    return Feedback(lease=lease, host=host, domain=domain, url=url, outcome="fetched", status=200,
                    sent_at=sent_at, done_at=sent_at + LATENCY, latency=LATENCY)  # fmt: skip


def drive(f: PartitionFrontier, now: float, until: float) -> tuple[list[Job], float]:
    """Dispatch and answer every page job (``LATENCY`` after its send) until ``until``."""
    jobs: list[Job] = []
    pending: list[tuple[float, int, Job]] = []
    for _ in range(20_000):
        while pending and pending[0][0] <= now:
            _, _, job = heapq.heappop(pending)
            assert f.feedback(answer(job, job.item.url, now, job.not_before), now)
        f.expire_leases(now)
        for job in f.dispatch(now).jobs:
            assert job.kind == "page", job  # every origin's robots.txt is known
            jobs.append(job)
            heapq.heappush(pending, (job.not_before + LATENCY, len(jobs), job))
        times = [t for t in (f.next_wakeup(), pending[0][0] if pending else None) if t is not None]
        if not times or min(times) > until:
            return jobs, until
        now = max(min(times), now + 1e-3)
    raise AssertionError(f"no end by {now}")


def urls_by_host(jobs: list[Job]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for job in jobs:
        out.setdefault(job.item.host, []).append(job.item.url)
    return out


# -- what was written loads ---------------------------------------------------------------------------
def test_the_fixture_is_the_version_1_layout() -> None:
    assert SRC["commit"].startswith("29d73cf") and SRC["layout"].startswith("frontier/partition/keys.py before")
    assert not any(bytes.fromhex(e["key"]).startswith(b"K") for e in STATE["entries"])  # no crawl record
    stored = [(bytes.fromhex(e["key"]), base64.b64decode(e["value"])) for e in STATE["entries"]]
    items = [item_dec.decode(value) for key, value in stored if key[:1] in (QUEUE, REVISIT)]
    assert len(items) == 7 and all(i.crawl == DEFAULT_CRAWL for i in items)
    # a restore from the changelog gives the store, entry for entry
    assert sorted(changelog_kv().scan(b"")) == sorted(store_kv().scan(b""))


def test_queues_leases_and_counters_load(f: PartitionFrontier) -> None:
    assert f.queued() == EXP["queued_total"] == 6
    assert f.inflight == len(EXP["inflight"]) == 1
    stats = msgspec.to_builtins(f.stats)
    added = {k: v for k, v in stats.items() if k not in EXP["stats"]}  # counters added since: zero in old state
    assert stats == {**EXP["stats"], **added} and set(added.values()) <= {0}
    assert {k: msgspec.to_builtins(v) for k, v in f.overrides().items()} == EXP["overrides"]
    assert {role: f.applied_input(role) for role in EXP["inputs"]} == EXP["inputs"]
    for qid, entries in EXP["queues"].items():  # each queue, in dispatch order
        got = [(key.hex(), item_dec.decode(raw).url) for key, raw in f.kv.scan(queue_prefix(qid))]
        assert got == [(e["key"], e["url"]) for e in entries]
    assert [item_dec.decode(raw).url for _, raw in f.kv.scan(REVISIT)] == [r["url"] for r in EXP["revisits"]]
    assert {url: seen_state(f, url) for url in EXP["seen"]} == EXP["seen"]
    assert f.scope_settings("example.org#api").delay == 5.0


def test_crawl_rows_show_the_default_crawl(f: PartitionFrontier) -> None:
    r = rows(f)
    assert list(r) == [DEFAULT_CRAWL]  # a "crawl" key inside an item's meta names no crawl
    d = r[DEFAULT_CRAWL]
    assert (d.queued, d.inflight, d.revisits) == (6, 1, 1)
    assert d.next_revisit == EXP["revisits"][0]["due"] and not d.paused and d.per_host == 0
    assert list(f.crawl_names()) == [DEFAULT_CRAWL] and f.held_reason(DEFAULT_CRAWL) is None


def test_the_lease_in_flight_is_known_and_its_feedback_closes_it(f: PartitionFrontier) -> None:
    assert LEASED["url"] == "https://api.example.org/v1/items?page=1"
    now = START
    assert f.feedback(answer(LEASE_ID, LEASED["url"], now, LEASED["dispatched_at"]), now)
    assert f.inflight == 0 and f.stats.completed == EXP["stats"]["completed"] + 1
    assert seen_state(f, LEASED["url"]) == "done"
    d = rows(f, now)[DEFAULT_CRAWL]
    assert (d.inflight, d.completed, d.fetched, d.queued) == (0, 1, 1, 6)
    assert not f.feedback(answer(LEASE_ID, LEASED["url"], now, LEASED["dispatched_at"]), now + 1)  # closed now
    # the api scope's next page: once the 5 s delay set on example.org#api allows it
    jobs, _ = drive(f, now, now + 60.0)
    api = [j for j in jobs if j.item.host == "api.example.org"]
    assert [j.item.url for j in api] == ["https://api.example.org/v1/items?page=2"]
    assert api[0].not_before >= LEASED["dispatched_at"] + 5.0


def test_a_lost_lease_of_the_old_store_is_queued_again() -> None:
    f = load(store_kv())
    assert f.expire_leases(LEASED["deadline"]) == 1
    assert f.inflight == 0 and f.queued() == 7
    assert rows(f, LEASED["deadline"])[DEFAULT_CRAWL].queued == 7


def test_seen_urls_are_duplicates_in_the_default_crawl_only(f: PartitionFrontier) -> None:
    urls = [*EXP["done"], LEASED["url"], EXP["revisits"][0]["url"], *EXP["queued"]["www.example.com"]]
    duplicates = f.stats.duplicates
    assert f.ingest([item(u) for u in urls], START) == 0  # done, in flight, waiting for a revisit, queued
    assert f.ingest([item(u, DEFAULT_CRAWL) for u in urls], START) == 0  # the default crawl named
    assert f.stats.duplicates == duplicates + 2 * len(urls)
    assert f.ingest([item(u, "other") for u in urls], START) == len(urls)  # another crawl: new there
    assert f.ingest([item(u, "other") for u in urls], START) == 0
    r = rows(f)
    assert (r["other"].queued, r[DEFAULT_CRAWL].queued) == (len(urls), 6)


def test_queued_pages_dispatch_in_order_and_the_overrides_hold(f: PartitionFrontier) -> None:
    now = START
    f.feedback(answer(LEASE_ID, LEASED["url"], now, LEASED["dispatched_at"]), now)
    jobs, now = drive(f, now, START + 300.0)
    by_host = urls_by_host(jobs)
    assert by_host == {
        "www.example.com": EXP["queued"]["www.example.com"],
        "api.example.org": EXP["queued"]["api.example.org"],
    }  # blog.example.fr: still paused
    for job in jobs:  # the default crawl's jobs: version 1, as before crawls
        assert job.item.crawl == DEFAULT_CRAWL and job.v == SCHEMA_VERSION
    about = next(j for j in jobs if "about" in j.item.url)
    assert about.item.meta["crawl"] == "c-1"  # meta kept as it was; not a crawl
    www = [j.not_before for j in jobs if j.item.host == "www.example.com"]
    assert all(b - a >= 2.0 for a, b in pairwise(www))  # robots.txt Crawl-delay: 2
    assert f.control(ControlCommand(action="resume", scope="blog.example.fr"), now) == 0
    more, _ = drive(f, now, now + 300.0)
    assert urls_by_host(more) == {"blog.example.fr": EXP["queued"]["blog.example.fr"]}
    assert f.queued() == 0 and f.inflight == 0
    assert rows(f, now)[DEFAULT_CRAWL].fetched == len(jobs) + len(more) + 1


def test_the_revisit_url_is_queued_again_when_due(f: PartitionFrontier) -> None:
    due = EXP["revisits"][0]["due"]
    url = EXP["revisits"][0]["url"]
    f.feedback(answer(LEASE_ID, LEASED["url"], START, LEASED["dispatched_at"]), START)
    jobs, _ = drive(f, START, due - 1.0)
    assert url not in {j.item.url for j in jobs} and f.stats.revisits == 0
    assert rows(f, due - 1.0)[DEFAULT_CRAWL].revisits == 1
    later, _ = drive(f, due - 1.0, due + 60.0)
    assert [j.item.url for j in later if j.item.host == "www.example.com"] == [url]
    assert later[0].not_before >= due and later[0].item.revisit == 3600.0
    assert f.stats.revisits == 1
    d = rows(f, due + 60.0)[DEFAULT_CRAWL]
    assert d.revisits == 1 and d.next_revisit is not None
    assert abs(d.next_revisit - (later[0].not_before + LATENCY + 3600.0)) < 0.01


def test_crawl_commands_work_on_the_loaded_default_crawl(f: PartitionFrontier) -> None:
    pause = ControlCommand(action="pause", crawl=DEFAULT_CRAWL)
    pause.validate()
    f.control(pause, START)
    f.feedback(answer(LEASE_ID, LEASED["url"], START, LEASED["dispatched_at"]), START)
    jobs, now = drive(f, START, START + 100.0)
    assert jobs == [] and rows(f, now)[DEFAULT_CRAWL].paused
    f.control(ControlCommand(action="resume", crawl=DEFAULT_CRAWL), now)
    jobs, now = drive(f, now, now + 100.0)
    assert {j.item.host for j in jobs} == {"www.example.com", "api.example.org"}
    assert f.control(ControlCommand(action="drop", crawl=DEFAULT_CRAWL), now) == 2  # blog's two, paused by scope
    assert f.queued() == 0 and rows(f, now)[DEFAULT_CRAWL].dropped == 2


# -- a store written before crawls, at an earlier moment ---------------------------------------------------------
def _before_the_revisit() -> int:
    """The changelog records up to the last counters' save before the revisit's V entry: a
    version-1 store with pages queued and leased, and no revisit waiting."""
    first_v = next(n for n, r in enumerate(CHANGELOG) if bytes.fromhex(r["key"]).startswith(REVISIT))
    return max(n for n, r in enumerate(CHANGELOG[:first_v]) if r["key"] == b"C".hex()) + 1


def test_the_default_crawl_is_listed_for_an_old_store_without_revisits() -> None:
    # (found by this test at 7014243: the default crawl had a row only when V entries made one, so an old
    # store without revisits listed no crawl at all, and client.wait_done() saw no row: "done")
    kv = changelog_kv(_before_the_revisit())
    queued = sum(1 for _ in kv.scan(QUEUE))
    leased = sum(1 for _ in kv.scan(LEASE))
    assert (queued, leased) == (6, 2) and next(kv.scan(REVISIT), None) is None
    f = load(kv, SRC["clock_end"])
    assert (f.queued(), f.inflight) == (6, 2)
    r = rows(f, SRC["clock_end"])
    assert DEFAULT_CRAWL in r and (r[DEFAULT_CRAWL].queued, r[DEFAULT_CRAWL].inflight) == (6, 2)
    assert DEFAULT_CRAWL in set(f.crawl_names())

"""Scopes, robots.txt and visibility at the partition level, with injected time.

THROTTLING.md cases 21-22 (several scopes per job) live here, where jobs meet scopes.
"""

import itertools
from dataclasses import replace

import pytest

from frontier.config import AutoThrottleSettings, FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core.causes import Cause
from frontier.core.kv import MemoryKV
from frontier.core.urls import parse_input
from frontier.partition import PartitionFrontier
from topics.schemas import Feedback, Job, UrlItem

FIXED = AutoThrottleSettings(enabled=False)
OPEN = ScopeSettings(delay=0.0, concurrency=100, autothrottle=FIXED)
NO_ROBOTS = FrontierConfig(robots_obey=False, max_inflight=10_000, dispatch_lead=0.0)


def frontier(scopes: dict[str, ScopeSettings], settings: FrontierConfig = NO_ROBOTS,
             default: ScopeSettings = OPEN) -> PartitionFrontier:  # fmt: skip
    return PartitionFrontier(0, MemoryKV(), settings, ThrottleConfig(default, scopes), lambda k, v: None,
                             user_agent="testbot/1.0")  # fmt: skip


def item(url: str, scopes: list[str] | None = None) -> UrlItem:
    sub = {"url": url, "scopes": scopes or []}
    return parse_input(repr(sub).replace("'", '"').encode())


def done(f: PartitionFrontier, job: Job, now: float, status: int = 200, body: bytes = b"", error: str = "") -> None:
    i = job.item
    f.feedback(Feedback(lease=job.lease, host=i.host, domain=i.domain, url=i.url, outcome="fetched", status=status,
                        latency=0.01, sent_at=now, body=body, error=error), now)  # fmt: skip


def test_case_21_a_job_waits_for_all_its_scopes_others_do_not() -> None:
    f = frontier({"A": replace(OPEN, delay=1.0), "B": replace(OPEN, delay=5.0)})
    f.ingest([item("http://x.test/ab1", ["A", "B"])], 0.0)
    assert [j.item.url for j in f.dispatch(0.0).jobs] == ["http://x.test/ab1"]
    f.ingest([item("http://x.test/ab2", ["A", "B"]), item("http://x.test/a", ["A"])], 0.5)
    assert f.dispatch(0.9).jobs == []
    assert [j.item.url for j in f.dispatch(1.0).jobs] == ["http://x.test/a"]  # {A} goes at t=1
    assert f.dispatch(4.99).jobs == []
    assert [j.item.url for j in f.dispatch(5.0).jobs] == ["http://x.test/ab2"]  # {A,B} waited for B until t=5


def test_case_22_registrable_domain_scope_limits_all_its_hosts() -> None:
    f = frontier({
        "toscrape.com": replace(OPEN, concurrency=32),
        "books.toscrape.com": replace(OPEN, concurrency=24),
        "quotes.toscrape.com": replace(OPEN, concurrency=16),
    })  # fmt: skip
    f.ingest([item(f"http://books.toscrape.com/{i}") for i in range(30)], 0.0)
    f.ingest([item(f"http://quotes.toscrape.com/{i}") for i in range(20)], 0.0)
    jobs = f.dispatch(0.0).jobs
    hosts = [j.item.host for j in jobs]
    assert (hosts.count("books.toscrape.com"), hosts.count("quotes.toscrape.com")) == (24, 8)
    [row] = [r for r in f.scope_rows(0.0) if r.scope == "quotes.toscrape.com"]
    assert row.inflight == 8 and "toscrape.com" in row.reason and "concurrency" in row.reason
    done(f, jobs[0], 1.0)  # a books slot frees: toscrape.com has room for one more
    assert len(f.dispatch(1.0).jobs) == 1


def test_named_scopes_are_per_registrable_domain() -> None:
    f = frontier({"api": replace(OPEN, concurrency=1)})
    f.ingest([item("http://a.test/1", ["api"]), item("http://a.test/2", ["api"]),
              item("http://b.test/1", ["api"])], 0.0)  # fmt: skip
    assert sorted(j.item.url for j in f.dispatch(0.0).jobs) == ["http://a.test/1", "http://b.test/1"]


# -- robots.txt --------------------------------------------------------------------------------
ROBOTS = replace(NO_ROBOTS, robots_obey=True, robots_ttl=3600.0, robots_retry=60.0)
POLITE = replace(OPEN, delay=0.5, concurrency=2)


def test_robots_first_then_disallow_is_reported_and_crawl_delay_applies() -> None:
    f = frontier({}, ROBOTS, POLITE)
    f.ingest([item("http://r.test/private/x"), item("http://r.test/public"), item("http://r.test/private/y")], 0.0)
    first = f.dispatch(0.0)
    assert [(j.kind, j.item.url) for j in first.jobs] == [("robots", "http://r.test/robots.txt")]
    assert f.dispatch(0.2).jobs == [] and "robots.txt pending" in f.scope_rows(0.2)[0].reason
    done(f, first.jobs[0], 0.1, body=b"User-agent: testbot\nDisallow: /private\nCrawl-delay: 3\n")
    # Crawl-delay is a server-stated floor: 3 s + 2 % + 20 ms from the end of the previous response (0.1)
    early = f.dispatch(3.17)  # the disallowed URL at the head is reported; /public waits for the floor
    assert early.jobs == [] and [p.url for p in early.disallowed] == ["http://r.test/private/x"]
    out = f.dispatch(3.2)
    assert [p.url for p in out.disallowed] == ["http://r.test/private/y"]
    assert [j.item.url for j in out.jobs] == ["http://r.test/public"]
    f.ingest([item("http://r.test/next")], 3.3)
    done(f, out.jobs[0], 3.3)  # sent and ended at 3.3
    assert f.dispatch(6.36).jobs == []  # (and concurrency 1)
    assert [j.item.url for j in f.dispatch(6.4).jobs] == ["http://r.test/next"]
    assert f.stats.disallowed == 2 and f.stats.robots_fetched == 1


@pytest.mark.parametrize(("status", "error"), [(503, ""), (0, "connect")])
def test_robots_unavailable_means_disallow_all_and_retry(status: int, error: str) -> None:
    f = frontier({}, ROBOTS, POLITE)
    f.ingest([item("http://u.test/a")], 0.0)
    robots = f.dispatch(0.0).jobs[0]
    done(f, robots, 0.1, status=status, error=error)
    out = f.dispatch(30.0)
    assert out.jobs == [] and out.disallowed == []  # nothing fetched, nothing given up either
    [row] = f.scope_rows(30.0)
    assert "unavailable" in row.reason and row.wait_until == pytest.approx(60.1)
    retry = f.dispatch(60.2).jobs
    assert [j.kind for j in retry] == ["robots"]
    done(f, retry[0], 60.3, status=404)  # 4xx: allow everything
    assert [j.item.url for j in f.dispatch(62.0).jobs] == ["http://u.test/a"]  # after the backoff the 5xx caused


def test_robots_is_refetched_after_its_ttl() -> None:
    f = frontier({}, ROBOTS, POLITE)
    f.ingest([item("http://t.test/1")], 0.0)
    done(f, f.dispatch(0.0).jobs[0], 0.1, status=404)
    done(f, f.dispatch(1.0).jobs[0], 1.1)
    f.ingest([item("http://t.test/2")], 3700.0)
    assert [j.kind for j in f.dispatch(3700.2).jobs] == ["robots"]


def test_robots_state_survives_rebuild() -> None:
    kv = MemoryKV()
    f = PartitionFrontier(0, kv, ROBOTS, ThrottleConfig(POLITE, {}), lambda k, v: None, user_agent="testbot")
    f.ingest([item("http://s.test/private/1"), item("http://s.test/ok")], 0.0)
    done(f, f.dispatch(0.0).jobs[0], 0.1, body=b"User-agent: *\nDisallow: /private\n")
    g = PartitionFrontier(0, kv, ROBOTS, ThrottleConfig(POLITE, {}), lambda k, v: None, user_agent="testbot")
    g.rebuild(1.0)
    out = g.dispatch(1.0)
    assert [i.url for i in out.disallowed] == ["http://s.test/private/1"]
    assert [j.item.url for j in out.jobs] == ["http://s.test/ok"]


# -- visibility --------------------------------------------------------------------------------
def test_delay_changes_are_reported_with_their_cause() -> None:
    changes: list[tuple[str, float, float, str, Cause, float]] = []
    f = frontier({}, NO_ROBOTS, replace(OPEN, delay=0.5))
    f.on_change = lambda *c: changes.append(c)
    f.ingest([item("http://c.test/1")], 0.0)
    job = f.dispatch(0.0).jobs[0]
    i = job.item
    f.feedback(Feedback(lease=job.lease, host=i.host, domain=i.domain, url=i.url, outcome="retry", status=429,
                        latency=0.01, sent_at=0.0, headers={"retry-after": "30"}), 0.1)  # fmt: skip
    assert changes and changes[-1][0] == "c.test" and changes[-1][2] == 0.75  # 1.5 x the 0.5 s interval
    assert "gate until +31s" in changes[-1][3] and "Retry-After" in changes[-1][3] and changes[-1][4] == Cause.GATE
    [row] = f.scope_rows(0.2)
    assert row.gate_until == pytest.approx(0.1 + 30 * 1.02 + 0.02) and row.backoff == 0.75 and row.queued == 1


@pytest.mark.parametrize(
    ("status", "error"),
    [(429, ""), (0, "tls"), (0, "blocked_address"), (0, "bad_response"), (0, "client:SomethingNew"), (0, "reset")],
)
def test_robots_without_a_usable_answer_disallows_all_and_retries(status: int, error: str) -> None:
    """RFC 9309: only 2xx and 4xx (not 429) are answers; 429, TLS, a blocked address, a malformed
    response and unknown errors mean "fetch nothing, try again later", never "allow all"."""
    f = frontier({}, ROBOTS, POLITE)
    f.ingest([item("https://badcert.test/a")], 0.0)
    done(f, f.dispatch(0.0).jobs[0], 0.1, status=status, error=error)
    assert f.dispatch(1.0).jobs == [] and f.dispatch(1.0).reports == []
    assert [j.kind for j in f.dispatch(60.2).jobs] == ["robots"]


def test_unreachable_robots_is_retried_less_and_less_then_its_urls_end_with_an_error() -> None:
    """A dead host: robots.txt retries double (60 s, 120 s, ... up to 6 h), and after a day of
    failures the queued URLs are reported with a final error instead of waiting forever."""
    f = frontier({}, replace(ROBOTS, robots_retry_max=6 * 3600.0), POLITE)
    f.ingest([item(f"http://dead.test/{n}") for n in range(100)], 0.0)
    now, robots_fetches, ended = 0.0, 0, []
    while now < 7 * 86400 and len(ended) < 100:
        out = f.dispatch(now)
        for job in out.jobs:
            assert job.kind == "robots", job.item.url  # no page is ever fetched
            robots_fetches += 1
            done(f, job, now + 0.1, error="connect")
        for report in out.reports:
            ended.append(report.page)
            f.reported(report.lease)
        nxt = f.next_wakeup()
        now = max(now + 0.2, nxt if nxt is not None else now + 60)
    assert len(ended) == 100 and all(p.outcome == "error" and "robots.txt unreachable" in p.error for p in ended)
    assert robots_fetches < 30  # doubling from 60 s to 6 h: about 12 attempts in the first day
    assert 86400 <= ended[0].fetched_at < 86400 + 6 * 3600 + 60


def test_robots_txt_answered_429_is_fetched_again_after_its_retry_after() -> None:
    """Issue 23: a robots.txt answered 429 with Retry-After: 2 was fetched again 60 s later, then
    120 s later. With the defaults it is fetched again once its Retry-After has passed (and at the
    host's pace), never before."""
    f = frontier({}, replace(NO_ROBOTS, robots_obey=True), POLITE)
    f.ingest([item("http://busy.test/a")], 0.0)
    now, robots_at, page_at = 0.0, [], None
    while now < 120 and page_at is None:
        for job in f.dispatch(now).jobs:
            if job.kind == "robots":
                robots_at.append(now)
                if len(robots_at) <= 2:
                    f.feedback(Feedback(lease=job.lease, host="busy.test", domain="busy.test", url=job.item.url,
                                        outcome="fetched", status=429, headers={"retry-after": "2"}, sent_at=now),
                               now + 0.05)  # fmt: skip
                else:
                    done(f, job, now + 0.05, status=404)
            else:
                page_at = now
        nxt = f.next_wakeup()
        now = max(now + 0.05, nxt if nxt is not None else now + 1)
    assert len(robots_at) == 3 and page_at is not None
    gaps = [b - a for a, b in itertools.pairwise(robots_at)]
    assert all(2.0 <= g < 4.0 for g in gaps), gaps  # after the Retry-After, not a minute later
    assert page_at - robots_at[-1] < 4.0


def test_robots_txt_unreachable_is_retried_at_growing_intervals_from_a_second() -> None:
    """The defaults: robots_retry 1 s doubling to robots_retry_max 60 s, as the host's outage
    probing (a site that resets its first eight connections is reached within about two minutes,
    a dead one probed once a minute)."""
    f = frontier({}, replace(NO_ROBOTS, robots_obey=True), POLITE)
    f.ingest([item("http://reset.test/a")], 0.0)
    now, robots_at = 0.0, []
    while now < 3600:
        for job in f.dispatch(now).jobs:
            assert job.kind == "robots"
            robots_at.append(now)
            done(f, job, now + 0.05, error="connect")
        nxt = f.next_wakeup()
        now = max(now + 0.05, nxt if nxt is not None else now + 1)
    gaps = [b - a for a, b in itertools.pairwise(robots_at)]
    assert gaps[0] < 3 and sum(gaps[:8]) < 200  # eight resets: through within minutes
    assert 55 < max(gaps) < 70 and len(robots_at) < 70


def test_robots_txt_is_per_origin() -> None:
    """https://h/ and http://h:8080/ have robots.txt files of their own (RFC 9309 §2.3)."""
    f = frontier({}, ROBOTS, POLITE)
    f.ingest([item("http://o.test:8080/public/1"), item("https://o.test/private/1")], 0.0)
    first = f.dispatch(0.0).jobs
    assert [j.item.url for j in first] == ["http://o.test:8080/robots.txt"]
    done(f, first[0], 0.1, body=b"User-agent: *\nDisallow:\n")
    second = f.dispatch(3.0)
    assert [j.item.url for j in second.jobs] == ["http://o.test:8080/public/1"]  # that origin's rules
    done(f, second.jobs[0], 3.1)
    third = f.dispatch(6.0)
    assert [j.item.url for j in third.jobs] == ["https://o.test/robots.txt"]  # not fetched under http's rules
    done(f, third.jobs[0], 6.1, body=b"User-agent: *\nDisallow: /private\n")
    assert [p.url for p in f.dispatch(9.0).disallowed] == ["https://o.test/private/1"]


def test_a_finished_crawls_hosts_stay_in_the_status_rows_with_what_was_learned() -> None:
    """Found by a new user's trial: once nothing was queued, status listed no scope, so a finished
    crawl's learned delay could not be read. Rows left over go to the scopes used most recently."""
    f = frontier({}, default=ScopeSettings(delay=2.0, concurrency=1, autothrottle=FIXED))
    f.ingest([item("http://done.test/1"), item("http://busy.test/1"), item("http://busy.test/2")], 0.0)
    for job in f.dispatch(0.0).jobs:
        done(f, job, 0.5)
    rows = {r.scope: r for r in f.scope_rows(1.0, top=5)}
    assert set(rows) == {"busy.test", "done.test"}, rows
    assert (rows["busy.test"].queued, rows["done.test"].queued) == (1, 0)
    assert rows["done.test"].reason == "idle" and rows["done.test"].delay == 2.0 and rows["done.test"].sent == 1
    assert [r.scope for r in f.scope_rows(1.0, top=1)] == ["busy.test"]  # queued scopes first

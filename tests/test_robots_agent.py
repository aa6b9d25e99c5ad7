"""robots.txt matched with a URL's own agent (a Scrapy spider's User-Agent, issue 21): its
Disallow and its Crawl-delay, while URLs without an agent keep the frontier's own."""

from __future__ import annotations

import itertools
import json

import pytest

from frontier.config import AutoThrottleSettings, FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core.kv import MemoryKV
from frontier.core.robots import Rules
from frontier.core.urls import Rejection, parse_input, robots_agent
from frontier.partition import PartitionFrontier
from frontier.partition.records import RobotsRecord
from topics.schemas import Feedback, Job

ROBOTS = b"User-agent: bookshop-bot\nCrawl-delay: 5\nDisallow: /private\n\nUser-agent: *\nDisallow:\n"
POLITE = ScopeSettings(delay=1.0, concurrency=1, autothrottle=AutoThrottleSettings(enabled=False))
SETTINGS = FrontierConfig(max_retries=2, robots_obey=True, dispatch_lead=0.0)


def make() -> PartitionFrontier:
    return PartitionFrontier(0, MemoryKV(), SETTINGS, ThrottleConfig(POLITE, {}), lambda k, v: None,
                             user_agent="kafka-crawl-frontier/0.1")  # fmt: skip


def submission(url: str, agent: str = "") -> bytes:
    return json.dumps({"url": url, **({"agent": agent} if agent else {}), "crawl": "books"}).encode()


def robots_fed(f: PartitionFrontier, job: Job, now: float) -> None:
    i = job.item
    f.feedback(Feedback(lease=job.lease, host=i.host, domain=i.domain, url=i.url, outcome="fetched", status=200,
                        latency=0.05, sent_at=now, body=ROBOTS), now)  # fmt: skip


def test_rules_match_the_agent_given_else_their_own() -> None:
    rules = Rules(RobotsRecord(status=200, body=ROBOTS, fetched_at=0.0), "kafka-crawl-frontier")
    assert rules.allowed("http://a.test/private/1")
    assert not rules.allowed("http://a.test/private/1", "bookshop-bot")
    assert rules.delay() == 0.0 and rules.delay("bookshop-bot") == 5.0


def test_intake_keeps_the_product_token_and_refuses_a_bad_agent() -> None:
    item = parse_input(submission("http://a.test/", "bookshop-bot/1.0 (+https://example.invalid)"))
    assert item.agent == "bookshop-bot"
    assert parse_input(submission("http://a.test/")).agent == ""
    with pytest.raises(Rejection, match="invalid agent"):
        parse_input(submission("http://a.test/", "bot\n/1.0"))


def test_a_url_with_an_agent_obeys_that_agents_rules_and_crawl_delay() -> None:
    f = make()
    mine = [parse_input(submission(f"http://shop.test/{p}", "bookshop-bot/1.0")) for p in ("private/1", "a", "b")]
    theirs = parse_input(submission("http://shop.test/private/2"))
    f.ingest([*mine, theirs], 0.0)
    [robots] = f.dispatch(0.0).jobs
    assert robots.kind == "robots"
    robots_fed(f, robots, 0.1)
    now, sent, disallowed = 1.2, [], []
    while now < 30 and len(sent) + len(disallowed) < 4:
        out = f.dispatch(now)
        disallowed += [p.url for p in out.disallowed]
        for job in out.jobs:
            sent.append((now, job.item.url))
            i = job.item
            f.feedback(Feedback(lease=job.lease, host=i.host, domain=i.domain, url=i.url, outcome="fetched",
                                status=200, latency=0.05, sent_at=now), now + 0.05)  # fmt: skip
        now += 0.1
    # the spider's agent may not fetch /private; the frontier's own agent may (robots.txt says so)
    assert disallowed == ["http://shop.test/private/1"]
    assert sorted(u for _, u in sent) == ["http://shop.test/a", "http://shop.test/b", "http://shop.test/private/2"]
    # and the agent's Crawl-delay (5 s) holds for the host, for every crawl of it
    times = [t for t, _ in sent]
    assert all(b - a >= 5.0 - 1e-6 for a, b in itertools.pairwise(times)), sent


def test_a_url_without_an_agent_keeps_the_frontiers_own_pace() -> None:
    f = make()
    f.ingest([parse_input(submission(f"http://shop.test/{n}")) for n in range(3)], 0.0)
    [robots] = f.dispatch(0.0).jobs
    robots_fed(f, robots, 0.1)
    now, sent = 1.2, []
    while now < 10 and len(sent) < 3:
        for job in f.dispatch(now).jobs:
            sent.append(now)
            i = job.item
            f.feedback(Feedback(lease=job.lease, host=i.host, domain=i.domain, url=i.url, outcome="fetched",
                                status=200, latency=0.05, sent_at=now), now + 0.05)  # fmt: skip
        now += 0.1
    assert len(sent) == 3 and sent[-1] - sent[0] < 5.0  # the 1 s delay, not bookshop-bot's 5 s


def test_an_agent_delay_is_applied_again_when_the_rules_are_fetched_again() -> None:
    f = make()
    f.ingest([parse_input(submission("http://shop.test/a", "bookshop-bot/1.0"))], 0.0)
    [robots] = f.dispatch(0.0).jobs
    robots_fed(f, robots, 0.1)
    f.dispatch(1.2)
    assert "bookshop-bot" in f.robots._agent_delays["http://shop.test"]
    i = robots.item
    again = Feedback(lease="again", host=i.host, domain=i.domain, url=i.url, outcome="fetched", status=200, body=ROBOTS)
    f.robots.store("http://shop.test", i, again, 2.0)  # stored again (a refetch): the memo goes with it
    assert "http://shop.test" not in f.robots._agent_delays


def test_the_product_token_of_a_browser_like_user_agent_is_the_bots() -> None:
    assert robots_agent("Mozilla/5.0 (compatible; bookshop-bot/1.0; +https://example.invalid)") == "bookshop-bot"
    assert robots_agent("bookshop-bot/1.0 (+https://example.invalid)") == "bookshop-bot"
    rules = Rules(RobotsRecord(status=200, body=ROBOTS, fetched_at=0.0), "kafka-crawl-frontier")
    assert not rules.allowed("http://a.test/private/1", robots_agent("Mozilla/5.0 (compatible; bookshop-bot/1.0)"))

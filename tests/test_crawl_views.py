"""What readers make of crawls (pure, no Kafka): rows added up over instances, the bounded set the
page and metrics show, what keeps a crawl from being done, the table, topic and group names of
crawls, and submissions given a crawl on the command line."""

from __future__ import annotations

import json
import re

import pytest

from frontier.client import submission_value
from frontier.client.crawls import OTHER, busy, crawl_rows, render_crawls, shown
from frontier.observability.metrics import FrontierMetrics
from topics.catalog import Topics, crawl_token, workers_group
from topics.schemas import CrawlStatus, Status


def status(instance: str, *rows: CrawlStatus) -> Status:
    return Status(instance=instance, at=100.0, partitions=[], totals={}, scopes=[], crawls=list(rows))


def test_rows_are_added_up_over_instances() -> None:
    a1 = CrawlStatus(crawl="a", queued=3, inflight=1, completed=5, fetched=4, failed=1, revisits=2, next_revisit=50.0,
                     workers=2, pages_per_s=1.5)  # fmt: skip
    a2 = CrawlStatus(crawl="a", queued=2, completed=1, fetched=1, revisits=1, next_revisit=40.0, paused=True,
                     workers=2, pages_per_s=0.5)  # fmt: skip
    b = CrawlStatus(crawl="b", completed=7, workers=0)
    rows = {r.crawl: r for r in crawl_rows([status("i1", a1, b), status("i2", a2)])}
    a = rows["a"]
    assert (a.queued, a.inflight, a.completed, a.fetched, a.failed, a.revisits) == (5, 1, 6, 5, 1, 3)
    assert a.next_revisit == 40.0 and a.paused and a.workers == 2 and a.pages_per_s == 2.0
    assert rows["b"].completed == 7
    assert a1.queued == 3, "the instance's own row is not changed by adding up"
    assert [r.crawl for r in crawl_rows([status("i1", b, a1)])] == ["a", "b"], "busiest first"


def test_shown_is_bounded_whatever_the_number_of_crawls() -> None:
    rows = [CrawlStatus(crawl=f"c{i:03d}", queued=1000 - i, completed=1) for i in range(500)]
    top = shown(rows, top=20)
    assert len(top) == 21 and top[-1].crawl == OTHER
    assert top[-1].queued == sum(r.queued for r in rows[20:]) and top[-1].completed == 480
    assert shown(rows[:5], top=20) == rows[:5]


def test_metrics_name_at_most_the_busiest_crawls_and_other() -> None:
    rows = [CrawlStatus(crawl=f"c{i:03d}", queued=1000 - i) for i in range(100)]
    metrics = FrontierMetrics(lambda: {}, lambda: rows)
    labels = {s.labels["crawl"] for m in metrics.registry.collect() if m.name == "crawl_frontier_crawl_urls"
              for s in m.samples}  # fmt: skip
    assert len(labels) == 21 and OTHER in labels and "c000" in labels and "c099" not in labels


def test_busy_says_what_keeps_a_crawl_from_being_done() -> None:
    assert busy(None, 0.0) == ""
    assert busy(CrawlStatus(crawl="a", completed=9), 0.0) == ""
    assert busy(CrawlStatus(crawl="a", queued=2, inflight=1), 0.0) == "2 queued, 1 in flight"
    later = CrawlStatus(crawl="a", revisits=1, next_revisit=100.0)
    assert busy(later, 0.0) == "", "a revisit beyond the window is not work left"
    assert "revisit" in busy(later, 0.0, window=200.0)
    assert "revisit" in busy(later, 100.0)


def test_the_crawls_table() -> None:
    rows = [CrawlStatus(crawl="books", queued=4, workers=0), CrawlStatus(crawl="news", completed=3, workers=2,
                                                                        per_host=10, over_limit=1)]  # fmt: skip
    text = render_crawls([status("i1", *rows)], now=0.0)
    books = next(line for line in text.splitlines() if line.startswith("books"))
    assert "no worker" in books
    assert "at most 10 queued per host (1 over)" in text
    assert "nothing submitted" in render_crawls([status("i1", *rows)], now=0.0, only="missing")
    assert "no live frontier" in render_crawls([])


@pytest.mark.parametrize(
    "name", ["books", "Books", "team a/books", "a.b", "a_b", "café", "x" * 64, "default2", "-", "books.1234abcd"]
)
def test_every_crawl_name_gives_a_legal_distinct_topic(name: str) -> None:
    token = crawl_token(name)
    topic = Topics(prefix="p.").jobs_of(name)
    assert re.fullmatch(r"[a-zA-Z0-9._-]+", topic) and len(topic) <= 249, topic
    assert "_" not in token, "Kafka takes '_' and '.' for the same in topic names"
    assert topic == f"p.crawl.jobs.{token}" and workers_group("app", name) == f"app-workers.{token}"
    others = ["books", "Books", "team a/books", "a.b", "a_b", "café", "x" * 64, "default2", "-", "books.1234abcd"]
    assert sum(crawl_token(o) == token for o in others) == 1, "distinct names, distinct tokens"


def test_the_default_crawl_keeps_its_topic_and_group() -> None:
    assert Topics(prefix="p.").jobs_of("default") == "p.crawl.jobs"
    assert workers_group("app", "default") == "app-workers"


def test_a_crawl_given_on_the_command_line_goes_with_each_line() -> None:
    assert json.loads(submission_value(b"https://a.test/", crawl="books")) == {
        "url": "https://a.test/",
        "crawl": "books",
    }
    own = json.loads(submission_value(b'{"url": "https://a.test/", "crawl": "news"}', crawl="books"))
    assert own["crawl"] == "news", "a JSON line naming its crawl keeps it"
    assert submission_value(b"https://a.test/") == b"https://a.test/", "the default crawl: the line as it is"


def test_crawls_served_by_the_broker_s_last_answer_and_as_before_crawls_when_it_is_stale() -> None:
    from frontier.service import crawls as directory_module
    from frontier.service.crawls import STALE, CrawlDirectory

    d = CrawlDirectory({}, Topics(), "app")
    d.know(frozenset({"default", "a", "b"}))
    assert d.served() == {"default"}, "before any answer: the default crawl only"
    d._made.update({"a", "b"})
    d.workers = {"default": 0, "a": 2, "b": 0}
    d._answered_at = directory_module.time.monotonic()
    assert d.served() == {"a"}, "the answer: only crawls with a worker"
    d._answered_at -= STALE + 1
    assert d.served() == {"default", "a", "b"}, "an answer too old is not trusted: every crawl with a topic"


def test_a_crawl_is_copartitioned_when_its_jobs_topic_has_the_frontier_s_partition_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from types import SimpleNamespace

    from frontier.service.crawls import CrawlDirectory

    topics = Topics(prefix="p.", partitions=8)
    d = CrawlDirectory({}, topics, "app")
    listed = {topics.jobs: SimpleNamespace(partitions=dict.fromkeys(range(8))),
              topics.jobs_of("a"): SimpleNamespace(partitions=dict.fromkeys(range(8))),
              topics.jobs_of("odd"): SimpleNamespace(partitions=dict.fromkeys(range(3)))}  # fmt: skip
    crawls = ["default", "a", "odd", "new"]  # (new: its topic not made yet)
    assert d._copartitioned(listed, crawls) == {"default", "a"}
    assert d._copartitioned(listed, crawls) == {"default", "a"}
    said = [r.getMessage() for r in caplog.records if "murmur2" in r.getMessage()]
    assert said == ["p.crawl.jobs.odd has 3 partitions, not the frontier's 8: its jobs go by murmur2 of the host"]

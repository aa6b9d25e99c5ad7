"""Status from several instances: merged totals and rows, the rendering, and the live page's
per-scope history (rates from successive snapshots)."""

import time

import msgspec

from frontier.client.history import StatusHistory
from frontier.client.status import overview, render
from topics.schemas import ScopeStatus, Status, encode


def row(scope: str, queued: int, sent: int = 0, delay: float = 1.0, reason: str = "ready") -> ScopeStatus:
    return ScopeStatus(scope=scope, queued=queued, inflight=0, delay=delay, concurrency=1, gate_until=0.0,
                       backoff=0.0, reason=reason, sent=sent)  # fmt: skip


def snap(instance: str, at: float, partitions: list[int], totals: dict[str, int], rows: list[ScopeStatus]) -> Status:
    return Status(instance=instance, at=at, partitions=partitions, totals=totals, scopes=rows)


def test_overview_merges_instances() -> None:
    a = snap("a", 10.0, [0, 1], {"queued": 5, "fetched": 7, "pages_per_s": 3}, [row("x.test", 4), row("y.test", 1)])
    b = snap("b", 11.0, [2, 3], {"queued": 2, "fetched": 1, "pages_per_s": 2}, [row("z.test", 2, reason="delay")])
    ov = overview([a, b], top=2)
    assert ov.instances == ["a", "b"] and ov.partitions == 4 and ov.at == 11.0
    assert ov.totals == {"queued": 7, "fetched": 8, "pages_per_s": 5}
    assert [r.scope for r in ov.scopes] == ["x.test", "z.test"]  # the busiest two over both instances
    text = render([a, b], top=2, now=11.0)
    assert "instances: 2  partitions: 4" in text and "fetched=8" in text and "pages_per_s=5" in text
    assert "y.test" not in text and "z.test" in text


def test_live_page_history_rates_come_from_successive_snapshots() -> None:
    feed = StatusHistory()  # the feed's state without its Kafka consumer: fed by hand
    now = time.time()
    for i, (sent, delay) in enumerate([(0, 2.0), (4, 1.0), (12, 0.5)]):
        feed.apply(b"a", encode(snap("a", now + 2 * i, [0], {"fetched": sent}, [row("x.test", 9, sent, delay)])))
    points = feed.history_json("x.test")["points"]
    assert [p["delay"] for p in points] == [2.0, 1.0, 0.5]
    assert [p["rate"] for p in points] == [None, 2.0, 4.0]
    assert feed.overview_json(5)["totals"] == {"fetched": 12}
    feed.apply(b"a", None)  # the instance left (tombstone)
    assert feed.overview_json(5)["instances"] == []
    assert feed.history_json("nobody.test")["points"] == []


def test_reasons_read_as_sentences_with_the_wait() -> None:
    from frontier.client.status import sentence

    assert sentence("delay (a.test)", 10.4, 10.0) == "delay: next send in 0.4 s (a.test)"
    assert (
        sentence("gate (a.test)", 100.0, 10.0)
        == "closed by the server (Retry-After or RateLimit): opens in 2 min (a.test)"
    )
    assert sentence("floor (a.test)", 10.0, 10.0) == "server-stated interval (Crawl-delay): due now (a.test)"
    assert sentence("concurrency (a.test)", None, 10.0) == "every slot in use: waits for a response (a.test)"
    assert sentence("paused (a.test)", None, 10.0) == "paused by an operator (a.test)"
    assert sentence("robots.txt pending", None, 10.0) == "robots.txt pending"
    assert sentence("ready", None, 10.0) == "ready"
    assert sentence("idle", None, 10.0) == "idle: nothing queued"
    due = msgspec.structs.replace(row("x.test", 3, 0, 1.0, reason="delay (x.test)"), wait_until=10.0)
    text = render([snap("a", 10.0, [0], {}, [due])], now=10.0)
    assert "delay: due now (x.test)" in text and "until now" not in text

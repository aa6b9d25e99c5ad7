"""Times set from outside are capped (issue 37): a server's Retry-After or RateLimit reset, a
worker's or client's hold, a BlockQueueUntil or ``block`` command. Each is held to ``now`` plus one
named setting (``throttle.*.gate_max``, ``frontier.hold_max``, ``frontier.block_max``), so no single
record freezes a host (or every host under a suffix) for years. Pure, with injected time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from frontier.config import AutoThrottleSettings, ScopeSettings
from frontier.core.caps import capped_seconds, capped_until
from frontier.core.policy import Done, ScopeState, Sent, apply, decide, delay
from tests.test_urlfrontier import SETTINGS, T0, change, item, jobs, make
from topics.schemas import ControlCommand, Feedback

NOW = 1_000.0


@pytest.mark.parametrize(
    ("until", "most", "expected"),
    [(NOW + 10, 3600, NOW + 10),  # within the cap: as given
     (NOW + 1e11, 3600, NOW + 3600),  # a hostile far future
     (9.9e10, 60, NOW + 60),
     (0.0, 60, 0.0),  # none stays none
     (NOW - 5, 60, NOW - 5)],  # the past stays the past (nothing held)
)  # fmt: skip
def test_a_time_from_outside_is_at_most_its_cap_away(until: float, most: float, expected: float) -> None:
    assert capped_until(until, NOW, most) == expected


@pytest.mark.parametrize(("seconds", "most", "expected"), [(5, 60, 5), (9_999_999_999, 60, 60), (-3, 60, 0)])
def test_a_span_from_outside_is_at_most_its_cap(seconds: float, most: float, expected: float) -> None:
    assert capped_seconds(seconds, most) == expected


FIXED = AutoThrottleSettings(enabled=False)
S = ScopeSettings(delay=0.5, concurrency=1, autothrottle=FIXED, gate_max=3600.0)
HUGE = "9999999999"


@pytest.mark.parametrize(
    "headers",
    [{"ratelimit": f"limit=100, remaining=5, reset={HUGE}"},  # a 200's budget: its spread
     {"ratelimit-limit": "100", "ratelimit-remaining": "1", "ratelimit-reset": HUGE},
     {"x-ratelimit-remaining": "2", "x-ratelimit-reset": HUGE},
     {"ratelimit": f"limit=100, remaining=0, reset={HUGE}"},  # a spent budget: its gate
     {"retry-after": HUGE}],
)  # fmt: skip
def test_a_hostile_reset_on_any_answer_waits_at_most_gate_max(headers: dict[str, str]) -> None:
    for status in (200, 429):
        state = apply(ScopeState(), Sent(NOW), NOW, S)
        state = apply(state, Done(sent_at=NOW, done_at=NOW + 0.1, status=status, latency=0.1, headers=headers),
                      NOW + 0.1, S)  # fmt: skip
        at = decide(state, NOW + 0.1, S).at
        waits = max(delay(state, S), (at or NOW) - NOW)
        assert 0 < waits <= S.gate_max * 1.25, (status, headers, waits)  # (the gates' safety margin)


def test_a_tighter_gate_max_is_the_cap() -> None:
    tight = replace(S, gate_max=60.0)
    state = apply(ScopeState(), Sent(NOW), NOW, tight)
    budget = {"ratelimit": f"limit=9, remaining=1, reset={HUGE}"}
    answer = Done(sent_at=NOW, done_at=NOW + 0.1, status=200, latency=0.1, headers=budget)
    state = apply(state, answer, NOW + 0.1, tight)
    assert delay(state, tight) <= 60.0 * 1.25


def test_a_hold_from_a_worker_or_a_client_lasts_at_most_hold_max() -> None:
    f = make()
    f.ingest([item("http://a.test/1"), item("http://b.test/1")], T0)
    first, second = jobs(f, T0)
    it = first.item
    f.feedback(Feedback(lease=first.lease, host=it.host, domain=it.domain, url=it.url, outcome="held",
                        held_until=1e11), T0)  # fmt: skip
    assert change(f, "hold", T0, leases=[second.lease], until=9.9e10).counts == {"held": 1}
    after = T0 + SETTINGS.hold_max + 60  # past the cap (and the lease's own time): both queued again
    f.expire_leases(after)
    assert sorted(j.item.url for j in jobs(f, after)) == ["http://a.test/1", "http://b.test/1"]


def test_a_block_lasts_at_most_block_max() -> None:
    f = make()
    f.control(ControlCommand(action="block", scope="test", until=9.9e10), T0)  # every host under "test"
    f.ingest([item("http://a.test/1")], T0)
    assert not jobs(f, T0 + SETTINGS.block_max - 1)
    assert [j.item.url for j in jobs(f, T0 + SETTINGS.block_max + 1)] == ["http://a.test/1"]


def test_a_partition_keeps_at_most_max_crawls_and_says_why_it_left_a_url_out() -> None:
    """Each crawl name is a changelogged record in every partition (issue 37): a producer naming a
    new crawl per record would grow them without end. Past ``frontier.max_crawls`` a URL of a new
    crawl is left out with the reason (the service puts it on ``crawl.rejected``), a crawl command
    naming a new crawl is refused; known crawls and the default one go on."""
    from dataclasses import replace as dc_replace

    from frontier.core.kv import MemoryKV
    from frontier.partition import PartitionFrontier
    from frontier.partition.records import Refused
    from tests.test_urlfrontier import THROTTLE

    f = PartitionFrontier(0, MemoryKV(), dc_replace(SETTINGS, max_crawls=2), THROTTLE, lambda k, v: None)
    assert f.ingest([item("http://a.test/1", crawl="one"), item("http://a.test/2", crawl="two")], T0) == 2
    assert f.refused == []
    taken = f.ingest([item("http://a.test/3", crawl="three"), item("http://a.test/4", crawl="one"),
                      item("http://a.test/5")], T0)  # fmt: skip
    assert taken == 2 and [i for i, _ in f.refused] == [0], f.refused
    assert "too many crawls" in f.refused[0][1] and "'three'" in f.refused[0][1]
    with pytest.raises(Refused, match="too many crawls"):
        f.control(ControlCommand(action="pause", crawl="four"), T0)
    f.control(ControlCommand(action="pause", crawl="one"), T0)  # a known crawl: applied


def test_the_live_pages_token_is_never_shown_in_a_repr() -> None:
    """Issue 37: a configuration printed (a log line, a traceback's locals) must not carry it."""
    from frontier.config import Config, FrontierConfig

    cfg = Config(frontier=FrontierConfig(web_token="s3cret-token-of-16+chars"))
    assert "s3cret" not in repr(cfg) and "s3cret" not in str(cfg.frontier)

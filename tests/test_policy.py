"""The policy's fixed part with injected time (AutoThrottle off): delay between sends,
concurrency cap, real send times. The adaptive rules are in test_throttling_cases.py."""

import pytest

from frontier.config import AutoThrottleSettings, ScopeSettings
from frontier.core.policy import Done, Lost, ScopeState, Sent, apply, decide

FIXED = AutoThrottleSettings(enabled=False)
S = ScopeSettings(delay=1.0, concurrency=1, autothrottle=FIXED)


def test_first_request_is_ready_at_once() -> None:
    assert decide(ScopeState(), 100.0, S).reason == "ready"


def test_concurrency_blocks_until_feedback() -> None:
    s = apply(ScopeState(), Sent(100.0), 100.0, S)
    d = decide(s, 105.0, S)
    assert (d.at, d.reason) == (None, "concurrency")
    s = apply(s, Done(sent_at=100.2, status=200, latency=0.1), 100.5, S)
    d = decide(s, 100.5, S)
    assert (d.at, d.reason) == (pytest.approx(101.2), "delay")  # timed from the real send
    assert decide(s, 101.2, S).reason == "ready"


def test_delay_applies_between_sends_even_with_free_slots() -> None:
    wide = ScopeSettings(delay=0.5, concurrency=3, autothrottle=FIXED)
    s = apply(ScopeState(), Sent(10.0), 10.0, wide)
    assert decide(s, 10.2, wide).at == pytest.approx(10.5)
    s = apply(s, Sent(10.5), 10.5, wide)
    s = apply(s, Sent(11.0), 11.0, wide)
    assert decide(s, 11.6, wide).reason == "concurrency"


def test_lagging_worker_pushes_next_slot_later_never_earlier() -> None:
    s = apply(ScopeState(), Sent(10.0), 10.0, S)
    s = apply(s, Done(sent_at=14.0), 14.1, S)  # sat in a queue for 4 s
    assert decide(s, 14.1, S).at == pytest.approx(15.0)
    s2 = apply(apply(ScopeState(), Sent(10.0), 10.0, S), Done(sent_at=0.0), 10.3, S)  # never sent (expired)
    assert decide(s2, 10.3, S).at == pytest.approx(11.0)


def test_lost_lease_frees_the_slot() -> None:
    s = apply(apply(ScopeState(), Sent(10.0), 10.0, S), Lost(), 70.0, S)
    assert s.inflight == 0 and decide(s, 70.0, S).reason == "ready"


def test_inflight_never_negative() -> None:
    assert apply(ScopeState(), Lost(), 1.0, S).inflight == 0

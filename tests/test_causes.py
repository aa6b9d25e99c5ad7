"""Each way the policy moves a scope's delay carries its typed class (the metrics' cause label):
code never matches the human-readable text."""

from __future__ import annotations

from frontier.config import ScopeSettings
from frontier.core import policy
from frontier.core.causes import Cause

S = ScopeSettings()


def done(state: policy.ScopeState, t: float, status: int, latency: float = 0.05, **headers: str) -> policy.ScopeState:
    state = policy.apply(state, policy.Sent(t), t, S)
    return policy.apply(state, policy.Done(sent_at=t, status=status, latency=latency, headers=headers), t + latency, S)


def test_every_adaptation_path_names_its_class() -> None:
    state = policy.ScopeState()
    state = done(state, 0.0, 200, latency=0.8)
    assert state.cause_kind == Cause.AUTOTHROTTLE and "autothrottle" in state.cause
    state = done(state, 1.0, 429)
    assert state.cause_kind == Cause.LIMIT and "limit signal" in state.cause
    t = 10.0
    for _ in range(3):  # errors, no Retry-After: the site is unwell
        state = done(state, t, 503)
        t += 20.0
    assert state.cause_kind == Cause.TROUBLE
    state = done(state, t, 200)
    assert state.cause_kind == Cause.RECOVERY and "outage over" in state.cause
    state = policy.apply(state, policy.Robots(2.0), t + 1, S)
    assert state.cause_kind == Cause.ROBOTS


def test_probing_faster_names_its_class() -> None:
    state = done(policy.ScopeState(), 0.0, 429)
    t = 1.0
    for _ in range(400):
        if state.cause_kind == Cause.PROBE:
            break
        state = done(state, t, 200, latency=0.01)
        t += 1.0
    assert state.cause_kind == Cause.PROBE and "probing" in state.cause


def test_states_stored_before_causes_were_typed_still_decode() -> None:
    old = b'{"cause":"autothrottle 1.00->0.50 (latency 0.100s, 200)","backoff":2.0}'
    state = policy.msgspec.json.decode(old, type=policy.ScopeState)
    assert state.cause_kind == Cause.NONE and state.backoff == 2.0

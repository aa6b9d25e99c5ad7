"""The partition's ``Scopes`` alone, on a ``MemoryKV``: scopes of a URL, overrides, policy states,
decisions and the waiters a full scope registers (not through PartitionFrontier)."""

import pytest

from frontier.config import AutoThrottleSettings, FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core import policy
from frontier.core.kv import MemoryKV
from frontier.core.scheduler import Scheduler
from frontier.partition import scopes as scopes_module
from frontier.partition.keys import override_key, queue_id, state_key
from frontier.partition.queues import Waiters
from frontier.partition.records import Refused, state_dec
from frontier.partition.scopes import Scopes
from frontier.partition.store import Store
from topics.schemas import ControlCommand, UrlItem

FIXED = AutoThrottleSettings(enabled=False)
THROTTLE = ThrottleConfig(
    default=ScopeSettings(delay=1.0, concurrency=1, autothrottle=FIXED),
    scopes={"dom.test": ScopeSettings(delay=2.0, concurrency=1, autothrottle=FIXED)},
)


def make() -> tuple[MemoryKV, Scopes, Scheduler, Waiters]:
    kv = MemoryKV()
    scheduler = Scheduler()
    waiters = Waiters(scheduler)
    return kv, Scopes(0, Store(kv, lambda k, v: None), FrontierConfig(), THROTTLE, waiters), scheduler, waiters


def test_the_scopes_of_a_url() -> None:
    _, scopes, _, _ = make()
    item = UrlItem(url="http://a.dom.test/", host="a.dom.test", domain="dom.test", ip="10.0.0.1", scopes=["img", "api"])
    assert scopes.scopes_of(item) == ["a.dom.test", "ip:10.0.0.1", "dom.test", "dom.test#api", "dom.test#img"]
    plain = UrlItem(url="http://b.test/", host="b.test", domain="b.test")
    assert scopes.scopes_of(plain) == ["b.test"]


def test_overrides_are_stored_cover_their_subdomains_and_clear() -> None:
    kv, scopes, _, _ = make()
    scopes.set_override(ControlCommand(scope="dom.test", action="set", delay=7.0), 0.0)
    assert kv.get(override_key("dom.test")) is not None
    assert scopes.scope_settings("a.dom.test").delay == 7.0 and scopes.scope_settings("other.test").delay == 1.0
    scopes.set_override(ControlCommand(scope="a.dom.test", action="pause"), 0.0)
    assert scopes.paused_by(["a.dom.test"]) == "a.dom.test" and scopes.paused_by(["b.dom.test"]) is None
    assert scopes.decide(["a.dom.test"], 0.0, 1.0).at is None
    scopes.set_override(ControlCommand(scope="a.dom.test", action="resume"), 0.0)
    assert kv.get(override_key("a.dom.test")) is None and "a.dom.test" not in scopes.overrides()


def test_overrides_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    _, scopes, _, _ = make()
    monkeypatch.setattr(scopes_module, "MAX_OVERRIDES", 2)
    for name in ("a.test", "b.test"):
        scopes.set_override(ControlCommand(scope=name, action="pause"), 0.0)
    with pytest.raises(Refused):
        scopes.set_override(ControlCommand(scope="c.test", action="pause"), 0.0)


def test_apply_stores_the_state_and_tells_the_hook() -> None:
    kv, scopes, _, _ = make()
    changes: list[tuple[str, float]] = []
    scopes.on_change = lambda scope, old, new, cause, kind, gate: changes.append((scope, gate))
    scopes.apply("a.test", policy.Sent(0.0, u=0.5, cost=1.0), 0.0)
    raw = kv.get(state_key("a.test"))
    assert raw is not None and state_dec.decode(raw) == scopes.state("a.test")
    retry_after = {"retry-after": "60"}
    scopes.apply("a.test", policy.Done(sent_at=0.0, status=429, headers=retry_after, outcome="retry"), 1.0)
    assert changes and changes[-1][0] == "a.test" and changes[-1][1] > 1.0


def test_a_full_scope_registers_a_multi_scope_queue_as_its_waiter() -> None:
    _, scopes, scheduler, waiters = make()
    scopes.apply("a.test", policy.Sent(0.0, u=0.5, cost=1.0), 0.0)  # concurrency 1: full until it is done
    assert scopes.decide(["a.test"], 0.0, 1.0).at is None and not waiters  # a host's own queue registers none
    decision = scopes.decide(["a.test", "a.test#api"], 0.0, 1.0)
    assert decision.at is None and "a.test" in decision.reason and len(waiters) == 1
    assert scopes.decide(["a.test", "a.test#img"], 0.0, 1.0, register=False).at is None and len(waiters) == 1
    waiters.wake("a.test", 5.0)
    assert not waiters and scheduler.pop_due(5.0) == queue_id(["a.test", "a.test#api"])


def test_the_state_cache_is_bounded_and_reads_back_evicted_states(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scopes_module, "STATE_CACHE", 3)  # (the cache's size is taken when it is made)
    _, scopes, _, _ = make()
    for n in range(5):
        scopes.apply(f"h{n}.test", policy.Sent(float(n), u=0.5, cost=1.0), float(n))
    assert scopes.recent(10) == ["h4.test", "h3.test", "h2.test"]
    assert scopes.state("h0.test").inflight == 1  # read back from the store
    assert scopes.recent(1) == ["h0.test"]


def test_a_scopes_settings_are_kept_and_an_override_is_seen_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings a scope's jobs use are computed once and kept (bounded: cleared past
    KNOWN_SCOPES), and an operator's override changes them from the next use on."""
    monkeypatch.setattr(scopes_module, "KNOWN_SCOPES", 3)
    kv, scopes, _, _ = make()
    assert scopes.scope_settings("a.dom.test").delay == 1.0
    scopes.apply("a.dom.test", policy.Sent(0.0, u=0.5), 0.0)
    assert kv.get(state_key("a.dom.test")) is not None
    scopes.set_override(ControlCommand(scope="dom.test", action="set", delay=7.0), 0.0)
    assert scopes.scope_settings("a.dom.test").delay == 7.0
    for n in range(5):  # past the bound: computed again, the same
        assert scopes.scope_settings(f"h{n}.test").delay == 1.0
    assert len(scopes._known) <= 3 and scopes.scope_settings("a.dom.test").delay == 7.0
    scopes.set_override(ControlCommand(scope="dom.test", action="clear"), 0.0)
    assert scopes.scope_settings("a.dom.test").delay == 1.0

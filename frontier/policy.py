"""The throttling policy of one scope, as pure functions: ``(state, event, now) -> state``.

No clock reads, no Kafka, no RocksDB: time comes in as ``now`` (epoch seconds) and every state
is an immutable value. The frontier stores the state, feeds it events, and asks
:func:`decide` when the scope may send next.

This is the fixed policy: a constant ``delay`` between request *sends* (as in Scrapy, the next
slot is timed from the previous send) and at most ``concurrency`` requests in flight.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from frontier.config import ScopeSettings


class ScopeState(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the policy remembers about one scope."""

    inflight: int = 0
    last_sent: float = 0.0  # epoch seconds of the latest known request send (0: never)


class Sent(msgspec.Struct, frozen=True):
    """The frontier dispatched a job at ``at`` (the earliest time the worker may send it)."""

    at: float


class Done(msgspec.Struct, frozen=True):
    """A dispatched job came back. ``sent_at`` is when the worker really sent it (0: never sent)."""

    sent_at: float = 0.0
    status: int = 0
    latency: float = 0.0


class Lost(msgspec.Struct, frozen=True):
    """A lease expired with no feedback (worker died or lagged): the slot is freed."""


Event = Sent | Done | Lost


@dataclass(frozen=True, slots=True)
class Decision:
    """When the scope may send next. ``at`` is None when only feedback can free it."""

    at: float | None
    reason: str  # "ready" | "delay" | "concurrency"


def apply(state: ScopeState, event: Event, now: float, settings: ScopeSettings) -> ScopeState:
    """Return the scope's state after ``event`` at time ``now``."""
    del now, settings  # the fixed policy needs neither; the adaptive one will
    if isinstance(event, Sent):
        return msgspec.structs.replace(state, inflight=state.inflight + 1, last_sent=max(state.last_sent, event.at))
    inflight = max(0, state.inflight - 1)
    if isinstance(event, Done):
        # A worker may have sent later than we dispatched (queueing in Kafka, waiting for its
        # own per-host gap): time the next slot from the real send so lag never shortens a gap.
        return msgspec.structs.replace(state, inflight=inflight, last_sent=max(state.last_sent, event.sent_at))
    return msgspec.structs.replace(state, inflight=inflight)


def decide(state: ScopeState, now: float, settings: ScopeSettings) -> Decision:
    """May the scope send at ``now``? If not, when (or whether only feedback can tell)?"""
    if state.inflight >= settings.concurrency:
        return Decision(None, "concurrency")
    next_at = state.last_sent + settings.delay if state.last_sent else now
    if next_at > now:
        return Decision(next_at, "delay")
    return Decision(now, "ready")

"""Scopes, as the part :class:`Scopes`: which scopes a URL is in, each scope's settings (the
throttle's, then the operators' overrides), its policy state (``H<scope>``, cached decoded), and
the two ways the policy is used: ``apply`` an event to a scope, ``decide`` whether a set of
scopes allows a send.

A job is dispatched only when every one of its scopes allows it, and the send is recorded on
all of them.

Interface: ``scopes_of``, ``scope_settings``, ``state``, ``apply``, ``decide``; the overrides:
``set_override``, ``overrides``, ``covering``, ``paused_by``, ``blocked_by``; ``late`` (a
result whose lease was closed still applies to its host); ``recent`` (the
states used most recently), ``load``. Owns: the ``H`` and ``O`` keys, the overrides, the state
LRU, ``on_change`` (the hook told of a scope's delay or gate changes). Depends on: the store,
the configuration, and ``Waiters`` (a full scope registers the queue that waits for it).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import msgspec

from frontier.config import FrontierConfig, ScopeSettings, ThrottleConfig
from frontier.core import policy
from frontier.core.caps import capped_until
from frontier.core.causes import Cause
from frontier.core.control import Override, updated
from frontier.core.lru import LRU
from frontier.partition.keys import OVERRIDE, QueueId, is_multi, override_key, override_of, queue_id, state_key
from frontier.partition.queues import Waiters
from frontier.partition.records import ChangeHook, Refused, encoder, override_dec, state_dec
from frontier.partition.store import Store
from topics.schemas import ControlCommand, Feedback, UrlItem

STATE_CACHE = 50_000  # scope states kept decoded in memory (bounded: RSS must not grow with domains)
MAX_OVERRIDES = 100_000  # operators' overrides per partition (kept in memory: ~0.2 KB each)
KNOWN_SCOPES = 10_000  # scopes whose settings and state key are kept computed (~0.2 KB each), cleared past it


class Scopes:
    """The scopes of one partition: settings, overrides, policy states."""

    def __init__(self, partition: int, store: Store, settings: FrontierConfig, throttle: ThrottleConfig,
                 waiters: Waiters, on_change: ChangeHook | None = None) -> None:  # fmt: skip
        self._partition = partition
        self._store = store
        self._kv = store.kv
        self._settings = settings
        self._throttle = throttle
        self._waiters = waiters
        self.on_change = on_change
        self._states: LRU[str, policy.ScopeState] = LRU(STATE_CACHE)  # decoded states over H<scope>
        # scope → (its latest state, the settings, that state's delay) as the change hook last computed
        # it: the next event's "before" (cleared past STATE_CACHE entries)
        self._delays: dict[str, tuple[policy.ScopeState, ScopeSettings, float]] = {}
        # operators' overrides by name (at most MAX_OVERRIDES); a scope finds the ones covering it
        # by looking up its own dot-suffixes, so their number does not slow dispatch
        self._overrides: dict[str, Override] = {}
        # scope → its settings as ``scope_settings`` computed them and its state key (cleared when
        # an override changes, and past KNOWN_SCOPES entries)
        self._known: dict[str, tuple[ScopeSettings, bytes]] = {}

    def scopes_of(self, item: UrlItem) -> list[str]:
        """The host, its address ``ip:<address>`` (frontier.ip_scope: the router resolved it), the
        registrable domain when it has settings of its own, and the item's named scopes."""
        scopes = [item.host]
        if item.ip:
            scopes.append(f"ip:{item.ip}")
        if item.domain != item.host and item.domain in self._throttle.scopes:
            scopes.append(item.domain)
        scopes.extend(f"{item.domain}#{name}" for name in sorted(set(item.scopes)))
        return scopes

    def scope_settings(self, scope: str) -> ScopeSettings:
        known = self._known.get(scope)
        return (known if known is not None else self._know(scope))[0]

    def _know(self, scope: str) -> tuple[ScopeSettings, bytes]:
        """The scope's settings and state key, computed and kept (three uses a job: decided,
        sent, its result)."""
        if len(self._known) >= KNOWN_SCOPES:
            self._known.clear()
        known = self._known[scope] = (self._scope_settings(scope), state_key(scope))
        return known

    def _scope_settings(self, scope: str) -> ScopeSettings:
        s = self._throttle.for_scope(scope.rsplit("#", 1)[-1])
        if not self._overrides:
            return s
        delay = concurrency = None
        for _, o in self.covering(scope):  # most specific last: it wins
            delay = o.delay if o.delay is not None else delay
            concurrency = o.concurrency if o.concurrency is not None else concurrency
        if delay is not None:
            s = replace(s, delay=delay)
        if concurrency is not None:
            s = replace(s, concurrency=concurrency)
        return s

    # -- operators' overrides -------------------------------------------------------------------
    def covering(self, scope: str) -> list[tuple[str, Override]]:
        """The overrides that apply to ``scope`` (see :func:`frontier.core.control.covers`), least
        specific first: one lookup per dot-suffix of the scope, whatever their number."""
        labels = scope.split(".")
        found: list[tuple[str, Override]] = []
        for i in range(len(labels) - 1, -1, -1):
            name = ".".join(labels[i:])
            o = self._overrides.get(name)
            if o is not None:
                found.append((name, o))
        return found

    def blocked_by(self, scopes: list[str], now: float) -> tuple[float, str] | None:
        """The latest block (BlockQueueUntil) on ``scopes`` still ahead at ``now``, and its name."""
        found: tuple[float, str] | None = None
        for scope in scopes:
            for name, o in self.covering(scope):
                if o.blocked_until > now and (found is None or o.blocked_until > found[0]):
                    found = (o.blocked_until, name)
        return found

    def paused_by(self, scopes: list[str]) -> str | None:
        for scope in scopes:
            for name, o in self.covering(scope):
                if o.paused:
                    return name
        return None

    def set_override(self, cmd: ControlCommand, now: float) -> None:
        """Apply an operator's scope command (not a drop) to the override of ``cmd.scope``; the
        caller looks at the queues it covers again. Raises :class:`Refused` past MAX_OVERRIDES."""
        name = cmd.scope
        if cmd.action == "block" and cmd.until:
            cmd = msgspec.structs.replace(cmd, until=capped_until(cmd.until, now, self._settings.block_max))
        new = updated(self._overrides.get(name, Override()), cmd)
        if name not in self._overrides and not new.empty() and len(self._overrides) >= MAX_OVERRIDES:
            raise Refused(f"{len(self._overrides)} scope overrides in partition {self._partition} already "
                          f"(at most {MAX_OVERRIDES}): clear some first")  # fmt: skip
        self._known.clear()  # (the settings of the scopes it covers change)
        if new.empty():
            self._overrides.pop(name, None)
            if self._kv.get(override_key(name)) is not None:
                self._store.delete(override_key(name))
        else:
            self._overrides[name] = new
            self._store.put(override_key(name), encoder.encode(new))

    def overrides(self) -> dict[str, Override]:
        return dict(self._overrides)

    def load(self) -> None:
        """The overrides as stored (``rebuild``; the states are read when used)."""
        for key, value in self._kv.scan(OVERRIDE):
            self._overrides[override_of(key)] = override_dec.decode(value)
        self._known.clear()

    # -- policy state ---------------------------------------------------------------------------
    def state(self, scope: str) -> policy.ScopeState:
        state = self._states.get(scope)
        if state is not None:
            return state
        raw = self._kv.get(state_key(scope))
        state = state_dec.decode(raw) if raw is not None else policy.ScopeState()
        self._cache_state(scope, state)
        return state

    def _cache_state(self, scope: str, state: policy.ScopeState) -> None:
        self._states.put(scope, state)

    def recent(self, n: int) -> list[str]:
        """The ``n`` scopes whose state was used most recently, newest first."""
        return list(itertools.islice(reversed(self._states), n))

    def apply(self, scope: str, event: policy.Event, now: float) -> None:
        self._apply(scope, event, now)

    def send(self, scopes: list[str], event: policy.Sent, now: float) -> tuple[policy.ScopeState, float, float]:
        """A job sent on ``scopes`` (the event applied to each); returns the host's (first scope's)
        state, delay and floor as they were before the send: the gap this send was timed with."""
        old, s, before = self._apply(scopes[0], event, now)
        for scope in scopes[1:]:
            self._apply(scope, event, now)
        return old, (before if before is not None else policy.delay(old, s)), policy.floor(old, s)

    def _apply(
        self, scope: str, event: policy.Event, now: float
    ) -> tuple[policy.ScopeState, ScopeSettings, float | None]:
        """Apply ``event``; returns the state and settings before it, and the delay before it when
        the change hook needed it (None: not computed)."""
        info = self._known.get(scope)
        s, key = info if info is not None else self._know(scope)
        states = self._states
        old = states.peek(scope)  # (not refreshed: the put below makes it the newest)
        if old is None:
            old = self.state(scope)
        new = policy.apply(old, event, now, s)
        self._store.put(key, encoder.encode(new))
        states.put(scope, new)
        if self.on_change is None:
            return old, s, None
        known = self._delays.get(scope)
        before = known[2] if known is not None and known[0] is old and known[1] is s else policy.delay(old, s)
        after = policy.delay(new, s)
        if len(self._delays) >= STATE_CACHE:
            self._delays.clear()
        self._delays[scope] = (new, s, after)
        if abs(before - after) > 1e-9 or new.gate_until != old.gate_until:
            cause, kind = new.cause, new.cause_kind or Cause.OTHER
            if new.gate_until > max(old.gate_until, now):
                cause, kind = f"gate until +{new.gate_until - now:.0f}s ({new.gate_cause})", Cause.GATE
            self.on_change(scope, before, after, cause, kind, new.gate_until)
        return old, s, before

    def late(self, fb: Feedback, now: float) -> None:
        """A result whose lease was already closed (expired, lost): the slot was freed then, but
        a request really went out and what the server answered (a gate, a 429, an outage) still
        applies to the host, so its throttling part is applied (named scopes are not known any more)."""
        if fb.outcome == "expired" or fb.sent_at <= 0 or not fb.host:
            return
        scopes = [fb.host]
        if fb.ip:
            scopes.append(f"ip:{fb.ip}")
        if fb.domain and fb.domain != fb.host and fb.domain in self._throttle.scopes:
            scopes.append(fb.domain)
        event = policy.Done(sent_at=fb.sent_at, status=fb.status, latency=fb.latency, error=fb.error,
                            headers=fb.headers, adjust=False, outcome=fb.outcome, late=True)  # fmt: skip
        for scope in scopes:
            self.apply(scope, event, now)

    def decide(
        self, scopes: list[str], now: float, cost: float, register: bool = True, qid: QueueId | None = None
    ) -> policy.Decision:
        """All scopes must allow: the latest time wins; a scope that needs feedback blocks outright
        (and, with ``register``, a multi-scope queue or another crawl's queue, ``qid``, waits on
        that scope's next free slot)."""
        if self._overrides:
            paused = self.paused_by(scopes)
            if paused is not None:
                return policy.Decision(None, f"paused ({paused})")  # resume reschedules its queues
            blocked = self.blocked_by(scopes, now)
            if blocked is not None:
                return policy.Decision(blocked[0], f"blocked ({blocked[1]})")
        latest = policy.Decision(now, "ready")
        for scope in scopes:
            d = policy.decide(self.state(scope), now, self.scope_settings(scope), cost)
            if d.at is None:
                if register and (len(scopes) > 1 or (qid is not None and is_multi(qid))):
                    self._waiters.add(scope, qid if qid is not None else queue_id(scopes))
                return policy.Decision(None, f"{d.reason} ({scope})")
            if d.at > now and (latest.at is None or d.at > latest.at):
                latest = policy.Decision(d.at, f"{d.reason} ({scope})")
        return latest

"""Scopes: which scopes a URL is in, each scope's settings (the throttle's, then the operators'
overrides), its policy state (``H<scope>``, cached decoded), and the two ways the policy is used:
``_apply`` an event to a scope, ``_decide`` whether a set of scopes allows a send. Operators'
commands (``control``) are applied here.

A job is dispatched only when every one of its scopes allows it, and the send is recorded on
all of them.
"""

from __future__ import annotations

from dataclasses import replace

import msgspec

from frontier.config import ScopeSettings
from frontier.core import policy
from frontier.core.caps import capped_until
from frontier.core.causes import Cause
from frontier.core.control import Override, covers, updated
from frontier.partition.crawls import Crawls
from frontier.partition.keys import QueueId, is_multi, override_key, queue_id, queue_scopes, state_key
from frontier.partition.records import Refused, encoder, state_dec
from topics.schemas import ControlCommand, UrlItem

STATE_CACHE = 50_000  # scope states kept decoded in memory (bounded: RSS must not grow with domains)
MAX_OVERRIDES = 100_000  # operators' overrides per partition (kept in memory: ~0.2 KB each)


class Scopes(Crawls):
    def scopes_of(self, item: UrlItem) -> list[str]:
        """The host, its address ``ip:<address>`` (frontier.ip_scope: the router resolved it), the
        registrable domain when it has settings of its own, and the item's named scopes."""
        scopes = [item.host]
        if item.ip:
            scopes.append(f"ip:{item.ip}")
        if item.domain != item.host and item.domain in self.throttle.scopes:
            scopes.append(item.domain)
        scopes.extend(f"{item.domain}#{name}" for name in sorted(set(item.scopes)))
        return scopes

    def scope_settings(self, scope: str) -> ScopeSettings:
        s = self.throttle.for_scope(scope.rsplit("#", 1)[-1])
        if not self._overrides:
            return s
        delay = concurrency = None
        for _, o in self._covering(scope):  # most specific last: it wins
            delay = o.delay if o.delay is not None else delay
            concurrency = o.concurrency if o.concurrency is not None else concurrency
        if delay is not None:
            s = replace(s, delay=delay)
        if concurrency is not None:
            s = replace(s, concurrency=concurrency)
        return s

    # -- operators' overrides -------------------------------------------------------------------
    def _covering(self, scope: str) -> list[tuple[str, Override]]:
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

    def _blocked_by(self, scopes: list[str], now: float) -> tuple[float, str] | None:
        """The latest block (BlockQueueUntil) on ``scopes`` still ahead at ``now``, and its name."""
        found: tuple[float, str] | None = None
        for scope in scopes:
            for name, o in self._covering(scope):
                if o.blocked_until > now and (found is None or o.blocked_until > found[0]):
                    found = (o.blocked_until, name)
        return found

    def _paused_by(self, scopes: list[str]) -> str | None:
        for scope in scopes:
            for name, o in self._covering(scope):
                if o.paused:
                    return name
        return None

    def control(self, cmd: ControlCommand, now: float) -> int:
        """Apply a scope (or crawl) command; return the queued URLs it dropped (drop) or 0."""
        if cmd.crawl:
            return self.crawl_control(cmd, now)
        name = cmd.scope
        if cmd.action == "drop":
            return self._drop(name, now)
        if cmd.action == "block" and cmd.until:
            cmd = msgspec.structs.replace(cmd, until=capped_until(cmd.until, now, self.settings.block_max))
        new = updated(self._overrides.get(name, Override()), cmd)
        if name not in self._overrides and not new.empty() and len(self._overrides) >= MAX_OVERRIDES:
            raise Refused(f"{len(self._overrides)} scope overrides in partition {self.partition} already "
                          f"(at most {MAX_OVERRIDES}): clear some first")  # fmt: skip
        if new.empty():
            self._overrides.pop(name, None)
            if self.kv.get(override_key(name)) is not None:
                self._delete(override_key(name))
        else:
            self._overrides[name] = new
            self._put(override_key(name), encoder.encode(new))
        for qid in list(self._queued):  # anything may dispatch sooner now: look at its queues again
            if any(covers(name, scope) for scope in queue_scopes(qid)):
                self._scheduler.schedule(qid, now)
        return 0

    def overrides(self) -> dict[str, Override]:
        return dict(self._overrides)

    # -- policy state ---------------------------------------------------------------------------
    def _state(self, scope: str) -> policy.ScopeState:
        state = self._states.get(scope)
        if state is not None:
            self._states.move_to_end(scope)
            return state
        raw = self.kv.get(state_key(scope))
        state = state_dec.decode(raw) if raw is not None else policy.ScopeState()
        self._cache_state(scope, state)
        return state

    def _cache_state(self, scope: str, state: policy.ScopeState) -> None:
        self._states[scope] = state
        self._states.move_to_end(scope)
        if len(self._states) > STATE_CACHE:
            self._states.popitem(last=False)

    def _apply(self, scope: str, event: policy.Event, now: float) -> None:
        s = self.scope_settings(scope)
        old = self._state(scope)
        new = policy.apply(old, event, now, s)
        self._put(state_key(scope), encoder.encode(new))
        self._cache_state(scope, new)
        if self.on_change is not None:
            before, after = policy.delay(old, s), policy.delay(new, s)
            if abs(before - after) > 1e-9 or new.gate_until != old.gate_until:
                cause, kind = new.cause, new.cause_kind or Cause.OTHER
                if new.gate_until > max(old.gate_until, now):
                    cause, kind = f"gate until +{new.gate_until - now:.0f}s ({new.gate_cause})", Cause.GATE
                self.on_change(scope, before, after, cause, kind, new.gate_until)

    def _decide(
        self, scopes: list[str], now: float, cost: float, register: bool = True, qid: QueueId | None = None
    ) -> policy.Decision:
        """All scopes must allow: the latest time wins; a scope that needs feedback blocks outright
        (and, with ``register``, a multi-scope queue or another crawl's queue, ``qid``, waits on
        that scope's next free slot)."""
        if self._overrides:
            paused = self._paused_by(scopes)
            if paused is not None:
                return policy.Decision(None, f"paused ({paused})")  # resume reschedules its queues
            blocked = self._blocked_by(scopes, now)
            if blocked is not None:
                return policy.Decision(blocked[0], f"blocked ({blocked[1]})")
        latest = policy.Decision(now, "ready")
        for scope in scopes:
            d = policy.decide(self._state(scope), now, self.scope_settings(scope), cost)
            if d.at is None:
                if register and (len(scopes) > 1 or (qid is not None and is_multi(qid))):
                    self._waiters[scope].add(qid if qid is not None else queue_id(scopes))
                return policy.Decision(None, f"{d.reason} ({scope})")
            if d.at > now and (latest.at is None or d.at > latest.at):
                latest = policy.Decision(d.at, f"{d.reason} ({scope})")
        return latest

"""Why a scope's delay or gate last changed, as a closed set (the metrics' ``cause`` label, the
status rows' class of cause). The text next to it (``ScopeState.cause``) says the details for
people; code never matches that text."""

from __future__ import annotations

from enum import StrEnum


class Cause(StrEnum):
    NONE = ""  # nothing changed it yet (or a state stored before causes were typed)
    AUTOTHROTTLE = "autothrottle"  # latency targeting moved the delay
    LIMIT = "limit"  # a limit signal (429, 503 + Retry-After...): slowed to below the learned limit
    TROUBLE = "trouble"  # errors or an outage: probing at a growing interval
    RECOVERY = "recovery"  # the outage ended (first success after trouble)
    PROBE = "probe"  # steady successes at the limit: trying a little faster
    RAMPUP = "rampup"  # the rampup policy's window moved delay or concurrency
    ROBOTS = "robots"  # robots.txt Crawl-delay / Request-rate
    BUDGET = "budget"  # a budget not told: refusals that followed a count per period (frontier.core.budget)
    GATE = "gate"  # the server closed the scope for a while (Retry-After, RateLimit)
    OTHER = "other"


CAUSES: tuple[str, ...] = tuple(c.value for c in Cause if c is not Cause.NONE)

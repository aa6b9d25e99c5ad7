"""How far ahead a value from outside may set a time (pure).

Servers (Retry-After, RateLimit resets), workers (a job ``held`` until then), URLFrontier clients
(GetURLs' ``delay_requestable``, BlockQueueUntil) and anyone who may write ``crawl.control`` set
times at which the frontier will do something. Each such time is held to ``now`` plus one named
setting, so no single record can freeze a host (or every host under a suffix) for years:

- ``throttle.<scope>.gate_max`` (1 h): a Retry-After or RateLimit gate, and a published budget's
  reset (its pacing and its hard stop);
- ``frontier.hold_max`` (1 h): a job held in a client's hands (the URL not handed out again; its
  host's slot kept only until the hand-out deadline, ``frontier.fetch_timeout``);
- ``frontier.block_max`` (30 days): a scope blocked by BlockQueueUntil or a ``block`` command.
"""

from __future__ import annotations


def capped_until(until: float, now: float, most: float) -> float:
    """``until`` (epoch seconds) no later than ``now + most``; 0 (none) and past times as given."""
    return min(until, now + most) if until > now else until


def capped_seconds(seconds: float, most: float) -> float:
    """A span of ``seconds`` no longer than ``most`` (and never negative)."""
    return min(max(seconds, 0.0), most)

"""How long a URL that failed is tried again: by time while its host fails, by count when it fails
alone (issue 23).

A network error, a 429 or a backoff 5xx of a host that answers its other URLs says something
about the URL: it ends after ``max_retries`` more attempts. The same failures while the whole host
fails (it has answered nothing since its failures began) say nothing about the URL: the host is
down, resetting connections or rate-limiting, and its URLs wait for it, paced by the host's outage
probing and its Retry-After, until the host has been failing for ``give_up`` seconds (hours by
default, as archive crawlers keep retrying). A count would lose the whole site in the first
seconds of an outage. ``failing_since`` is the host scope's (``ScopeState.failing_since``): when
its current run of failures began, < 0 when it last answered."""

from __future__ import annotations


def in_outage(failing_since: float, sent: float) -> bool:
    """Whether a failure of a request scheduled at ``sent`` belongs to its host's outage (the host
    was already failing when it was sent): not counted against the URL."""
    return 0 <= failing_since <= sent


def retries_left(attempts: int, max_retries: int, failing_since: float, now: float, give_up: float) -> int:
    """How many more attempts a job may ask for (the job's ``retries_left``) after ``attempts`` that
    counted: while its host has been failing for less than ``give_up``, at least one; once longer,
    none (the URL ends with its next failure). ``give_up`` 0: by count only."""
    left = max(0, max_retries - attempts)
    if failing_since < 0 or give_up <= 0:
        return left
    return max(left, 1) if now - failing_since < give_up else 0

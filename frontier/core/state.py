"""A scope's throttling state and the events that move it: immutable values, stored as JSON in
the partition (``H<scope>``; fields are only ever added, with defaults, so stored states decode),
and the decision :func:`frontier.core.policy.decide` returns."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from frontier.core.causes import Cause


class ScopeState(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the policy remembers about one scope."""

    inflight: int = 0
    last_sent: float = -1.0  # latest known request send (< 0: never)
    jitter_u: float = 0.5  # uniform [0, 1) draw for the gap after last_sent
    at_delay: float = -1.0  # AutoThrottle delay (< 0: not started yet)
    backoff: float = 0.0  # adaptation delay from limit signals (0: none), see frontier.core.adapt
    backoff_step_at: float = -1.0  # when adaptation last stepped up (incident boundary; < 0: never)
    limit: float = 0.0  # learned limit: the sending interval at the last limit signal (0: none known)
    near: int = 0  # successes at the target since the last probe step
    near_at: float = -1.0  # when the current probe step began (< 0: not settled yet)
    probes: int = 0  # probe steps taken since the last limit signal
    trouble: float = 0.0  # probe interval while the server is in trouble (0: no outage)
    returned: int = -1  # sends since an outage ended (-1: none recent); trouble this soon is overload
    gap: float = -1.0  # EWMA of real send gaps (< 0: not measured yet)
    sig_sent: float = -1.0  # dispatch time of the request that brought the last limit signal
    sig_ok: int = 0  # successes since that signal (the limit's rate is sig_ok over the time between two)
    last_end: float = -1.0  # when the latest response ended (server-stated floors are timed from it)
    unsafe: float = 0.0  # rampup: a delay known to trigger
    gate_until: float = 0.0  # hard gate from the server
    gate_cause: str = ""
    robots_delay: float = 0.0  # Crawl-delay / Request-rate, already capped
    quota_start: float = -1.0  # start of the current quota window (< 0: none yet)
    quota_used: float = 0.0
    srv_remaining: int = -1  # RateLimit remaining > 0 told by the server (-1: none)
    srv_until: float = 0.0
    srv_spread: float = 0.0  # seconds between requests to spread the published budget
    srv_lo: float = 0.0  # the published window ends after this...
    srv_hi: float = 0.0  # ...and no later than this (narrowed by each answer of the same window)
    srv_seen: int = -1  # the remaining count last published
    ru_delay: float = -1.0  # rampup's delay (< 0: the configured delay)
    ru_concurrency: int = 0  # rampup's concurrency (0: the configured concurrency)
    ru_window_start: float = -1.0
    ru_triggers: int = 0
    ru_sent: int = 0
    cause: str = ""  # why the delay last changed, for people
    cause_kind: Cause = Cause.NONE  # ...and its class, for code (metrics, status)
    sent_total: int = 0  # requests sent, ever (for request rates in status and charts)
    failing_since: float = -1.0  # when the current run of failures began (network, 429, backoff 5xx); < 0: answering
    # a budget not told (frontier.core.budget): refusals that follow a count per period, not the rate
    bud_mode: int = 0  # 0 watching, 1 spent (waiting for the period to turn), 2 counting, 3 pacing
    bud_size: float = 0.0  # learned requests a period lets through before refusing (0: not known)
    bud_period: float = 0.0  # learned period, seconds (0: not known)
    bud_period_was: float = 0.0  # the period before the latest turn measured it (a false turn restores it)
    bud_start: float = -1.0  # when the current period began (a turn seen, or expected; < 0: nothing sent)
    bud_seen: float = -1.0  # the latest turn seen and confirmed (periods are measured between them)
    bud_fresh: bool = False  # the current period began at a turn seen, not confirmed yet
    bud_exact: bool = False  # the current period began at a turn seen (its count is the site's)
    bud_ok: int = 0  # successes in the current period
    bud_clean: int = 0  # periods in a row that used their budget without a refusal
    bud_last: int = 0  # successes in the period before the current one
    bud_refused: float = -1.0  # when the current period first refused (< 0: not yet)
    bud_streak: int = 0  # successes in a row
    bud_streak_at: float = -1.0  # dispatch time of the first of them
    bud_run_at: float = -1.0  # dispatch time of the first refusal of a run being judged (< 0: none)
    bud_run_ok: int = 0  # successes of the period before that run
    bud_follows: int = 0  # halvings of the sending rate in this run at which the accepted rate fell too
    bud_run_gap: float = 0.0  # the sending interval when the run began (judged again at twice it)
    bud_n1: int = 0  # responses to requests sent since the run began, before it slowed down...
    bud_r1: int = 0  # ...and how many of them were refused
    bud_slow_at: float = -1.0  # when the scope got down to half the rate the run began at (< 0: not yet)
    bud_n: int = 0  # responses to requests sent since then...
    bud_r: int = 0  # ...and how many of them were refused
    bud_limit0: float = 0.0  # the adaptation's limit and delay before the run (restored for a budget)
    bud_backoff0: float = 0.0
    bud_hist: int = 0  # the last 16 answers while watching, newest in bit 0 (1: refused)
    bud_ref_gap: float = 0.0  # the sending interval at the last refusal
    bud_guess: float = 0.0  # counting after the first turn seen: the period guessed until measured (seconds)
    bud_test_left: int = 0  # a suspected turn under test: test requests still to send
    bud_test_at: float = -1.0  # when the first test request was sent (< 0: none sent)...
    bud_test_end: float = -1.0  # ...and the last (< 0: not all sent yet)
    bud_test_n: int = 0  # test answers so far
    bud_tested: bool = False  # counting since a turn a test confirmed (no refusal by twice its budget: none)
    bud_last_ref: float = -1.0  # dispatch time of the latest refusal of the run being judged (the turn is after it)
    bud_turn_span: float = 0.0  # spent: from the last refused probe to the first success after it (the turn is between)
    bud_gap0: float = 0.0  # the delay when the run began (what went through before it, a probe faster than the limit)
    bud_test_fails: int = 0  # tests refused since the last turn a test confirmed...
    bud_test_skip: int = 0  # ...and the runs to begin until one is tested again (2**fails after a refused one)
    bud_test_over: float = -1.0  # when the last test was refused: refusals of what was sent before are its burst's


class Sent(msgspec.Struct, frozen=True):
    """A job was dispatched at ``at``; ``u`` is a uniform [0, 1) draw for the jitter of the next gap."""

    at: float
    u: float = 0.5
    cost: float = 1.0


class Done(msgspec.Struct, frozen=True, kw_only=True):
    """A dispatched job came back. ``sent_at`` is when the worker really sent it (0: never sent),
    by the worker's clock; ``dispatched_at`` is the send time the frontier scheduled, by its own
    clock (what incidents are told apart by: the two clocks may disagree).

    ``late``: the job's lease had already been closed (expired, or lost and re-queued) when this
    result came in. The slot was freed then, so ``inflight`` is not touched again, but what the
    server said (its gates, a 429, an outage) still counts: it was said about this scope.
    """

    sent_at: float = 0.0
    done_at: float = 0.0  # when the response ended, by the worker's clock (0: unknown)
    dispatched_at: float = 0.0
    status: int = 0
    latency: float = 0.0
    error: str = ""
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    adjust: bool = True  # False: this response must not move the AutoThrottle delay
    outcome: str = "fetched"  # "expired": handed back unfetched
    late: bool = False


class Lost(msgspec.Struct, frozen=True):
    """A lease expired with no feedback (worker died or lagged): the slot is freed."""


class Robots(msgspec.Struct, frozen=True):
    """robots.txt was read: ``delay`` is its Crawl-delay / Request-rate interval (0: none)."""

    delay: float


Event = Sent | Done | Lost | Robots


@dataclass(frozen=True, slots=True)
class Decision:
    """When the scope may send next. ``at`` is None when only feedback (or resume) can free it."""

    at: float | None
    reason: str  # ready | delay | floor | backoff | trouble | gate | quota | ratelimit | budget | concurrency

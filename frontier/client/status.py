"""``crawl-frontier status``: read every live frontier instance's latest snapshot from the
compacted ``crawl.frontier.status`` topic and render totals plus the busiest scopes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from frontier.client.crawls import crawl_rows, shown, state
from topics.schemas import CrawlStatus, ScopeStatus, Status

LIVE_SECONDS = 10.0  # no snapshot for this long (5 intervals): the instance has gone away


# A dispatch decision's reason word (frontier.core.policy.decide, frontier.partition) as a sentence;
# {t} is the wait ("0.4 s").
_SENTENCES = {
    "delay": "delay: next send in {t}",
    "floor": "server-stated interval (Crawl-delay): next send in {t}",
    "backoff": "backing off after 429/5xx: next send in {t}",
    "trouble": "site unwell (errors or outage): next probe in {t}",
    "gate": "closed by the server (Retry-After or RateLimit): opens in {t}",
    "quota": "quota used up: next window in {t}",
    "ratelimit": "published rate-limit budget spent: resets in {t}",
    "budget": "this period's budget (learned from 429s) spent: next send in {t}",
}


def sentence(reason: str, wait_until: float | None, now: float) -> str:
    """Why a scope is not dispatching, as a sentence: ``"delay (a.test)"`` due in 0.4 s reads
    ``"delay: next send in 0.4 s (a.test)"``; reasons that are sentences already pass through."""
    if reason == "ready":
        return "ready"
    if reason == "idle":
        return "idle: nothing queued"
    word, sep, rest = reason.partition(" (")
    where = f" ({rest}" if sep else ""
    if word == "paused":
        return f"paused by an operator{where}"
    if word == "crawl":  # "crawl 'b' paused", "crawl 'b' has no worker": a sentence already
        return reason
    if word == "concurrency":
        return f"every slot in use: waits for a response{where}"
    template = _SENTENCES.get(word)
    if template is None:  # robots.txt pending or unavailable: a sentence already
        return reason if wait_until is None or wait_until <= now else f"{reason}; again in {_wait(wait_until, now)}"
    head = template.split(":")[0]
    if wait_until is None:
        return f"{head}: waits for a response{where}"
    if wait_until <= now:
        return f"{head}: due now{where}"
    return template.format(t=_wait(wait_until, now)) + where


def _wait(at: float, now: float) -> str:
    left = max(0.0, at - now)
    if left < 60:
        return f"{left:.1f} s"
    if left < 3600:
        return f"{left / 60:.0f} min"
    return f"{left / 3600:.1f} h"


def _when(at: float | None, now: float) -> str:
    if at is None:
        return "feedback"
    if at <= now:
        return "now"
    return f"+{at - now:.1f}s"


@dataclass
class Overview:
    """Every live instance's snapshot combined: what ``status`` shows, the client returns and the
    web page serves."""

    instances: list[str]
    partitions: int
    totals: dict[str, int]
    scopes: list[ScopeStatus]
    at: float = 0.0
    now: float = 0.0  # the reader's time, for the waits in ``why`` (0: the clock at to_json)
    unserved: dict[int, str] = field(default_factory=dict)  # partition → why it is not served
    crawls: list[CrawlStatus] = field(default_factory=list)  # every crawl, added up over the instances

    def unserved_lines(self) -> list[str]:
        return [f"partition {p} not served: {why}" for p, why in sorted(self.unserved.items())]

    def to_json(self) -> dict[str, Any]:
        now = self.now or time.time()
        scopes = [{**msgspec.structs.asdict(r), "why": sentence(r.reason, r.wait_until, now)} for r in self.scopes]
        crawls = [{**msgspec.structs.asdict(r), "state": state(r)} for r in shown(self.crawls)]
        return {"instances": self.instances, "partitions": self.partitions, "totals": self.totals, "at": self.at,
                "scopes": scopes, "problems": self.unserved_lines(), "crawls": crawls}  # fmt: skip


def overview(statuses: list[Status], top: int = 20) -> Overview:
    totals: dict[str, int] = {}
    for s in statuses:
        for k, v in s.totals.items():
            totals[k] = totals.get(k, 0) + v
    rows = sorted((r for s in statuses for r in s.scopes), key=lambda r: (-r.queued, r.scope))[:top]
    unserved = {p: f"{why} ({s.instance})" for s in statuses for p, why in s.unserved.items()}
    return Overview(instances=sorted(s.instance for s in statuses), partitions=sum(len(s.partitions) for s in statuses),
                    totals=totals, scopes=rows, at=max((s.at for s in statuses), default=0.0),
                    unserved=unserved, crawls=crawl_rows(statuses))  # fmt: skip


def _crawl_lines(ov: Overview) -> list[str]:
    """One line of crawls when there is more than the default one (``crawl-frontier crawls``: all)."""
    if not any(r.crawl != "default" for r in ov.crawls):
        return []
    parts = [f"{r.crawl} {state(r)} {r.queued}q/{r.inflight}f/{r.completed}d" for r in shown(ov.crawls, 8)]
    return ["crawls: " + "  ".join(parts) + "  (crawl-frontier crawls)"]


def render(statuses: list[Status], top: int = 20, now: float | None = None) -> str:
    now = time.time() if now is None else now
    if not statuses:
        return "no live frontier instance has published status (is a frontier running?)"
    ov = overview(statuses, top)
    totals = ov.totals
    lines = [
        f"instances: {len(statuses)}  partitions: {ov.partitions}",
        "totals: "
        + "  ".join(
            f"{k}={totals.get(k, 0)}"
            for k in (
                "queued",
                "inflight",
                "fetched",
                "failed",
                "disallowed",
                "rejected",
                "pages_per_s",
                "dispatched",
                "retried",
                "lost",
                "returned",
                "duplicates",
                "dropped",
                "revisits",
                "forgotten",
                "recrawls",
                "skipped",
            )
        ),
        *ov.unserved_lines(),
        *_crawl_lines(ov),
        "",
        f"{'scope':<32} {'queued':>7} {'infl':>4} {'conc':>4} {'delay':>7} {'limit/s':>8} {'gate':>8}  "
        "why not now; why this delay",
    ]
    for r in ov.scopes:
        gate = _when(r.gate_until, now) if r.gate_until > now else "-"
        why = sentence(r.reason, r.wait_until, now)
        limit = f"{r.limit:.2f}" if r.limit > 0 else "-"
        cause = f"; {r.cause}" if r.cause else ""
        lines.append(f"{r.scope[:32]:<32} {r.queued:>7} {r.inflight:>4} {r.concurrency:>4} {r.delay:>7.2f} "
                     f"{limit:>8} {gate:>8}  {why}{cause}")  # fmt: skip
    return "\n".join(lines)

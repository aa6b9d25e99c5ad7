"""What a frontier instance reports: status snapshots on ``crawl.frontier.status`` (totals, the
busiest scopes, and the scopes a live page watches), the totals the Prometheus gauges read, and
the open-gates gauge fed by every scope's delay change. :class:`Reporting` is a part of
:class:`~frontier.service.service.FrontierService`.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import msgspec

from frontier.client.crawls import crawl_rows
from frontier.config import Config
from frontier.core import budget
from frontier.core.causes import Cause
from frontier.core.control import control_record, scope_key
from frontier.observability.metrics import FrontierMetrics
from frontier.observability.watch import (
    MAX_WATCH_SENT,
    MAX_WATCHED,
    WATCH_RESEND,
    WATCH_SECONDS,
    WatchBusy,
    watch_scope,
)
from frontier.partition.keys import state_key
from frontier.partition.records import state_dec
from frontier.service.crawls import CrawlDirectory
from frontier.service.owned import Partitions
from topics.kafka import AsyncProducer
from topics.partitioning import partition_for
from topics.schemas import MAX_STATUS_CRAWLS, ControlCommand, CrawlStatus, Status, encode

MAX_GATE_GAUGE = 100_000  # open gates tracked for the gates-active gauge; beyond, it reads this value
throttle_log = logging.getLogger("frontier.throttle")


class Reporting:
    """What this instance reports. Interface: :meth:`delay_changed` (the hook every partition
    calls on a scope's delay change), :meth:`watch` (a live page asks for a scope),
    :meth:`watch_partitions` and :meth:`add_watch` (a watch command, checked and applied),
    :meth:`status`, :meth:`crawl_status`, :meth:`publish_status`, :meth:`stats`,
    :meth:`metric_totals`; ``instance`` and ``metrics`` (the live page's). Owns the Prometheus
    metrics (:class:`FrontierMetrics`, whose gauges read it), the scopes watched and asked for,
    the open gates and the pages/s marks. Given the configuration, the clock, the instance's
    name, the shared :class:`Partitions` (read only), and callables: ``producer`` (the process's
    producer), ``rejected`` (the records this process put on crawl.rejected) and ``directory``
    (the crawls' workers, once started)."""

    def __init__(
        self,
        cfg: Config,
        clock: Callable[[], float],
        instance: str,
        partitions: Partitions,
        producer: Callable[[], AsyncProducer],
        rejected: Callable[[], int],
        directory: Callable[[], CrawlDirectory | None],
    ) -> None:
        self.cfg = cfg
        self.topics = cfg.topics
        self.clock = clock
        self.instance = instance
        self.partitions = partitions
        self._producer = producer
        self._rejected = rejected
        self._directory = directory
        self.metrics = FrontierMetrics(self.metric_totals, lambda: self.crawl_status(self.clock()))
        self.watched: dict[str, float] = {}  # scope → until when a live page (any instance's) charts it
        self._watch_sent: dict[str, float] = {}  # scope → when this instance last asked for it (< WATCH_RESEND ago)
        self._gates: dict[str, float] = {}  # scope → gate end, for the gates-active gauge (bounded)
        self._gates_pruned = 0.0
        self._rate_mark: tuple[float, int] = (time.monotonic(), 0)  # for pages/s in the status totals
        self.pages_per_s = 0.0
        self._crawl_marks: dict[str, tuple[float, int]] = {}  # crawl → (time, completed) for its pages/s
        self.crawl_rates: dict[str, float] = {}

    def delay_changed(self, scope: str, old: float, new: float, cause: str, kind: Cause, gate_until: float) -> None:
        self.metrics.delay_changes.labels(kind.value or Cause.OTHER.value).inc()
        if kind is Cause.BUDGET:
            self.metrics.note_budget(scope)  # counted in the budget gauge while it has a budget
        now = self.clock()
        if gate_until > now:
            if len(self._gates) >= MAX_GATE_GAUGE and scope not in self._gates and now - self._gates_pruned >= 1.0:
                self._prune_gates(now)  # full: make room from ended gates (at most once a second)
            if len(self._gates) < MAX_GATE_GAUGE or scope in self._gates:
                self._gates[scope] = gate_until  # else the gauge saturates at MAX_GATE_GAUGE
        level = logging.INFO if self.cfg.frontier.debug_throttle else logging.DEBUG
        throttle_log.log(level, "scope %s delay %.3f -> %.3f: %s", scope, old, new, cause)

    def watch(self, scope: str) -> bool:
        """Ask the instance owning ``scope`` (maybe this one) to report it in its snapshots for
        WATCH_SECONDS. The scope is checked first (:func:`watch_scope`; ValueError with the reason,
        nothing stored or sent). Return False when it was asked for less than WATCH_RESEND ago
        (nothing sent); raise :class:`WatchBusy` when MAX_WATCH_SENT other scopes were."""
        scope = watch_scope(scope)
        now = self.clock()
        last = self._watch_sent.get(scope)
        if last is not None and 0 <= now - last < WATCH_RESEND:
            return False
        if last is None and len(self._watch_sent) >= MAX_WATCH_SENT:
            self._prune_watches(now)
            if len(self._watch_sent) >= MAX_WATCH_SENT:
                raise WatchBusy(f"{MAX_WATCH_SENT} scopes asked for in the last {WATCH_RESEND:.0f} s: try again later")
        cmd = ControlCommand(action="watch", scope=scope)
        key, value, _ = control_record(cmd, self.topics.partitions)
        for target in self.watch_partitions(scope) or range(self.topics.partitions):
            self._producer().send_nowait(self.topics.control, value, key=key, partition=target)
        self._watch_sent[scope] = now
        return True

    def watch_partitions(self, scope: str) -> set[int] | None:
        """The partition holding ``scope`` (its domain's, or an ``ip:`` scope's address's), or None
        for any: with ``frontier.ip_scope`` URLs are keyed by their address."""
        if self.cfg.frontier.ip_scope and not scope.startswith("ip:"):
            return None
        return {partition_for(scope_key(scope), self.topics.partitions)}  # no command built: per snapshot

    def add_watch(self, scope: str, now: float) -> None:
        """Report ``scope`` until now + WATCH_SECONDS. At MAX_WATCHED, expired entries make room,
        else the one that would expire first: a full map never stops new watches."""
        if scope not in self.watched and len(self.watched) >= MAX_WATCHED:
            self._prune_watches(now)
            if len(self.watched) >= MAX_WATCHED:
                del self.watched[min(self.watched, key=self.watched.__getitem__)]
        self.watched[scope] = now + WATCH_SECONDS

    def _prune_watches(self, now: float) -> None:
        """Drop expired watches and asks older than WATCH_RESEND (every status snapshot)."""
        self.watched = {s: until for s, until in self.watched.items() if now < until <= now + WATCH_SECONDS}
        self._watch_sent = {s: at for s, at in self._watch_sent.items() if 0 <= now - at < WATCH_RESEND}

    def status(self, now: float, top: int = 20) -> Status:
        """This instance's view: totals and the busiest scopes of every owned partition."""
        # every partition's busiest scopes ranked, and rows built for the ``top`` kept only
        ranked = [(-n, scope, qid, owned) for owned in self.partitions.owned.values()
                  for scope, n, qid in owned.frontier.visibility.scope_ranking(top)]  # fmt: skip
        ranked.sort(key=lambda r: (r[0], r[1]))
        rows = [owned.frontier.scope_row(scope, now, -n, qid) for n, scope, qid, owned in ranked[:top]]
        listed = {r.scope for r in rows}
        self._prune_watches(now)
        for scope in sorted(set(self.watched) - listed):  # scopes someone is charting on a live page
            # O(the scope's queues) each (the partition's watch index), never a scan of all queues
            targets = self.watch_partitions(scope)
            if targets is not None:
                owned = self.partitions.owned.get(min(targets))
                if owned is not None:
                    rows.append(owned.frontier.scope_row(scope, now))
                continue
            for owned in self.partitions.owned.values():  # ip_scope: the partitions where it has work
                row = owned.frontier.scope_row(scope, now)
                if row.queued or row.inflight:
                    rows.append(row)
        totals = self.stats()
        totals["rejected"] = self._rejected()
        mark_at, mark_done = self._rate_mark
        elapsed = time.monotonic() - mark_at
        if elapsed >= 5.0:  # pages/s over the last 5+ seconds of this instance's partitions
            done = totals.get("completed", 0) + totals.get("disallowed", 0)
            self.pages_per_s = max(0.0, (done - mark_done) / elapsed)
            self._rate_mark = (time.monotonic(), done)
        totals["pages_per_s"] = round(self.pages_per_s)
        crawls = self.crawl_status(now)
        return Status(instance=self.instance, at=now, partitions=sorted(self.partitions.owned), totals=totals,
                      scopes=rows, unserved=dict(self.partitions.unserved), crawls=crawls[:MAX_STATUS_CRAWLS],
                      crawls_cut=max(0, len(crawls) - MAX_STATUS_CRAWLS))  # fmt: skip

    def crawl_status(self, now: float) -> list[CrawlStatus]:
        """Every crawl of the owned partitions, added up over them, with the workers its group has
        and its pages/s here (over the last 5+ seconds)."""
        part = [Status(instance="", at=now, partitions=[], totals={}, scopes=[], crawls=owned.frontier.crawl_rows(now))
                for owned in self.partitions.owned.values()]  # fmt: skip
        rows = crawl_rows(part)
        directory = self._directory()
        workers = directory.workers if directory is not None else {}
        mono = time.monotonic()
        for row in rows:
            row.workers = workers.get(row.crawl, -1)
            mark = self._crawl_marks.get(row.crawl)
            if mark is None or mono - mark[0] >= 5.0:
                if mark is not None:
                    self.crawl_rates[row.crawl] = max(0.0, (row.completed - mark[1]) / (mono - mark[0]))
                self._crawl_marks[row.crawl] = (mono, row.completed)
            row.pages_per_s = round(self.crawl_rates.get(row.crawl, 0.0), 1)
        return rows

    def publish_status(self, now: float) -> None:
        self._prune_gates(now)  # every status interval, not only when Prometheus scrapes
        self._producer().send_nowait(self.topics.status, encode(self.status(now)), key=self.instance.encode())

    def _prune_gates(self, now: float) -> None:
        self._gates = {scope: until for scope, until in self._gates.items() if until > now}
        self._gates_pruned = now

    def stats(self) -> dict[str, Any]:
        totals: dict[str, int] = defaultdict(int)
        for owned in self.partitions.owned.values():
            for k, v in msgspec.structs.asdict(owned.frontier.stats).items():
                totals[k] += v
            totals["inflight"] += owned.frontier.inflight
            totals["hosts_due"] += owned.frontier.queued_hosts()
            totals["queued"] += owned.frontier.queued()
        totals["transactions"] = self.partitions.transactions()
        totals["partitions"] = len(self.partitions.owned)
        self.metrics.count_lost({p: owned.frontier.stats.lost for p, owned in self.partitions.owned.items()})
        totals["partitions_unserved"] = len(self.partitions.unserved)
        return dict(totals)

    def metric_totals(self) -> dict[str, int]:
        """What the Prometheus gauges read at scrape time."""
        totals = self.stats()
        self._prune_gates(self.clock())
        totals["gates_active"] = len(self._gates)
        totals["topic_partitions"] = self.topics.partitions
        totals["budget_learned"], totals["budget_spent"] = self._budgets()
        return totals

    def _budgets(self) -> tuple[int, int]:
        """Of the scopes a budget changed here (``metrics.budgeted``), those of the owned partitions
        that have a budget, and those whose budget is spent until their period turns, read from
        their stored states (a few: the scopes with a budget). A scope with no budget any more, or
        no longer here, is dropped (counted again at its next budget change here)."""
        learned = spent = 0
        for scope in list(self.metrics.budgeted):
            targets = self.watch_partitions(scope)  # (None with ip_scope: any partition)
            raw = None
            for p in sorted(targets) if targets is not None else list(self.partitions.owned):
                owned = self.partitions.owned.get(p)
                if owned is not None and (raw := owned.kv.get(state_key(scope))) is not None:
                    break
            state = state_dec.decode(raw) if raw is not None else None
            if state is None or state.bud_mode == budget.WATCHING:
                del self.metrics.budgeted[scope]
                continue
            learned += 1
            spent += state.bud_mode == budget.SPENT
        return learned, spent

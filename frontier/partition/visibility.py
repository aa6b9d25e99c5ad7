"""What an operator sees of a partition, as the part :class:`Visibility`: per scope, its queued
URLs, its state, and why it is not dispatching now (status rows for ``crawl.frontier.status``,
the live page and ``watch``), and per crawl, its counts here. Reading only: no write, and no side
effect on the scheduler or the waiters.

Interface: ``scope_rows`` (or ``scope_ranking``, then ``scope_row`` of the scopes kept),
``scope_row``, ``crawl_rows``. Owns nothing. Depends on: the store (a queue's head), the
settings, ``Crawls``, ``Queues``, ``Scopes``, ``RobotsCache``, ``Revisits`` and ``Leases`` (the
counts in flight).
"""

from __future__ import annotations

from collections import Counter

from frontier.config import FrontierConfig
from frontier.core import budget, policy
from frontier.core.robots import origin
from frontier.partition.crawls import Crawls
from frontier.partition.keys import QueueId, queue_crawl, queue_prefix, queue_scopes, scope_queue
from frontier.partition.leases import Leases
from frontier.partition.queues import Queues
from frontier.partition.records import item_dec
from frontier.partition.revisits import Revisits
from frontier.partition.robots import RobotsCache
from frontier.partition.scopes import Scopes
from frontier.partition.store import Store
from topics.schemas import CrawlStatus, ScopeStatus


class Visibility:
    """Status rows of one partition's scopes and crawls."""

    def __init__(self, store: Store, settings: FrontierConfig, crawls: Crawls, queues: Queues, scopes: Scopes,
                 robots: RobotsCache, revisits: Revisits, leases: Leases) -> None:  # fmt: skip
        self._kv = store.kv
        self._settings = settings
        self._crawls = crawls
        self._queues = queues
        self._scopes = scopes
        self._robots = robots
        self._revisits = revisits
        self._leases = leases

    def _explain(self, qid: QueueId, now: float) -> tuple[str, float | None]:
        """Why ``qid`` is not dispatching now (no side effects: for status only)."""
        scopes = queue_scopes(qid)
        held = self._crawls.held_reason(queue_crawl(qid))
        if held is not None:
            return held, None
        paused = self._scopes.paused_by(scopes)
        if paused is not None:
            return f"paused ({paused})", None
        head = self._kv.first(queue_prefix(qid))
        if self._settings.robots_obey and head is not None:
            rules = self._robots.rules(origin(item_dec.decode(head[1]).url), now)
            if rules is None:
                return "robots.txt pending", None
            if rules.unavailable:
                failures = rules.record.failures
                return f"robots.txt unavailable ({failures} failure(s)): all disallowed until retry", (
                    self._robots.due(rules)
                )
        d = self._scopes.decide(scopes, now, 1.0, register=False)
        return d.reason, d.at

    def scope_rows(self, now: float, top: int = 20) -> list[ScopeStatus]:
        """Per scope, busiest first: queued, in flight, delay, gate, and why it is not dispatching;
        rows left over go to the scopes used most recently (their own count: a scope of a small
        queue too), so a crawl that finished still shows what it learned of its hosts."""
        return [self.scope_row(scope, now, n, qid) for scope, n, qid in self.scope_ranking(top)]

    def scope_ranking(self, top: int = 20) -> list[tuple[str, int, QueueId | None]]:
        """The scopes :meth:`scope_rows` gives rows of, in its order: ``(scope, queued, its largest
        queue)``, without building a row (a status snapshot builds only the rows it keeps)."""
        # The largest queues only (Queues.largest): the cost must not grow with Python work per
        # queue, there can be millions. A scope shared by many small queues may be under-counted.
        queued: Counter[str] = Counter()
        biggest: dict[str, tuple[int, QueueId]] = {}  # scope → its largest queue
        for qid, n in self._queues.largest(top * 4):
            for scope in queue_scopes(qid):
                queued[scope] += n
                if n > biggest.get(scope, (0, ""))[0]:
                    biggest[scope] = (n, qid)
        ranked: list[tuple[str, int, QueueId | None]] = [
            (scope, n, biggest.get(scope, (0, None))[1]) for scope, n in queued.most_common(top)
        ]
        if len(ranked) < top:
            # the states cache's newest first (taken before any row reads them: a read moves a scope up)
            recent = self._scopes.recent(2 * top)
            for scope in [s for s in recent if s not in queued][: top - len(ranked)]:
                mine = self._queues.of_scope(scope, scope_queue(scope))
                ranked.append((scope, sum(n for n, _ in mine), max(mine)[1] if mine else None))
        return ranked

    def scope_row(self, scope: str, now: float, queued: int | None = None, qid: QueueId | None = None) -> ScopeStatus:
        """One scope's status row (``queued`` counted over its queues when not given: its own
        queue and the multi-scope queues the index lists for it, O(its queues), never a scan)."""
        if queued is None:
            mine = self._queues.of_scope(scope, scope_queue(scope))
            queued = sum(n for n, _ in mine)
            qid = max(mine)[1] if mine else None
        s = self._scopes.scope_settings(scope)
        st = policy.advance(self._scopes.state(scope), now, s)
        # an emptied queue (not popped yet) reads like no queue: nothing to explain, and no seek in the store
        reason, at = self._explain(qid, now) if qid and queued else ("ready" if st.inflight else "idle", None)
        return ScopeStatus(scope=scope, queued=queued, inflight=st.inflight, delay=policy.delay(st, s),
                           concurrency=policy.concurrency(st, s), gate_until=st.gate_until, backoff=st.backoff,
                           reason=reason, wait_until=at, sent=st.sent_total,
                           limit=1 / st.limit if st.limit > 0 else 0.0,
                           cause="; ".join(c for c in (budget.describe(st), st.cause) if c))  # fmt: skip

    def crawl_rows(self, now: float) -> list[CrawlStatus]:
        """Every crawl this partition has a record of, with its counts here."""
        due = self._revisits.next_by_crawl({name for name, r in self._crawls.items() if r.revisits > 0})
        rows = []
        for name, r in self._crawls.items():
            rows.append(CrawlStatus(
                crawl=name, queued=self._queues.crawl_queued(name), inflight=self._leases.crawl_inflight(name),
                ingested=r.ingested, dispatched=r.dispatched, completed=r.completed, fetched=r.fetched,
                failed=r.failed, disallowed=r.disallowed, dropped=r.dropped, over_limit=r.over_limit,
                revisits=r.revisits, next_revisit=due.get(name), paused=r.paused, per_host=r.per_host,
            ))  # fmt: skip
        return rows

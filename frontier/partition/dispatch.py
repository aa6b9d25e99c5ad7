"""The dispatch loop, as the part :class:`Dispatcher`: the due queues popped from the scheduler,
each given its turn (shared out between crawls of the same scopes), its head leased when every
scope allows it, reported when robots.txt disallows it, preceded by its origin's robots.txt job
when the rules must be fetched, or rescheduled (or left waiting as a waiter).

Interface: ``dispatch``, ``next_wakeup``. Owns nothing of its own. Depends on: the store, the
settings, ``Crawls``, ``Queues``, ``Scopes``, ``RobotsCache``, ``Revisits``, ``Recorded``,
``Reports``, ``Leases`` and the partition's ``Stats``. The hot path of the frontier: a job costs
the parts' calls and nothing between them.
"""

from __future__ import annotations

from frontier.config import FrontierConfig
from frontier.core.robots import origin, robots_url
from frontier.partition.crawls import Crawls
from frontier.partition.keys import QueueId, queue_base, queue_crawl, queue_scopes
from frontier.partition.leases import Leases
from frontier.partition.queues import Queues
from frontier.partition.recorded import Recorded
from frontier.partition.records import Dispatch, Stats, encoder, item_dec
from frontier.partition.reports import Reports
from frontier.partition.revisits import Revisits
from frontier.partition.robots import RobotsCache
from frontier.partition.scopes import Scopes
from frontier.partition.store import Store
from topics.schemas import UrlItem


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds:.0f} s"


class Dispatcher:
    """What one partition may send now."""

    def __init__(self, store: Store, settings: FrontierConfig, stats: Stats, crawls: Crawls, queues: Queues,
                 scopes: Scopes, robots: RobotsCache, revisits: Revisits, recorded: Recorded, reports: Reports,
                 leases: Leases) -> None:  # fmt: skip
        self._store = store
        self._kv = store.kv
        self._settings = settings
        self._stats = stats
        self._crawls = crawls
        self._queues = queues
        self._scopes = scopes
        self._robots = robots
        self._revisits = revisits
        self._recorded = recorded
        self._reports = reports
        self._leases = leases

    def dispatch(self, now: float, limit: int = 1000) -> Dispatch:
        """Lease the jobs that may be sent at ``now``; report URLs robots.txt disallows."""
        out = Dispatch()
        revisits, leases, crawls, queues = self._revisits, self._leases, self._crawls, self._queues
        scheduler, groups, max_inflight = queues.scheduler, queues.groups, self._settings.max_inflight
        if revisits.next_due is not None and revisits.next_due <= now:
            revisits.requeue(now)
        # scopes whose turn was given this round and could not send (their chosen queue waits for
        # a response, or is due later): base queue id → that chosen queue. Nothing in a round makes
        # a scope freer (no feedback, no expiry), so the group's other queues popped in the same
        # round follow it without choosing and deciding again (the same outcome, O(1) a pop)
        waiting: dict[QueueId, QueueId] = {}
        while len(out.records) < limit and leases.inflight < max_inflight:
            due = scheduler.pop_due(now)
            if due is None:
                break
            qid = QueueId(due)
            if (crawls.held or crawls.served is not None) and crawls.waits(crawl := queue_crawl(qid)):
                queues.park(crawl, qid)  # until its crawl is resumed, or has a worker
                continue
            base = queue_base(qid)
            group = groups.get(base) if groups else None
            if not group:
                self._serve(qid, now, out)
                continue
            chosen = waiting.get(base)
            if chosen is not None and chosen != qid:
                self._follow(qid, chosen, now)
                continue
            # other crawls queue URLs of these scopes: the turn goes to one of them, and the queue
            # popped follows it (the same scopes decide the same: sent, due later, or waiting)
            chosen = queues.choose(qid, group)
            if chosen != qid:
                scheduler.discard(chosen)  # served now: where it goes next is what serving it says
            sent = len(out.records) + len(out.reports)
            self._serve(chosen, now, out)
            if sent == len(out.records) + len(out.reports) and self._waits(chosen, now):
                waiting[base] = chosen
            if chosen != qid:
                self._follow(qid, chosen, now)
        if self._reports.has_unreported():
            self._reports.report_pending(out, now)
        return out

    def _serve(self, qid: QueueId, now: float, out: Dispatch) -> None:
        """Give ``qid`` its turn: lease its head if every scope allows it now, or report it (robots.txt),
        or reschedule it (or leave it waiting as a waiter)."""
        queues = self._queues
        # from memory in the common case (the turn read it, or it came in); an empty queue (its
        # count, as the turns trust it) is not read
        head = queues.heads.head(qid) if queues.count(qid) > 0 else None
        if head is None:
            queues.forget(qid)
            return  # no work left: the queue leaves the heap
        qkey, raw = head
        item = item_dec.decode(raw)
        if item.key and self._recorded.stale_entry(item):  # a client decided it since it was queued
            self._store.delete(qkey)
            queues.dequeued(qid, qkey)
            self._recorded.decided_by_client(item)
            queues.scheduler.schedule(qid, now)
            return
        scopes = queue_scopes(qid)
        settings = self._settings
        if settings.robots_obey:
            robots = self._robots
            site = origin(item.url)
            rules = robots.rules(site, now)
            if rules is None:
                self._need_robots(qid, item, scopes, site, now, out)
                return
            if rules.unavailable and not robots.given_up(rules):
                queues.scheduler.schedule(qid, robots.due(rules))
                return
            if item.discover_sitemaps and not rules.unavailable:
                robots.discover_sitemaps(site, item, rules, out)
            if item.agent and not rules.unavailable:
                robots.agent_delay(site, item.host, rules, item.agent, now)
            if rules.unavailable or not rules.allowed(item.url, item.agent):
                if rules.unavailable:
                    rec = rules.record
                    error = f"robots.txt unreachable for {_duration(now - rec.failing_since)}"
                    error += f" ({rec.failures} attempts, last: {rec.error or rec.status})"
                    self._reports.report(item, raw, qkey, scopes, now, "error", error)
                    self._stats.failed += 1
                else:
                    self._reports.report(item, raw, qkey, scopes, now, "disallowed", "disallowed by robots.txt")
                    self._stats.disallowed += 1
                queues.dequeued(qid, qkey)
                queues.scheduler.schedule(qid, now)
                return
        elif item.discover_sitemaps:
            self._robots.discover_sitemaps(origin(item.url), item, None, out)
        decision = self._scopes.decide(scopes, now, item.cost, qid=qid)
        if decision.at is None:
            return  # waits for feedback on a full scope (registered as a waiter)
        if decision.at > now + settings.dispatch_lead:
            queues.scheduler.schedule(qid, decision.at - settings.dispatch_lead)
            return
        # Due now or within the lead: send it ahead with not_before = its slot, so Kafka
        # transit is off the critical path; the worker holds it until then.
        self._leases.lease(out, item, raw, qkey, scopes, now, not_before=max(now, decision.at))
        queues.dequeued(qid, qkey)
        if queues.groups:
            queues.took_turn(qid)
        if queues.count(qid) > 0:
            queues.scheduler.schedule(qid, now)
        else:
            queues.forget(qid)  # its last URL went: it leaves now (not at a pop that finds it empty)

    def _waits(self, qid: QueueId, now: float) -> bool:
        """Whether ``qid``, just served without a send, waits past ``now``: a waiter, or due later."""
        queues = self._queues
        if queues.count(qid) <= 0:
            return False
        at = queues.scheduler.scheduled_at(qid)
        return at is None or at > now

    def _follow(self, qid: QueueId, chosen: QueueId, now: float) -> None:
        """``qid`` lost its turn to ``chosen`` (its scopes'): it goes when ``chosen`` goes next, or,
        when ``chosen`` waits for a response, waits for one of its scopes too."""
        queues = self._queues
        if queues.count(qid) <= 0:
            queues.forget(qid)
            return
        at = queues.scheduler.scheduled_at(chosen)
        if at is not None or not queues.has(chosen):
            queues.scheduler.schedule(qid, now if at is None else at)
            return
        for scope in queue_scopes(qid):  # chosen waits as a waiter: woken by the next response of its scopes
            queues.waiters.add(scope, qid)

    def _need_robots(
        self, qid: QueueId, item: UrlItem, scopes: list[str], site: str, now: float, out: Dispatch
    ) -> None:
        host = scopes[0]
        if self._robots.is_pending(site):
            self._queues.waiters.add(f"robots:{site}", qid)  # woken when that robots.txt lease closes
            return
        # the robots.txt request goes through the same throttling
        decision = self._scopes.decide(scopes, now, 0.0, qid=qid)
        if decision.at is None:
            return
        if decision.at > now + self._settings.dispatch_lead:
            self._queues.scheduler.schedule(qid, decision.at - self._settings.dispatch_lead)
            return
        # robots.txt redirects are followed one hop per job, each through the same throttling
        hop = self._robots.record(site)
        url = hop.redirect if hop is not None and hop.redirect else robots_url(item.url)
        # ip: the feedback's partition; crawl: the job goes to the workers of the crawl that waits for it
        robots_item = UrlItem(url=url, host=host, domain=item.domain, ip=item.ip, meta={}, crawl=item.crawl)
        self._robots.fetching(site)
        self._leases.lease(out, robots_item, encoder.encode(robots_item), b"", scopes, now, kind="robots",
                          not_before=max(now, decision.at), site=site)  # fmt: skip

    def next_wakeup(self) -> float | None:
        """The earliest time something may happen without new input."""
        lease = self._leases.next_deadline()
        # at max_inflight nothing can go out before a lease closes (feedback wakes the loop)
        due = self._queues.scheduler.next_time() if self._leases.inflight < self._settings.max_inflight else None
        times = [t for t in (due, lease, self._revisits.next_due) if t is not None]
        return min(times) if times else None

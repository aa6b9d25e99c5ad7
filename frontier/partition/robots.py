"""robots.txt in a partition, as the part :class:`RobotsCache`: each origin's answer (``R<origin>``,
an LRU of parsed rules over it), when it must be fetched again (TTL, growing retries after
failures, giving up), and what a robots.txt response does (store it, follow a redirect hop, count
failures, set the host's crawl delay). The rules themselves are ``frontier.core.robots``; the
robots.txt job is leased by ``PartitionFrontier.dispatch``.

Interface: ``rules``, ``due``, ``given_up``, ``record``, ``store``, ``agent_delay``,
``discover_sitemaps``, and the origins whose robots.txt is being fetched (``fetching``,
``fetched``, ``is_pending``). Owns: the ``R`` keys, the rules' LRU, the agents' Crawl-delays
applied, the sitemaps read. Depends on: the store, the settings, ``Scopes`` (a Crawl-delay is
applied to the host's scope) and the partition's ``Stats``."""

from __future__ import annotations

import logging
from urllib.parse import urljoin

from frontier.config import FrontierConfig
from frontier.core import policy
from frontier.core.headers import retry_after
from frontier.core.lru import LRU
from frontier.core.robots import MAX_SITEMAPS, RobotsRecord, Rules, agent_token, retry_after_failures
from frontier.partition.keys import robots_key
from frontier.partition.records import Dispatch, Stats, encoder, robots_dec
from frontier.partition.scopes import Scopes
from frontier.partition.store import Store
from topics.schemas import Feedback, Submission, UrlItem

log = logging.getLogger("frontier")

ROBOTS_CACHE = 10_000
MAX_ROBOTS_REDIRECTS = 5


def _join(base: str, location: str) -> str:
    """An absolute http(s) redirect target, or "" when ``location`` is not one."""
    try:
        target = urljoin(base, location.strip())
    except ValueError:
        return ""
    return target if target.startswith(("http://", "https://")) and len(target) <= 2048 else ""


class RobotsCache:
    """The robots.txt answers of one partition's origins."""

    def __init__(self, store: Store, settings: FrontierConfig, scopes: Scopes, stats: Stats,
                 user_agent: str) -> None:  # fmt: skip
        self._store = store
        self._kv = store.kv
        self._settings = settings
        self._scopes = scopes
        self._stats = stats
        self._agent = agent_token(user_agent)
        self._pending: set[str] = set()  # origins whose robots.txt is being fetched
        self._rules: LRU[str, Rules] = LRU(ROBOTS_CACHE)  # origin → rules (over R<origin>)
        # origin → the agents (other than the frontier's own) whose Crawl-delay was applied since
        # its rules were stored (memory only: after a restart, applied again at the next dispatch)
        self._agent_delays: dict[str, set[str]] = {}
        # (crawl, origin) → the robots.txt copy (its fetch time) whose sitemaps were submitted for the
        # crawl (discover_sitemaps; memory only: after a restart submitted again, and the seen set
        # drops them); a robots.txt fetched again is read again
        self._sitemaps_read: LRU[tuple[str, str], float] = LRU(ROBOTS_CACHE)

    # -- robots.txt being fetched -------------------------------------------------------------------
    def fetching(self, site: str) -> None:
        """A robots.txt job of ``site`` is out (leased, or restored with its lease)."""
        self._pending.add(site)

    def fetched(self, site: str) -> None:
        """The robots.txt lease of ``site`` closed."""
        self._pending.discard(site)

    def is_pending(self, site: str) -> bool:
        return site in self._pending

    # -- answers ------------------------------------------------------------------------------------
    def rules(self, site: str, now: float) -> Rules | None:
        """The origin's current rules, or None when they must be (re)fetched first."""
        rules = self._rules.peek(site)
        if rules is None:
            raw = self._kv.get(robots_key(site))
            if raw is None:
                return None
            rules = Rules(robots_dec.decode(raw), self._agent)
            self._rules.put(site, rules)
        if rules.record.redirect:
            return None  # half way through its redirects: the next hop is fetched first
        return rules if now < self.due(rules) else None

    def due(self, rules: Rules) -> float:
        """When the rules must be fetched again: after the TTL, or sooner (growing) after failures."""
        rec = rules.record
        if not rules.unavailable:
            return rec.fetched_at + self._settings.robots_ttl
        retry, most = self._settings.robots_retry, max(self._settings.robots_retry, self._settings.robots_retry_max)
        return max(rec.fetched_at + retry_after_failures(rec.failures, retry, most), rec.retry_at)

    def given_up(self, rules: Rules) -> bool:
        rec = rules.record
        return rules.unavailable and rec.fetched_at - rec.failing_since >= self._settings.robots_give_up

    def store(self, site: str, item: UrlItem, fb: Feedback, now: float) -> None:
        host = item.host
        status = 0 if fb.error else fb.status
        record = RobotsRecord(status=status, body=fb.body, fetched_at=now, error=fb.error)
        location = fb.headers.get("location", "")
        if 300 <= status < 400 and location:
            before = self.record(site)
            hops = before.hops + 1 if before is not None and before.redirect == item.url else 1
            target = _join(item.url, location)
            if hops <= MAX_ROBOTS_REDIRECTS and target:  # RFC 9309 §2.3.1.2: follow at least five
                record = RobotsRecord(status=status, fetched_at=now, redirect=target, hops=hops)
        rules = Rules(record, self._agent)
        if rules.unavailable:  # count consecutive failures: retries grow apart, and end (see given_up)
            before = self.record(site)
            failing = before is not None and before.failures > 0
            record.failures = before.failures + 1 if failing and before else 1
            record.failing_since = before.failing_since if failing and before else now
            wait = retry_after(fb.headers.get("retry-after"), now, fb.headers.get("date"))
            if wait is not None:  # the server said when (a 429 or 503): not before, and not long after
                record.retry_at = now + min(wait, self._settings.robots_give_up)
        self._store.put(robots_key(site), encoder.encode(record))
        self._rules.put(site, rules)
        self._stats.robots_fetched += 1
        self._agent_delays.pop(site, None)
        if not rules.unavailable and not record.redirect:
            self._scopes.apply(host, policy.Robots(rules.delay()), now)

    def agent_delay(self, site: str, host: str, rules: Rules, agent: str, now: float) -> None:
        """The Crawl-delay robots.txt asks of a URL's own agent (a Scrapy spider's User-Agent), when
        longer than the frontier's own: the host's robots delay becomes it (one politeness for every
        crawl of the host: the strictest agent's). Once per origin and agent until the rules change."""
        if not agent or agent in self._agent_delays.get(site, ()):
            return
        if len(self._agent_delays) >= ROBOTS_CACHE:
            self._agent_delays.clear()
        self._agent_delays.setdefault(site, set()).add(agent)
        delay = rules.delay(agent)
        if delay > rules.delay():
            self._scopes.apply(host, policy.Robots(delay), now)

    def discover_sitemaps(self, site: str, item: UrlItem, rules: Rules | None, out: Dispatch) -> None:
        """Submit the sitemaps the origin's robots.txt names (``item.discover_sitemaps``), once per
        crawl and robots.txt copy, as sitemap jobs of the URL's crawl with its revisit, priority, meta,
        follow budget and scopes; they may list the URL's registrable domain (a robots.txt may name
        a sitemap elsewhere: sitemaps.org's cross-submission). ``rules`` None: robots.txt is not
        obeyed, so not kept; the robots.txt itself is submitted as a sitemap (a throttled job) instead."""
        copy = rules.record.fetched_at if rules is not None else 0.0
        key = (item.crawl, site)
        if self._sitemaps_read.get(key) == copy:  # (read: now the most recent)
            return
        self._sitemaps_read.put(key, copy)
        if rules is None:
            urls, depth = [f"{site}/robots.txt"], 0
        else:
            (urls, named), depth = rules.sitemaps(), 1
            if named > len(urls):
                log.warning("%s/robots.txt: %d of its %d Sitemap lines followed (the others are not absolute "
                            "http(s) URLs, or past %d)", site, len(urls), named, MAX_SITEMAPS)  # fmt: skip
        for url in urls:
            out.submissions.append(Submission(
                url=url, priority=item.priority, meta=item.meta, follow=item.follow, scopes=item.scopes,
                revisit=item.passed_on_revisit(), crawl=item.crawl, agent=item.agent, sitemap=True,
                sitemap_for=item.domain, sitemap_depth=depth))  # fmt: skip
        self._stats.sitemaps_found += len(urls)

    def record(self, site: str) -> RobotsRecord | None:
        """The origin's stored answer (its redirect hop, its failures), None when there is none."""
        rules = self._rules.peek(site)
        if rules is not None:
            return rules.record
        raw = self._kv.get(robots_key(site))
        return robots_dec.decode(raw) if raw is not None else None

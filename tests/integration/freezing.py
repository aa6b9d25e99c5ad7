"""Pauses of real processes for the integration tests, and the judges of what the sites saw.

A process of a :class:`~frontier.demo.stack.Stack` is frozen with SIGSTOP and thawed with SIGCONT
(each runs in its own session, so its whole process group stops), at a moment the test chooses,
as a GC pause, a VM migration or a stalled disk would freeze it. Afterwards the crawl is judged
from the sites' own request logs (pages fetched twice that a response in flight at a freeze does
not explain, requests closer than the delay), from crawl.pages (URLs lost, published twice, turned
into error pages), and from the frontier's stores: once the frontiers are stopped cleanly, each
partition's store must equal a fresh rebuild from its changelog.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from confluent_kafka import OFFSET_BEGINNING

from frontier.client.feed import read_status
from frontier.demo.sites import Hit, SiteFleet
from frontier.demo.stack import Stack, read_pages, wait_until
from frontier.partition.keys import CLEAN_AT_KEY, CLEAN_KEY, COMMITTED_AT_KEY, COMMITTED_KEY, MARKER_KEYS
from frontier.service.restore import db_path, replay
from frontier.service.rocks import RocksKV
from tests.integration.helpers import Pages
from topics.schemas import Page

EXAMPLES = 8  # how many items a problem lists before "..."


@dataclass(frozen=True)
class Freeze:
    """A process frozen from ``start`` to ``end`` (epoch seconds, the sites' clock)."""

    name: str
    start: float  # just before SIGSTOP
    end: float  # just after SIGCONT
    # a worker's report takes a moment after its response (page, feedback, offset commit): with
    # ``grace``, a response that ended this long before the freeze still counts as in flight
    grace: float = 0.0

    def in_flight(self, hit: Hit) -> bool:
        """Whether ``hit`` had arrived at its site before the freeze and was not complete by it (or,
        with ``grace``, its report could not be)."""
        return hit.start < self.start and (hit.end == 0.0 or hit.end > self.start - self.grace)


def freeze(stack: Stack, name: str, seconds: float, grace: float = 0.0) -> Freeze:
    """Freeze ``name`` now for ``seconds`` (the scenario itself: a deliberate wait), then thaw it,
    whatever happens meanwhile. ``grace``: see :attr:`Freeze.grace`."""
    pid = stack.procs[name].pid
    start = time.time()
    os.killpg(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.killpg(pid, signal.SIGCONT)
    return Freeze(name, start, time.time(), grace)


def thaw_all(stack: Stack) -> None:
    """SIGCONT to every process of the stack still running (a no-op for one not stopped)."""
    for proc in stack.procs.values():
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)


def proc_name(stack: Stack, instance: str) -> str:
    """The stack's name of a process from its instance or worker id ``<hostname>-<pid>``."""
    pid = instance.rsplit("-", 1)[-1]
    return next((name for name, proc in stack.procs.items() if str(proc.pid) == pid), instance)


def ownership(stack: Stack, since: float) -> dict[str, list[int]] | None:
    """Which frontier (by the stack's name) owns which partitions, from snapshots taken after
    ``since``; None while those snapshots do not split every partition exactly once."""
    fresh = [s for s in read_status(stack.client, stack.topics.status, max_age=6) if s.at > since]
    owned = {proc_name(stack, s.instance): sorted(s.partitions) for s in fresh}
    every = sorted(p for parts in owned.values() for p in parts)
    return owned if every == list(range(stack.partitions)) else None


def sole_fetchers(stack: Stack, pages: PageRecords, last: int = 3) -> dict[str, str]:
    """Host -> the worker (the stack's name) that fetched each of the host's last ``last`` pages on
    crawl.pages, for the hosts one worker serves (jobs are keyed by host: their partition of
    crawl.jobs is that worker's)."""
    recent: dict[str, list[str]] = defaultdict(list)
    for page in reversed(pages.records):
        names = recent[site_of(page.url)[0]]
        if len(names) < last:
            names.append(proc_name(stack, page.worker))
    return {host: names[0] for host, names in recent.items() if len(names) == last and len(set(names)) == 1}


def next_request(fleet: SiteFleet, hosts: Iterable[str], timeout: float) -> Hit:
    """The next request to reach any of ``hosts``, as soon as it arrives."""
    sites = [fleet.site(h) for h in hosts]
    counts = [len(s.hits) for s in sites]
    found: list[Hit] = []

    def arrived() -> bool:
        found.extend(s.hits[n] for s, n in zip(sites, counts, strict=True) if len(s.hits) > n)
        return bool(found)

    wait_until(arrived, timeout=timeout, interval=0.005, what=f"a request to one of {sorted(h.host for h in sites)}")
    return min(found, key=lambda h: h.start)


def replayed(log: str) -> list[tuple[int, int, int]]:
    """(partition, changelog records replayed, leases in flight) of each partition opened in ``log``."""
    pattern = r"partition (\d+) ready: (\d+) changelog records replayed in [\d.]+s, (\d+) in flight"
    return [(int(p), int(n), int(f)) for p, n, f in re.findall(pattern, log)]


class PageRecords(Pages):
    """:class:`Pages` that keeps every record (its worker, its outcome) as well as the URLs."""

    def __init__(self, stack: Stack) -> None:
        super().__init__(stack)
        self.records: list[Page] = []

    def poll(self, timeout: float = 0.2) -> None:
        got = read_pages(self._reader, timeout)
        self.records.extend(got)
        self.urls.extend(p.url for p in got)

    def finish(self, urls: Sequence[str], timeout: float, what: str) -> None:
        """Wait for every URL of ``urls`` (a timeout is judged afterwards, as URLs lost), then look
        a little longer for late duplicates."""
        with contextlib.suppress(TimeoutError):
            self.wait_for(len(set(urls)), timeout=timeout, what=what)
        self.settle()


def _at(t: float, t0: float) -> str:
    return f"t{t - t0:+.2f}s"


def refetches(fleet: SiteFleet, freezes: Iterable[Freeze], t0: float) -> tuple[list[tuple[str, str]], int]:
    """Each request for a page (robots.txt aside) that its site had served before, unless the
    request before it was in flight at a freeze: the host and a description of each such refetch
    (times from ``t0``), and how many refetches a response in flight at a freeze explains."""
    freezes = list(freezes)
    unexplained: list[tuple[str, str]] = []
    explained = 0
    for site in fleet.sites:
        by_path: dict[str, list[Hit]] = defaultdict(list)
        for hit in site.hits:
            if hit.path != "/robots.txt":
                by_path[hit.path].append(hit)
        for path, hits in sorted(by_path.items()):
            hits.sort(key=lambda h: h.start)
            for a, b in itertools.pairwise(hits):
                if any(f.in_flight(a) for f in freezes):
                    explained += 1
                    continue
                unexplained.append((site.host, f"{site.host}{path} at {_at(a.start, t0)} (ended {_at(a.end, t0)}) "
                                    f"and again at {_at(b.start, t0)}, {b.start - a.start:.2f}s later"))  # fmt: skip
    return unexplained, explained


def site_of(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.path or "/"


def hits_of(fleet: SiteFleet, url: str) -> list[Hit]:
    host, path = site_of(url)
    return [h for h in fleet.site(host).hits if h.path == path]


def _listed(items: Sequence[str]) -> str:
    shown = "; ".join(items[:EXAMPLES])
    return shown + (f"; ... ({len(items) - EXAMPLES} more)" if len(items) > EXAMPLES else "")


@dataclass
class Verdict:
    """What a crawl came to, judged from the sites and from crawl.pages; ``problems`` is empty
    when it held; ``figures`` is the line printed for the record."""

    problems: list[str]
    figures: str


def late_by(stalls: Iterable[tuple[float, float]], at: float) -> float:
    """How late a request stamped at ``at`` may be for ``stalls`` (epoch seconds, how long) in the
    second before it: the longest overlap of one with that second."""
    return max((min(t + d, at) - max(t, at - 1.0) for t, d in stalls if t <= at and t + d >= at - 1.0), default=0.0)


def close_requests(
    fleet: SiteFleet, delay: float, tolerance: float = 0.03, path_stalls: Sequence[tuple[float, float]] = (),
    t0: float | None = None,
) -> list[str]:  # fmt: skip
    """Pairs of requests to a site closer than ``delay`` (and concurrency above 1) that a stall on
    the way to the site does not explain. A site stamps a request when its handler runs: a stall
    of the fleet (this test process, on a loaded machine) or of a proxy in front of it
    (``path_stalls``: tests/cluster/proxy.py) just before the first request makes that stamp late
    by up to the stall's length, and the gap look shorter than the crawler sent it (the same
    judgement as helpers.politeness_failures, which names the fleet's stalls). Each failure names
    the pair (paths, seconds from ``t0``: the first fault)."""
    failures = []
    for site in fleet.sites:
        hits = sorted(site.hits, key=lambda h: h.start)
        for a, b in itertools.pairwise(hits):
            gap = b.start - a.start
            if gap >= delay - tolerance:
                continue
            fleet_late = late_by(fleet.stalls, a.start)
            path_late = late_by(path_stalls, a.start)
            if gap + fleet_late + path_late < delay - tolerance:
                when = f" at {a.start - t0:+.1f}s" if t0 is not None else ""
                failures.append(f"{site.host}: two requests {gap:.3f}s apart (delay {delay}){when}, {a.path} then "
                                f"{b.path}; the fleet's stalls before the first explain {fleet_late:.3f}s, "
                                f"the proxy's {path_late:.3f}s")  # fmt: skip
        if site.max_active > 1:
            failures.append(f"{site.host}: {site.max_active} concurrent requests (cap 1)")
    return failures


def judge(
    fleet: SiteFleet, pages: PageRecords, urls: Sequence[str], delay: float, freezes: Sequence[Freeze], t0: float,
    path_stalls: Sequence[tuple[float, float]] = (),
) -> Verdict:  # fmt: skip
    """0 refetches that a response in flight at a freeze does not explain, 0 requests closer than
    ``delay`` (or beyond one at a time; ``path_stalls``: see :func:`close_requests`), 0 URLs lost,
    published twice or turned into error pages."""
    problems = []
    twice, explained = refetches(fleet, freezes, t0)
    if twice:
        problems.append(f"{len(twice)} refetches (a page its site had served before) that no response in flight "
                        f"at a freeze explains (times from the first freeze or kill): "
                        f"{_listed([d for _, d in twice])}")  # fmt: skip
    impolite = close_requests(fleet, delay, path_stalls=path_stalls, t0=t0)
    if impolite:
        problems.append(f"requests closer than the delay {delay}s: {_listed(impolite)}")
    lost = sorted(set(urls) - set(pages.urls))
    if lost:
        problems.append(f"{len(lost)} of {len(set(urls))} URLs never on crawl.pages: {_listed(lost)}")
    published = Counter(pages.urls)
    doubled = sorted(f"{u} x{n}" for u, n in published.items() if n > 1)
    if doubled:
        problems.append(f"{len(doubled)} URLs published more than once on crawl.pages: {_listed(doubled)}")
    errors = [f"{p.url}: {p.error}" for p in pages.records if p.outcome == "error"]
    if errors:
        problems.append(f"{len(errors)} error pages on crawl.pages: {_listed(errors)}")
    per_site = Counter({s.host: 0 for s in fleet.sites})
    per_site.update(host for host, _ in twice)
    min_gaps = {s.host: round(s.min_gap() or 0.0, 3) for s in fleet.sites}
    worst_stall = max((d for _, d in fleet.stalls), default=0.0)
    figures = (f"urls={len(set(urls))} lost={len(lost)} published_twice={len(doubled)} errors={len(errors)} "
               f"fetched_twice_unexplained={dict(per_site)} fetched_twice_in_flight={explained} "
               f"min_gaps={min_gaps} (delay {delay}) fleet_stalls={len(fleet.stalls)} "
               f"worst_stall={worst_stall:.3f}s")  # fmt: skip
    if path_stalls:
        figures += f" proxy_stalls={len(path_stalls)} worst_proxy_stall={max(d for _, d in path_stalls):.3f}s"
    return Verdict(problems, figures)


def stop_frontiers(stack: Stack, names: Sequence[str], timeout: float = 60.0) -> list[str]:
    """Stop ``names`` cleanly (SIGTERM) one at a time; after each but the last, wait for the rest
    to own every partition, so the last one closes every store. Returns what did not happen."""
    notes = []
    for i, name in enumerate(names):
        stopped_at = time.time()
        code = stack.stop(name)
        if code != 0:
            notes.append(f"{name} exited with {code} on SIGTERM:\n{stack.log(name)[-2000:]}")
        rest = set(names[i + 1 :])
        if rest:

            def rest_own_everything(rest: set[str] = rest, since: float = stopped_at) -> bool:
                owned = ownership(stack, since)
                return owned is not None and set(owned) == rest

            try:
                wait_until(rest_own_everything, timeout=timeout, interval=0.5,
                           what=f"{sorted(rest)} to own every partition after {name} stopped")  # fmt: skip
            except TimeoutError as exc:
                notes.append(str(exc))
    return notes


def _kind(key: bytes) -> str:
    return "META" if key[:1] == b"\x00" else key[:1].decode(errors="replace")


def _key(key: bytes) -> str:
    return repr(key[:60]) + ("..." if len(key) > 60 else "")


# the store's markers of how far it holds the changelog: local bookkeeping, never in the changelog
LOCAL_MARKERS = frozenset((*MARKER_KEYS, COMMITTED_KEY, COMMITTED_AT_KEY))


def _contents(kv: RocksKV) -> dict[bytes, bytes]:
    return {k: v for k, v in kv.scan(b"") if k not in LOCAL_MARKERS}


def store_differences(stack: Stack) -> tuple[list[str], str]:
    """With every frontier stopped: for each partition, the store closed last (the latest clean
    close among the stack's state directories) against a rebuild from the whole changelog in an
    empty database. Returns the problems and a line of figures (keys per partition)."""
    problems, sizes = [], {}
    state_dirs = sorted(p for p in stack.workdir.glob("state*") if p.is_dir())
    for partition in range(stack.partitions):
        latest: tuple[float, Path] | None = None
        for state_dir in state_dirs:
            path = db_path(state_dir, stack.app_id, partition)
            if not path.exists():
                continue
            kv = RocksKV(path)
            try:
                at, clean = kv.get(CLEAN_AT_KEY), kv.get(CLEAN_KEY)
            finally:
                kv.close()
            if at is not None and clean is not None and (latest is None or float(at) > latest[0]):
                latest = (float(at), path)
        if latest is None:
            problems.append(f"partition {partition}: no cleanly closed store in {[str(d) for d in state_dirs]}")
            continue
        kv = RocksKV(latest[1])
        try:
            live = _contents(kv)
        finally:
            kv.close()
        with tempfile.TemporaryDirectory(prefix=f"rebuild-p{partition}-") as tmp:
            fresh_kv = RocksKV(Path(tmp) / "db")
            try:
                replay(fresh_kv, stack.client, stack.topics.state, partition, OFFSET_BEGINNING)
                fresh = _contents(fresh_kv)
            finally:
                fresh_kv.close()
        sizes[partition] = len(live)
        only_live = sorted(k for k in live if k not in fresh)
        only_fresh = sorted(k for k in fresh if k not in live)
        changed = sorted(k for k in live if k in fresh and live[k] != fresh[k])
        if only_live or only_fresh or changed:
            parts = []
            for label, keys in (("only in the live store", only_live), ("only in the rebuild", only_fresh),
                                ("with other values", changed)):  # fmt: skip
                if keys:
                    kinds = dict(Counter(_kind(k) for k in keys))
                    parts.append(f"{len(keys)} keys {label} {kinds}, e.g. {', '.join(_key(k) for k in keys[:3])}")
            problems.append(f"partition {partition}: the store closed last ({latest[1].parent.parent.name}, "
                            f"{len(live)} keys) is not a rebuild from its changelog ({len(fresh)} keys): "
                            + "; ".join(parts))  # fmt: skip
    return problems, f"store_keys={sizes}"

"""Network faults in a small cluster on one machine (issue 23, tests/cluster/harness.py): three
brokers (replication 3, min ISR 2), two frontier instances and two workers, each in a network
namespace of its own, the local sites behind a proxy. Judged as the pause tests are
(tests/integration/freezing.py): from the sites' own logs (requests closer than the delay, pages
fetched again that no request in flight at the fault explains) and from crawl.pages (URLs lost,
published twice, error pages).

These tests need root and iproute2; without them the harness says why and they fail (never skip)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from frontier.client.feed import read_status
from frontier.demo.sites import Hit, SiteFleet
from frontier.demo.stack import Stack, wait_until
from tests.cluster import soak
from tests.cluster.harness import Cluster
from tests.integration.freezing import (
    Freeze,
    PageRecords,
    close_requests,
    judge,
    ownership,
    proc_name,
    refetches,
    site_of,
)
from tests.integration.helpers import submit

FAULT = 15.0  # seconds a fault lasts: longer than the session timeout (10 s)
DELAY = 0.5


@dataclass
class Crawl:
    """A crawl under way on the cluster: its stack, sites, URLs (public addresses) and pages."""

    cluster: Cluster
    stack: Stack
    fleet: SiteFleet
    urls: list[str]
    pages: PageRecords
    public: dict[str, str]  # site host -> its public address (behind the sites' proxy)

    def during(self, seconds: float, check: Callable[[], bool] | None = None) -> None:
        """Let the crawl run for ``seconds`` (collecting pages), ending early once ``check`` holds."""
        self.cluster.run_for(seconds, self.pages.poll, check, self.stack)

    def partitioned(self, role: str) -> tuple[float, float]:
        """Namespace ``role`` cut off from everything for FAULT seconds, the crawl going on; when."""
        self.cluster.partition(role)
        begun = time.time()  # in effect from here: a request that reached its site before it is in flight at it
        try:
            self.during(FAULT)
        finally:
            self.cluster.heal(role)
        return begun, time.time()

    def cut_from_sites(self, role: str) -> tuple[float, float]:
        """Namespace ``role`` cut off from every site (blackhole routes; Kafka still reachable, so a
        worker keeps its jobs) for FAULT seconds, the crawl going on; when."""
        for addr in self.public.values():
            self.cluster.cut(role, addr)
        begun = time.time()  # (as for a partition: in effect from here)
        try:
            self.during(FAULT)
        finally:
            for addr in self.public.values():
                self.cluster.uncut(role, addr)
        return begun, time.time()

    def left(self) -> int:
        self.pages.poll()
        return len(set(self.urls) - set(self.pages.urls))

    def judged(self, title: str, faults: list[Freeze], left: int, started: float, *extra: str) -> list[str]:
        """Finish the crawl, print its figures; the problems found (empty: it held)."""
        self.pages.finish(self.urls, timeout=240, what=f"every URL after {title}")
        verdict = judge(self.fleet, self.pages, self.urls, DELAY, faults, faults[0].start,
                        path_stalls=self.cluster.proxy_stalls())  # fmt: skip
        problems = list(verdict.problems)
        if left == 0:
            problems.append(f"the crawl was over when {title} ended: the scenario was not exercised")
        print(f"[{title}] {verdict.figures} urls_left_at_heal={left} {' '.join(extra)} "
              f"took={time.monotonic() - started:.0f}s")  # fmt: skip
        return problems


@contextmanager
def crawling(tmp_path: Path, first_octet: int, pages: int = 150, frontiers: int = 2) -> Iterator[Crawl]:
    """Three brokers, ``frontiers`` frontier instances and two workers in their namespaces, four
    sites of ``pages`` pages behind the sites' proxy (delay 0.5 s, one request at a time), every
    URL submitted and the first 40 pages in; removes everything afterwards."""
    cluster = Cluster(tmp_path / "cluster", brokers=3, frontiers=frontiers, workers=2)
    fleet = SiteFleet(4, pages=pages, latency=0.02, first_octet=first_octet).start()
    stack = None
    records = None
    try:
        cluster.up()
        public = {site: addr for addr, site in cluster.serve_sites([s.host for s in fleet.sites], fleet.port).items()}
        urls = [u.replace(f"//{host}:", f"//{public[host]}:", 1) for u in fleet.all_urls() for host in [site_of(u)[0]]]
        stack = cluster.stack(partitions=4, throttle=throttle(DELAY))
        stack.create_topics()
        names = [f"f{i}" for i in range(1, frontiers + 1)]
        for name in names:
            stack.start_frontier(name, own_state=True)
        stack.start_worker("w1", concurrency=4)
        stack.start_worker("w2", concurrency=4)
        sharing(stack, names)
        submit(stack, urls)
        records = PageRecords(stack)
        records.wait_for(40, timeout=120, what="the crawl to be under way")
        yield Crawl(cluster, stack, fleet, urls, records, public)
    finally:
        if records is not None:
            records.close()
        if stack is not None:
            stack.stop_all()
        fleet.stop()
        cluster.down()


def throttle(delay: float) -> dict[str, Any]:
    return {"delay": delay, "concurrency": 1, "autothrottle": {"start_delay": 0}}


def sharing(stack: Stack, names: list[str]) -> None:
    def shared() -> bool:
        stack.check_alive()
        owned = ownership(stack, 0.0)
        return owned is not None and set(owned) == set(names) and all(owned.values())

    wait_until(shared, timeout=90, interval=0.5, what=f"{names} sharing the partitions")


def owned_by(stack: Stack, name: str, since: float) -> set[int]:
    """The partitions ``name`` says it owns in its latest status snapshot after ``since`` (what
    another instance says about the same partitions aside: a zombie may still claim them)."""
    fresh = [s for s in read_status(stack.client, stack.topics.status, max_age=6) if s.at > since]
    mine = [s for s in fresh if proc_name(stack, s.instance) == name]
    return set(max(mine, key=lambda s: s.at).partitions) if mine else set()


def test_frontier_instance_cut_from_its_group_coordinator(tmp_path: Path) -> None:
    """A partial partition: frontier f1 cannot reach the broker that coordinates the frontiers'
    group (it may still reach the leaders of partitions on the other brokers) for longer than two
    session timeouts, mid-crawl. f2 takes its partitions over; f1 must not go on dispatching for
    them (a zombie): no host gets two requests within its delay, nothing is lost, and every page
    fetched twice is one that was in flight when the cut began."""
    started = time.monotonic()
    with crawling(tmp_path, first_octet=171) as crawl:
        cluster, stack = crawl.cluster, crawl.stack
        coordinator = cluster.coordinator(stack.app_id)
        target = cluster.nodes[f"k{coordinator}"].addr
        cut_at = time.time()
        cluster.cut("f1", target)
        try:
            crawl.during(FAULT + 30, lambda: owned_by(stack, "f2", cut_at) == set(range(stack.partitions)))
            taken_over = time.time() - cut_at
            crawl.during(FAULT - taken_over)
        finally:
            cluster.uncut("f1", target)
        cut = Freeze("f1 cut from the coordinator", cut_at, time.time())
        problems = crawl.judged("frontier cut from its group coordinator", [cut], crawl.left(), started,
                                f"coordinator=k{coordinator}", f"taken_over_after={taken_over:.1f}s")  # fmt: skip
        if taken_over >= FAULT + 30:
            problems.append("f2 never owned every partition while f1 was cut off")
        assert not problems, "\n".join(problems)


def test_worker_partitioned_then_cut_from_the_sites(tmp_path: Path) -> None:
    """Worker w1's namespace fully partitioned (its link down: it reaches neither Kafka nor the
    sites) for longer than two session timeouts, mid-fetch: w2 takes its jobs over. Then w2 cut
    off from every site (blackhole routes: it still reaches Kafka, so it keeps its jobs, and its
    requests fail) as long. Nothing lost, published twice or turned into an error page (the
    hosts' outage probing retries them); no host gets two requests within its delay, and no page
    is fetched twice unless its request was in flight when a fault began.

    Requests sent into the dead links must not land when they heal: before the built-in fetcher's
    sockets were bounded (``worker.unacked_timeout``), TCP delivered them then, after their jobs
    were retried or taken over: 8 pairs of requests 0.05-0.45 s apart and 4-5 pages fetched
    twice at the heal, in 2 runs of 2."""
    started = time.monotonic()
    with crawling(tmp_path, first_octet=181, pages=200) as crawl:
        partition = Freeze("w1 partitioned", *crawl.partitioned("w1"), grace=1.0)
        crawl.during(10)
        cut = Freeze("w2 cut from the sites", *crawl.cut_from_sites("w2"), grace=1.0)
        problems = crawl.judged("a worker partitioned, then one cut from the sites", [partition, cut],
                                crawl.left(), started)  # fmt: skip
        assert not problems, "\n".join(problems)


class AfterBrokerPartition(Freeze):
    """The named cause of refetches after a broker partition: a partition the broker led may take
    minutes to accept writes again once it is back (seen: 4-5 min, until the brokers' periodic
    leader rebalance), so feedback comes after its lease's deadline and the job is sent again
    (at least once). Any fetch from the partition's start on may be repeated for that reason."""

    def in_flight(self, hit: Hit) -> bool:
        return hit.start >= self.start - 1.0


def test_broker_partitioned_loses_nothing(tmp_path: Path) -> None:
    """A full partition of broker k2 (replication 3, min ISR 2) for longer than two session
    timeouts, mid-crawl: nothing is lost, no host gets two requests within its delay, no error
    pages; pages fetched or published twice are counted, each with its cause."""
    started = time.monotonic()
    with crawling(tmp_path, first_octet=191) as crawl:
        fault = AfterBrokerPartition("k2 partitioned", *crawl.partitioned("k2"))
        left = crawl.left()
        crawl.pages.finish(crawl.urls, timeout=420, what="every URL after the broker partition")
        twice, explained = refetches(crawl.fleet, [fault], fault.start)
        lost = sorted(set(crawl.urls) - set(crawl.pages.urls))
        published = Counter(crawl.pages.urls)
        doubled = sorted(f"{u} x{n}" for u, n in published.items() if n > 1)
        errors = [p.url for p in crawl.pages.records if p.outcome == "error"]
        close = close_requests(crawl.fleet, DELAY, path_stalls=crawl.cluster.proxy_stalls(), t0=fault.start)
        print(f"[broker partitioned] urls={len(crawl.urls)} lost={len(lost)} errors={len(errors)} "
              f"published_twice={len(doubled)} fetched_twice_after_the_partition={explained} "
              f"fetched_twice_unexplained={len(twice)} close_requests={len(close)} urls_left_at_heal={left} "
              f"took={time.monotonic() - started:.0f}s")  # fmt: skip
        assert not lost and not errors and not close and not twice, (lost[:5], errors[:5], close[:5], twice[:5])
        assert left > 0, "the crawl was over when the partition healed: the scenario was not exercised"


def test_slow_lossy_links_everywhere(tmp_path: Path) -> None:
    """50 ms ± 20 ms on every link (each way, every broker's and every site's) and 1 % of new
    connections reset, for a whole crawl: it completes, politely, nothing lost or published twice."""
    started = time.monotonic()
    with crawling(tmp_path, first_octet=201, pages=30, frontiers=1) as crawl:
        begun = time.time()
        crawl.cluster.every_link(delay=0.05, jitter=0.02, drop=0.01)
        crawl.during(FAULT)  # a first part of the crawl through the slow links; the rest below
        left = crawl.left()
        problems = crawl.judged("slow lossy links", [Freeze("slow links", begun, begun)], left, started)
        assert not problems, "\n".join(problems)


def test_a_short_chaos_soak(tmp_path: Path) -> None:
    """The chaos soak (tests/cluster/soak.py) for a minute, seed 1: kill -9 of a worker at about
    38 s (restarted), over every kind of test site with the defaults. Nothing lost, no request
    inside a window or under a Crawl-delay, one request at a time per host, every page fetched
    twice explained by a request in flight at a fault, and no more pages published twice than
    those (at least once: a worker killed between publishing a page and its feedback has the
    page fetched and published again; measured in CI: 2 of 2 explained by the kill). (The
    30-minute run: docs/GUARANTEES.md.)"""
    report = soak.run(tmp_path / "soak", minutes=1.0, seed=1)
    print(json.dumps(report))
    problems = [k for k in ("lost", "violations") if report[k]]
    problems += ["over_concurrency"] if report["over_concurrency"] else []
    problems += ["fetched_twice unexplained"] if report["fetched_twice"].get("unexplained") else []
    explained = sum(n for cause, n in report["fetched_twice"].items() if cause != "unexplained")
    problems += ["published twice beyond what a fault explains"] if report["published_twice"] > explained else []
    assert len(report["faults"]) == 1, report["faults"]  # the seed's fault was struck
    assert not problems, (problems, report)

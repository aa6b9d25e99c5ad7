"""Processes that freeze and come back (SIGSTOP, then SIGCONT: a GC pause, a VM migration, a
stalled disk) and a partition restored after a crash, on the real broker (issue 27's "Done when").

Each test freezes or kills a process at a moment it chooses and judges the crawl from the local
sites' own request logs: 0 pages fetched twice that a response in flight at a freeze does not
explain, 0 requests closer than the delay, 0 URLs lost, published twice or turned into error
pages; then it stops the frontiers cleanly and compares each partition's store with a fresh
rebuild from its changelog. Every problem seen is listed in the failure, and the figures are
printed for the record (``-s``)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from frontier.demo.sites import SiteFleet
from frontier.demo.stack import Stack, wait_until
from tests.integration.freezing import (
    PageRecords,
    Verdict,
    freeze,
    hits_of,
    judge,
    next_request,
    ownership,
    proc_name,
    replayed,
    sole_fetchers,
    stop_frontiers,
    store_differences,
    thaw_all,
)
from tests.integration.helpers import submit

FRONTIER_FREEZE = 35.0  # more than three of the frontier group's 10 s session timeouts
WORKER_FREEZE = 20.0  # past a worker's 10 s session, short of its jobs' expiry (job_ttl 30 s by default)
REPORT_GRACE = 1.0  # a response that ended this long before a worker's freeze may still have its report on its way
PAST_EXPIRY = {"job_ttl": 4.0, "fetch_timeout": 4.0, "lease_grace": 2.0}  # a lease's deadline: ~10 s
EXPIRED_FREEZE = 25.0  # past the jobs' expiry and the leases' deadline under PAST_EXPIRY
# Jobs go out this much before their slot (0.1 s by default), so that at any moment a worker holds
# some, waiting for not_before: what a thawed worker does with them is what the worker tests judge.
HELD = {"dispatch_lead": 0.8}
HOLD_POINT = 0.65  # after a request to a site one worker serves: that worker then holds its next job (sent at +1 s)
UNOWNED = 15.0  # how long a killed frontier's partitions stay unowned: past a lease's deadline under PAST_EXPIRY


def throttle(delay: float) -> dict[str, Any]:
    return {"delay": delay, "concurrency": 1, "autothrottle": {"start_delay": 0}}


def report(title: str, verdict: Verdict, started: float, *extra: str) -> None:
    print(f"[{title}] {verdict.figures} {' '.join(extra)} took={time.monotonic() - started:.0f}s")


def regroup(stack: Stack, thawed: str, since: float, timeout: float = 30.0) -> dict[str, list[int]] | None:
    """After ``thawed`` came back: the split of the partitions between both frontiers once the
    thawed one owns some again, or the last split seen by ``timeout`` (partitions not coming back;
    None: no split seen at all)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        stack.check_alive()
        owned = ownership(stack, since)
        if owned is not None and set(owned) == {"f1", "f2"}:
            last = owned
            if owned[thawed]:
                return owned
        time.sleep(0.5)
    return last


def test_frontier_instances_frozen_in_turn(bootstrap: str, tmp_path: Path) -> None:
    """Two frontier instances, each with its own state_dir, frozen in turn for longer than three
    session timeouts while two workers crawl: the other instance takes the frozen one's partitions
    over, and some come back after the thaw."""
    started = time.monotonic()
    delay = 0.5
    # its hosts cover all 4 partitions; 260 pages at 0.5 s each outlast both freezes and the regroup
    # in between (160 at 0.4 s were over before the second thaw once takeovers got quick)
    fleet = SiteFleet(6, pages=260, latency=0.02, first_octet=151).start()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4, throttle=throttle(delay))
    pages = None
    try:
        stack.create_topics()
        stack.start_frontier("f1", own_state=True)
        stack.start_frontier("f2", own_state=True)
        stack.start_worker("w1", concurrency=4)
        stack.start_worker("w2", concurrency=4)

        def both_own_partitions() -> bool:
            stack.check_alive()
            owned = ownership(stack, 0.0)
            return owned is not None and set(owned) == {"f1", "f2"} and all(owned.values())

        wait_until(both_own_partitions, timeout=60, interval=0.5, what="two frontier instances sharing partitions")
        urls = fleet.all_urls()
        submit(stack, urls)
        pages = PageRecords(stack)
        pages.wait_for(60, timeout=90, what="the crawl to be under way")
        before = ownership(stack, 0.0)
        first = freeze(stack, "f1", FRONTIER_FREEZE)
        after_first = regroup(stack, "f1", first.end)
        second = freeze(stack, "f2", FRONTIER_FREEZE)
        pages.poll()
        left = len(set(urls) - set(pages.urls))
        pages.finish(urls, timeout=150, what="every URL after both freezes")
        opened = {name: replayed(stack.log(name)) for name in ("f1", "f2")}
        notes = stop_frontiers(stack, ["f1", "f2"])
        store_problems, store_figures = store_differences(stack)

        verdict = judge(fleet, pages, urls, delay, [], first.start)
        problems = verdict.problems + store_problems + notes
        if left == 0:
            problems.append("the crawl was over before f2 thawed: the scenario was not exercised")
        report("frontiers frozen in turn", verdict, started, f"owners_before={before}",
               f"owners_after_f1_thawed={after_first}", f"f2_frozen_at=t{second.start - first.start:+.0f}s",
               f"urls_left_when_f2_thawed={left}",
               f"opened(partition, replayed, in_flight)={opened}", store_figures)  # fmt: skip
        assert not problems, "\n".join(problems)
    finally:
        thaw_all(stack)
        if pages is not None:
            pages.close()
        stack.stop_all()
        fleet.stop()


def _worker_frozen(
    bootstrap: str, tmp_path: Path, first_octet: int, frontier: dict[str, Any], seconds: float, title: str
) -> None:
    """One frontier, workers w1 and w2, four sites with a 1 s delay and jobs sent 0.8 s ahead; a
    worker frozen for ``seconds`` mid-crawl while it holds a job, then thawed, and the crawl finished."""
    started = time.monotonic()
    delay = 1.0
    fleet = SiteFleet(4, pages=45, latency=0.2, first_octet=first_octet).start()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4, throttle=throttle(delay), frontier=frontier)
    pages = None
    try:
        stack.create_topics()
        stack.start_frontier()
        stack.start_worker("w1", concurrency=4)
        stack.start_worker("w2", concurrency=4)
        urls = fleet.all_urls()
        submit(stack, urls)
        pages = PageRecords(stack)
        pages.wait_for(20, timeout=90, what="the crawl to be under way")
        sole: dict[str, str] = {}

        def a_site_one_worker_serves() -> bool:
            stack.check_alive()
            pages.poll(0.05)
            current = sole_fetchers(stack, pages)
            sole.clear()
            sole.update(current)
            return bool(sole)

        wait_until(a_site_one_worker_serves, timeout=30, what="a site whose last pages one worker fetched")
        victim = max(sorted(set(sole.values())), key=list(sole.values()).count)
        hosts = sorted(h for h, w in sole.items() if w == victim)
        hit = next_request(fleet, hosts, timeout=30)
        # the moment the test chooses: the site's next job is in the victim, held until its slot (1 s after this
        # request), and the request before it is over
        time.sleep(max(0.0, hit.start + HOLD_POINT - time.time()))
        frozen = freeze(stack, victim, seconds)
        pages.poll()
        left = len(set(urls) - set(pages.urls))
        pages.finish(urls, timeout=120, what="every URL after the worker's freeze")
        chosen = f"{hit.start - frozen.start:+.2f}s"
        by_victim = sum(1 for p in pages.records if proc_name(stack, p.worker) == victim)
        notes = stop_frontiers(stack, ["frontier"])
        store_problems, store_figures = store_differences(stack)

        verdict = judge(fleet, pages, urls, delay, [frozen], frozen.start)
        problems = verdict.problems + store_problems + notes
        if left == 0:
            problems.append(f"the crawl was over before {victim} thawed: the scenario was not exercised")
        report(title, verdict, started, f"frozen={victim} alone_serving={hosts}", f"request_before_freeze_at={chosen}",
               f"urls_left_when_thawed={left}", f"pages_by_{victim}={by_victim}", store_figures)  # fmt: skip
        assert not problems, "\n".join(problems)
    finally:
        thaw_all(stack)
        if pages is not None:
            pages.close()
        stack.stop_all()
        fleet.stop()


def test_worker_frozen_past_its_session(bootstrap: str, tmp_path: Path) -> None:
    """A worker frozen 20 s: its partitions of crawl.jobs move to the other worker (10 s session),
    but its jobs have not expired (30 s): on thawing it must not send what the other one fetched."""
    _worker_frozen(bootstrap, tmp_path, 157, HELD, WORKER_FREEZE, "worker frozen past its session")


def test_worker_frozen_past_its_jobs_expiry(bootstrap: str, tmp_path: Path) -> None:
    """A worker frozen 25 s, past its session, its jobs' expiry (4 s) and their leases' deadline
    (~10 s): the frontier re-queues them, and the thawed worker must not send them again."""
    _worker_frozen(bootstrap, tmp_path, 161, PAST_EXPIRY | HELD, EXPIRED_FREEZE, "worker frozen past its jobs' expiry")


def test_worker_frozen_right_after_reporting(bootstrap: str, tmp_path: Path) -> None:
    """The moment a page arrives on crawl.pages, its worker is frozen for 20 s (before it commits
    its job offsets, once a second): the worker that takes its partitions over must not fetch or
    publish again what was already reported."""
    started = time.monotonic()
    delay = 0.3
    fleet = SiteFleet(4, pages=100, latency=0.02, first_octet=165).start()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4, throttle=throttle(delay))
    pages = None
    try:
        stack.create_topics()
        stack.start_frontier()
        stack.start_worker("w1", concurrency=4)
        stack.start_worker("w2", concurrency=4)
        urls = fleet.all_urls()
        submit(stack, urls)
        pages = PageRecords(stack)
        pages.wait_for(20, timeout=90, what="the crawl to be under way")
        seen = len(pages.records)
        deadline = time.monotonic() + 30
        while len(pages.records) == seen and time.monotonic() < deadline:
            pages.poll(0.01)  # short looks: the freeze follows the page within milliseconds
        assert len(pages.records) > seen, "no page arrived within 30 s of the crawl being under way"
        victim = proc_name(stack, pages.records[-1].worker)
        assert victim in stack.procs, f"page from an unknown worker {pages.records[-1].worker!r}"
        on_pages = list(dict.fromkeys(pages.urls))  # already on crawl.pages at the freeze
        by_victim = sum(1 for p in pages.records if proc_name(stack, p.worker) == victim)
        # frozen the moment a page arrives: another response of the victim may have ended just before
        # with its report still on its way (its page may be out, its feedback not): the frontier's
        # lease then brings that URL back, at least once. The pages on crawl.pages at the freeze
        # must never be fetched or published again (checked below, without any grace).
        frozen = freeze(stack, victim, WORKER_FREEZE, grace=REPORT_GRACE)
        pages.poll()
        left = len(set(urls) - set(pages.urls))
        pages.finish(urls, timeout=120, what="every URL after the worker's freeze")
        notes = stop_frontiers(stack, ["frontier"])
        store_problems, store_figures = store_differences(stack)

        refetched = [f"{u} ({len(hits_of(fleet, u))} hits)" for u in on_pages if len(hits_of(fleet, u)) > 1]
        republished = [f"{u} x{pages.urls.count(u)}" for u in on_pages if pages.urls.count(u) > 1]
        problems = []
        if refetched or republished:
            problems.append(f"of the {len(on_pages)} pages on crawl.pages before {victim} was frozen, "
                            f"{len(refetched)} were fetched again: {refetched[:10]}; "
                            f"{len(republished)} were published again: {republished[:10]}")  # fmt: skip
        verdict = judge(fleet, pages, urls, delay, [frozen], frozen.start)
        problems += verdict.problems + store_problems + notes
        if left == 0:
            problems.append(f"the crawl was over before {victim} thawed: the scenario was not exercised")
        report("worker frozen right after reporting", verdict, started, f"frozen={victim}",
               f"pages_before_freeze={len(on_pages)} (by {victim}: {by_victim})",
               f"refetched_of_those={len(refetched)} republished_of_those={len(republished)}",
               f"urls_left_when_thawed={left}", store_figures)  # fmt: skip
        assert not problems, "\n".join(problems)
    finally:
        thaw_all(stack)
        if pages is not None:
            pages.close()
        stack.stop_all()
        fleet.stop()


def test_partition_restored_after_its_leases_deadline(bootstrap: str, tmp_path: Path) -> None:
    """The only frontier killed (kill -9) mid-crawl; its partitions stay unowned for longer than a
    lease's deadline while the workers finish and report the jobs they hold; a new frontier on the
    same state_dir restores them: it must apply the waiting results before expiring leases."""
    started = time.monotonic()
    delay = 0.5
    # slow, so that a job of each site is in flight at the kill; six sites over all four partitions
    fleet = SiteFleet(6, pages=30, latency=0.4, first_octet=122).start()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4, throttle=throttle(delay), frontier=PAST_EXPIRY)
    pages = None
    try:
        stack.create_topics()
        stack.start_frontier("frontier")
        stack.start_worker("w1", concurrency=4)
        stack.start_worker("w2", concurrency=4)
        urls = fleet.all_urls()
        submit(stack, urls)
        pages = PageRecords(stack)
        pages.wait_for(20, timeout=90, what="the crawl to be under way")
        # the kill must find a request in flight (on a loaded machine the workers may be between jobs)
        wait_until(lambda: any(s.active for s in fleet.sites), timeout=60, interval=0.02, what="a request in flight")
        killed_at = time.time()
        stack.stop("frontier", sig=signal.SIGKILL)
        time.sleep(UNOWNED)  # the scenario: nothing owns the partitions for longer than a lease's deadline
        restarted_at = time.time()
        # requests whose responses came after the kill: their results wait on crawl.feedback for the next owner
        meanwhile = sum(1 for s in fleet.sites for h in s.hits if h.start < restarted_at and h.end > killed_at)
        stack.start_frontier("frontier-2")
        pages.poll()
        left = len(set(urls) - set(pages.urls))
        pages.finish(urls, timeout=120, what="every URL after the restart")
        opened = replayed(stack.log("frontier-2"))
        notes = stop_frontiers(stack, ["frontier-2"])
        store_problems, store_figures = store_differences(stack)

        verdict = judge(fleet, pages, urls, delay, [], killed_at)  # a dead frontier explains no refetch
        problems = verdict.problems + store_problems + notes
        if meanwhile == 0:
            problems.append("no response came while no frontier ran: no job was in flight at the kill")
        if left == 0:
            problems.append("the crawl was over before the restart: the scenario was not exercised")
        report("partition restored after its leases' deadline", verdict, started,
               f"responses_while_unowned={meanwhile}", f"urls_left_at_restart={left}",
               f"opened(partition, replayed, in_flight)={opened}", store_figures)  # fmt: skip
        assert not problems, "\n".join(problems)
    finally:
        thaw_all(stack)
        if pages is not None:
            pages.close()
        stack.stop_all()
        fleet.stop()

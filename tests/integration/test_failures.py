"""What production does to a crawl: kill -9 of a frontier instance (another takes over) and of
a worker (its leases come back). Nothing may be lost; politeness must hold throughout, judged
by the sites' own logs. Figures are printed for the record (duplicates, recovery time)."""

import re
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from frontier.client.feed import read_status
from frontier.demo.sites import SiteFleet
from frontier.demo.stack import Stack, wait_until
from tests.integration.helpers import Pages, crawling, longest_silence_after, politeness_failures, submit
from topics.kafka import watermarks
from topics.partitioning import partition_for

DELAY = 0.3
THROTTLE = {"delay": DELAY, "concurrency": 1, "autothrottle": {"start_delay": 0}}


def replayed_on_takeover(log: str, partitions: set[int]) -> dict[int, int]:
    """Changelog records replayed when each of ``partitions`` last became ready in ``log``."""
    found = {}
    for m in re.finditer(r"partition (\d+) ready: (\d+) changelog records replayed", log):
        if int(m.group(1)) in partitions:
            found[int(m.group(1))] = int(m.group(2))
    return found


@pytest.mark.parametrize("standby", [0, 1])
def test_frontier_kill9_another_instance_takes_over(bootstrap: str, tmp_path: Path, standby: int) -> None:
    fleet = SiteFleet(4, pages=15, latency=0.02, first_octet=70 if standby else 74).start()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4, throttle=THROTTLE,
                  frontier={"standby_replicas": standby})  # fmt: skip
    pages = None
    try:
        stack.create_topics()
        stack.start_frontier("f1", own_state=True)
        stack.start_frontier("f2", own_state=True)
        stack.start_worker("w1", concurrency=4)
        stack.start_worker("w2", concurrency=4)

        def both_own_partitions() -> bool:
            stack.check_alive()
            live = read_status(stack.client, stack.topics.status)
            return len(live) == 2 and all(s.partitions for s in live) and sum(len(s.partitions) for s in live) == 4

        wait_until(both_own_partitions, timeout=60, interval=0.5, what="two frontier instances sharing partitions")
        urls = fleet.all_urls()
        submit(stack, urls)
        pages = Pages(stack)
        pages.wait_for(len(urls) // 3, timeout=90, what="the crawl to be under way")
        # kill the instance that owns the first site's partition, so a takeover is needed
        owners = {
            s.instance.rsplit("-", 1)[1]: set(s.partitions) for s in read_status(stack.client, stack.topics.status)
        }
        needed = partition_for(fleet.sites[0].host, stack.partitions)
        victim, survivor = ("f1", "f2") if needed in owners[str(stack.procs["f1"].pid)] else ("f2", "f1")
        taken_over = owners[str(stack.procs[victim].pid)]
        killed_at = time.time()
        stack.stop(victim, sig=signal.SIGKILL)
        pages.wait_for(len(urls), timeout=150, what="the surviving instance to finish the crawl")
        pages.settle()

        def survivor_owns_everything() -> bool:
            return [len(s.partitions) for s in read_status(stack.client, stack.topics.status, max_age=6)] == [4]

        wait_until(survivor_owns_everything, timeout=30, what="the status to show one instance owning all partitions")
        silence = longest_silence_after(fleet, killed_at)
        replayed = replayed_on_takeover(stack.log(survivor), taken_over)
        consumer = Consumer({**stack.client, "group.id": "sizes"})
        sizes = {p: watermarks(consumer, stack.topics.state, p)[1] for p in taken_over}
        consumer.close()
        print(f"[frontier kill -9, standby={standby}] urls={len(urls)} lost={len(set(urls) - set(pages.urls))} "
              f"duplicates={pages.duplicates()} longest_site_silence_after_kill={silence:.1f}s "
              f"replayed_on_takeover={replayed} changelog_sizes={sizes} "
              f"min_gaps={[round(s.min_gap() or 0, 3) for s in fleet.sites]}")  # fmt: skip
        assert replayed.keys() == taken_over, "the survivor restored every partition of the dead instance"
        if standby:
            assert sum(replayed.values()) < 0.25 * sum(sizes.values()), "a standby replays only the tail"
        assert set(pages.urls) == set(urls), "nothing lost"
        assert not politeness_failures(fleet, DELAY, 1), "no burst after the takeover"
    finally:
        if pages is not None:
            pages.close()
        stack.stop_all()
        fleet.stop()


def test_worker_kill9_leases_come_back(bootstrap: str, tmp_path: Path) -> None:
    fleet = SiteFleet(3, pages=15, latency=0.4, first_octet=80).start()  # slow: the victim dies mid-fetch
    frontier = {"job_ttl": 4.0, "fetch_timeout": 4.0, "lease_grace": 2.0}  # a lost lease returns after 10 s
    throttle = {"delay": 0.1, "concurrency": 2, "autothrottle": {"start_delay": 0, "target_concurrency": 4}}
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4, throttle=throttle, frontier=frontier)
    urls = fleet.all_urls()
    with crawling(stack, fleet, workers=1, concurrency=4) as pages:  # alone: every lease in flight is in w1
        pages.wait_for(6, timeout=90, what="the crawl to be under way")
        stack.stop("w1", sig=signal.SIGKILL)  # dies mid-fetch, holding leases
        stack.start_worker("w2", concurrency=4)
        pages.wait_for(len(urls), timeout=150, what="the new worker to finish the crawl")
        pages.settle()
        fetched_twice = sum(len([h for h in s.hits if h.path != "/robots.txt"]) for s in fleet.sites) - len(urls)
        print(f"[worker kill -9] urls={len(urls)} lost={len(set(urls) - set(pages.urls))} "
              f"duplicate_pages={pages.duplicates()} refetches_seen_by_sites={fetched_twice}")  # fmt: skip
        assert set(pages.urls) == set(urls), "nothing lost"
        assert fetched_twice >= 1, "the killed worker held no lease: the scenario was not exercised"
        assert not politeness_failures(fleet, 0.1, 2)

"""Shared steps of the crawl scenarios: submit URLs, collect pages, judge politeness from the sites."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Producer

from frontier.demo.sites import STALL_TICK, SiteFleet
from frontier.demo.stack import Stack, TopicReader, read_pages, wait_until
from topics.schemas import Page


def submit(stack: Stack, urls: Sequence[str | dict[str, Any]]) -> None:
    """Publish ``urls`` (each a URL or a whole submission) unkeyed to crawl.urls, as any user's
    producer would."""
    producer = Producer(stack.client)
    for url in urls:
        producer.produce(stack.topics.urls, json.dumps(url if isinstance(url, dict) else {"url": url}).encode())
    assert producer.flush(30) == 0


def status_saying(stack: Stack, words: str, timeout: float) -> str:
    """``crawl-frontier status`` run until its output says ``words`` (the crawl's processes must
    live meanwhile); that output."""
    out = [""]

    def says() -> bool:
        stack.check_alive()
        run = subprocess.run([sys.executable, "-m", "frontier.cli", "--config", str(stack.config_path), "status"],
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        out[0] = run.stdout
        return run.returncode == 0 and words in run.stdout

    wait_until(says, timeout=timeout, interval=1.0, what=f"status to say {words!r}")
    return out[0]


class Pages:
    """Everything that arrives on crawl.pages, in order."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.urls: list[str] = []
        self.records: list[Page] = []
        self._reader = TopicReader(stack.client, stack.topics.pages)

    def poll(self, timeout: float = 0.2) -> None:
        got = read_pages(self._reader, timeout)
        self.records.extend(got)
        self.urls.extend(p.url for p in got)

    def wait_for(self, count: int, timeout: float, what: str) -> None:
        def enough() -> bool:
            self.stack.check_alive()
            self.poll()
            return len(set(self.urls)) >= count

        wait_until(enough, timeout=timeout, what=what)

    def settle(self) -> None:
        """A short bounded look for late duplicates."""
        for _ in range(10):
            self.poll(0.2)

    def duplicates(self) -> int:
        return sum(n - 1 for n in Counter(self.urls).values())

    def close(self) -> None:
        self._reader.close()


def politeness_failures(fleet: SiteFleet, delay: float, concurrency: int, tolerance: float = 0.03) -> list[str]:
    """What the sites saw against ``delay`` and ``concurrency``. A gap is judged on the sites'
    stamps, which the fleet's own event loop takes: when that loop was stalled until the first of
    two requests was stamped, the request may have arrived as early as the stall began (a late
    stamp, not an early send), and the gap is judged that much longer. A short gap names the two
    requests and the stalls around them."""
    failures = []
    for site in fleet.sites:
        short = short_gaps(fleet, [h.start for h in site.hits], delay, tolerance)
        if short:
            a, b = min(short, key=lambda pair: pair[1] - pair[0])
            stalls = [(round(t - a, 3), round(d, 3)) for t, d in fleet.stalls_between(a - 0.5, b)]
            failures.append(f"{site.host}: two requests {b - a:.3f}s apart (delay {delay}); fleet stalls around "
                            f"them (start after the first, seconds): {stalls}")  # fmt: skip
        if site.max_active > concurrency:
            failures.append(f"{site.host}: {site.max_active} concurrent requests (cap {concurrency})")
    return failures


def short_gaps(
    fleet: SiteFleet, starts: list[float], delay: float, tolerance: float = 0.03
) -> list[tuple[float, float]]:
    """The pairs of consecutive stamps (of ``starts``) closer than ``delay``, a late stamp of the
    first forgiven as in :func:`politeness_failures`."""
    ordered = sorted(starts)
    return [(a, b) for a, b in itertools.pairwise(ordered) if b - a + _stamp_lateness(fleet, a) < delay - tolerance]


def _stamp_lateness(fleet: SiteFleet, at: float) -> float:
    """How late a stamp taken at ``at`` may be: the fleet's loop was stalled from the first look
    it missed until about then (a stall ending more than one look before ``at`` delayed nothing)."""
    late = 0.0
    for t, d in fleet.stalls_between(at - 1.0, at):
        blocked_from, blocked_to = t + STALL_TICK, t + STALL_TICK + d
        if blocked_from <= at <= blocked_to + STALL_TICK:
            late = max(late, at - blocked_from)
    return late


def longest_silence_after(fleet: SiteFleet, t: float) -> float:
    """The longest time any site went without a request after ``t`` (up to its last request)."""
    longest = 0.0
    for site in fleet.sites:
        starts = sorted([t] + [h.start for h in site.hits if h.start > t])
        longest = max(longest, *(b - a for a, b in itertools.pairwise(starts)), 0.0)
    return longest


@contextmanager
def crawling(
    stack: Stack, fleet: SiteFleet, workers: int = 1, concurrency: int = 4,
    urls: Sequence[str | dict[str, Any]] | None = None,
) -> Iterator[Pages]:  # fmt: skip
    """Topics, one frontier, ``workers`` workers, ``urls`` (default: every fleet URL) submitted;
    yields the page collector and always tears the stack and the fleet down."""
    pages = None
    try:
        stack.create_topics()
        stack.start_frontier()
        for i in range(workers):
            stack.start_worker(f"w{i + 1}", concurrency=concurrency)
        submit(stack, fleet.all_urls() if urls is None else urls)
        pages = Pages(stack)
        yield pages
    finally:
        if pages is not None:
            pages.close()
        stack.stop_all()
        fleet.stop()

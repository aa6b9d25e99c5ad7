"""The worker API's examples (workers/examples), the README's worker and the project's worker
with a user fetcher (``--fetcher``) crawl local sites on the real broker with the default
configuration (nothing per site), one of their processes killed with SIGKILL mid-crawl, and are
judged by the sites' own logs:

- no request inside a window a site announced (429 + Retry-After, RateLimit remaining 0);
- no request sooner than robots.txt's Crawl-delay after the end of the previous response (§9);
- no disallowed path fetched;
- every URL ends with a page (fetched, disallowed, or skipped by the partial worker), nothing
  lost through the kill: the killed worker's leases come back to the others.
"""

from __future__ import annotations

import itertools
import json
import re
import signal
from pathlib import Path

import pytest
from confluent_kafka import Producer

from frontier.demo.stack import Stack, TopicReader, read_pages, wait_until
from tests.integration.hidden_sites import HiddenLimitFleet, Limits

CRAWL_DELAY = 0.3
FLOOR_TOLERANCE = 0.01  # seconds; one machine's clock
README = Path(__file__).parent.parent.parent / "README.md"
FETCHER = ["--fetcher", "workers.examples.threaded_requests:factory"]
# example → its processes (name, how to start it); one that published pages is killed mid-crawl. How: a
# module of workers/examples and its arguments, "worker" and the project's worker's arguments, or
# "readme" (the README's worker, run as a script)
EXAMPLES: dict[str, list[tuple[str, list[str]]]] = {
    "threaded_requests": [("threaded-1", ["--concurrency", "4"]), ("threaded-2", ["--concurrency", "4"])],
    "partial": [("partial-1", ["--skip", r"/page/\d*7$"]), ("partial-2", ["--skip", r"/page/\d*7$"])],
    "background": [("background-1", []), ("background-2", []), ("background-3", [])],
    "fetcher": [("fetcher-1", ["worker", *FETCHER]), ("fetcher-2", ["worker", *FETCHER])],
    "readme": [("readme-1", ["readme"]), ("readme-2", ["readme"])],
}


def start(stack: Stack, example: str, name: str, how: list[str]) -> None:
    if how[:1] == ["worker"]:
        stack.start_worker(name, 4, *how[1:])
    elif how == ["readme"]:
        [code] = [b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "workers.api" in b]
        script = stack.workdir / "readme_worker.py"
        script.write_text(code.replace('load("crawl.toml")', f"load({str(stack.config_path)!r})"))
        stack.start_program(name, str(script))
    else:
        stack.start_program(name, f"workers.examples.{example}", *how)


def fleet_urls(fleet: HiddenLimitFleet) -> list[str]:
    host = {lim.kind: h for h, lim in fleet.limits.items()}
    counts = {"retry_after_seconds": 24, "ratelimit": 20, "robots": 8}
    urls = [f"http://{host[kind]}:{fleet.port}/page/{i}" for kind, n in counts.items() for i in range(n)]
    return urls + [f"http://{host['robots']}:{fleet.port}/private/{i}" for i in range(4)]


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_an_example_worker_crawls_politely_and_loses_nothing_to_a_kill(
    bootstrap: str, tmp_path: Path, example: str
) -> None:
    limits = [Limits("retry_after_seconds", rate=4.0), Limits("ratelimit", quota=6, window=3.0),
              Limits("robots", crawl_delay=CRAWL_DELAY)]  # fmt: skip
    fleet = HiddenLimitFleet(limits, first_octet=171).start()
    urls = fleet_urls(fleet)
    # a lost lease comes back after 4 + 4 + 2 s (the defaults would take over a minute)
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4,
                  frontier={"job_ttl": 4.0, "fetch_timeout": 4.0, "lease_grace": 2.0})  # fmt: skip
    pages: dict[str, str] = {}
    workers: set[str] = set()  # who published pages (Page.worker: host-pid)
    reader = None
    processes = EXAMPLES[example]
    try:
        stack.create_topics()
        stack.start_frontier()
        for name, how in processes:
            start(stack, example, name, how)
        producer = Producer(stack.client)
        for url in urls:
            producer.produce(stack.topics.urls, json.dumps({"url": url}).encode())
        assert producer.flush(30) == 0
        reader = TopicReader(stack.client, stack.topics.pages)

        def at_least(n: int) -> bool:
            stack.check_alive()
            for p in read_pages(reader):
                pages[p.url] = p.outcome
                workers.add(p.worker)
            return len(pages) >= n

        pids = {name: stack.procs[name].pid for name, _ in processes}

        def busy() -> list[str]:  # the processes that published pages (jobs are keyed by host: with
            # few sites, a process may own only partitions without any)
            return [name for name, pid in pids.items() if any(w.endswith(f"-{pid}") for w in workers)]

        wait_until(lambda: at_least(len(urls) // 3) and bool(busy()), timeout=120, interval=0.2,
                   what="a third of the pages")  # fmt: skip
        victim = busy()[-1]
        assert stack.stop(victim, sig=signal.SIGKILL) == -signal.SIGKILL  # mid-crawl, holding jobs
        wait_until(lambda: at_least(len(urls)), timeout=150, interval=0.3, what="every URL to end with a page")
    finally:
        if reader is not None:
            reader.close()
        stack.stop_all()
        fleet.stop()
    logs = {name: stack.log(name) for name, _ in processes}

    assert set(pages) == set(urls), "every URL ends with a page"
    skipped = {u for u, outcome in pages.items() if outcome == "skipped"}
    if example == "partial":
        assert skipped == {u for u in urls if u.endswith("7") and "/page/" in u}
    else:
        assert not skipped
    assert {u for u, o in pages.items() if o == "disallowed"} == {u for u in urls if "/private/" in u}
    for h, lim in fleet.limits.items():
        site = fleet.site(h)
        assert not lim.gate_violations, f"{lim.kind}: {len(lim.gate_violations)} requests inside an announced window"
        assert not lim.disallowed_fetched, f"{lim.kind}: fetched {lim.disallowed_fetched}"
        fetched = {x.path for x in site.hits if x.path != "/robots.txt"}
        assert not fetched & {u.split(str(fleet.port), 1)[1] for u in skipped}, "a skipped URL was requested"
        if lim.kind == "robots":
            hits = sorted(site.hits, key=lambda x: x.start)
            floors = [b.start - a.end for a, b in itertools.pairwise(hits)]
            assert min(floors) >= CRAWL_DELAY - FLOOR_TOLERANCE, f"Crawl-delay not kept: {min(floors):.3f}"
    if example == "background":  # the seed-004 shape: each process did its own work too
        for name in set(pids) - {victim}:
            assert "units of own work" in logs[name], logs[name][-2000:]

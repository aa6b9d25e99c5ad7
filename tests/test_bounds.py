"""Memory bounds: a million distinct hosts through the frontier's per-host maps, each of which
must stay within its documented bound (docs/CONFIGURATION.md, "Memory bounds").

The partition runs on a key-value store that keeps only a sample of what is written (the maps
under test are in memory; a store holding a million states would only measure the test), and
the service's gate gauge is fed by the partition's real change hook.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import msgspec

from frontier.config import Config, FrontierConfig
from frontier.core.robots import RobotsRecord
from frontier.partition import PartitionFrontier
from frontier.partition import robots as robots_module
from frontier.partition import scopes as scopes_module
from frontier.service.reporting import MAX_GATE_GAUGE
from frontier.service.service import FrontierService
from topics.schemas import Feedback

HOSTS = 1_000_000
SAMPLE = 99_991  # every SAMPLE-th host's records are kept, to check what an evicted host reads back
ROBOTS = msgspec.json.encode(RobotsRecord(status=200, body=b"User-agent: *\nDisallow: /private\n", fetched_at=0.0))


class SampleKV:
    """Keeps the records of sampled hosts only; answers every robots.txt read with one record."""

    def __init__(self) -> None:
        self.kept: dict[bytes, bytes] = {}
        self.puts = 0

    def get(self, key: bytes) -> bytes | None:
        if key.startswith(b"R"):
            return ROBOTS
        return self.kept.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.puts += 1
        if key.startswith(b"Hh") and int(key[2:].split(b".")[0]) % SAMPLE == 0:
            self.kept[key] = value

    def delete(self, key: bytes) -> None:
        self.kept.pop(key, None)

    def scan(self, prefix: bytes, after: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        return iter(())

    def first(self, prefix: bytes) -> tuple[bytes, bytes] | None:
        return None

    def close(self) -> None:
        pass


def test_a_million_gated_hosts_keep_the_partition_and_service_maps_bounded() -> None:
    now = [1000.0]
    svc = FrontierService(replace(Config(), frontier=FrontierConfig()), clock=lambda: now[0])
    kv = SampleKV()
    f = PartitionFrontier(
        0, kv, svc.cfg.frontier, svc.cfg.throttle, lambda k, v: None, on_change=svc.reporting.delay_changed
    )
    for i in range(HOSTS):
        now[0] = 1000.0 + i * 1e-4
        host = f"h{i}.test"
        # a result whose lease is gone still applies to its host: here, a 429 closing it for an hour
        f.feedback(Feedback(lease="gone", host=host, domain=host, url=f"http://{host}/", outcome="fetched",
                            status=429, sent_at=now[0], headers={"retry-after": "3600"}), now[0])  # fmt: skip
    assert kv.puts >= HOSTS  # every host's state was written: the hosts really went through
    assert len(f.scopes._states) == scopes_module.STATE_CACHE
    assert not f.queues.waiters and not f.leases._deadlines and not f.queues._queued and len(f.queues.scheduler) == 0
    assert len(svc.reporting._gates) == MAX_GATE_GAUGE
    assert svc.reporting.metric_totals()["gates_active"] == MAX_GATE_GAUGE  # saturated: every gate is still open
    # an evicted host reads its state back from the store: its gate is still there
    evicted = f"h{SAMPLE}.test"
    assert evicted not in f.scopes._states
    assert f.scopes.state(evicted).gate_until > now[0] + 3000
    # once the gates have ended, the next reading (a status snapshot or a scrape) empties the map
    now[0] += 3700.0
    assert svc.reporting.metric_totals()["gates_active"] == 0 and svc.reporting._gates == {}

    # robots.txt rules: a million origins through the LRU, the latest ones served from memory
    for i in range(HOSTS):
        rules = f.robots.rules(f"http://h{i}.test", 1.0)
        assert rules is not None
    assert len(f.robots._rules) == robots_module.ROBOTS_CACHE
    assert f"http://h{HOSTS - 1}.test" in f.robots._rules and "http://h0.test" not in f.robots._rules
    assert rules is not None and not rules.allowed(f"http://h{HOSTS - 1}.test/private")

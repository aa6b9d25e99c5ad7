"""Broker failures: a restart of a single-node broker (persistent log dirs) mid-crawl. Services
reconnect and finish; nothing is lost; politeness holds. Uses a broker of its own."""

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.kafka import KafkaCluster, LocalKafka, free_port
from frontier.demo.sites import SiteFleet
from frontier.demo.stack import Stack
from tests.integration.helpers import crawling, longest_silence_after, politeness_failures

DELAY = 0.3


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalKafka]:
    broker = LocalKafka(home=tmp_path / "kafka", port=free_port(), controller_port=free_port(), heap="512m")
    broker.up(timeout=180)
    yield broker
    broker.down()


def test_broker_restart_mid_crawl(own_broker: LocalKafka, tmp_path: Path) -> None:
    fleet = SiteFleet(2, pages=20, latency=0.02, first_octet=90).start()
    stack = Stack(own_broker.bootstrap, tmp_path / "stack", partitions=4,
                  throttle={"delay": DELAY, "concurrency": 1, "autothrottle": {"start_delay": 0}})  # fmt: skip
    urls = fleet.all_urls()
    with crawling(stack, fleet) as pages:
        pages.wait_for(8, timeout=90, what="the crawl to be under way")
        stopped_at = time.time()
        own_broker.down()
        own_broker.up(timeout=180)
        restarted_in = time.time() - stopped_at
        pages.wait_for(len(urls), timeout=180, what="the crawl to finish after the broker restart")
        pages.settle()
        print(f"[broker restart] urls={len(urls)} lost={len(set(urls) - set(pages.urls))} "
              f"duplicates={pages.duplicates()} broker_down_for={restarted_in:.1f}s "
              f"longest_site_silence={longest_silence_after(fleet, stopped_at):.1f}s")  # fmt: skip
        assert set(pages.urls) == set(urls), "nothing lost"
        assert not politeness_failures(fleet, DELAY, 1)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KafkaCluster]:
    nodes = KafkaCluster(home=tmp_path / "cluster", ports=[free_port() for _ in range(3)],
                         controller_ports=[free_port() for _ in range(3)], heap="512m")  # fmt: skip
    nodes.up(timeout=180)
    yield nodes
    nodes.down()


def test_three_broker_cluster_survives_losing_one(cluster: KafkaCluster, tmp_path: Path) -> None:
    fleet = SiteFleet(3, pages=12, latency=0.02, first_octet=95).start()
    stack = Stack(cluster.bootstrap, tmp_path / "stack", partitions=4, replication=3,
                  throttle={"delay": DELAY, "concurrency": 1, "autothrottle": {"start_delay": 0}})  # fmt: skip
    urls = fleet.all_urls()
    with crawling(stack, fleet) as pages:
        pages.wait_for(8, timeout=90, what="the crawl to be under way")
        killed_at = time.time()
        cluster.nodes[0].kill()  # kill -9 one of three brokers (and one of three controllers)
        pages.wait_for(len(urls), timeout=180, what="the crawl to finish on two brokers")
        pages.settle()
        print(
            f"[cluster lost a broker] urls={len(urls)} lost={len(set(urls) - set(pages.urls))} "
            f"duplicates={pages.duplicates()} longest_site_silence={longest_silence_after(fleet, killed_at):.1f}s"
        )
        assert set(pages.urls) == set(urls), "nothing lost"
        assert not politeness_failures(fleet, DELAY, 1)

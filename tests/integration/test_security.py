"""Kafka security settings pass through to every client (router, frontier/faust, workers, CLI):
a crawl runs end to end against a broker listener that requires SASL/PLAIN, and the password
never appears in any log."""

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from deploy.kafka import LocalKafka, free_port
from frontier.demo.sites import SiteFleet
from frontier.demo.stack import Stack
from tests.integration.helpers import crawling

PASSWORD = f"pw-{secrets.token_hex(8)}"


@pytest.fixture
def sasl_broker(tmp_path: Path) -> Iterator[LocalKafka]:
    broker = LocalKafka(home=tmp_path / "kafka", port=free_port(), controller_port=free_port(), heap="512m",
                        sasl_port=free_port(), sasl_users={"crawler": PASSWORD})  # fmt: skip
    broker.up(timeout=180)
    yield broker
    broker.down()


def sasl(password: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "crawler",
            "sasl.password": password}  # fmt: skip


def test_crawl_over_sasl_and_secrets_stay_out_of_logs(sasl_broker: LocalKafka, tmp_path: Path) -> None:
    bootstrap = f"127.0.0.1:{sasl_broker.sasl_port}"
    wrong = AdminClient({"bootstrap.servers": bootstrap, "log_level": "0", **sasl("wrong-password")})
    with pytest.raises(Exception):  # noqa: B017 - any failure: the listener really requires the password
        wrong.list_topics(timeout=5)

    fleet = SiteFleet(1, pages=5, first_octet=98).start()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=2, kafka_extra=sasl(PASSWORD),
                  throttle={"delay": 0.1, "autothrottle": {"start_delay": 0}})  # fmt: skip
    urls = fleet.all_urls()
    with crawling(stack, fleet, concurrency=8) as pages:
        pages.wait_for(len(urls), timeout=90, what="the crawl over SASL")
        assert set(pages.urls) == set(urls)
    logs = {p.name: p.read_text(errors="replace") for p in (tmp_path / "stack").glob("*.log")}
    assert logs and all(PASSWORD not in text for text in logs.values()), "a secret reached a log"

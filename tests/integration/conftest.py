"""A real single-node Apache Kafka broker (KRaft) for the integration tests, started once per
session by the project's own deploy script on free loopback ports, removed afterwards."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.kafka import LocalKafka, free_port


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    home: Path = tmp_path_factory.mktemp("kafka")
    broker = LocalKafka(home=home, port=free_port(), controller_port=free_port())
    broker.up(timeout=180)
    yield broker
    broker.down()


@pytest.fixture
def bootstrap(kafka: LocalKafka) -> str:
    return kafka.bootstrap

"""With Kafka down, every command that needs it says so in one line and exits non-zero within
seconds; librdkafka's own lines go to the logger, never to the terminal (issue 15). No broker:
127.0.0.1:1 refuses connections. The elapsed-time bounds are bounds on a failure path."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from frontier.cli import common as cli
from frontier.cli import main
from frontier.client import FrontierClient, SubmitError
from frontier.client import client as client_module
from frontier.config import Config
from tests.fakes import FakeProducer
from topics.kafka import LIBRDKAFKA_LOG, Kafka, KafkaUnreachable

DOWN = "127.0.0.1:1"
LINE = f"cannot reach Kafka at {DOWN}: is `crawl-frontier kafka up` running?"


@pytest.fixture(autouse=True)
def broker_down(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("CRAWL_KAFKA_BOOTSTRAP", DOWN)
    yield


def run(argv: list[str], capfd: pytest.CaptureFixture[str], bound: float) -> tuple[int, str, str]:
    started = time.monotonic()
    code = main(argv)
    elapsed = time.monotonic() - started
    out, err = capfd.readouterr()
    assert elapsed < bound, f"{argv}: {elapsed:.1f} s"
    return code, out, err


def assert_one_line(err: str, reason: str = "Connection refused") -> None:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(LINE), lines[0]
    assert reason in lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "create"],
        ["submit", "http://a.test/"],
        ["forget", "http://a.test/"],
        ["pages"],
        ["status"],
        ["scope", "pause", "a.test"],
    ],
)
def test_every_kafka_command_fails_in_one_line_within_seconds(
    argv: list[str], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "CHECK_TIMEOUT", 1.0)  # the default (3 s) is timed once below
    code, out, err = run(argv, capfd, bound=8.0)
    assert code == 1 and out == ""
    assert_one_line(err)
    assert "rdkafka" not in err and "FAIL" not in err  # librdkafka's own lines stay off the terminal


def test_the_default_check_takes_a_few_seconds(capfd: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["status"], capfd, bound=10.0)
    assert code == 1 and out == ""
    assert_one_line(err)


@pytest.mark.parametrize("argv", [["router"], ["worker"], ["frontier"]])
def test_the_services_wait_then_fail_the_same_way(
    argv: list[str], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "CHECK_TIMEOUT", 0.5)
    monkeypatch.setattr(cli, "SERVICE_WAIT", 2.0)  # 30 s in use: a broker may be starting with them
    started = time.monotonic()
    code, out, err = run(argv, capfd, bound=10.0)
    assert time.monotonic() - started >= 2.0  # it did wait
    assert code == 1 and out == ""
    assert_one_line(err)


def test_an_unknown_host_says_so(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAWL_KAFKA_BOOTSTRAP", "no-such-host.invalid:9092")
    monkeypatch.setattr(cli, "CHECK_TIMEOUT", 1.0)
    code, _, err = run(["status"], capfd, bound=8.0)
    assert code == 1 and err.count("\n") == 1
    assert err.startswith("cannot reach Kafka at no-such-host.invalid:9092: is `crawl-frontier kafka up` running?")


def test_verbose_shows_librdkafka_lines_through_logging(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "CHECK_TIMEOUT", 1.0)
    caplog.set_level(logging.INFO)
    code, _, err = run(["status", "--verbose"], capfd, bound=8.0)
    assert code == 1 and err.splitlines()[-1].startswith(LINE)


def test_librdkafka_logs_go_to_the_logger(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LIBRDKAFKA_LOG.name)
    producer = Kafka({"bootstrap.servers": DOWN}).producer()
    deadline = time.monotonic() + 10.0
    while not any(r.name == LIBRDKAFKA_LOG.name for r in caplog.records):
        assert time.monotonic() < deadline, "no librdkafka log record"
        producer.poll(0.1)  # logs are served by poll, on the caller's thread
    record = next(r for r in caplog.records if r.name == LIBRDKAFKA_LOG.name)
    assert record.levelno >= logging.WARNING and "127.0.0.1:1" in record.getMessage()


def test_reachable_and_check() -> None:
    kafka = Kafka({"bootstrap.servers": DOWN})
    assert kafka.reachable(1.0) is False
    with pytest.raises(KafkaUnreachable) as caught:
        kafka.check(1.0)
    assert str(caught.value) == f"{LINE} (Connection refused)"
    assert caught.value.bootstrap == DOWN and caught.value.reason == "Connection refused"


# -- the broker going away after the check -----------------------------------------------------------


class Flaky(Kafka):
    """Answers the first check, then is gone (the broker stopped while submitting)."""

    checks = 0

    def check(self, timeout: float = 3.0, wait: float = 0.0) -> None:
        Flaky.checks += 1
        if Flaky.checks > 1:
            super().check(timeout, wait)


def test_submit_does_not_hang_when_the_broker_goes_away(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    Flaky.checks = 0
    monkeypatch.setattr(cli, "Kafka", Flaky)
    monkeypatch.setattr(client_module, "Kafka", Flaky)
    monkeypatch.setattr(client_module, "DELIVERY_TIMEOUT", 1.0)  # 30 s in use
    monkeypatch.setattr(cli, "CHECK_TIMEOUT", 1.0)
    code, out, err = run(["submit", "http://a.test/", "http://b.test/"], capfd, bound=10.0)
    assert code == 1 and out == ""
    assert_one_line(err, reason="lost while submitting")


def test_the_client_fails_a_submission_after_its_delivery_timeout() -> None:
    client = FrontierClient(Config(), kafka=Kafka({"bootstrap.servers": DOWN}), delivery_timeout=1.0)
    client._checked = True  # as if the broker had answered, then gone
    started = time.monotonic()
    with pytest.raises(SubmitError):
        client.submit(["http://a.test/"])
    assert time.monotonic() - started < 8.0


def test_the_client_checks_before_its_first_use() -> None:
    client = FrontierClient(Config(), bootstrap=DOWN)
    with pytest.raises(KafkaUnreachable):
        client.submit(["http://a.test/"])


# -- the CLI as a thin shell over the client (the connection injected) ---------------------------------


class FakeKafka(Kafka):
    def __init__(self) -> None:
        super().__init__({"bootstrap.servers": "fake:9092"})
        self.made = FakeProducer()

    def check(self, timeout: float = 3.0, wait: float = 0.0) -> None:
        pass

    def producer(self, **extra: Any) -> Any:
        assert extra["message.timeout.ms"] == 30000  # deliveries are bounded
        return self.made


def test_submit_lines_from_a_file_through_an_injected_connection(tmp_path: Path) -> None:
    kafka = FakeKafka()
    client = FrontierClient(Config(), kafka=kafka)
    lines = tmp_path / "urls.txt"
    lines.write_bytes(b'# a comment\nhttp://a.test/\n\n{"url": "http://b.test/", "priority": 3}\n')
    with lines.open("rb") as fh:
        from frontier.client import read_lines

        assert client.submit_lines(read_lines(fh), recrawl=True) == 2
    topics = {topic for topic, _ in kafka.made.records}
    assert topics == {client.topics.urls}
    values = [value for _, value in kafka.made.records]
    assert values == [b'{"url": "http://a.test/", "recrawl": true}',
                      b'{"url": "http://b.test/", "priority": 3, "recrawl": true}']  # fmt: skip


def test_the_cli_submit_goes_through_the_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kafka = FakeKafka()
    monkeypatch.setattr(client_module, "Kafka", lambda _conf: kafka)
    urls = tmp_path / "urls.txt"
    urls.write_text("http://b.test/\n")
    assert main(["submit", "http://a.test/", "--file", str(urls), "--follow", "1"]) == 0
    assert [value for _, value in kafka.made.records] == [b'{"url": "http://a.test/", "follow": 1}',
                                                          b'{"url": "http://b.test/", "follow": 1}']  # fmt: skip
    assert "submitted 2 record(s)" in capsys.readouterr().out


def test_status_says_so_when_the_broker_goes_away_after_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    def gone(*_args: Any, **_kwargs: Any) -> Any:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "watermarks not available"))

    Flaky.checks = 0
    client = FrontierClient(Config(), kafka=Flaky({"bootstrap.servers": DOWN}))
    monkeypatch.setattr(client_module, "read_status", gone)
    with pytest.raises(KafkaUnreachable, match="lost while reading the status"):
        client.statuses()


def test_the_reachability_checks_own_client_logs_nothing_the_check_does_not_say() -> None:
    """A service started before its broker waits with one line; the check's client's own connection
    errors (ten librdkafka lines every 1.5 s, seen as a new user) stay out of the services' log:
    nothing reaches the librdkafka logger's handlers (pytest hangs its capture on every logger)."""
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    LIBRDKAFKA_LOG.addHandler(handler)
    try:
        assert Kafka({"bootstrap.servers": DOWN}).reachable(0.5) is False
    finally:
        LIBRDKAFKA_LOG.removeHandler(handler)
    assert [r.getMessage() for r in seen] == []


def test_ctrl_c_while_a_command_waits_is_one_line_and_130(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    def interrupted(self: Kafka, timeout: float = 3.0, wait: float = 0.0) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Kafka, "check", interrupted)
    code, out, err = run(["status"], capfd, bound=5)
    assert (code, out, err) == (130, "", "interrupted\n")

"""The command line as a new user types it (no Kafka needed for these)."""

from __future__ import annotations

from pathlib import Path

import pytest

from frontier.cli import build_parser, main


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["status", "--config", "x.toml"], "x.toml"),
        (["--config", "y.toml", "status"], "y.toml"),
        (["-c", "a.toml", "submit", "-c", "b.toml", "http://a.test/"], "b.toml"),  # the later one wins
        (["scope", "pause", "a.test", "-c", "z.toml"], "z.toml"),
        (["status"], None),
    ],
)
def test_config_is_accepted_before_or_after_the_subcommand(argv: list[str], expected: str | None) -> None:
    config = build_parser().parse_args(argv).config
    assert (str(config) if config is not None else None) == expected


def test_a_bad_config_after_the_subcommand_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[throttle]\ndelay = -1\n")
    assert main(["status", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("configuration error: throttle.delay")


def test_kafka_up_takes_its_port_from_the_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``kafka up --config`` runs the broker the configuration names (a trial user's
    ``bootstrap = "127.0.0.1:9192"`` was ignored: "already running at 127.0.0.1:9092")."""
    from deploy import kafka
    from frontier.cli.kafka import _local_port

    monkeypatch.delenv("CRAWL_KAFKA_PORT", raising=False)
    monkeypatch.delenv("CRAWL_KAFKA_CONTROLLER_PORT", raising=False)
    conf = tmp_path / "c.toml"
    conf.write_text('[kafka]\nbootstrap = "127.0.0.1:9192"\n')
    port = _local_port(build_parser().parse_args(["--config", str(conf), "kafka", "status"]))
    broker = kafka.default_broker(port)
    assert (port, broker.port, broker.controller_port, broker.home.name) == (9192, 9192, 9193, "kafka-9192")
    remote = tmp_path / "r.toml"
    remote.write_text('[kafka]\nbootstrap = "kafka.example.com:9092"\n')
    assert _local_port(build_parser().parse_args(["--config", str(remote), "kafka", "status"])) == 0
    assert _local_port(build_parser().parse_args(["kafka", "status"])) == 0  # no --config: the README's default
    default = kafka.default_broker(0)
    assert (default.port, default.controller_port, default.home.name) == (9092, 9093, "kafka")

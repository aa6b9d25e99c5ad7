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

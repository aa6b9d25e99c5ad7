"""`crawl-frontier kafka up|status|down` manage one broker: a second `up` is a no-op, `down`
stops only the broker that `up` started."""

import os
import subprocess
import sys
from pathlib import Path

from deploy.kafka import free_port, port_open
from topics.catalog import ALL


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "frontier.cli", *args], env=env, capture_output=True, text=True,
                          timeout=240, check=False)  # fmt: skip


def test_kafka_up_is_idempotent_and_down_stops_it(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "CRAWL_STATE_DIR": str(tmp_path), "CRAWL_KAFKA_PORT": str(port),
           "CRAWL_KAFKA_CONTROLLER_PORT": str(free_port())}  # fmt: skip
    try:
        first = run(["kafka", "up"], env)
        assert first.returncode == 0, first.stderr
        assert f"kafka started at 127.0.0.1:{port}" in first.stdout
        pid = (tmp_path / "kafka" / "broker.pid").read_text()
        second = run(["kafka", "up"], env)
        assert second.returncode == 0 and "already running" in second.stdout
        assert (tmp_path / "kafka" / "broker.pid").read_text() == pid
        status = run(["kafka", "status"], env)
        assert status.returncode == 0 and f"pid {pid}" in status.stdout
        topics = run(["topics", "create", "--partitions", "3"], {**env, "CRAWL_KAFKA_BOOTSTRAP": f"127.0.0.1:{port}"})
        assert topics.returncode == 0 and f"{len(ALL)} topic(s) created" in topics.stdout, topics.stdout + topics.stderr
        again = run(["topics", "create", "--partitions", "3"], {**env, "CRAWL_KAFKA_BOOTSTRAP": f"127.0.0.1:{port}"})
        assert "0 topic(s) created" in again.stdout
    finally:
        down = run(["kafka", "down"], env)
    assert down.returncode == 0 and "kafka stopped" in down.stdout
    assert not port_open(port)
    assert "not running" in run(["kafka", "down"], env).stdout

"""Run a whole crawl stack as real processes: frontier instances and workers, each a
``crawl-frontier`` subprocess with a generated config file. Used by the demo and by the
integration tests (which must exercise the same processes a user runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from topics.admin import create_all
from topics.catalog import Topics
from topics.kafka import Connection, Kafka
from topics.schemas import Page, Rejected, decode

# glibc keeps per-thread malloc arenas; with Python, RocksDB and librdkafka threads in one process
# that costs RSS for nothing (measured in tests/bench/memory.py). Deployments set the same.
MALLOC_ENV = {"MALLOC_ARENA_MAX": "2"}
# a child that does not stop when told is sent SIGABRT: Python's fault handler writes every thread's
# stack to its log first, so the log says where it hung (then SIGKILL if even that does not end it)
CHILD_ENV = {**MALLOC_ENV, "PYTHONFAULTHANDLER": "1"}


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def _key(key: str) -> str:
    """A TOML key: bare when it can be, quoted otherwise (``"security.protocol"``)."""
    return key if key.replace("_", "").replace("-", "").isalnum() else _toml(key)


def render_config(data: dict[str, Any]) -> str:
    """Render sections as TOML; a section's ``scopes`` (name → table) become sub-tables."""
    lines: list[str] = []
    for section, values in data.items():
        lines.append(f"[{section}]")
        lines.extend(f"{k} = {_toml(v)}" for k, v in values.items() if k != "scopes")
        for name, table in values.get("scopes", {}).items():
            lines.append(f"[{section}.scopes.{_toml(name)}]")
            lines.extend(f"{k} = {_toml(v)}" for k, v in table.items())
        lines.append("")
    return "\n".join(lines)


def _die_with_parent() -> None:
    """In the child: SIGTERM when the process that started the stack dies, even by SIGKILL
    (Linux prctl PR_SET_PDEATHSIG), so an aborted test or demo leaves no services behind."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


@dataclass
class Stack:
    bootstrap: str
    workdir: Path
    prefix: str = field(default_factory=lambda: f"t{uuid.uuid4().hex[:8]}.")
    partitions: int = 4
    replication: int = 1
    throttle: dict[str, Any] = field(default_factory=dict)
    frontier: dict[str, Any] = field(default_factory=dict)
    kafka_extra: dict[str, str] = field(default_factory=dict)  # e.g. SASL settings for every client
    # local test sites live on loopback, which workers refuse unless told otherwise
    worker: dict[str, Any] = field(default_factory=lambda: {"allow_networks": ["127.0.0.0/8"]})
    urlfrontier: dict[str, Any] = field(default_factory=dict)  # the URLFrontier gateway's section
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # process name -> the network namespace it runs in (``ip netns exec``; the cluster harness)
    netns: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.app_id = f"{self.prefix}frontier"
        self.config_path = self.workdir / "crawl.toml"
        self.config_path.write_text(
            render_config(
                {
                    "kafka": {"bootstrap": self.bootstrap, **({"extra": self.kafka_extra} if self.kafka_extra else {})},
                    "topics": {"prefix": self.prefix, "partitions": self.partitions, "replication": self.replication},
                    "frontier": {"app_id": self.app_id, "state_dir": str(self.workdir / "state"), **self.frontier},
                    "throttle": self.throttle,
                    "worker": self.worker,
                    "urlfrontier": self.urlfrontier,
                }
            )
        )
        self.topics = Topics(prefix=self.prefix, partitions=self.partitions, replication=self.replication)

    @property
    def client(self) -> dict[str, str]:
        # librdkafka: warnings and worse
        return {"bootstrap.servers": self.bootstrap, "log_level": "4", **self.kafka_extra}

    def create_topics(self) -> None:
        create_all(self.client, self.topics)

    def _spawn(
        self, name: str, *args: str, env: dict[str, str] | None = None, module: str = "frontier.cli"
    ) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "ab")  # the child owns it
        run = [module] if module.endswith(".py") else ["-m", module]
        cmd = [sys.executable, *run, "--config", str(self.config_path), *args]
        if name in self.netns:
            cmd = ["ip", "netns", "exec", self.netns[name], *cmd]
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**CHILD_ENV, **os.environ, **(env or {})},
                                preexec_fn=_die_with_parent)  # fmt: skip
        self.procs[name] = proc
        return proc

    def start_frontier(self, name: str = "frontier", own_state: bool = False) -> subprocess.Popen[bytes]:
        """Start a frontier; ``own_state`` gives it a state directory of its own (several instances)."""
        env = {"CRAWL_FRONTIER_STATE_DIR": str(self.workdir / f"state-{name}")} if own_state else None
        return self._spawn(name, "frontier", "--loglevel", "info", env=env)

    def start_router(self, name: str = "router") -> subprocess.Popen[bytes]:
        """A standalone router (for frontiers configured with ``embedded_router = false``)."""
        return self._spawn(name, "router")

    def start_worker(self, name: str, concurrency: int = 8, *args: str) -> subprocess.Popen[bytes]:
        return self._spawn(name, "worker", "--concurrency", str(concurrency), *args)

    def start_gateway(self, name: str, port: int) -> subprocess.Popen[bytes]:
        """A URLFrontier gateway (``crawl-frontier urlfrontier``) on 127.0.0.1:``port``."""
        return self._spawn(name, "urlfrontier", "--port", str(port), "--bind", "127.0.0.1")

    def start_program(self, name: str, module: str, *args: str) -> subprocess.Popen[bytes]:
        """``python -m module --config <the stack's file> args``: a worker built on the worker API
        (``module`` may also be the path of a script ending in ``.py``)."""
        return self._spawn(name, *args, module=module)

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return None
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._note(name, f"did not stop within {timeout:.0f} s of signal {sig}: SIGABRT (stacks follow)")
                proc.send_signal(signal.SIGABRT)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # its children too
                except ProcessLookupError:
                    pass
                proc.wait(10)
        return proc.returncode

    def _note(self, name: str, text: str) -> None:
        """A line of the stack's own in a process's log (what was done to it, and why)."""
        with open(self.workdir / f"{name}.log", "a") as log:
            log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} stack: {name} {text}\n")

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log(name)[-3000:]}")


class TopicReader:
    """Reads a topic from the beginning, incrementally (for tests and the demo's progress)."""

    def __init__(self, client: Connection, topic: str) -> None:
        self._consumer: Consumer = Kafka.of(client).reader(
            "reader", {"auto.offset.reset": "earliest", "enable.auto.commit": False}
        )
        self._consumer.subscribe([topic])

    def poll(self, timeout: float = 0.2, max_records: int = 1000) -> Iterator[bytes]:
        for msg in self._consumer.consume(max_records, timeout=timeout):
            value = msg.value()
            if msg.error() is None and value is not None:
                yield value

    def close(self) -> None:
        self._consumer.close()


def read_pages(reader: TopicReader, timeout: float = 0.2) -> list[Page]:
    return [decode(v, Page) for v in reader.poll(timeout)]


def read_rejected(reader: TopicReader, timeout: float = 0.2) -> list[Rejected]:
    return [decode(v, Rejected) for v in reader.poll(timeout)]


def wait_until(predicate: Any, timeout: float, interval: float = 0.2, what: str = "condition") -> None:
    """Poll ``predicate`` until true or raise TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")

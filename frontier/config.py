"""Configuration: one TOML file, typed frozen sections, validated at load with messages that
name the key. Environment variables override the Kafka connection and topic layout
(``CRAWL_KAFKA_BOOTSTRAP``, ``CRAWL_TOPIC_PREFIX``, ``CRAWL_PARTITIONS``).

Example::

    [kafka]
    bootstrap = "127.0.0.1:9092"

    [topics]
    prefix = ""
    partitions = 8

    [throttle]           # defaults for every scope
    delay = 1.0          # seconds between request sends to one scope
    concurrency = 1      # requests in flight per scope

    [throttle.scopes."books.example.com"]
    delay = 0.25
    concurrency = 2
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from topics.catalog import Topics


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key."""


@dataclass(frozen=True)
class ScopeSettings:
    """Fixed politeness of one throttling scope (a host by default)."""

    delay: float = 1.0  # seconds between two request sends
    concurrency: int = 1  # requests in flight at once

    def validate(self, where: str) -> None:
        if not isinstance(self.delay, int | float) or self.delay < 0:
            raise ConfigError(f"{where}.delay: must be a number >= 0, got {self.delay!r}")
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ConfigError(f"{where}.concurrency: must be an integer >= 1, got {self.concurrency!r}")


@dataclass(frozen=True)
class ThrottleConfig:
    default: ScopeSettings = field(default_factory=ScopeSettings)
    scopes: Mapping[str, ScopeSettings] = field(default_factory=dict)

    def for_scope(self, name: str) -> ScopeSettings:
        return self.scopes.get(name, self.default)


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap: str = "127.0.0.1:9092"
    # Extra librdkafka / client settings passed through to every client (e.g. SASL/SSL).
    extra: Mapping[str, str] = field(default_factory=dict)

    def client_conf(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap, **self.extra}


@dataclass(frozen=True)
class FrontierConfig:
    app_id: str = "crawl-frontier"
    state_dir: str = ".crawl-state"  # RocksDB files, one database per partition
    job_ttl: float = 30.0  # a job not picked up within this many seconds is returned unfetched
    fetch_timeout: float = 20.0  # what a worker may spend on one fetch
    lease_grace: float = 10.0  # extra time before a silent lease is presumed lost
    max_retries: int = 2  # re-fetches after a network error or 5xx
    max_inflight: int = 2000  # jobs in flight per partition (bounds worker lag)
    web_port: int = 0  # faust web server port; 0 disables it

    def validate(self) -> None:
        for name in ("job_ttl", "fetch_timeout", "lease_grace"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"frontier.{name}: must be > 0")
        if self.max_retries < 0:
            raise ConfigError("frontier.max_retries: must be >= 0")
        if self.max_inflight < 1:
            raise ConfigError("frontier.max_inflight: must be >= 1")


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int = 16
    max_body_bytes: int = 5 * 1024 * 1024
    user_agent: str = "kafka-crawl-frontier/0.1 (+https://example.invalid/bot)"
    max_redirects: int = 5

    def validate(self) -> None:
        if self.concurrency < 1:
            raise ConfigError("worker.concurrency: must be >= 1")
        if self.max_body_bytes < 1024:
            raise ConfigError("worker.max_body_bytes: must be >= 1024")


@dataclass(frozen=True)
class Config:
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    topics: Topics = field(default_factory=Topics)
    frontier: FrontierConfig = field(default_factory=FrontierConfig)
    throttle: ThrottleConfig = field(default_factory=ThrottleConfig)
    worker: WorkerConfig = field(default_factory=WorkerConfig)


def _section(data: Mapping[str, Any], cls: type[Any], where: str) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    defaults = cls()
    for key, value in data.items():
        expected = type(getattr(defaults, key))
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if expected in (int, float, str) and (type(value) is not expected):
            raise ConfigError(f"{where}.{key}: expected {expected.__name__}, got {value!r}")
    return cls(**data)


def _scope(data: Any, where: str, base: ScopeSettings) -> ScopeSettings:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table")
    _section(data, ScopeSettings, where)  # unknown keys and types
    s = replace(base, **data)
    s.validate(where)
    return s


def from_dict(data: Mapping[str, Any]) -> Config:
    unknown = set(data) - {"kafka", "topics", "frontier", "throttle", "worker"}
    if unknown:
        raise ConfigError(f"unknown section(s): {', '.join(sorted(unknown))}")
    kafka_d = dict(data.get("kafka", {}))
    extra = kafka_d.pop("extra", {})
    if not isinstance(extra, dict):
        raise ConfigError("kafka.extra: expected a table of librdkafka settings")
    kafka = _section(kafka_d, KafkaConfig, "kafka")
    kafka = replace(kafka, extra={str(k): str(v) for k, v in extra.items()})
    topics = _section(data.get("topics", {}), Topics, "topics")
    if topics.partitions < 1:
        raise ConfigError("topics.partitions: must be >= 1")
    if topics.replication < 1:
        raise ConfigError("topics.replication: must be >= 1")
    frontier = _section(data.get("frontier", {}), FrontierConfig, "frontier")
    frontier.validate()
    worker = _section(data.get("worker", {}), WorkerConfig, "worker")
    worker.validate()
    throttle_d = dict(data.get("throttle", {}))
    scopes_d = throttle_d.pop("scopes", {})
    default = _scope(throttle_d, "throttle", ScopeSettings())
    scopes = {name: _scope(v, f"throttle.scopes.{name!r}", default) for name, v in scopes_d.items()}
    return Config(
        kafka=kafka, topics=topics, frontier=frontier, throttle=ThrottleConfig(default, scopes), worker=worker
    )


def apply_env(cfg: Config, env: Mapping[str, str]) -> Config:
    if "CRAWL_KAFKA_BOOTSTRAP" in env:
        cfg = replace(cfg, kafka=replace(cfg.kafka, bootstrap=env["CRAWL_KAFKA_BOOTSTRAP"]))
    if "CRAWL_TOPIC_PREFIX" in env:
        cfg = replace(cfg, topics=replace(cfg.topics, prefix=env["CRAWL_TOPIC_PREFIX"]))
    if "CRAWL_PARTITIONS" in env:
        try:
            n = int(env["CRAWL_PARTITIONS"])
        except ValueError:
            raise ConfigError("CRAWL_PARTITIONS: expected an integer") from None
        cfg = replace(cfg, topics=replace(cfg.topics, partitions=n))
    return cfg


def load(path: str | Path | None, env: Mapping[str, str] | None = None) -> Config:
    """Load ``path`` (or defaults when None), then apply environment overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    return apply_env(from_dict(data), os.environ if env is None else env)

"""Reading the settings: a TOML file, then environment overrides (``CRAWL__SECTION__KEY`` and the
short forms), each value checked against its type and range."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from frontier.config.ranges import ConfigError, _check_ranges
from frontier.config.settings import (
    PROFILES,
    TOPICS_RANGES,
    AutoThrottleSettings,
    BackoffSettings,
    Config,
    FrontierConfig,
    KafkaConfig,
    RampupSettings,
    ScopeSettings,
    ThrottleConfig,
    UrlFrontierConfig,
    WorkerConfig,
)
from topics.catalog import Topics


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
        if expected in (int, float, str, bool) and (type(value) is not expected):
            shown = f"a {type(value).__name__} (not shown: a secret)" if _secret(key) else repr(value)
            raise ConfigError(f"{where}.{key}: expected {expected.__name__}, got {shown}")
    return cls(**data)


def _secret(key: str) -> bool:
    """A key whose value is never printed (a token, a password)."""
    return any(word in key for word in ("token", "password", "secret"))


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _jitter(value: Any, where: str) -> tuple[float, float]:
    if isinstance(value, list):
        if len(value) != 2:
            raise ConfigError(f"{where}: a jitter range is [lo, hi], got {value!r}")
        return (_number(value[0], where), _number(value[1], where))
    j = _number(value, where)
    if not 0 <= j < 1:
        raise ConfigError(f"{where}: must be in [0, 1), got {value!r}")
    return (-j, j)


def _nested(value: Any, cls: type[Any], base: Any, where: str) -> Any:
    """A nested table (``backoff = {factor = 3}``) or a bool shorthand (``rampup = true``)."""
    if isinstance(value, bool) and "enabled" in {f.name for f in fields(cls)}:
        return replace(base, enabled=value)
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table or true/false, got {value!r}")
    data = dict(value)
    if "codes" in data:
        if not isinstance(data["codes"], list) or not all(isinstance(c, int) for c in data["codes"]):
            raise ConfigError(f"{where}.codes: expected a list of HTTP status codes")
        data["codes"] = tuple(data["codes"])
    if "target" in data:
        t = data["target"]
        if isinstance(t, int) and not isinstance(t, bool):
            data["target"] = (t, t)
        elif isinstance(t, list) and len(t) == 2 and all(isinstance(x, int) for x in t):
            data["target"] = (t[0], t[1])
        else:
            raise ConfigError(f"{where}.target: expected an integer or [lo, hi], got {t!r}")
    checked = {k: v for k, v in data.items() if k not in ("codes", "target")}
    _section(checked, cls, where)
    if cls is RampupSettings and "enabled" not in data:
        data["enabled"] = True  # a rampup table switches rampup on
    return replace(base, **data)


def _scope(data: Any, where: str, base: ScopeSettings) -> ScopeSettings:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table")
    known = {f.name for f in fields(ScopeSettings)}
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for key, value in data.items():
        here = f"{where}.{key}"
        if key == "jitter":
            values[key] = _jitter(value, here)
        elif key == "autothrottle":
            values[key] = _nested(value, AutoThrottleSettings, base.autothrottle, here)
        elif key == "backoff":
            values[key] = _nested(value, BackoffSettings, base.backoff, here)
        elif key == "rampup":
            values[key] = _nested(value, RampupSettings, base.rampup, here)
        elif key in ("ignore_robots_txt", "spread"):
            if not isinstance(value, bool):
                raise ConfigError(f"{here}: expected true or false, got {value!r}")
            values[key] = value
        elif key == "concurrency":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{here}: must be an integer >= 1, got {value!r}")
            values[key] = value
        else:
            values[key] = _number(value, here)
    s = replace(base, **values)
    s.validate(where)
    return s


def from_dict(data: Mapping[str, Any]) -> Config:
    unknown = set(data) - {"kafka", "topics", "frontier", "throttle", "worker", "urlfrontier"}
    if unknown:
        raise ConfigError(f"unknown section(s): {', '.join(sorted(unknown))}")
    kafka_d = dict(data.get("kafka", {}))
    extra = kafka_d.pop("extra", {})
    if not isinstance(extra, dict):
        raise ConfigError("kafka.extra: expected a table of librdkafka settings")
    kafka = _section(kafka_d, KafkaConfig, "kafka")
    kafka = replace(kafka, extra={str(k): str(v) for k, v in extra.items()})
    topics = _section(data.get("topics", {}), Topics, "topics")
    _check_ranges(topics, TOPICS_RANGES, "topics")
    frontier = _section(data.get("frontier", {}), FrontierConfig, "frontier")
    frontier.validate()
    worker_d = dict(data.get("worker", {}))
    nets = worker_d.pop("allow_networks", [])
    if not isinstance(nets, list) or not all(isinstance(n, str) for n in nets):
        raise ConfigError("worker.allow_networks: expected a list of CIDR strings")
    worker = replace(_section(worker_d, WorkerConfig, "worker"), allow_networks=tuple(nets))
    worker.validate()
    throttle_d = dict(data.get("throttle", {}))
    scopes_d = throttle_d.pop("scopes", {})
    profile = throttle_d.pop("profile", "polite")
    if profile not in PROFILES:
        raise ConfigError(f"throttle.profile: one of {', '.join(sorted(PROFILES))}, got {profile!r}")
    default = _scope(throttle_d, "throttle", PROFILES[profile])
    scopes = {name: _scope(v, f"throttle.scopes.{name!r}", default) for name, v in scopes_d.items()}
    urlfrontier = _section(data.get("urlfrontier", {}), UrlFrontierConfig, "urlfrontier")
    urlfrontier.validate()
    return Config(kafka=kafka, topics=topics, frontier=frontier, throttle=ThrottleConfig(default, scopes),
                  worker=worker, urlfrontier=urlfrontier)  # fmt: skip


def apply_env(cfg: Config, env: Mapping[str, str]) -> Config:
    if "CRAWL_FRONTIER_STATE_DIR" in env:
        cfg = replace(cfg, frontier=replace(cfg.frontier, state_dir=env["CRAWL_FRONTIER_STATE_DIR"]))
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
    env = os.environ if env is None else env
    cfg = apply_env(from_dict(merge_env(data, env)), env)
    cfg.validate()  # the short environment forms (CRAWL_PARTITIONS=0) are checked too
    return cfg


ENV_PREFIX = "CRAWL__"


def merge_env(data: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Overlay ``CRAWL__SECTION__KEY=value`` variables on the file's data (containers).

    Nested keys take more ``__`` (``CRAWL__THROTTLE__AUTOTHROTTLE__START_DELAY=0``); values are
    read as TOML values (``8``, ``true``, ``["a", "b"]``) and otherwise as strings. Under
    ``kafka.extra`` an underscore stands for a dot: ``CRAWL__KAFKA__EXTRA__SASL_PASSWORD`` sets
    ``sasl.password``. Scope tables cannot be set this way (their names have dots). A key that
    holds text (a token, an address, a ``kafka.extra`` value) takes the variable as it is: a token
    ``0x1F`` or ``12345`` stays that string.
    """
    out: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for name, raw in sorted(env.items()):
        if not name.startswith(ENV_PREFIX) or len(name) == len(ENV_PREFIX):
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        if path[:2] == ["kafka", "extra"] and len(path) == 3:
            path[2] = path[2].replace("_", ".")
        try:
            value: Any = raw if _text_key(path) else tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = out
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
            node[part] = child = dict(child)
            node = child
        node[path[-1]] = value
    return out


def _text_key(path: list[str]) -> bool:
    """Does ``section.key`` (lower case) name a key whose value is a string?"""
    if path[:2] == ["kafka", "extra"]:
        return len(path) == 3
    node: Any = ScopeSettings() if path[:1] == ["throttle"] else Config()
    for part in path[1:] if path[:1] == ["throttle"] else path:
        if not hasattr(node, "__dataclass_fields__") or part not in node.__dataclass_fields__:
            return False
        node = getattr(node, part)
    return isinstance(node, str)

"""Configuration: one TOML file, typed frozen sections, validated at load with messages that
name the key. Any key can be overridden from the environment as ``CRAWL__SECTION__KEY``
(:func:`merge_env`); the short forms ``CRAWL_KAFKA_BOOTSTRAP``, ``CRAWL_TOPIC_PREFIX``,
``CRAWL_PARTITIONS`` and ``CRAWL_FRONTIER_STATE_DIR`` (one per instance) still work. Every key
is documented in docs/CONFIGURATION.md.

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

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from topics.catalog import MAX_PAGE_BODY_BYTES, Topics


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key."""


DAY = 86400.0
MONTH = 30 * DAY


@dataclass(frozen=True)
class Range:
    """The values a numeric key accepts: finite, within [lo, hi] (``(lo, hi]`` when ``lo_open``),
    integral when ``integer``. NaN and infinities never pass: NaN fails every comparison, so a
    NaN delay slipped through ``delay < 0`` and sent jobs to a host all at once."""

    lo: float
    hi: float
    lo_open: bool = False
    integer: bool = False
    why: str = ""  # said after the range when a bound has a reason worth giving

    def check(self, where: str, value: object) -> None:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and self.integer:
            ok = isinstance(value, int)
        if ok:
            v = float(value)  # type: ignore[arg-type]
            ok = math.isfinite(v) and (v > self.lo if self.lo_open else v >= self.lo) and v <= self.hi
        if not ok:
            kind = "an integer" if self.integer else "a finite number"
            low = f"> {_num(self.lo)}" if self.lo_open else f">= {_num(self.lo)}"
            why = f" ({self.why})" if self.why else ""
            raise ConfigError(f"{where}: must be {kind} {low} and <= {_num(self.hi)}{why}, got {value!r}")


def _num(x: float) -> str:
    return str(int(x)) if x == int(x) else repr(x)


def _check_ranges(obj: Any, ranges: Mapping[str, Range], where: str) -> None:
    """Check the fields of the dataclass ``obj`` that ``ranges`` names (every numeric field has
    a range: tests/test_config.py checks that none is missing)."""
    for name, allowed in ranges.items():
        allowed.check(f"{where}.{name}", getattr(obj, name))


GAP = Range(0, DAY)  # seconds between two requests to one scope (also the cap of `scope set --delay`)
POSITIVE_GAP = Range(0, DAY, lo_open=True)
WINDOW = Range(0, MONTH, lo_open=True)  # a time window, seconds
CONCURRENCY = Range(1, 1000, integer=True)  # requests in flight (also the cap of `scope set --concurrency`)
PORT = Range(0, 65535, integer=True)
JITTER_MAX = 10.0  # a gap is multiplied by at most 1 + JITTER_MAX


BACKOFF_CODES = (429, 502, 503, 504, 520, 521, 522, 523, 524)


@dataclass(frozen=True)
class AutoThrottleSettings:
    """Scrapy's AutoThrottle: aim at ``target_concurrency`` requests in flight on average."""

    enabled: bool = True
    start_delay: float = 1.0  # first delay of a scope (never below its configured delay)
    max_delay: float = 60.0
    target_concurrency: float = 1.0


@dataclass(frozen=True)
class BackoffSettings:
    """Adaptation to the server's signals (THROTTLING.md v2 §3, frontier/core/adapt.py)."""

    codes: tuple[int, ...] = BACKOFF_CODES  # statuses that are limit (429) or trouble (5xx) signals
    factor: float = 1.5  # a limit signal steps the delay to this times the interval it happened at
    min_delay: float = 0.25  # ...and to at least this
    max_delay: float = 300.0
    window: float = 60.0  # unused since v2 (recovery is per success); accepted for old configurations
    trouble_max: float = 60.0  # outages (503, network errors): probe at doubling intervals up to this


@dataclass(frozen=True)
class RampupSettings:
    """Speed up until about ``target`` backoff responses per window (API-like scopes)."""

    enabled: bool = False
    target: tuple[int, int] = (1, 1)  # acceptable backoff responses per window: [lo, hi]
    window: float = 60.0
    min_delay: float = 0.25  # rampup halves the delay down to this, then raises concurrency
    max_concurrency: int = 16


@dataclass(frozen=True)
class ScopeSettings:
    """Politeness of one throttling scope (a host by default)."""

    delay: float = 0.1  # seconds between two request sends (a floor): AutoThrottle and adaptation never go below it
    concurrency: int = 1  # requests in flight at once
    jitter: tuple[float, float] = (0.0, 0.0)  # each gap is multiplied by 1 + uniform(lo, hi)
    autothrottle: AutoThrottleSettings = field(default_factory=AutoThrottleSettings)
    backoff: BackoffSettings = field(default_factory=BackoffSettings)
    rampup: RampupSettings = field(default_factory=RampupSettings)
    gate_max: float = 3600.0  # cap on Retry-After / RateLimit gates
    quota: float = 0.0  # cost units per window (0: no quota)
    window: float = 60.0  # quota window, seconds
    spread: bool = False  # pace requests evenly over the quota window (delay >= window/quota)
    ignore_robots_txt: bool = False  # configured delay/concurrency win over Crawl-delay (logged)
    robots_max_delay: float = 60.0  # cap on Crawl-delay / Request-rate

    def validate(self, where: str) -> None:
        _check_ranges(self, SCOPE_RANGES, where)
        lo, hi = self.jitter
        if not (math.isfinite(lo) and math.isfinite(hi) and -1 < lo <= hi <= JITTER_MAX):
            raise ConfigError(
                f"{where}.jitter: must be j in [0, 1) or [lo, hi] with -1 < lo <= hi <= {JITTER_MAX:g}, "
                f"got {self.jitter!r}"
            )
        at = self.autothrottle
        _check_ranges(at, AUTOTHROTTLE_RANGES, f"{where}.autothrottle")
        b = self.backoff
        _check_ranges(b, BACKOFF_RANGES, f"{where}.backoff")
        if b.max_delay < b.min_delay:
            raise ConfigError(
                f"{where}.backoff.max_delay: must be >= backoff.min_delay ({b.min_delay}), got {b.max_delay}"
            )
        for code in b.codes:
            if isinstance(code, bool) or not isinstance(code, int) or not 100 <= code <= 599:
                raise ConfigError(f"{where}.backoff.codes: must be HTTP status codes (100..599), got {code!r}")
        r = self.rampup
        _check_ranges(r, RAMPUP_RANGES, f"{where}.rampup")
        tlo, thi = r.target
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in r.target) or not 0 <= tlo <= thi <= 10**6:
            raise ConfigError(f"{where}.rampup.target: must be integers 0 <= lo <= hi <= 1000000, got {r.target!r}")


SCOPE_RANGES = {
    "delay": GAP, "concurrency": CONCURRENCY, "gate_max": WINDOW, "quota": Range(0, 1e12), "window": WINDOW,
    "robots_max_delay": GAP,
}  # fmt: skip
AUTOTHROTTLE_RANGES = {
    "start_delay": GAP,
    "max_delay": POSITIVE_GAP,
    "target_concurrency": Range(0, 1000, lo_open=True),
}
BACKOFF_RANGES = {
    "factor": Range(1, 100), "min_delay": GAP, "max_delay": GAP, "window": WINDOW, "trouble_max": POSITIVE_GAP,
}  # fmt: skip
RAMPUP_RANGES = {"window": WINDOW, "min_delay": POSITIVE_GAP, "max_concurrency": CONCURRENCY}


# Named starting points for [throttle] (keys set next to `profile` override them); the reasoning
# and the simulator's figures behind them are in docs/CONFIGURATION.md.
PROFILES: dict[str, ScopeSettings] = {
    # the defaults: a 0.1 s floor, one request in flight per host, AutoThrottle from 1 s
    "polite": ScopeSettings(),
    # hosts you may crawl hard: no floor, up to 8 in flight, AutoThrottle aiming at 4 from 0.5 s;
    # every signal (429, Retry-After, RateLimit, 5xx, Crawl-delay) is still obeyed and adapted to
    "fast": ScopeSettings(
        delay=0.0, concurrency=8, autothrottle=AutoThrottleSettings(start_delay=0.5, target_concurrency=4.0)
    ),
}


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
    max_retries: int = 4  # re-fetches after a network error, 429 or 5xx
    max_inflight: int = 2000  # jobs in flight per partition (bounds worker lag)
    standby_replicas: int = 0  # 1: keep a warm copy of every partition this instance does not own
    dispatch_lead: float = 0.1  # send a job this much before its slot; the worker holds it until not_before
    robots_obey: bool = True  # fetch robots.txt before a host's first page and obey it
    robots_ttl: float = 86400.0  # seconds a fetched robots.txt stays valid
    robots_retry: float = 60.0  # robots.txt without an answer (5xx, 429, network, TLS): first retry after this
    robots_retry_max: float = 6 * 3600.0  # ...doubling per failure up to this
    robots_give_up: float = 86400.0  # unreachable this long: the origin's URLs end with an error page (<= 30 days)
    debug_throttle: bool = False  # log every delay change of every scope with its cause
    status_interval: float = 2.0  # seconds between status snapshots on crawl.frontier.status
    web_port: int = 0  # the live page, /api/status and /metrics (Prometheus); 0 disables it
    web_bind: str = "127.0.0.1"  # address of that server ("0.0.0.0" in containers)
    web_token: str = ""  # required (header or basic auth) for the page, /api/* and commands; must be set off loopback
    seen_retention: float = 30 * 86400.0  # a seen URL is forgotten this long after it was last seen/fetched; 0: never
    ip_scope: bool = False  # hosts that resolve to one IPv4/IPv6 address share one politeness scope (router resolves)
    embedded_router: bool = True  # route crawl.urls in this process; false: run `crawl-frontier router`

    def validate(self) -> None:
        _check_ranges(self, FRONTIER_RANGES, "frontier")


FRONTIER_RANGES = {
    "job_ttl": POSITIVE_GAP,
    "fetch_timeout": Range(0, 3600, lo_open=True),
    "lease_grace": Range(0, 3600, lo_open=True),
    "max_retries": Range(0, 100, integer=True),
    "max_inflight": Range(1, 1_000_000, integer=True),
    "standby_replicas": Range(0, 1, integer=True),
    "dispatch_lead": Range(0, 60),
    "robots_ttl": Range(0, 365 * DAY, lo_open=True),
    "robots_retry": WINDOW,
    "robots_retry_max": WINDOW,
    "robots_give_up": Range(0, 30 * DAY, lo_open=True),  # RFC 9309: 30 days is the outer limit
    "status_interval": Range(0, 3600, lo_open=True),
    "web_port": PORT,
    "seen_retention": Range(0, 10 * 365 * DAY),
}


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int = 16
    max_body_bytes: int = 5 * 1024 * 1024
    user_agent: str = "kafka-crawl-frontier/0.1 (+https://example.invalid/bot)"
    max_redirects: int = 5
    block_private: bool = True  # refuse private/loopback/link-local/metadata addresses (after DNS)
    allow_networks: tuple[str, ...] = ()  # CIDRs allowed anyway, e.g. ["127.0.0.0/8"] for local tests
    metrics_port: int = 0  # Prometheus /metrics of this worker; 0 disables it
    metrics_bind: str = "127.0.0.1"

    def validate(self) -> None:
        import ipaddress

        for net in self.allow_networks:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError:
                raise ConfigError(f"worker.allow_networks: {net!r} is not an IP network (CIDR)") from None
        _check_ranges(self, WORKER_RANGES, "worker")


WORKER_RANGES = {
    "concurrency": Range(1, 10_000, integer=True),
    # a page carries its body as base64 with its headers: it must fit the pages topic's limit
    # (topics.catalog.MAX_PAGE_BODY_BYTES), or publishing it fails after the fetch
    "max_body_bytes": Range(
        1024, MAX_PAGE_BODY_BYTES, integer=True, why="a page with its headers must fit crawl.pages"
    ),
    "max_redirects": Range(0, 50, integer=True),
    "metrics_port": PORT,
}
TOPICS_RANGES = {"partitions": Range(1, 10_000, integer=True), "replication": Range(1, 100, integer=True)}


@dataclass(frozen=True)
class Config:
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    topics: Topics = field(default_factory=Topics)
    frontier: FrontierConfig = field(default_factory=FrontierConfig)
    throttle: ThrottleConfig = field(default_factory=ThrottleConfig)
    worker: WorkerConfig = field(default_factory=WorkerConfig)

    def with_bootstrap(self, bootstrap: str) -> Config:
        return replace(self, kafka=replace(self.kafka, bootstrap=bootstrap))

    def validate(self) -> None:
        """Check every section (from_dict does; so does load after the environment overrides)."""
        _check_ranges(self.topics, TOPICS_RANGES, "topics")
        self.frontier.validate()
        self.worker.validate()
        self.throttle.default.validate("throttle")
        for name, scope in self.throttle.scopes.items():
            scope.validate(f"throttle.scopes.{name!r}")


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
            raise ConfigError(f"{where}.{key}: expected {expected.__name__}, got {value!r}")
    return cls(**data)


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
    return Config(
        kafka=kafka, topics=topics, frontier=frontier, throttle=ThrottleConfig(default, scopes), worker=worker
    )


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
    ``sasl.password``. Scope tables cannot be set this way (their names have dots).
    """
    out: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for name, raw in sorted(env.items()):
        if not name.startswith(ENV_PREFIX) or len(name) == len(ENV_PREFIX):
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        if path[:2] == ["kafka", "extra"] and len(path) == 3:
            path[2] = path[2].replace("_", ".")
        try:
            value: Any = tomllib.loads(f"v = {raw}")["v"]
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

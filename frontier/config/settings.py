"""The settings, as typed frozen sections: the throttling policy of a scope (``ScopeSettings``
and its parts), the kafka, topics, frontier and worker sections, and their validation."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from frontier.config.ranges import (
    CONCURRENCY,
    DAY,
    GAP,
    JITTER_MAX,
    PORT,
    POSITIVE_GAP,
    WINDOW,
    ConfigError,
    Range,
    _check_ranges,
)
from topics.catalog import MAX_PAGE_BODY_BYTES, Topics

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
    max_retries: int = 4  # re-fetches of a URL failing (network, 429, backoff 5xx) while its host answers others
    retry_give_up: float = 6 * 3600.0  # while its whole host fails, its URLs are retried until it failed this long
    max_inflight: int = 2000  # jobs in flight per partition (bounds worker lag)
    standby_replicas: int = 0  # 1: keep a warm copy of every partition this instance does not own
    dispatch_lead: float = 0.1  # send a job this much before its slot; the worker holds it until not_before
    robots_obey: bool = True  # fetch robots.txt before a host's first page and obey it
    robots_ttl: float = 86400.0  # seconds a fetched robots.txt stays valid
    robots_retry: float = 1.0  # robots.txt without an answer (5xx, 429, network, TLS): first retry after this
    robots_retry_max: float = 60.0  # ...doubling up to this (as the host's outage probing); not before a Retry-After
    robots_give_up: float = 86400.0  # unreachable this long: the origin's URLs end with an error page (<= 30 days)
    debug_throttle: bool = False  # log every delay change of every scope with its cause
    status_interval: float = 2.0  # seconds between status snapshots on crawl.frontier.status
    web_port: int = 0  # the live page, /api/status and /metrics (Prometheus); 0 disables it
    web_bind: str = "127.0.0.1"  # address of that server ("0.0.0.0" in containers)
    # required (header or basic auth) for the page, /api/* and commands; must be set off loopback; never in a repr
    web_token: str = field(default="", repr=False)
    seen_retention: float = 30 * 86400.0  # a seen URL is forgotten this long after it was last seen/fetched; 0: never
    ip_scope: bool = False  # hosts that resolve to one IPv4/IPv6 address share one politeness scope (router resolves)
    embedded_router: bool = True  # route crawl.urls in this process; false: run `crawl-frontier router`
    hold_max: float = 3600.0  # a job held in a client's hands (GetURLs' delay_requestable) at most this long
    block_max: float = 30 * 86400.0  # a scope blocked (BlockQueueUntil, a block command) at most this long
    max_crawls: int = 1000  # crawls a partition keeps (each a changelogged record); a new one past it is rejected

    def validate(self) -> None:
        _check_ranges(self, FRONTIER_RANGES, "frontier")


FRONTIER_RANGES = {
    "job_ttl": POSITIVE_GAP,
    "fetch_timeout": Range(0, 3600, lo_open=True),
    "lease_grace": Range(0, 3600, lo_open=True),
    "max_retries": Range(0, 100, integer=True),
    "retry_give_up": Range(0, 30 * DAY),
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
    "hold_max": Range(0, 30 * DAY, lo_open=True),
    "block_max": Range(0, 365 * DAY, lo_open=True),
    "max_crawls": Range(1, 100_000, integer=True),
}


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int = 16
    max_body_bytes: int = 5 * 1024 * 1024
    user_agent: str = "kafka-crawl-frontier/0.1 (+https://example.invalid/bot)"
    max_redirects: int = 5
    # a request whose bytes the server has not acknowledged (TCP) for this long is dropped by the
    # kernel: it reaches the server within this time of leaving, or never (below the workers' 10 s
    # group session, so before its job can go to another worker: workers/api/fetch.bounded_sockets)
    unacked_timeout: float = 5.0
    block_private: bool = True  # refuse private/loopback/link-local/metadata addresses (after DNS)
    allow_networks: tuple[str, ...] = ()  # CIDRs allowed anyway, e.g. ["127.0.0.0/8"] for local tests
    metrics_port: int = 0  # Prometheus /metrics of this worker; 0 disables it
    metrics_bind: str = "127.0.0.1"
    fetcher: str = ""  # package.module:factory of a fetcher to use instead of the built-in one (docs/WORKERS.md)

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
    "unacked_timeout": Range(0, 9, lo_open=True, why="below the workers' group session (10 s)"),
    "metrics_port": PORT,
}
TOPICS_RANGES = {"partitions": Range(1, 10_000, integer=True), "replication": Range(1, 100, integer=True)}


@dataclass(frozen=True)
class UrlFrontierConfig:
    """The URLFrontier gRPC gateway (``crawl-frontier urlfrontier``, ``workers/urlfrontier``)."""

    port: int = 7071
    bind: str = "127.0.0.1"  # the address to listen on ("0.0.0.0": every interface)
    delay_requestable: float = 30.0  # a GetURLs that gives none (0): a URL handed out comes back after this
    held: int = 10_000  # URLs one gateway holds per crawl at most (handed out, or ready to be)
    get_wait: float = 1.0  # a GetURLs with nothing to send waits this long for a first URL, then ends
    # a GetURLs that sent URLs stays open up to this long, each further URL sent when its host may be
    # sent to (it ends sooner once its limits are reached): a client that fetches while it reads
    # (StormCrawler) gets a host's next URL as soon as the frontier allows it
    get_stream: float = 5.0
    query_timeout: float = 15.0  # seconds to wait for every partition's answer (else UNAVAILABLE)
    put_wait: float = 30.0  # a PutURLs stream completes once the frontier applied it, waiting up to this
    # a crawl no GetURLs asked for this long: its jobs go back to the frontier as they come (each holds
    # its host's slot, for every crawl, while it waits in the gateway)
    unasked: float = 5.0
    # who may call (docs/URLFRONTIER.md, "Security"): a bearer token in each call's metadata
    # (``authorization: Bearer TOKEN``), given here (from a secret: CRAWL__URLFRONTIER__TOKEN) or
    # as the first line of a file (a mounted Kubernetes secret); never shown in a repr or an error
    token: str = field(default="", repr=False)
    token_file: str = ""
    tls_cert: str = ""  # PEM certificate (chain) of the gateway: TLS on its port (with tls_key)
    tls_key: str = ""  # PEM private key of tls_cert
    tls_client_ca: str = ""  # PEM CA(s): every client must present a certificate they signed (mutual TLS)
    allow_clients: tuple[str, ...] = ()  # CIDRs the clients' addresses must be in (empty: any address)
    # limits no client can exceed
    max_message_bytes: int = 4 * 1024 * 1024  # a gRPC message in or out (gRPC's own default, grpc-java's too)
    max_calls: int = 1000  # calls served at once (streams included); beyond: RESOURCE_EXHAUSTED
    max_stream_age: float = 0.0  # a call lasting longer ends with DEADLINE_EXCEEDED; 0: no limit (see docs)
    keepalive: float = 60.0  # seconds between pings on a quiet connection: a client gone silently is let go
    put_window: int = 1000  # URLs of one PutURLs / PutDiscovered stream handled at once (items, not batches)
    max_crawls: int = 100  # crawls one gateway serves (a Kafka consumer each); a new one beyond: refused

    def __post_init__(self) -> None:
        if isinstance(self.allow_clients, list):  # from TOML: a list
            object.__setattr__(self, "allow_clients", tuple(self.allow_clients))

    def validate(self) -> None:
        import ipaddress

        _check_ranges(self, URLFRONTIER_RANGES, "urlfrontier")
        if not isinstance(self.allow_clients, tuple) or not all(isinstance(n, str) for n in self.allow_clients):
            raise ConfigError("urlfrontier.allow_clients: expected a list of CIDR strings")
        for net in self.allow_clients:
            try:
                ipaddress.ip_network(net.strip(), strict=False)
            except ValueError:
                raise ConfigError(f"urlfrontier.allow_clients: {net[:100]!r} is not an IP network (CIDR)") from None
        if self.token and self.token_file:
            raise ConfigError("urlfrontier.token and urlfrontier.token_file are both set: give one")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("urlfrontier.tls_cert and urlfrontier.tls_key go together: set both or neither")
        if self.tls_client_ca and not self.tls_cert:
            raise ConfigError("urlfrontier.tls_client_ca needs TLS: set urlfrontier.tls_cert and tls_key too")


URLFRONTIER_RANGES = {
    "port": PORT,
    "delay_requestable": Range(0, DAY, lo_open=True),
    "held": Range(1, 1_000_000, integer=True),
    "get_wait": Range(0, 60),
    "get_stream": Range(0, 600),
    "query_timeout": Range(0, 600, lo_open=True),
    "put_wait": Range(0, 3600),
    "unasked": Range(0, 3600, lo_open=True),
    "max_message_bytes": Range(64 * 1024, 64 * 1024 * 1024, integer=True),
    "max_calls": Range(1, 100_000, integer=True),
    "max_stream_age": Range(0, 30 * DAY),
    "keepalive": Range(0, DAY),
    "put_window": Range(1, 100_000, integer=True),
    "max_crawls": Range(1, 1000, integer=True, why="a Kafka consumer each"),
}


@dataclass(frozen=True)
class Config:
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    topics: Topics = field(default_factory=Topics)
    frontier: FrontierConfig = field(default_factory=FrontierConfig)
    throttle: ThrottleConfig = field(default_factory=ThrottleConfig)
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    urlfrontier: UrlFrontierConfig = field(default_factory=UrlFrontierConfig)

    def with_bootstrap(self, bootstrap: str) -> Config:
        return replace(self, kafka=replace(self.kafka, bootstrap=bootstrap))

    def validate(self) -> None:
        """Check every section (from_dict does; so does load after the environment overrides)."""
        _check_ranges(self.topics, TOPICS_RANGES, "topics")
        self.frontier.validate()
        self.worker.validate()
        self.urlfrontier.validate()
        self.throttle.default.validate("throttle")
        for name, scope in self.throttle.scopes.items():
            scope.validate(f"throttle.scopes.{name!r}")

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

from frontier.config.loading import (
    ENV_PREFIX,
    _jitter,
    _nested,
    _number,
    _scope,
    _section,
    apply_env,
    from_dict,
    load,
    merge_env,
)
from frontier.config.ranges import (
    CONCURRENCY,
    DAY,
    GAP,
    JITTER_MAX,
    MONTH,
    PORT,
    POSITIVE_GAP,
    WINDOW,
    ConfigError,
    Range,
    _check_ranges,
    _num,
)
from frontier.config.settings import (
    AUTOTHROTTLE_RANGES,
    BACKOFF_CODES,
    BACKOFF_RANGES,
    FRONTIER_RANGES,
    PROFILES,
    RAMPUP_RANGES,
    SCOPE_RANGES,
    TOPICS_RANGES,
    WORKER_RANGES,
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

__all__ = [
    "AUTOTHROTTLE_RANGES",
    "BACKOFF_CODES",
    "BACKOFF_RANGES",
    "CONCURRENCY",
    "DAY",
    "ENV_PREFIX",
    "FRONTIER_RANGES",
    "GAP",
    "JITTER_MAX",
    "MONTH",
    "PORT",
    "POSITIVE_GAP",
    "PROFILES",
    "RAMPUP_RANGES",
    "SCOPE_RANGES",
    "TOPICS_RANGES",
    "WINDOW",
    "WORKER_RANGES",
    "AutoThrottleSettings",
    "BackoffSettings",
    "Config",
    "ConfigError",
    "FrontierConfig",
    "KafkaConfig",
    "RampupSettings",
    "Range",
    "ScopeSettings",
    "ThrottleConfig",
    "UrlFrontierConfig",
    "WorkerConfig",
    "_check_ranges",
    "_jitter",
    "_nested",
    "_num",
    "_number",
    "_scope",
    "_section",
    "apply_env",
    "from_dict",
    "load",
    "merge_env",
]

"""Configuration is validated at load with messages that name the key."""

import re
from pathlib import Path

import pytest

from frontier.config import ConfigError, from_dict, load


def test_defaults_and_scopes_inherit_from_throttle_defaults() -> None:
    cfg = from_dict({"throttle": {"delay": 2.0, "scopes": {"a.test": {"concurrency": 3}}}})
    assert cfg.throttle.for_scope("a.test").delay == 2.0
    assert cfg.throttle.for_scope("a.test").concurrency == 3
    assert cfg.throttle.for_scope("other.test").concurrency == 1


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"throttle": {"delay": -1}}, "throttle.delay"),
        ({"throttle": {"concurrency": 0}}, "throttle.concurrency"),
        ({"throttle": {"scopes": {"a.test": {"concurrency": 0}}}}, "throttle.scopes.'a.test'.concurrency"),
        ({"throttle": {"scopes": {"a.test": {"speed": 1}}}}, "unknown key(s) speed"),
        ({"throttle": {"delay": "fast"}}, "throttle.delay"),
        ({"topics": {"partitions": 0}}, "topics.partitions"),
        ({"frontier": {"job_ttl": 0}}, "frontier.job_ttl"),
        ({"worker": {"concurrency": 0}}, "worker.concurrency"),
        ({"nonsense": {}}, "unknown section(s): nonsense"),
    ],
)
def test_invalid_config_names_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        from_dict(data)
    assert message in str(exc.value)


def test_env_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[kafka]\nbootstrap = "h:1"\n')
    cfg = load(path, env={"CRAWL_KAFKA_BOOTSTRAP": "h:2", "CRAWL_TOPIC_PREFIX": "x.", "CRAWL_PARTITIONS": "3"})
    assert (cfg.kafka.bootstrap, cfg.topics.prefix, cfg.topics.partitions) == ("h:2", "x.", 3)


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[throttle\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load(bad, env={})
    with pytest.raises(ConfigError, match="not found"):
        load(tmp_path / "missing.toml", env={})


def test_nested_scope_settings_and_shorthands() -> None:
    cfg = from_dict({"throttle": {"jitter": 0.1, "scopes": {"api": {
        "rampup": {"window": 10, "target": [1, 3]}, "backoff": {"factor": 3, "codes": [429]},
        "autothrottle": False, "quota": 500, "window": 3600, "spread": True}}}})  # fmt: skip
    api = cfg.throttle.for_scope("api")
    assert api.rampup.enabled and api.rampup.target == (1, 3) and api.rampup.window == 10
    assert api.backoff.factor == 3 and api.backoff.codes == (429,)
    assert not api.autothrottle.enabled and api.quota == 500 and api.spread
    assert api.jitter == (-0.1, 0.1)  # inherited from [throttle]
    assert from_dict({"throttle": {"rampup": True}}).throttle.default.rampup.enabled


@pytest.mark.parametrize(
    ("scope", "message"),
    [
        ({"autothrottle": {"target_concurrency": 0}}, "autothrottle.target_concurrency"),
        ({"jitter": 1.5}, "jitter"),
        ({"jitter": [0.3, 0.1]}, "jitter"),
        ({"backoff": {"factor": 0.5}}, "backoff"),
        ({"backoff": {"speed": 1}}, "unknown key(s) speed"),
        ({"rampup": {"min_delay": 0}}, "rampup"),
        ({"rampup": {"target": "one"}}, "rampup.target"),
        ({"quota": -1}, "quota"),
        ({"ignore_robots_txt": "yes"}, "ignore_robots_txt"),
        ({"concurrency": 1.5}, "concurrency"),
    ],
)
def test_invalid_scope_settings_name_the_key(scope: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        from_dict({"throttle": {"scopes": {"api": scope}}})
    assert message in str(exc.value) and "'api'" in str(exc.value)


def test_worker_allow_networks() -> None:
    assert from_dict({"worker": {"allow_networks": ["127.0.0.0/8"]}}).worker.allow_networks == ("127.0.0.0/8",)
    with pytest.raises(ConfigError, match=r"worker\.allow_networks: 'nope'"):
        from_dict({"worker": {"allow_networks": ["nope"]}})


def test_any_key_can_be_set_from_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[frontier]\nweb_port = 1\n[throttle]\ndelay = 2.0\n[worker]\nallow_networks = ["10.0.0.0/8"]\n')
    env = {
        "CRAWL__FRONTIER__WEB_PORT": "8080",
        "CRAWL__FRONTIER__WEB_BIND": "0.0.0.0",
        "CRAWL__THROTTLE__AUTOTHROTTLE__START_DELAY": "0.5",
        "CRAWL__KAFKA__EXTRA__SASL_PASSWORD": "s3cret",
        "CRAWL__WORKER__ALLOW_NETWORKS": '["127.0.0.0/8"]',
        "CRAWL__FRONTIER__ROBOTS_OBEY": "false",
        "UNRELATED": "x",
    }
    cfg = load(path, env)
    assert (cfg.frontier.web_port, cfg.frontier.web_bind, cfg.frontier.robots_obey) == (8080, "0.0.0.0", False)
    assert cfg.throttle.default.delay == 2.0 and cfg.throttle.default.autothrottle.start_delay == 0.5
    assert cfg.kafka.extra["sasl.password"] == "s3cret"
    assert cfg.worker.allow_networks == ("127.0.0.0/8",)
    with pytest.raises(ConfigError, match=r"frontier\.web_port"):
        load(path, {"CRAWL__FRONTIER__WEB_PORT": "eighty"})
    with pytest.raises(ConfigError, match="nonsense"):
        load(path, {"CRAWL__FRONTIER__NONSENSE": "1"})


def test_every_key_is_documented() -> None:
    """docs/CONFIGURATION.md names every key the loader accepts."""
    doc = (Path(__file__).parent.parent / "docs" / "CONFIGURATION.md").read_text()
    missing = [key for key in all_keys() if f"`{key}`" not in doc]
    assert not missing, missing


def all_keys() -> list[str]:
    from dataclasses import fields, is_dataclass

    from frontier.config import Config, ScopeSettings

    keys: list[str] = []

    def walk(cls: type, prefix: str) -> None:
        for f in fields(cls):
            default = getattr(cls(), f.name)
            if is_dataclass(default) and not isinstance(default, type):
                walk(type(default), f"{prefix}{f.name}.")
            elif f.name not in ("default", "scopes", "extra"):
                keys.append(f"{prefix}{f.name}")

    for section in ("kafka", "topics", "frontier", "worker"):
        walk(type(getattr(Config(), section)), f"{section}.")
    walk(ScopeSettings, "throttle.")
    return [*keys, "kafka.extra", "throttle.scopes"]


def numeric_keys() -> list[tuple[str, type]]:
    """Every numeric key the loader accepts, with its type (int or float)."""
    from frontier.config import Config, ScopeSettings

    out: list[tuple[str, type]] = []
    for key in all_keys():
        if key in ("kafka.extra", "throttle.scopes"):
            continue
        section, *path = key.split(".")
        node: object = ScopeSettings() if section == "throttle" else getattr(Config(), section)
        for part in path:
            node = getattr(node, part)
        if isinstance(node, int | float) and not isinstance(node, bool):
            out.append((key, type(node)))
    return out


def nested(key: str, value: object) -> dict[str, object]:
    """``{"a": {"b": value}}`` for ``"a.b"``."""
    data: dict[str, object] = {}
    node = data
    *path, last = key.split(".")
    for part in path:
        child: dict[str, object] = {}
        node[part] = child
        node = child
    node[last] = value
    return data


def test_every_numeric_key_has_a_range() -> None:
    from dataclasses import fields

    from frontier import config as c
    from topics.catalog import Topics

    ranges: dict[type, dict[str, c.Range]] = {
        c.ScopeSettings: c.SCOPE_RANGES, c.AutoThrottleSettings: c.AUTOTHROTTLE_RANGES,
        c.BackoffSettings: c.BACKOFF_RANGES, c.RampupSettings: c.RAMPUP_RANGES,
        c.FrontierConfig: c.FRONTIER_RANGES, c.WorkerConfig: c.WORKER_RANGES, Topics: c.TOPICS_RANGES,
    }  # fmt: skip
    for cls, table in ranges.items():
        numeric = {f.name for f in fields(cls) if type(getattr(cls(), f.name)) in (int, float)}
        assert numeric == set(table), cls.__name__
    assert len(numeric_keys()) >= 30  # the walk numeric_keys() does finds them all


@pytest.mark.parametrize(("key", "kind"), numeric_keys())
def test_no_numeric_key_takes_nan_or_infinity(key: str, kind: type) -> None:
    """NaN compared false with every bound: throttle.delay = nan loaded and sent jobs at once."""
    for bad in (float("nan"), float("inf"), float("-inf"), 1e300, -1e300):
        with pytest.raises(ConfigError) as exc:
            from_dict(nested(key, bad))
        assert str(exc.value).startswith(f"{key}: "), (bad, str(exc.value))
    if kind is float:
        with pytest.raises(ConfigError, match=rf"^{re.escape(key)}: must be a finite number .*got nan$"):
            from_dict(nested(key, float("nan")))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("throttle.delay", float("nan"), "throttle.delay: must be a finite number >= 0 and <= 86400, got nan"),
        ("throttle.delay", 90000.0, "throttle.delay: must be a finite number >= 0"),
        ("throttle.window", float("inf"), "throttle.window: must be a finite number > 0"),
        ("throttle.gate_max", 0, "throttle.gate_max: must be a finite number > 0"),
        ("throttle.robots_max_delay", -1, "throttle.robots_max_delay: must be a finite number >= 0"),
        ("throttle.quota", float("inf"), "throttle.quota"),
        ("throttle.concurrency", 5000, "throttle.concurrency: must be an integer >= 1 and <= 1000"),
        ("throttle.jitter", [0.0, float("inf")], "throttle.jitter"),
        ("throttle.jitter", [float("nan"), 0.1], "throttle.jitter"),
        ("throttle.jitter", float("nan"), "throttle.jitter"),
        ("throttle.autothrottle.start_delay", -1, "throttle.autothrottle.start_delay"),
        ("throttle.autothrottle.max_delay", 0, "throttle.autothrottle.max_delay"),
        ("throttle.autothrottle.target_concurrency", float("nan"), "throttle.autothrottle.target_concurrency"),
        ("throttle.backoff.window", float("inf"), "throttle.backoff.window"),
        ("throttle.backoff.factor", 1e9, "throttle.backoff.factor"),
        ("throttle.backoff.min_delay", float("nan"), "throttle.backoff.min_delay"),
        ("throttle.backoff.max_delay", 0.1, "throttle.backoff.max_delay: must be >= backoff.min_delay"),
        ("throttle.backoff.trouble_max", 0, "throttle.backoff.trouble_max"),
        ("throttle.backoff.codes", [42], "throttle.backoff.codes"),
        ("throttle.backoff.codes", [True], "throttle.backoff.codes"),
        ("throttle.rampup.window", float("inf"), "throttle.rampup.window"),
        ("throttle.rampup.min_delay", float("nan"), "throttle.rampup.min_delay"),
        ("throttle.rampup.max_concurrency", 0, "throttle.rampup.max_concurrency"),
        ("throttle.rampup.target", [-1, 2], "throttle.rampup.target"),
        ("frontier.robots_ttl", -1.0, "frontier.robots_ttl: must be a finite number > 0"),
        ("frontier.robots_ttl", float("inf"), "frontier.robots_ttl"),
        ("frontier.dispatch_lead", -0.5, "frontier.dispatch_lead: must be a finite number >= 0"),
        ("frontier.dispatch_lead", float("nan"), "frontier.dispatch_lead"),
        ("frontier.robots_retry", 0, "frontier.robots_retry"),
        ("frontier.status_interval", float("nan"), "frontier.status_interval"),
        ("frontier.job_ttl", float("inf"), "frontier.job_ttl"),
        ("frontier.fetch_timeout", float("nan"), "frontier.fetch_timeout"),
        ("frontier.lease_grace", -1, "frontier.lease_grace"),
        ("frontier.max_retries", -1, "frontier.max_retries: must be an integer >= 0"),
        ("frontier.max_inflight", 0, "frontier.max_inflight"),
        ("frontier.standby_replicas", 2, "frontier.standby_replicas"),
        ("frontier.web_port", 70000, "frontier.web_port"),
        ("frontier.robots_obey", "flase", "frontier.robots_obey: expected bool"),
        ("worker.max_body_bytes", 16 * 1024 * 1024, "worker.max_body_bytes: must be an integer >= 1024 and <= "),
        ("worker.max_body_bytes", 100, "worker.max_body_bytes"),
        ("worker.max_redirects", -1, "worker.max_redirects"),
        ("worker.metrics_port", -1, "worker.metrics_port"),
        ("worker.concurrency", 0, "worker.concurrency"),
        ("topics.partitions", 0, "topics.partitions"),
        ("topics.replication", 0, "topics.replication"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_key(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        from_dict(nested(key, value))
    assert str(exc.value).startswith(message), str(exc.value)
    if key.startswith("throttle."):  # the same in a scope table, named with the scope
        inner = key.removeprefix("throttle.")
        with pytest.raises(ConfigError) as exc:
            from_dict({"throttle": {"scopes": {"api": nested(inner, value)}}})
        assert str(exc.value).startswith(f"throttle.scopes.'api'.{inner.split('.')[0]}"), str(exc.value)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CRAWL__THROTTLE__DELAY": "nan"}, "throttle.delay: must be a finite number >= 0 and <= 86400, got nan"),
        ({"CRAWL__THROTTLE__WINDOW": "inf"}, "throttle.window: must be a finite number > 0"),
        ({"CRAWL__FRONTIER__ROBOTS_TTL": "-1"}, "frontier.robots_ttl"),
        ({"CRAWL__FRONTIER__DISPATCH_LEAD": "-inf"}, "frontier.dispatch_lead"),
        ({"CRAWL__THROTTLE__AUTOTHROTTLE__START_DELAY": "nan"}, "throttle.autothrottle.start_delay"),
        ({"CRAWL__WORKER__MAX_BODY_BYTES": str(64 * 1024 * 1024)}, "worker.max_body_bytes"),
        ({"CRAWL_PARTITIONS": "0"}, "topics.partitions"),
    ],
)
def test_environment_overrides_are_checked_too(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load(None, env)
    assert str(exc.value).startswith(message), str(exc.value)


def test_the_body_cap_keeps_a_page_within_the_pages_topic() -> None:
    """A body cap above what crawl.pages takes made every large page fail to publish."""
    from topics.catalog import MAX_PAGE_BODY_BYTES, PAGES, PRODUCER_MAX_BYTES, page_record_bytes
    from topics.kafka import producer_conf

    assert PRODUCER_MAX_BYTES == producer_conf({})["message.max.bytes"]
    assert page_record_bytes(MAX_PAGE_BODY_BYTES) <= PAGES.max_message_bytes <= PRODUCER_MAX_BYTES
    assert from_dict({"worker": {"max_body_bytes": MAX_PAGE_BODY_BYTES}}).worker.max_body_bytes == MAX_PAGE_BODY_BYTES
    with pytest.raises(ConfigError, match=r"crawl\.pages"):
        from_dict({"worker": {"max_body_bytes": MAX_PAGE_BODY_BYTES + 1}})


def test_defaults_and_the_deployment_config_are_valid() -> None:
    from frontier.config import Config

    Config().validate()
    load(Path(__file__).parent.parent / "deploy" / "crawl.toml", env={}).validate()


def test_the_fast_profile_is_a_starting_point_that_keys_override() -> None:
    fast = from_dict({"throttle": {"profile": "fast"}}).throttle.default
    assert (fast.delay, fast.concurrency, fast.autothrottle.target_concurrency) == (0.0, 8, 4.0)
    tuned = from_dict({"throttle": {"profile": "fast", "concurrency": 4, "scopes": {"a.test": {"delay": 1}}}})
    assert tuned.throttle.default.concurrency == 4 and tuned.throttle.default.delay == 0.0
    assert tuned.throttle.for_scope("a.test").concurrency == 4 and tuned.throttle.for_scope("a.test").delay == 1.0
    assert from_dict({}).throttle.default == from_dict({"throttle": {"profile": "polite"}}).throttle.default
    with pytest.raises(ConfigError, match=r"throttle\.profile"):
        from_dict({"throttle": {"profile": "reckless"}})

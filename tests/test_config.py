"""Configuration is validated at load with messages that name the key."""

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

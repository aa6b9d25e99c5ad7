"""Static validation of deploy/ (no Docker or Kubernetes here): the compose file and the
manifests parse, every command is a valid ``crawl-frontier`` invocation, every configuration
(file, ConfigMap, environment variables) loads, every reference resolves, and every frontier
that serves its live page off loopback gets its token from a secret (never from the repository)
and is probed on ``/healthz``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from frontier.cli import build_parser
from frontier.config import Config, ConfigError, load, merge_env
from frontier.observability.web import OPEN_PATHS, check_exposure, is_loopback

DEPLOY = Path(__file__).parent.parent / "deploy"
REPO = DEPLOY.parent
KNOWN_KINDS = {"ConfigMap", "Job", "Service", "StatefulSet", "Deployment", "ScaledObject", "Kustomization"}
TOKEN_VAR = "CRAWL__FRONTIER__WEB_TOKEN"
SAMPLE_TOKEN = "t" * 32  # what a secret would hold, for loading the configuration here


def manifests() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in manifests() if d["kind"] == kind]


def pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in manifests()
            if d["kind"] in ("Job", "StatefulSet", "Deployment")]  # fmt: skip


def check_command(command: list[str]) -> Any:
    """A container command must be a valid crawl-frontier invocation; return the parsed args."""
    assert command[0] == "crawl-frontier", command
    return build_parser().parse_args(command[1:])


def container_env(c: dict[str, Any]) -> dict[str, str]:
    """A container's environment; a variable taken from a Secret gets a sample value. Secrets
    and tokens must come from a Secret, never as a literal value."""
    env = {}
    for e in c.get("env", []):
        if "valueFrom" in e:
            ref = e["valueFrom"]["secretKeyRef"]
            assert ref["name"] and ref["key"], e
            env[e["name"]] = SAMPLE_TOKEN
        else:
            assert not re.search(r"TOKEN|PASSWORD|SECRET", e["name"]), f"{e['name']}: a literal secret"
            env[e["name"]] = e["value"]
    return env


def k8s_config(tmp_path: Path) -> Config:
    (cm,) = [d for d in by_kind("ConfigMap") if d["metadata"]["name"] == "crawl-config"]
    path = tmp_path / "crawl.toml"
    path.write_text(cm["data"]["crawl.toml"])
    return load(path, {})


def test_every_manifest_is_well_formed_and_listed_in_the_kustomization() -> None:
    docs = manifests()
    assert {d["kind"] for d in docs} <= KNOWN_KINDS
    for d in docs:
        assert d.get("apiVersion") and (d["kind"] == "Kustomization" or d["metadata"]["name"])
    (kust,) = by_kind("Kustomization")
    files = {p.name for p in (DEPLOY / "k8s").glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == files


def test_pods_run_real_cli_commands_with_resolvable_volumes_and_ports(tmp_path: Path) -> None:
    cfg = k8s_config(tmp_path)
    configmaps = {d["metadata"]["name"] for d in by_kind("ConfigMap")}
    for name, spec in pod_specs():
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        claims = set()
        for d in manifests():
            if d["kind"] == "StatefulSet" and d["metadata"]["name"] == name:
                claims = {c["metadata"]["name"] for c in d["spec"].get("volumeClaimTemplates", [])}
        for c in spec["containers"]:
            args = check_command(c["command"])
            assert args.config == Path("/etc/crawl/crawl.toml")
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            assert mounts.get("/etc/crawl") == "config", f"{name}: the config file must be mounted"
            for mount_name in mounts.values():
                assert mount_name in volumes or mount_name in claims, f"{name}: volume {mount_name} undefined"
            for v in volumes.values():
                if "configMap" in v:
                    assert v["configMap"]["name"] in configmaps
            env = container_env(c)
            load(None, env)  # CRAWL__ variables must name real keys with valid values
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            if args.command == "frontier":
                assert ports["web"] == cfg.frontier.web_port and cfg.frontier.web_bind == "0.0.0.0"
                assert "/data" in mounts and cfg.frontier.state_dir == "/data"
                for probe in ("readinessProbe", "livenessProbe"):
                    assert c[probe]["httpGet"]["path"] == "/healthz"  # open, no data; the rest needs the token
                    assert c[probe]["httpGet"]["port"] in ports
                check_served_with_a_secret_token(tmp_path, cm_text(), env, f"k8s {name}")
            if args.command == "worker":
                assert ports["metrics"] == cfg.worker.metrics_port and cfg.worker.metrics_bind == "0.0.0.0"


def test_services_select_pods_and_autoscaling_targets_the_worker_group(tmp_path: Path) -> None:
    cfg = k8s_config(tmp_path)
    commands = {check_command(c["command"]).command for _, spec in pod_specs() for c in spec["containers"]}
    assert cfg.frontier.embedded_router or "router" in commands, "nothing would route crawl.urls"
    labels = {}
    for d in manifests():
        if d["kind"] in ("StatefulSet", "Deployment"):
            labels[d["metadata"]["name"]] = d["spec"]["template"]["metadata"]["labels"]
            assert d["spec"]["selector"]["matchLabels"].items() <= labels[d["metadata"]["name"]].items()
    for svc in by_kind("Service"):
        assert any(svc["spec"]["selector"].items() <= lab.items() for lab in labels.values()), svc["metadata"]
    (sts,) = by_kind("StatefulSet")
    assert sts["spec"]["serviceName"] in {s["metadata"]["name"] for s in by_kind("Service")}
    assert sts["spec"]["replicas"] <= cfg.topics.partitions
    (scaled,) = by_kind("ScaledObject")
    assert scaled["spec"]["scaleTargetRef"]["name"] in {d["metadata"]["name"] for d in by_kind("Deployment")}
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["metadata"]["consumerGroup"] == f"{cfg.frontier.app_id}-workers"  # the workers' group
    assert trigger["metadata"]["topic"] == cfg.topics.jobs
    assert trigger["metadata"]["bootstrapServers"] == cfg.kafka.bootstrap
    assert scaled["spec"]["maxReplicaCount"] <= cfg.topics.partitions


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    return data


def test_compose_has_three_brokers_two_frontiers_and_resolving_references() -> None:
    services = compose()["services"]
    brokers = [n for n, s in services.items() if s.get("image", "").startswith("apache/kafka")]
    assert len(brokers) == 3
    voters = services[brokers[0]]["environment"]["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert sorted(v.split("@")[1].split(":")[0] for v in voters) == sorted(brokers)
    assert sorted(services[b]["environment"]["KAFKA_NODE_ID"] for b in brokers) == [1, 2, 3]
    file_cfg = load(DEPLOY / "crawl.toml", {})
    assert sorted(h.split(":")[0] for h in file_cfg.kafka.bootstrap.split(",")) == sorted(brokers)
    assert file_cfg.topics.replication <= len(brokers)
    roles: dict[str, int] = {}
    named_volumes = set(compose()["volumes"])
    for name, s in services.items():
        for dep in s.get("depends_on", []):
            assert dep in services, f"{name} depends on unknown {dep}"
        for v in s.get("volumes", []):
            source = v.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} missing"
            else:
                assert source in named_volumes, f"{name}: volume {source} undeclared"
        if "command" in s:
            args = check_command(s["command"])
            roles[args.command] = roles.get(args.command, 0) + 1
            assert (DEPLOY / s["build"]["context"] / s["build"]["dockerfile"]).exists()
    assert roles == {"topics": 1, "frontier": 2, "router": 1, "worker": 1}
    assert not file_cfg.frontier.embedded_router  # so the router service is what routes crawl.urls
    frontier_volumes = [v for n, s in services.items() for v in s.get("volumes", []) if v.endswith(":/data")]
    assert len(set(frontier_volumes)) == 2  # one state volume per frontier instance


def test_dockerfile_copies_what_exists_and_runs_the_cli() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    for line in text.splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (REPO / source).exists(), source
    cmd = re.search(r"^CMD (\[.*\])$", text, re.M)
    assert cmd is not None
    check_command(yaml.safe_load(cmd.group(1)))


def test_the_deploy_config_file_and_env_merge(tmp_path: Path) -> None:
    raw = tomllib.loads((DEPLOY / "crawl.toml").read_text())
    merged = merge_env(raw, {"CRAWL__WORKER__CONCURRENCY": "64"})
    assert merged["worker"]["concurrency"] == 64 and raw["worker"]["concurrency"] == 32
    with pytest.raises(SystemExit):
        check_command(["crawl-frontier", "frontier", "--no-such-flag"])


def cm_text() -> str:
    (cm,) = [d for d in by_kind("ConfigMap") if d["metadata"]["name"] == "crawl-config"]
    text: str = cm["data"]["crawl.toml"]
    return text


def check_served_with_a_secret_token(tmp_path: Path, config_text: str, env: dict[str, str], where: str) -> None:
    """A frontier whose live page listens off loopback starts only with the token from ``env``
    (a secret), and the configuration file itself holds none."""
    raw = tomllib.loads(config_text)
    assert "web_token" not in raw.get("frontier", {}), f"{where}: a token in a file of the repository"
    path = tmp_path / "check.toml"
    path.write_text(config_text)
    without = load(path, {k: v for k, v in env.items() if k != TOKEN_VAR})
    if not without.frontier.web_port or is_loopback(without.frontier.web_bind):
        return
    with pytest.raises(ConfigError, match="web_token"):
        check_exposure(without.frontier)  # the refusal fires without the secret...
    assert env.get(TOKEN_VAR) == SAMPLE_TOKEN, f"{where}: {TOKEN_VAR} must come from a secret"
    check_exposure(load(path, env).frontier)  # ...and not with it


def test_exposed_frontiers_take_the_token_from_a_secret(tmp_path: Path) -> None:
    services = compose()["services"]
    frontiers = 0
    for name, s in services.items():
        if "command" not in s or check_command(s["command"]).command != "frontier":
            continue
        frontiers += 1
        env = dict(s.get("environment", {}))
        token = env.get(TOKEN_VAR, "")
        # compose substitutes ${VAR:?message} from the shell or deploy/.env, and stops without it
        assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]+\}", token), (
            f"{name}: {TOKEN_VAR} must be ${{VAR:?...}}, not {token!r}"
        )
        env[TOKEN_VAR] = SAMPLE_TOKEN
        check_served_with_a_secret_token(tmp_path, (DEPLOY / "crawl.toml").read_text(), env, f"compose {name}")
        for port in s.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name}: {port} published beyond this machine"
        probe = " ".join(s["healthcheck"]["test"])
        assert "/healthz" in probe and "/healthz" in OPEN_PATHS
    assert frontiers == 2
    assert not list(DEPLOY.glob(".env")), "deploy/.env holds the token: it must not be in the repository"
    (sts,) = by_kind("StatefulSet")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    (token,) = [e for e in container["env"] if e["name"] == TOKEN_VAR]
    assert token["valueFrom"]["secretKeyRef"] == {"name": "crawl-frontier-web", "key": "token"}
    assert not by_kind("Secret"), "the Secret is created by the operator, not kept here"
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] in OPEN_PATHS  # scraped without the token


def test_a_deploy_without_the_token_does_not_start(capsys: pytest.CaptureFixture[str]) -> None:
    from frontier.cli import main

    assert main(["--config", str(DEPLOY / "crawl.toml"), "frontier"]) == 2
    assert "frontier.web_token" in capsys.readouterr().err

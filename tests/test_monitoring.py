"""deploy/monitoring: the rules pass ``promtool check rules`` and their unit tests (``promtool test
rules``, Debian's Prometheus, fetched by deploy/monitoring/install-prometheus.sh when not
installed); every alert is documented in docs/RUNBOOK.md and unit-tested; rules and dashboard read
the project's own metrics only; the scrape configurations match the compose file and the
Kubernetes manifests; and the metrics added for them count what they say, within their bounds.

``python -m tests.test_monitoring`` writes deploy/monitoring/kubernetes/prometheusrule.yaml again
from rules.yml (after a change of the rules)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
import yaml

from frontier.config import Config, load
from frontier.core.causes import Cause
from frontier.core.kv import MemoryKV
from frontier.core.state import ScopeState
from frontier.observability.metrics import MAX_BUDGET_SCOPES, FrontierMetrics
from frontier.observability.process import memory_limit
from frontier.partition import PartitionFrontier
from frontier.partition.keys import state_key
from frontier.service.owned import _Owned
from frontier.service.service import FrontierService
from workers.api.metrics import REFUSING_RUN, REFUSING_STALE, ROBOTS_WINDOW, HostWatch, WorkerMetrics

ROOT = Path(__file__).resolve().parent.parent
MON = ROOT / "deploy" / "monitoring"
RULES = MON / "rules.yml"
DASHBOARD = MON / "grafana" / "crawl-frontier.json"
RUNBOOK = (ROOT / "docs" / "RUNBOOK.md").read_text()
METRICS_DOC = (ROOT / "docs" / "METRICS.md").read_text()
K8S = ROOT / "deploy" / "k8s"
PROMETHEUS_RULE = MON / "kubernetes" / "prometheusrule.yaml"


def prometheus_bin() -> Path:
    """The directory of Debian's ``prometheus`` and ``promtool`` (installed, or unpacked into the
    cache by the install script: a failure to get them fails the test, it is never skipped)."""
    run = subprocess.run(["bash", str(MON / "install-prometheus.sh")], capture_output=True, text=True, timeout=600,
                         check=False)  # fmt: skip
    assert run.returncode == 0, f"deploy/monitoring/install-prometheus.sh failed:\n{run.stderr[-3000:]}"
    return Path(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def promtool() -> Path:
    return prometheus_bin() / "promtool"


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def alerts() -> list[dict[str, Any]]:
    return [r for g in rule_groups() for r in g["rules"] if "alert" in r]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def runbook_sections() -> dict[str, str]:
    parts = re.split(r"^## (.+)$", RUNBOOK, flags=re.M)
    return {slug(title): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


# -- promtool -------------------------------------------------------------------------------------
def test_promtool_checks_the_rules(promtool: Path) -> None:
    run = subprocess.run([str(promtool), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60,
                         check=False)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_promtool_unit_tests_of_every_alert_pass(promtool: Path) -> None:
    tests = sorted((MON / "tests").glob("*.yml"))
    run = subprocess.run([str(promtool), "test", "rules", *map(str, tests)], capture_output=True, text=True,
                         timeout=120, check=False, cwd=MON / "tests")  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in tests:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {a["alert"] for a in alerts()}
    assert names <= fired, f"alerts never shown firing: {sorted(names - fired)}"
    assert names <= quiet, f"alerts never shown quiet: {sorted(names - quiet)}"


def test_promtool_checks_the_compose_scrape_configuration(promtool: Path) -> None:
    run = subprocess.run([str(promtool), "check", "config", str(MON / "prometheus.yml")], capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr


# -- the alerts and their runbook -----------------------------------------------------------------
def test_every_alert_has_its_annotations_and_a_runbook_section() -> None:
    sections = runbook_sections()
    assert alerts()
    for alert in alerts():
        name = alert["alert"]
        notes = alert["annotations"]
        assert notes.keys() >= {"summary", "description", "runbook_url"}, name
        assert alert["labels"]["severity"] in ("critical", "warning"), name
        path, _, anchor = notes["runbook_url"].partition("#")
        assert path == "docs/RUNBOOK.md" and anchor == slug(name), notes["runbook_url"]
        body = sections.get(anchor)
        assert body is not None, f"docs/RUNBOOK.md has no section {name}"
        for part in ("**Means.**", "**Confirm.**", "**Do.**", "**Threshold.**"):
            assert part in body, f"{name}: its runbook section says nothing under {part}"
        confirm = body.split("**Confirm.**")[1].split("**Do.**")[0]
        # confirmed three ways: the command line, the live page, the metric
        assert "`crawl-frontier " in confirm and "live page" in confirm, name
        assert re.search(r"`[a-z(]*(crawl_|process_)[a-z_]+", confirm), name
    assert set(sections) == {slug(a["alert"]) for a in alerts()}, "a runbook section without its alert"


def test_the_kubernetes_prometheus_rule_holds_the_same_rules() -> None:
    doc = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert doc["kind"] == "PrometheusRule"
    assert doc["spec"]["groups"] == rule_groups(), "run: .venv/bin/python -m tests.test_monitoring"


# -- the project's metrics only -------------------------------------------------------------------
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "on", "ignoring", "group_left", "group_right", "and",
    "or", "unless", "rate", "irate", "deriv", "delta", "increase", "changes", "clamp_min", "clamp_max", "absent",
    "histogram_quantile", "avg_over_time", "max_over_time", "min_over_time", "offset", "bool", "le",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names an expression reads (labels, strings, durations and functions left out)."""
    expr = re.sub(r'"[^"]*"', "", expr)  # label values
    expr = re.sub(r"\{[^}]*\}", "", expr)  # matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges, subqueries
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)  # label lists
    names = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr))
    return {n for n in names if n not in PROMQL_WORDS and not re.fullmatch(r"\d.*|e", n)}


def documented(name: str) -> bool:
    base = re.sub(r"_(bucket|sum|count)$", "", name)
    return f"`{name}`" in METRICS_DOC or f"`{base}`" in METRICS_DOC


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def dashboard_queries() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dashboard()["panels"] for t in p.get("targets", [])]


def test_rules_and_panels_read_documented_project_metrics_only() -> None:
    recorded = {r["record"] for g in rule_groups() for r in g["rules"] if "record" in r}
    exprs = [(r.get("alert") or r["record"], r["expr"]) for g in rule_groups() for r in g["rules"]]
    for where, expr in exprs + dashboard_queries():
        for name in metric_names(expr):
            if name in recorded:
                continue
            assert name.startswith(("crawl_frontier_", "crawl_worker_", "crawl_process_", "process_")), (where, name)
            assert documented(name), f"{where}: {name} is not in docs/METRICS.md"
    assert metric_names('sum by (crawl) (rate(x_total{a="b"}[5m])) / on (c) y') == {"x_total", "y"}


def test_the_dashboard_has_a_row_per_question_and_the_crawl_and_scope_variables() -> None:
    d = dashboard()
    rows = [p["title"] for p in d["panels"] if p["type"] == "row"]
    for words in ("partition unserved", "refusing", "keeping up", "budget", "stall", "memory"):
        assert any(words in r for r in rows), (words, rows)
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["crawl"]["query"]["query"] == "label_values(crawl_frontier_crawl_urls, crawl)"
    assert variables["crawl"]["includeAll"] and variables["crawl"]["allValue"] == ".*"
    assert variables["scope"]["type"] == "textbox"  # no metric names a scope: it links the live page
    assert any("?scope=${scope}" in p.get("options", {}).get("content", "") for p in d["panels"])
    queries = dashboard_queries()
    assert len(queries) >= 25
    assert all('crawl=~"$crawl"' in e for t, e in queries if "by crawl" in t), "a per-crawl panel ignores $crawl"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in d["panels"]:
        if p["type"] not in ("row", "text"):
            assert p["targets"] and p["datasource"]["uid"] == "${datasource}", p["title"]


# -- the scrape configurations --------------------------------------------------------------------
def manifests() -> list[dict[str, Any]]:
    return [d for path in sorted(K8S.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]


def pod_templates() -> dict[str, dict[str, Any]]:
    """Pod templates by their app.kubernetes.io/name label."""
    return {d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]: d["spec"]["template"]
            for d in manifests() if d["kind"] in ("StatefulSet", "Deployment")}  # fmt: skip


def test_the_kubernetes_scrape_configuration_keeps_the_annotated_pods() -> None:
    config = yaml.safe_load((MON / "prometheus-kubernetes.yml").read_text())
    pods = pod_templates()
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == {"crawl-frontier", "crawl-worker"}
    assert config["rule_files"] == ["rules.yml"]
    for job, scrape in jobs.items():
        (sd,) = scrape["kubernetes_sd_configs"]
        assert sd["role"] == "pod"
        relabel = {r["source_labels"][0]: r for r in scrape["relabel_configs"]}
        name = relabel["__meta_kubernetes_pod_label_app_kubernetes_io_name"]
        assert name["action"] == "keep" and name["regex"] == job
        pod = pods[job]
        notes = pod["metadata"]["annotations"]
        assert re.fullmatch(relabel["__meta_kubernetes_pod_annotation_prometheus_io_scrape"]["regex"],
                            notes["prometheus.io/scrape"])  # fmt: skip
        ports = {p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        assert int(notes["prometheus.io/port"]) in ports, job
        assert notes["prometheus.io/path"] == "/metrics"
    monitors = [d for d in yaml.safe_load_all((MON / "kubernetes" / "podmonitor.yaml").read_text()) if d]
    for monitor in monitors:
        job = monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        names = {p["name"] for c in pods[job]["spec"]["containers"] for p in c.get("ports", [])}
        assert endpoint["port"] in names and endpoint["path"] == "/metrics", job
    kust = yaml.safe_load((MON / "kubernetes" / "kustomization.yaml").read_text())
    assert set(kust["resources"]) == {"podmonitor.yaml", "prometheusrule.yaml"}


def test_the_compose_stack_runs_prometheus_on_these_files() -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())["services"]
    cfg = load(ROOT / "deploy" / "crawl.toml", {})
    config = yaml.safe_load((MON / "prometheus.yml").read_text())
    assert "./monitoring:/etc/prometheus:ro" in compose["prometheus"]["volumes"]
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["alertmanager:9093"]
    assert any(v.startswith("./monitoring/alertmanager.yml:") for v in compose["alertmanager"]["volumes"])
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    frontiers = {n for n, s in compose.items() if s.get("command", [None, None, None, None])[-1:] == ["frontier"]}
    (static,) = jobs["crawl-frontier"]["static_configs"]
    assert set(static["targets"]) == {f"{n}:{cfg.frontier.web_port}" for n in frontiers}
    (dns,) = jobs["crawl-worker"]["dns_sd_configs"]
    assert dns["names"] == ["worker"] and "worker" in compose and dns["port"] == cfg.worker.metrics_port
    for service in ("prometheus", "alertmanager", "grafana"):
        assert all(p.startswith("127.0.0.1:") for p in compose[service]["ports"]), service
    grafana = compose["grafana"]["volumes"]
    assert "./monitoring/grafana:/var/lib/grafana/dashboards:ro" in grafana
    provider = yaml.safe_load((MON / "grafana/provisioning/dashboards/crawl-frontier.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


# -- the metrics the alerts need ------------------------------------------------------------------
def samples(registry: Any, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for m in registry.collect() for s in m.samples
            if s.name == name}  # fmt: skip


def test_hosts_refusing_count_runs_of_refusals_by_signal() -> None:
    watch = HostWatch()
    for i in range(REFUSING_RUN - 1):
        watch.answer("a.test", "page", "limit", float(i))
    assert watch.refusing(10.0) == {"limit": 0, "outage": 0}  # not a run yet
    watch.answer("a.test", "page", "limit", 10.0)
    watch.answer("b.test", "robots", "outage", 10.0)
    for t in (11.0, 12.0, 13.0):
        watch.answer("b.test", "page", "outage", t)
        watch.answer("b.test", "page", None, t)  # half answered: still a run (refusals >= answers)
    assert watch.refusing(20.0) == {"limit": 1, "outage": 1}
    watch.answer("b.test", "page", None, 21.0)
    assert watch.refusing(21.0) == {"limit": 1, "outage": 1}  # as many answered as refused
    watch.answer("b.test", "page", None, 21.0)  # more answered than refused since it began: over
    assert watch.refusing(21.0) == {"limit": 1, "outage": 0}
    # a run no answer reached for REFUSING_STALE (its jobs went to another worker) is forgotten
    assert watch.refusing(10.0 + REFUSING_STALE) == {"limit": 0, "outage": 0}
    mixed = HostWatch()
    for t, signal in enumerate(["limit", "outage", "outage", "limit"]):
        mixed.answer("c.test", "page", signal, float(t))
    assert mixed.refusing(5.0) == {"limit": 1, "outage": 0}  # 429s at least half of them


def test_robots_hosts_by_their_latest_fetch_within_the_window() -> None:
    watch = HostWatch()
    watch.answer("a.test", "robots", "outage", 0.0)
    watch.answer("b.test", "robots", None, 1.0)
    watch.answer("c.test", "robots", "limit", 2.0)
    watch.answer("c.test", "robots", None, 3.0)  # its retry answered
    watch.answer("d.test", "page", "outage", 3.0)  # a page: not a robots.txt fetch
    assert watch.robots(10.0) == {"failing": 1, "answered": 2}
    assert watch.robots(0.5 + ROBOTS_WINDOW) == {"failing": 0, "answered": 2}


def test_host_tables_are_bounded() -> None:
    watch = HostWatch(size=100)
    for i in range(1000):
        for t in range(REFUSING_RUN):
            watch.answer(f"h{i}.test", "robots", "limit", float(i + t))
    assert watch.refusing(1100.0)["limit"] == 100  # the most recently refused
    assert sum(watch.robots(1100.0).values()) == 100


def test_worker_metrics_label_the_crawl_and_count_refusing_hosts_by_answer() -> None:
    metrics = WorkerMetrics("books")
    for _ in range(REFUSING_RUN):
        metrics.observe("page", "fetched", 429, 0.1, host="a.test")
        metrics.observe("robots", "error", 0, 0.0, host="b.test")  # no answer
        metrics.observe("page", "expired", 0, 0.0, host="c.test")  # handed back: not an answer
    metrics.lag.set(7)
    reg = metrics.registry
    assert samples(reg, "crawl_worker_refusing_hosts") == {(("signal", "limit"),): 1, (("signal", "outage"),): 1}
    assert samples(reg, "crawl_worker_robots_hosts") == {(("state", "failing"),): 1, (("state", "answered"),): 0}
    assert samples(reg, "crawl_worker_consumer_lag") == {(("crawl", "books"),): 7}
    assert samples(reg, "crawl_process_memory_limit_bytes")[()] > 0
    assert samples(reg, "process_resident_memory_bytes")[()] > 0


def test_memory_limit_is_the_lowest_cgroup_limit_else_the_machine(tmp_path: Path) -> None:
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal:       24000000 kB\nMemFree: 1 kB\n")
    (proc / "self" / "cgroup").write_text("0::/kubepods/pod1/ctr\n")
    assert memory_limit(root, proc) == 24000000 * 1024  # no cgroup files: the machine
    for path, value in (("kubepods", "max"), ("kubepods/pod1", "3000000000"), ("kubepods/pod1/ctr", "2147483648")):
        (root / path).mkdir(parents=True, exist_ok=True)
        (root / path / "memory.max").write_text(value + "\n")
    assert memory_limit(root, proc) == 2147483648
    (proc / "self" / "cgroup").write_text("4:memory:/docker/abc\n0::/\n")  # cgroup v1
    (root / "memory" / "docker" / "abc").mkdir(parents=True)
    (root / "memory" / "docker" / "abc" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # none
    (root / "memory" / "memory.limit_in_bytes").write_text("1073741824\n")
    assert memory_limit(root, proc) == 1073741824
    assert memory_limit() > 0  # this machine


def test_lost_leases_count_per_process_across_partitions_that_move() -> None:
    metrics = FrontierMetrics(lambda: {})

    def lost() -> float:
        return samples(metrics.registry, "crawl_frontier_leases_lost_total")[()]

    metrics.count_lost({0: 5, 1: 2})  # first look: their counts so far were counted where they happened
    assert lost() == 0
    metrics.count_lost({0: 8, 1: 2})
    assert lost() == 3
    metrics.count_lost({0: 8})  # partition 1 moved away...
    metrics.count_lost({0: 8, 1: 40})  # ...and came back with what another instance counted
    assert lost() == 3
    metrics.count_lost({0: 9, 1: 41})
    assert lost() == 5


@pytest.fixture
def frontier_service() -> Iterator[tuple[FrontierService, PartitionFrontier, MemoryKV, str]]:
    cfg = Config()
    cfg = replace(cfg, topics=replace(cfg.topics, partitions=4))
    svc = FrontierService(cfg, clock=lambda: 1000.0)
    scope = "books.example.com"
    p = min(svc.reporting.watch_partitions(scope) or {0})
    kv = MemoryKV()
    f = PartitionFrontier(p, kv, cfg.frontier, cfg.throttle, lambda k, v: None, user_agent="t")
    svc.partitions.owned[p] = _Owned(frontier=f, kv=kv, writer=cast(Any, None))
    yield svc, f, kv, scope


def test_budget_scopes_counted_from_their_stored_state(
    frontier_service: tuple[FrontierService, PartitionFrontier, MemoryKV, str],
) -> None:
    svc, _, kv, scope = frontier_service

    def budgets() -> dict[tuple[tuple[str, str], ...], float]:
        return samples(svc.metrics.registry, "crawl_frontier_budget_scopes")

    kv.put(state_key(scope), msgspec.json.encode(ScopeState(bud_mode=1, bud_size=10, bud_period=60)))
    assert budgets() == {(("state", "learned"),): 0, (("state", "spent"),): 0}  # no budget change seen
    svc.reporting.delay_changed(scope, 1.0, 6.0, "budget", Cause.BUDGET, 0.0)
    svc.reporting.delay_changed("other.test", 1.0, 2.0, "429", Cause.LIMIT, 0.0)  # not a budget: not followed
    assert budgets() == {(("state", "learned"),): 1, (("state", "spent"),): 1}
    kv.put(state_key(scope), msgspec.json.encode(ScopeState(bud_mode=3, bud_size=10, bud_period=60)))
    assert budgets() == {(("state", "learned"),): 1, (("state", "spent"),): 0}  # pacing
    kv.put(state_key(scope), msgspec.json.encode(ScopeState()))  # the budget was forgotten: dropped
    assert budgets() == {(("state", "learned"),): 0, (("state", "spent"),): 0}
    assert not svc.metrics.budgeted
    for i in range(MAX_BUDGET_SCOPES + 10):
        svc.metrics.note_budget(f"s{i}.test")
    assert len(svc.metrics.budgeted) == MAX_BUDGET_SCOPES
    totals = svc.reporting.metric_totals()
    assert totals["topic_partitions"] == 4 and totals["budget_learned"] == 0  # none of them here
    assert not svc.metrics.budgeted


def test_frontier_metrics_show_paused_crawls_and_every_feedback_class() -> None:
    from topics.schemas import CrawlStatus

    metrics = FrontierMetrics(lambda: {"topic_partitions": 8},
                              lambda: [CrawlStatus(crawl="a", paused=True), CrawlStatus(crawl="b")])  # fmt: skip
    reg = metrics.registry
    assert samples(reg, "crawl_frontier_crawl_paused") == {(("crawl", "a"),): 1, (("crawl", "b"),): 0}
    assert samples(reg, "crawl_frontier_topic_partitions") == {(): 8}
    assert (("class", "expired"),) in samples(reg, "crawl_frontier_feedback_total")


def write_prometheus_rule() -> None:
    """deploy/monitoring/kubernetes/prometheusrule.yaml from rules.yml (its header kept)."""
    header = PROMETHEUS_RULE.read_text().split("---\n")[0] if PROMETHEUS_RULE.exists() else ""
    doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
           "metadata": {"name": "crawl-frontier", "labels": {"app.kubernetes.io/part-of": "kafka-crawl-frontier"}},
           "spec": {"groups": rule_groups()}}  # fmt: skip
    PROMETHEUS_RULE.write_text(header + "---\n" + yaml.safe_dump(doc, sort_keys=False, width=120))


if __name__ == "__main__":
    write_prometheus_rule()

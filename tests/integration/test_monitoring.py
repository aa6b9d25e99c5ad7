"""The alert rules and the dashboard on a real Prometheus (Debian's, from
deploy/monitoring/install-prometheus.sh) scraping a real crawl: two frontier instances, two
workers and local sites on the real broker.

Prometheus scrapes and evaluates every second, with the project's rules.yml as it is but for the
alerts' ``for:`` durations, shortened in a test-time copy (minutes in the file) so that a crawl of a
few minutes can show them; expressions and their windows are unchanged. The crawl:

1. one site answers 429 to everything (its robots.txt too), one crawl (``orphan``) has URLs and no
   worker, another site is crawled normally: CrawlHostLimitStorm and CrawlNoWorker fire, no other
   alert does, every rule evaluates without error, and every panel of the dashboard returns data;
2. a second frontier instance joins whose stores cannot open (a file where each partition's RocksDB
   directory would be): the partitions the group gives it are served by no one, and
   CrawlPartitionUnserved fires (CrawlFrontierDown does not);
3. every frontier stops: CrawlFrontierDown fires.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from deploy.kafka import free_port
from frontier.client import FrontierClient
from frontier.demo.sites import Hit, Site, SiteFleet
from frontier.demo.stack import Stack, _die_with_parent, wait_until
from frontier.service.restore import db_path

ROOT = Path(__file__).resolve().parent.parent.parent
MON = ROOT / "deploy" / "monitoring"
TEST_FOR = "4s"  # every alert's `for:` in the test-time copy of the rules
FIRST_OCTET = 240  # the sites: 127.0.0.240 (refuses), .241 (the default crawl's), .242 (orphan's)


class Sites(SiteFleet):
    """The first site answers 429 (no Retry-After) to every request; the others serve pages."""

    async def respond(self, site: Site, request: web.Request, hit: Hit) -> web.Response:
        if site is self.sites[0]:
            return web.Response(status=429, text="too many requests")
        return await super().respond(site, request, hit)


def prometheus_bin() -> Path:
    run = subprocess.run(["bash", str(MON / "install-prometheus.sh")], capture_output=True, text=True, timeout=600,
                         check=False)  # fmt: skip
    assert run.returncode == 0, f"deploy/monitoring/install-prometheus.sh failed:\n{run.stderr[-3000:]}"
    return Path(run.stdout.strip().splitlines()[-1])


def rules_for_test(path: Path) -> None:
    """rules.yml with every alert's ``for:`` set to TEST_FOR (nothing else changed)."""
    rules = yaml.safe_load((MON / "rules.yml").read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if "alert" in rule:
                rule["for"] = TEST_FOR
    path.write_text(yaml.safe_dump(rules, sort_keys=False))


class Prometheus:
    def __init__(self, workdir: Path, frontiers: list[int], workers: list[int]) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        rules_for_test(workdir / "rules.yml")
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
            "rule_files": ["rules.yml"],
            "scrape_configs": [
                {"job_name": "crawl-frontier", "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in frontiers]}]},
                {"job_name": "crawl-worker", "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in workers]}]},
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "prometheus.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [str(prometheus_bin() / "prometheus"), f"--config.file={workdir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                 "--storage.tsdb.retention.time=1h"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
            )  # fmt: skip
        wait_until(self.ready, 60, 0.2, what="Prometheus ready")

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]

    def alerts(self, state: str = "firing") -> set[tuple[str, str]]:
        """(alert name, its crawl or signal) of the alerts in ``state``."""
        return {(a["labels"]["alertname"], a["labels"].get("crawl") or a["labels"].get("signal") or "")
                for a in self.api("alerts")["alerts"] if a["state"] == state}  # fmt: skip

    def query(self, expr: str) -> list[Any]:
        result: list[Any] = self.api("query", query=expr)["result"]
        return result

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def sites() -> Iterator[Sites]:
    fleet = Sites(3, pages=8, latency=0.01, first_octet=FIRST_OCTET).start()
    yield fleet
    fleet.stop()


def dashboard_queries() -> list[tuple[str, str]]:
    """Each panel's queries, with the dashboard's crawl variable at "All"."""
    data = json.loads((MON / "grafana" / "crawl-frontier.json").read_text())
    return [(p["title"], t["expr"].replace("$crawl", ".*")) for p in data["panels"] for t in p.get("targets", [])]


def test_alerts_fire_on_a_real_prometheus_and_every_panel_has_data(
    bootstrap: str, tmp_path: Path, sites: Sites
) -> None:
    web_a, web_b, wm1, wm2 = free_port(), free_port(), free_port(), free_port()
    stack = Stack(bootstrap, tmp_path / "stack", partitions=4,
                  throttle={"delay": 0.5, "autothrottle": {"enabled": False}},
                  frontier={"web_port": web_a, "status_interval": 0.5})  # fmt: skip
    # (the usual site's 8 URLs, 0.5 s apart, complete over seconds: Prometheus sees the crawl
    # progress, so CrawlStalled must stay quiet while the refusing host's URLs stay queued)
    refusing, site, orphan_site = sites.sites
    prometheus: Prometheus | None = None
    started = time.monotonic()
    try:
        stack.create_topics()
        stack.start_frontier("frontier-a", own_state=True)
        for name, port in (("w1", wm1), ("w2", wm2)):
            stack._spawn(name, "worker", "--concurrency", "4", env={"CRAWL__WORKER__METRICS_PORT": str(port)})
        prometheus = Prometheus(tmp_path / "prometheus", frontiers=[web_a, web_b], workers=[wm1, wm2])
        wait_until(lambda: len(prometheus.query('crawl_frontier_partitions{job="crawl-frontier"} == 4')) == 1,
                   90, 0.5, what="frontier a serving all 4 partitions, scraped")  # fmt: skip
        wait_until(lambda: len(prometheus.query("crawl_worker_consumer_lag")) == 2, 60, 0.5, what="both workers")

        # 1. a site refusing everything, a crawl with no worker, a site crawled as usual
        with FrontierClient(stack.config_path) as client:
            client.submit([site.url(sites.port, "/")] + [site.url(sites.port, f"/page/{i}") for i in range(1, 8)])
            client.submit([refusing.url(sites.port, f"/page/{i}") for i in range(1, 4)])
        with FrontierClient(stack.config_path, crawl="orphan") as client:
            client.submit([orphan_site.url(sites.port, f"/page/{i}") for i in range(1, 4)])
        expected = {("CrawlHostLimitStorm", "limit"), ("CrawlNoWorker", "orphan")}
        wait_until(lambda: stack.check_alive() or expected <= prometheus.alerts(), 120, 0.5,
                   what=f"{sorted(expected)} firing")  # fmt: skip
        fired = time.monotonic()
        wait_until(lambda: len({h.path for h in site.hits if h.path.startswith("/page/")}) == 7, 60, 0.5,
                   what="the usual site's pages")  # fmt: skip
        assert not orphan_site.hits, "the orphan crawl's URLs went to another crawl's workers"
        # the others do not fire, evaluation after evaluation
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            assert prometheus.alerts() == expected, (prometheus.alerts(), prometheus.alerts("pending"))
            time.sleep(0.5)
        for group in prometheus.api("rules")["groups"]:
            for rule in group["rules"]:
                assert rule["health"] == "ok", rule
        # every panel of the dashboard has data from this Prometheus
        queries = dashboard_queries()

        def empty() -> list[str]:
            return [f"{title}: {expr}" for title, expr in queries if not prometheus.query(expr)]

        wait_until(lambda: not empty(), 30, 0.5, what="data for every panel")
        phase1 = time.monotonic() - started

        # 2. a second instance whose stores cannot open: the partitions it is given are not served
        state_b = stack.workdir / "state-frontier-b"
        for p in range(stack.partitions):
            path = db_path(state_b, stack.app_id, p)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("not a RocksDB directory")
        env = {"CRAWL_FRONTIER_STATE_DIR": str(state_b), "CRAWL__FRONTIER__WEB_PORT": str(web_b)}
        stack._spawn("frontier-b", "frontier", "--loglevel", "info", env=env)
        wait_until(lambda: ("CrawlPartitionUnserved", "") in prometheus.alerts(), 90, 0.5,
                   what="CrawlPartitionUnserved firing")  # fmt: skip
        assert ("CrawlFrontierDown", "") not in prometheus.alerts()
        assert "not served" in stack.log("frontier-b"), stack.log("frontier-b")[-3000:]

        # 3. no frontier at all
        stack.stop("frontier-b")
        stack.stop("frontier-a")
        wait_until(lambda: ("CrawlFrontierDown", "") in prometheus.alerts(), 60, 0.5, what="CrawlFrontierDown firing")
        print(
            f"alerts fired {fired - started:.0f} s after the start; phase 1 {phase1:.0f} s, "
            f"all {time.monotonic() - started:.0f} s"
        )
    except BaseException:
        if prometheus is not None:
            print(prometheus.log()[-3000:])
        for name in ("frontier-a", "frontier-b", "w1", "w2"):
            print(f"== {name}\n{stack.log(name)[-2000:]}")
        raise
    finally:
        stack.stop_all()
        if prometheus is not None:
            prometheus.stop()

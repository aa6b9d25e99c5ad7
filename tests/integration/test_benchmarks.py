"""The benchmark programs still run (tiny --smoke sizes, against the session broker) and print
their figures. Speed is not asserted here: figures live in docs/BENCHMARKS.md."""

import json
import subprocess
import sys

import pytest

TIMEOUT = {"versus_scrapy_spider": 600}  # three crawls of their own, Scrapy processes started each time


@pytest.mark.parametrize(
    "bench",
    ["kafka_ceiling", "ingest", "dispatch", "crawls", "memory", "scaleout", "versus_scrapy", "versus_scrapy_spider",
     "floors", "revisits"],
)  # fmt: skip
def test_benchmark_runs(bootstrap: str, bench: str) -> None:
    run = subprocess.run([sys.executable, "-m", f"tests.bench.{bench}", "--smoke", "--bootstrap", bootstrap],
                         capture_output=True, text=True, timeout=TIMEOUT.get(bench, 300), check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    figures = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert figures and all(f["bench"].startswith(bench) for f in figures)
    numbers = [v for f in figures for v in f.values() if isinstance(v, int | float)]
    assert numbers and all(v >= 0 for v in numbers)
    if bench == "crawls":  # every job on its own crawl's topic, every URL answered, the status right
        assert all(f["wrong_crawl_items"] == f["wrong_crawl_urls"] == f["missing"] == f["on_default_topic"] == 0
                   and not f["status_mismatch"] for f in figures), figures  # fmt: skip
    if bench == "floors":  # gaps under the Crawl-delay, as the sites saw them
        assert all(f["under_crawl_delay"] == 0 and f["requests"] > 0 for f in figures), figures
    if bench == "revisits":  # both schedules on both kinds of site, every page fetched, judged by the site
        runs = [f for f in figures if f["bench"] == "revisits"]
        assert sorted((f["validators"], f["schedule"]) for f in runs) == [
            (False, "adaptive"), (False, "fixed"), (True, "adaptive"), (True, "fixed")], runs  # fmt: skip
        assert all(f["requests"] >= f["pages"] > 0 for f in runs), runs
    if bench == "versus_scrapy":  # politeness is not a speed figure: the sites' own logs must be clean
        ours = [f for f in figures if f["bench"] == bench and f["crawler"].startswith("kafka-crawl-frontier")]
        assert ours and all(f["gate_violations"] == 0 and f["disallowed_fetched"] == 0 for f in ours)
        assert all(f["pages_200"] == f["sites"] * f["pages_per_site"] for f in ours)
        kinds = [f for f in figures if f["bench"] == "versus_scrapy_kinds" and f["crawler"].startswith("kafka")]
        assert len(kinds) == 9, kinds  # every kind of site, judged by its own log
        assert all(f["inside_windows"] == 0 and f["under_crawl_delay"] == 0 and f["disallowed_fetched"] == 0
                   for f in kinds), kinds  # fmt: skip
    if bench == "versus_scrapy_spider":  # the same spider plain and on the frontier, judged by the sites
        totals = [f for f in figures if f.get("kind") == "total"]
        assert [f["run"] for f in totals] == ["scrapy", "frontier-1", "frontier-3"], totals
        for f in totals:  # each run to completion: the spiders closed by themselves, every book an item
            said = json.dumps(f, sort_keys=True)  # whole (pytest would shorten the dict)
            assert f["all_exited"] and f["exit_codes"] == [0] * f["processes"], said
            assert f["finish_reasons"] == ["finished"] * f["processes"], said
            assert f["items_expected"] > 0 and f["items_missing"] == f["items_unexpected"] == 0, said
        assert totals[0]["addon_log_lines"] == 0 and all(f["addon_log_lines"] > 0 for f in totals[1:]), totals
        ours = [f for f in figures if f["bench"] == bench and f["run"].startswith("frontier")]
        assert len(ours) == 2 * 10, ours  # 9 kinds and a total, per run
        assert all(f["gate_violations"] == 0 and f["disallowed_fetched"] == 0 and f["under_crawl_delay"] == 0
                   for f in ours), ours  # fmt: skip

"""Metric names and labels: documented, bounded, classified."""

from pathlib import Path

from frontier.core.causes import CAUSES, Cause
from frontier.observability.metrics import FrontierMetrics
from frontier.observability.process import FETCH_CLASSES, fetch_class
from workers.api.metrics import WorkerMetrics

DOC = (Path(__file__).parent.parent / "docs" / "METRICS.md").read_text()


def test_every_metric_is_documented() -> None:
    names = set()
    for registry in (FrontierMetrics(lambda: {}).registry, WorkerMetrics().registry):
        for family in registry.collect():
            names.add(family.name + ("_total" if family.type == "counter" else ""))
    assert names and all(f"`{n}`" in DOC for n in names), sorted(n for n in names if f"`{n}`" not in DOC)


def test_label_values_are_bounded() -> None:
    assert {fetch_class(o, s) for o, s in [("fetched", 200), ("fetched", 301), ("fetched", 404), ("fetched", 429),
            ("fetched", 503), ("fetched", 999), ("error", 0), ("expired", 0)]} <= set(FETCH_CLASSES)  # fmt: skip
    assert fetch_class("fetched", 429) == "429" and fetch_class("fetched", 999) == "5xx"
    assert set(CAUSES) == {c.value for c in Cause} - {""}  # the cause label: the typed classes, nothing else
    [row] = [line for line in DOC.splitlines() if "crawl_frontier_delay_changes_total" in line]
    assert all(c in row for c in CAUSES)

"""The chart's Grafana dashboard (issue 14, point 9): rendered as a ConfigMap for the Grafana sidecar, valid
JSON, and every panel's query names only metrics Lethe exports."""

from __future__ import annotations

import json
import re

from tests.deploy.test_chart import SECRETS, render

SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created")


def exported() -> set[str]:
    """Every metric family Lethe registers, the lazy gauges included."""
    from prometheus_client import REGISTRY

    from app.platform.observability import metrics

    metrics.lazy_gauges()
    names = set()
    for collector in list(REGISTRY._collector_to_names):
        for metric in collector.describe() if hasattr(collector, "describe") else []:
            names.add(metric.name)
    return {name for name in names if name.startswith("lethe_")}


def test_the_dashboard_renders_for_the_sidecar_and_queries_only_lethes_metrics():
    docs = render({"secrets": SECRETS, "metrics": {"grafanaDashboard": {"enabled": True}}})
    (config_map,) = [
        doc for doc in docs if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-dashboard")
    ]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["lethe.json"])
    known = exported()
    titles = set()
    for panel in dashboard["panels"]:
        titles.add(panel["title"])
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = set(re.findall(r"\blethe_[a-z0-9_]+", target["expr"]))
            assert names, target["expr"]
            for name in names:
                family = next(
                    (name[: -len(s)] for s in SUFFIXES if name.endswith(s) and name[: -len(s)] in known), name
                )
                assert family in known, f"{panel['title']}: {name} is not a metric Lethe exports"
    # What the issue asks the dashboard to show
    for wanted in (
        "Deletions by path",
        "Purge",
        "backlog",
        "Delete-to-gone",
        "Cleanup",
        "Outbox",
        "API latency",
        "API answers",
    ):
        assert any(wanted.lower() in title.lower() for title in titles), wanted


def test_no_dashboard_unless_asked():
    docs = render({"secrets": SECRETS})
    assert not [doc for doc in docs if doc["metadata"]["name"].endswith("-dashboard")]

"""The chart's PrometheusRule (issue 14, point 8): rendered, checked and unit-tested with `promtool test rules`
on series this test writes: each alert fires on the series that should wake an operator and stays quiet on
healthy ones. promtool comes from Debian's `prometheus` package (.ci/run installs it)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.deploy.test_chart import SECRETS, render
from tests.support.services import service_missing

# alert -> (series that fire it, series that do not, minutes at which to evaluate)
CASES = {
    "LethePurgeBacklogOverdue": (
        {"lethe_file_purge_backlog_oldest_seconds": "90000x40"},
        # Quiet while a legal hold keeps files older than the delay (issue 27): the backlog gauges leave them
        # out (tests/integration/test_holds.py proves it), and nothing here reads lethe_files_held.
        {"lethe_file_purge_backlog_oldest_seconds": "80000x40", "lethe_files_held": "500x40"},
        20,
    ),
    "LethePurgeErrorsRising": (
        {"lethe_purge_errors_total": "0+1x60"},
        {"lethe_purge_errors_total": "5x60", "lethe_file_purge_failing": "0x60"},
        45,
    ),
    "LetheStoreThrottling": (
        # Throttled while the oldest purge waits past half the delay (86400 s by default): at risk
        {"lethe_store_throttled_total": "0+50x40", "lethe_file_purge_backlog_oldest_seconds": "50000x40"},
        # Throttled, the backlog kept short: the backoff copes; and a backlog without throttling is another alert's
        {"lethe_store_throttled_total": "0+50x40", "lethe_file_purge_backlog_oldest_seconds": "600x40"},
        25,
    ),
    "LetheScansPending": (
        {"lethe_scan_pending_oldest_seconds": "8000x60"},
        {"lethe_scan_pending_oldest_seconds": "7000x60"},
        45,
    ),
    "LetheOutboxGrowing": ({"lethe_outbox_depth": "0+10x60"}, {"lethe_outbox_depth": "500x60"}, 45),
    "LetheWebhooksBehind": (
        {"lethe_webhook_oldest_undelivered_seconds": "4000x60"},
        {"lethe_webhook_oldest_undelivered_seconds": "3000x60"},
        45,
    ),
    "LetheRestorePending": ({"lethe_restore_pending": "1x20"}, {"lethe_restore_pending": "0x20"}, 10),
    "LetheJournalBehind": (
        {"lethe_journal_oldest_pending_seconds": "120x30"},
        {"lethe_journal_oldest_pending_seconds": "0.05x30"},
        20,
    ),
    "LetheCleanupNotRunning": (
        {'lethe_cleanup_runs_total{outcome="ok"}': "3x120"},
        {'lethe_cleanup_runs_total{outcome="ok"}': "0+1x120"},
        60,
    ),
    "LetheApiErrors": (
        {
            'lethe_http_requests_total{route="/api/v1/files/<uuid:file_id>",method="GET",status="500"}': "0+10x40",
            'lethe_http_requests_total{route="/api/v1/files/<uuid:file_id>",method="GET",status="200"}': "0+10x40",
        },
        {'lethe_http_requests_total{route="/api/v1/files/<uuid:file_id>",method="GET",status="200"}': "0+10x40"},
        25,
    ),
    "LetheNotReady": (
        {'lethe_http_requests_total{route="/readyz",method="GET",status="503"}': "0+1x40"},
        {'lethe_http_requests_total{route="/readyz",method="GET",status="200"}': "0+1x40"},
        20,
    ),
}


@pytest.fixture(scope="module")
def promtool():
    found = shutil.which("promtool")
    if found is None:
        service_missing("promtool (Debian package prometheus)", "not installed; .ci/run installs it")
    return found


@pytest.fixture(scope="module")
def rules():
    docs = render({"secrets": SECRETS, "metrics": {"prometheusRule": {"enabled": True}}})
    (rule,) = [doc for doc in docs if doc["kind"] == "PrometheusRule"]
    return rule["spec"]["groups"]


def test_every_alert_the_issue_names_is_there_and_has_a_case(rules):
    alerts = {r["alert"] for group in rules for r in group["rules"]}
    assert alerts == set(CASES)


def test_the_rules_pass_promtool(promtool, rules, tmp_path):
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rules}))
    checked = subprocess.run(
        [promtool, "check", "rules", str(tmp_path / "rules.yml")], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr

    by_name = {r["alert"]: r for group in rules for r in group["rules"]}
    tests = []
    for alert, (firing, quiet, minutes) in CASES.items():
        rule = by_name[alert]
        for series, expected in (
            (firing, [{"exp_labels": rule["labels"], "exp_annotations": rule["annotations"]}]),
            (quiet, []),
        ):
            tests.append(
                {
                    "interval": "1m",
                    "input_series": [{"series": name, "values": values} for name, values in series.items()],
                    "alert_rule_test": [{"eval_time": f"{minutes}m", "alertname": alert, "exp_alerts": expected}],
                }
            )
    (tmp_path / "tests.yml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests})
    )
    result = subprocess.run(
        [promtool, "test", "rules", str(tmp_path / "tests.yml")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_throttling_alert_clears_once_the_store_takes_the_deletes_again(promtool, rules, tmp_path):
    """Throttled for 20 minutes with the backlog past half the delay, then neither: firing at 25m, quiet at 50m."""
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rules}))
    (rule,) = [r for group in rules for r in group["rules"] if r["alert"] == "LetheStoreThrottling"]
    series = {
        "lethe_store_throttled_total": "0+50x29 1450x30",
        "lethe_file_purge_backlog_oldest_seconds": "50000x29 0x30",
    }
    test = {
        "interval": "1m",
        "input_series": [{"series": name, "values": values} for name, values in series.items()],
        "alert_rule_test": [
            {
                "eval_time": "25m",
                "alertname": "LetheStoreThrottling",
                "exp_alerts": [{"exp_labels": rule["labels"], "exp_annotations": rule["annotations"]}],
            },
            {"eval_time": "50m", "alertname": "LetheStoreThrottling", "exp_alerts": []},
        ],
    }
    (tmp_path / "tests.yml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [test]})
    )
    result = subprocess.run(
        [promtool, "test", "rules", str(tmp_path / "tests.yml")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def heading_anchors(markdown: str) -> dict[str, str]:
    """GitHub's anchor of every heading, with the text of its section (to the next heading of any level)."""
    import re

    sections: dict[str, str] = {}
    parts = re.split(r"^(#{1,6} .+)$", markdown, flags=re.M)
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        title = heading.lstrip("#").strip().lower()
        anchor = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        sections[anchor] = body
    return sections


def test_every_alert_links_a_runbook_section_that_says_what_to_run(rules):
    """Each runbook_url resolves to a heading of docs/operations.md, and that section names a command."""
    from tests.deploy.test_chart import ROOT

    sections = heading_anchors((ROOT / "docs" / "operations.md").read_text())
    for group in rules:
        for rule in group["rules"]:
            url = rule["annotations"].get("runbook_url", "")
            assert url.startswith("docs/operations.md#"), (rule["alert"], url)
            anchor = url.split("#", 1)[1]
            assert anchor in sections, (rule["alert"], anchor)
            said = sections[anchor]
            assert any(
                command in said for command in ("`lethe ", "`kubectl ", "`curl ", "`SELECT ", "`echo ", "`rabbitmqctl ")
            ), (rule["alert"], said[:300])

"""The alert rules and the dashboard as Prometheus reads them: `promtool check rules`, the
rules' unit tests (`promtool test rules`), and every dashboard query parsed by promtool too.
Every metric they name is served by a running stack: tests/integration/test_metrics.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from tests.support.monitoring import (
    RULE_TESTS,
    RULES,
    dashboard_expressions,
    metric_names,
    rule_expressions,
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    # `make tools` installs Debian's prometheus package, which has promtool.
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: `make tools` installs the Debian package prometheus"
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_rules_pass_promtool_check() -> None:
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_pass_their_unit_tests() -> None:
    assert RULE_TESTS, "deploy/monitoring/tests holds the rules' unit tests"
    done = _promtool("test", "rules", *map(str, RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_the_issue_asks_for_is_there_and_unit_tested() -> None:
    alerts = set(rule_expressions())
    asked = {
        "OmniumStandbyMissing",
        "OmniumDeliveryPromiseBroken",
        "OmniumImportQueueAgeing",
        "OmniumGrpcErrors",
        "OmniumHttpErrors",
        "OmniumGatewayErrors",
        "OmniumDatabasePoolSaturated",
    }
    assert asked <= alerts
    tested = {
        case["alertname"]
        for path in RULE_TESTS
        for test in yaml.safe_load(path.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert alerts <= tested, f"alerts never seen firing in a unit test: {alerts - tested}"


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    # promtool parses a rule file's expressions: each query becomes a recording rule.
    queries = dashboard_expressions()
    rules = [{"record": f"omnium:dashboard:{i}", "expr": q} for i, q in enumerate(queries)]
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = _promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(queries)} rules found" in done.stdout


def test_the_names_read_are_our_metrics() -> None:
    names = metric_names()
    assert "omnium_db_sync_standbys" in names
    assert "omnium_delivery_promise_broken" in names
    assert "omnium_imports_queue_oldest_seconds" in names

"""The monitoring files in deploy/monitoring: the alert rules, their promtool unit tests and
the Grafana dashboard, and every metric name their expressions use."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
RULES = MONITORING / "omnium.rules.yml"
RULE_TESTS = sorted((MONITORING / "tests").glob("*.yml"))
DASHBOARD = MONITORING / "omnium-dashboard.json"

# A metric of ours: every name the services export starts so (omnium_metrics and each
# service's _metrics); `up` is Prometheus's own.
_NAME = re.compile(r"\bomnium_[a-z0-9_]+\b")


def rule_expressions() -> dict[str, str]:
    """Each alert's name and expression."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


def dashboard_expressions() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


def metric_names() -> set[str]:
    """Every omnium_* series name the rules and the dashboard read (as scraped: a counter's
    `_total`, a histogram's `_bucket`)."""
    texts = [*rule_expressions().values(), *dashboard_expressions()]
    return {name for text in texts for name in _NAME.findall(text)}

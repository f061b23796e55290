"""deploy/prometheus/alerts.yaml: well-formed, annotated, and reading only metrics the code
exports (so an alert cannot silently watch a series nobody sends); promtool's own check and
unit tests when promtool is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.ops.metric_names import (
    PROMETHEUS_OWN,
    ROOT,
    declared,
    referenced,
    registered,
)

pytestmark = pytest.mark.unit

RULES = ROOT / "deploy" / "prometheus" / "alerts.yaml"
RULE_TESTS = sorted((ROOT / "deploy" / "prometheus" / "tests").glob("*.yaml"))
PROMTOOL = shutil.which("promtool")
NO_PROMTOOL = (
    "promtool is not installed: it comes with Debian's `prometheus` package "
    "(apt-get install prometheus; .ci/run installs it where apt-get is available)"
)


def alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_the_scan_of_the_sources_sees_every_metric_the_registries_hold() -> None:
    assert registered() <= declared()


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'max by (state) (lockstep_planner_waves{state="tripped"}) > 0',
            {"lockstep_planner_waves"},
        ),
        ("time() - a_seconds > 900", {"a_seconds"}),
        ('sum without (kind) (delta(x{kind!="pending"}[1h])) > 10', {"x"}),
        ('up{job=~"lockstep-.*"} == 0 or lockstep_ready == 0', {"up", "lockstep_ready"}),
        ("rate(a_total[5m]) / on (job) group_left b offset 5m", {"a_total", "b"}),
        ('histogram_quantile(0.99, sum by (le) (rate(h_bucket{c="or"}[5m])))', {"h_bucket"}),
    ],
)
def test_the_expression_scan_finds_exactly_the_metric_names(expr: str, names: set[str]) -> None:
    assert referenced(expr) == names


def test_every_alert_reads_only_exported_metrics() -> None:
    known = declared() | PROMETHEUS_OWN
    unknown = {r["alert"]: sorted(referenced(r["expr"]) - known) for r in alerts()}
    assert {a: u for a, u in unknown.items() if u} == {}


def test_every_alert_has_a_severity_a_summary_a_description_and_a_runbook() -> None:
    rules = alerts()
    assert {r["alert"] for r in rules} >= {
        "LockstepGateTripped",
        "LockstepRolloutStalled",
        "LockstepNodeStuckInStep",
        "LockstepDriftRateHigh",
        "LockstepUnreadableBmcs",
        "LockstepDeadLettersGrowing",
        "LockstepOutboxLagging",
    }
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert {"summary", "description", "runbook"} <= set(rule["annotations"]), rule["alert"]
        anchor = rule["annotations"]["runbook"].split("#", 1)[1]
        assert anchor == rule["alert"].lower()


def test_every_runbook_anchor_is_a_heading_of_the_operations_guide() -> None:
    guide = (ROOT / "docs" / "operations.md").read_text()
    headings = {
        line.lstrip("#").strip().lower() for line in guide.splitlines() if line.startswith("#")
    }
    missing = [r["alert"] for r in alerts() if r["alert"].lower() not in headings]
    assert missing == []


def test_every_alert_has_a_promtool_unit_test() -> None:
    tested = {
        case["alertname"]
        for path in RULE_TESTS
        for test in yaml.safe_load(path.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert {r["alert"] for r in alerts()} - tested == set()


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
def test_promtool_check_rules_accepts_the_rules() -> None:
    done = promtool("check", "rules", RULES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in done.stdout


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests_of_the_rules_pass(path: Path) -> None:
    done = promtool("test", "rules", path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout

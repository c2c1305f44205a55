"""config/prometheus/statestore-alerts.yml: valid Prometheus rules (``promtool check rules``), every alert
unit-tested firing and not firing (``promtool test rules``), on metric names the metrics files hold.

promtool is Debian's package ``prometheus``; without it these tests skip, except under CI=true (where
.ci/run installs it) where they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from paths import REPO

from statestore_cli.ops.metrics import CleanMetrics, StatsMetrics

pytestmark = pytest.mark.slow  # promtool runs the rules' unit tests

RULES_DIR = REPO / "config" / "prometheus"
RULES = RULES_DIR / "statestore-alerts.yml"
UNIT_TESTS = RULES_DIR / "statestore-alerts.test.yml"
PROMTOOL = os.environ.get("STATESTORE_TEST_PROMTOOL", "/usr/bin/promtool")  # where Debian's package puts it


def _promtool() -> str:
    found = PROMTOOL if os.access(PROMTOOL, os.X_OK) else shutil.which("promtool")
    if found is None:
        message = f"promtool is not installed at {PROMTOOL} or on PATH; install it with: apt-get install -y prometheus"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules():
    done = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout


def test_promtool_unit_tests_of_every_alert_pass():
    done = subprocess.run(
        [_promtool(), "test", "rules", UNIT_TESTS.name], cwd=RULES_DIR, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_is_tested_firing_and_not_firing():
    tested: dict[str, set[bool]] = {}
    for case in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            tested.setdefault(check["alertname"], set()).add(bool(check.get("exp_alerts")))
    alerts = [rule["alert"] for rule in _rules()]
    assert {"StatestoreCleanFailed", "StatestoreCleanStale", "StatestoreExpiredBacklog"} <= set(alerts)
    assert {name: tested.get(name) for name in alerts} == {name: {True, False} for name in alerts}


def test_every_alert_is_per_database_with_a_severity_summary_and_what_to_do():
    for rule in _rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
        if rule["alert"] != "StatestoreMetricsAbsent":  # absent() has no series to take a label from
            assert "by (database)" in rule["expr"], rule["alert"]
            assert "{{ $labels.database }}" in rule["annotations"]["summary"], rule["alert"]


def test_the_rules_ask_only_for_metrics_the_files_hold(tmp_path: Path):
    clean = CleanMetrics(exit_status=0, duration_seconds=1.0, finished_at=1.0, expired_rows_remaining=0)
    stats = StatsMetrics({"task": 1}, {"task": 1}, 0, 0, 0, 1.0)
    written = set(re.findall(r"^# TYPE (\S+) ", clean.render() + stats.render(), re.MULTILINE))
    asked = {name for rule in _rules() for name in re.findall(r"\bstatestore_[a-z_]+", rule["expr"])}
    assert asked and asked <= written, asked - written

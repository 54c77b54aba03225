"""The alert and recording rules, checked and unit-tested by the real promtool."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from sidecar.telemetry.metrics import Metrics
from tests.deploy.chart import values_file
from tests.deploy.rules import PLAIN_RULES, RULES_TESTS, chart_rule_groups, plain_rules_text


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: apt-get install -y prometheus (the rules tests need the real one)"
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_plain_rules_file():
    result = _promtool("check", "rules", PLAIN_RULES.name, cwd=PLAIN_RULES.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_fires_and_stays_quiet_as_the_tests_say():
    result = _promtool("test", "rules", RULES_TESTS.name, cwd=RULES_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_plain_file_is_the_charts_rules_with_default_targets():
    assert yaml.safe_load(PLAIN_RULES.read_text()) == {"groups": chart_rule_groups()}
    assert PLAIN_RULES.read_text() == plain_rules_text(), "regenerate: .venv/bin/python -m tests.deploy.rules"


def test_chart_rules_with_other_targets_pass_promtool(tmp_path):
    monitoring = values_file("monitoring-values.yaml")["monitoring"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": chart_rule_groups(monitoring)}))
    result = _promtool("check", "rules", path.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_each_alert_has_a_firing_and_a_quiet_case():
    alerts = {r["alert"] for g in chart_rule_groups() for r in g["rules"] if "alert" in r}
    cases = [c for t in yaml.safe_load(RULES_TESTS.read_text())["tests"] for c in t.get("alert_rule_test", [])]
    firing = {c["alertname"] for c in cases if c["exp_alerts"]}
    quiet = {c["alertname"] for c in cases if not c["exp_alerts"]}
    assert alerts - firing == set(), "alerts never shown firing"
    assert alerts - quiet == set(), "alerts never shown quiet"


def exposed_names() -> set[str]:
    """Every series name the sidecar's registry exposes, series with labels not yet seen included."""
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"], "info": ["_info"]}
    return {
        family.name + suffix for family in Metrics().registry.collect() for suffix in suffixes.get(family.type, [""])
    }


def test_rules_use_only_metrics_the_sidecar_emits():
    groups = chart_rule_groups()
    used = {m for g in groups for r in g["rules"] for m in re.findall(r"(?<![:\w])sidecar_[a-z_]+\b", r["expr"])}
    assert used and used - exposed_names() == set(), (
        f"rules read metrics the sidecar does not emit: {used - exposed_names()}"
    )

"""The Prometheus rules: the chart renders them into its PrometheusRule, and
deploy/prometheus/sidecar-rules.yaml is the same list with the default values, for a
Prometheus without the Operator. Regenerate that file after changing the chart's rules:

    .venv/bin/python -m tests.deploy.rules
"""

from __future__ import annotations

from typing import Any

import yaml

from tests.deploy.chart import REPO, render

PLAIN_RULES = REPO / "deploy" / "prometheus" / "sidecar-rules.yaml"
RULES_TESTS = REPO / "deploy" / "prometheus" / "sidecar-rules.test.yaml"
HEADER = """\
# Recording rules and alerts of agent-sidecar, for a Prometheus without the Prometheus Operator
# (rule_files: [sidecar-rules.yaml]). Generated from the Helm chart's PrometheusRule with its
# default targets (helm/agent-sidecar/templates/_rules.tpl): edit the chart, then run
#   .venv/bin/python -m tests.deploy.rules
# Tested by promtool: sidecar-rules.test.yaml (tests/deploy/test_rules.py).
"""


def chart_rule_groups(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The `groups` of the chart's PrometheusRule (monitoring on, Operator objects forced on)."""
    monitoring = {"enabled": True, "prometheusOperator": True, **(values or {})}
    groups: list[dict[str, Any]] = render({"monitoring": monitoring}).one("PrometheusRule")["spec"]["groups"]
    return groups


class _Literal(yaml.SafeDumper):
    """Multi-line strings (PromQL) as literal blocks, so the file reads like hand-written rules."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Literal.add_representer(str, _str)


def plain_rules_text() -> str:
    body = yaml.dump({"groups": chart_rule_groups()}, Dumper=_Literal, sort_keys=False, width=200)
    return HEADER + body


if __name__ == "__main__":
    PLAIN_RULES.parent.mkdir(parents=True, exist_ok=True)
    PLAIN_RULES.write_text(plain_rules_text())
    print(f"wrote {PLAIN_RULES.relative_to(REPO)}")

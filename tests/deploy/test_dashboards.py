"""The Grafana dashboards: their JSON shape, and every panel's query answered with data by a
real Prometheus scraping a real sidecar while a scripted workload runs."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartSidecar
from tests.deploy.chart import CHART, REPO
from tests.deploy.prometheus import Prometheus, QueryError, finite_samples, run_prometheus
from tests.deploy.workload import FOCUS_TOOL, TOKEN_LINE, Workload
from tests.helpers.metrics import scrape
from tests.helpers.ports import free_port

DASHBOARDS = REPO / "dashboards"
NAMESPACE, POD = "agents", "support-agent-7d9f8-x2x4q"
# Grafana computes $__rate_interval from the scrape interval; here one window covers the
# whole workload (both rounds), so every rate() sees the increase between them.
RATE_INTERVAL = "1m"
RANGE = "5m"
WRONG_QUERY = "sum(rate(sidecar_tool_invocations_total[$__rate_interval]))"


def _dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def _targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in _panels(dashboard) for t in p.get("targets", [])]


def _variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


# ------------------------------------------------------------------------------ shape


@pytest.mark.parametrize("name", sorted(_dashboards()))
def test_dashboard_json_shape(name):
    dashboard = _dashboards()[name]
    assert dashboard["schemaVersion"] >= 39
    assert re.fullmatch(r"agent-sidecar-[a-z-]+", dashboard["uid"]) and len(dashboard["uid"]) <= 40
    assert "id" not in dashboard, "no instance id: Grafana assigns it on import"
    variables = _variables(dashboard)
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    panels = _panels(dashboard)
    assert len({p["id"] for p in panels}) == len(panels), "panel ids are unique"
    for panel in panels:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["description"], f"{panel['title']}: say what the panel shows"
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            windows = re.findall(r"\[([^\]]+)\]", target["expr"])
            assert all(w in ("$__rate_interval", "$__range") for w in windows), (panel["title"], windows)
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    text = json.dumps(dashboard)
    uids = set(re.findall(r'"uid": "([^"]*)"', text))
    assert uids == {dashboard["uid"], "${datasource}", "-- Grafana --"}, f"hard-coded datasource uids: {uids}"


def test_dashboard_uids_are_distinct_and_fixed():
    uids = [d["uid"] for d in _dashboards().values()]
    assert sorted(uids) == ["agent-sidecar-overview", "agent-sidecar-tool"]


def test_per_tool_dashboard_has_namespace_pod_and_tool_variables():
    variables = _variables(_dashboards()["sidecar-tool.json"])
    assert {"namespace", "pod", "tool"} <= set(variables)
    for title, expr in _targets(_dashboards()["sidecar-tool.json"]):
        assert 'tool="$tool"' in expr and 'namespace="$namespace"' in expr, title


def test_overview_covers_what_the_issue_lists():
    exprs = " ".join(e for _, e in _targets(_dashboards()["sidecar-overview.json"]))
    for metric in [
        "sidecar_tool_calls_total",
        "sidecar_tool_call_duration_seconds_bucket",
        "sidecar_tool_results_total",
        "sidecar_tool_replays_total",
        "sidecar_argument_rejections_total",
        "sidecar_policy_decisions_total",
        "sidecar_policy_evaluation_seconds_bucket",
        "sidecar_policy_reload_failures_total",
        "sidecar_approvals_pending",
        "sidecar_approvals_total",
        "sidecar_repair_rounds_total",
        "sidecar_requests_refused_total",
        "sidecar_upstream_request_duration_seconds_bucket",
        "sidecar_upstream_errors_total",
        "sidecar_proxy_overhead_seconds_bucket",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    ]:
        assert metric in exprs, metric


# ------------------------------------------------------------------------------ real Prometheus


def _substitute(expr: str, values: dict[str, str]) -> str:
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(f"${name}", values[name])
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


async def _problems(prometheus: Prometheus, targets: list[tuple[str, str]], values: dict[str, str]) -> list[str]:
    """Panels whose query returns no data (no series, or only NaN/Inf) or is refused."""
    problems = []
    for title, expr in targets:
        query = _substitute(expr, values)
        try:
            result = await prometheus.query(query)
        except QueryError as exc:
            problems.append(f"{title}: {exc}")
            continue
        if not finite_samples(result):
            problems.append(f"{title}: no data for {query} (got {result})")
    return problems


async def _until_scraped(prometheus: Prometheus, admin_url: str) -> None:
    """Until Prometheus holds the sidecar's current counts (its last scrape follows the last
    event). Polls: the scrape happens on Prometheus's clock, there is nothing to wait on."""
    families = ("sidecar_tool_calls_total", "sidecar_upstream_request_duration_seconds_count")
    while True:
        mine = await scrape(admin_url)
        expected = [mine.total(name) for name in families]
        seen = [await prometheus.scalar(f"sum({name})") for name in families]
        if seen == expected:
            return
        await asyncio.sleep(0.2)


def _dashboard_policies(tmp_path: Path) -> Path:
    """The chart's support policy, with approval for replies outside example.com only (the
    example asks for every reply), so one tool shows every verdict."""
    target = tmp_path / "policies"
    shutil.copytree(CHART / "files" / "policies" / "support", target)
    data = json.loads((target / "data.json").read_text())
    data["sidecar"]["tools"]["support_replies_send"]["approval"] = {
        "recipient_arg": "to",
        "allowed_domains": ["example.com"],
        "group": "support-leads",
    }
    (target / "data.json").write_text(json.dumps(data))
    return target


async def test_every_panel_returns_data_from_a_real_prometheus(model, start_sidecar: StartSidecar, tmp_path: Path):
    running = await start_sidecar(
        policies=str(_dashboard_policies(tmp_path)),
        admin_token=TOKEN_LINE,
        openai_upstream=f"http://127.0.0.1:{free_port()}",  # nothing listens: upstream errors
    )
    target = running.admin_url.removeprefix("http://")
    async with run_prometheus(tmp_path, target, {"namespace": NAMESPACE, "pod": POD}) as prometheus:
        while await prometheus.scalar('up{job="agent-sidecar"}') != 1.0:  # noqa: ASYNC110 (Prometheus's clock)
            await asyncio.sleep(0.2)
        workload = Workload(model, running)
        for number in (1, 2):
            await workload.run_round(number)
            await _until_scraped(prometheus, running.admin_url)

        # The variables' own queries, as Grafana runs them, give the values substituted.
        assert NAMESPACE in await prometheus.label_values("namespace", "sidecar_build_info")
        assert POD in await prometheus.label_values("pod", f'sidecar_build_info{{namespace=~"{NAMESPACE}"}}')
        tools = await prometheus.label_values(
            "tool", f'sidecar_tool_calls_total{{namespace="{NAMESPACE}", pod=~"{POD}"}}'
        )
        assert FOCUS_TOOL in tools
        values = {"namespace": NAMESPACE, "pod": POD, "tool": FOCUS_TOOL}
        values |= {"__rate_interval": RATE_INTERVAL, "__range": RANGE}

        problems = []
        for name, dashboard in _dashboards().items():
            problems += [f"{name}: {p}" for p in await _problems(prometheus, _targets(dashboard), values)]
        assert problems == []

        # The same check fails a panel on a metric the sidecar does not emit.
        [wrong] = await _problems(prometheus, [("wrong", WRONG_QUERY)], values)
        assert "no data" in wrong

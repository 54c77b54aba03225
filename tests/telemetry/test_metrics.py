from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from sidecar.telemetry.metrics import Metrics, ToolLabels, quantile

# DESIGN.md "Metrics (contract)": exposed family name -> (type, labels)
CONTRACT = {
    # `path` (model or mcp): added with the MCP path; `sum by (tool)` queries read both.
    "sidecar_tool_calls": ("counter", {"tool", "provider", "verdict", "path"}),
    "sidecar_tool_call_duration_seconds": ("histogram", {"tool", "outcome", "path"}),
    "sidecar_tool_results": ("counter", {"tool", "outcome", "path"}),
    "sidecar_tool_replays": ("counter", {"tool", "action", "path"}),
    "sidecar_argument_rejections": ("counter", {"tool", "problem", "path"}),
    "sidecar_policy_decisions": ("counter", {"decision", "path"}),
    "sidecar_policy_evaluation_seconds": ("histogram", {"engine"}),
    "sidecar_approvals_pending": ("gauge", set()),
    "sidecar_approvals": ("counter", {"outcome"}),
    "sidecar_repair_rounds": ("counter", {"outcome"}),
    "sidecar_upstream_request_duration_seconds": ("histogram", {"provider", "status"}),
    "sidecar_proxy_overhead_seconds": ("histogram", {"provider", "stream"}),
    "sidecar_tool_schema_changes": ("counter", {"tool"}),
}


def _exercise(m: Metrics) -> None:
    m.declare_tool("search")
    m.tool_call("search", "anthropic", "allow")
    m.argument_rejection("search", "type")
    m.policy_decision("deny", "embedded", 0.0002)
    m.tool_result("search", "ok", 0.5)
    m.replay("search", "answered")
    m.repair_round("corrected", tools=["search"])
    m.upstream("openai", 200, 1.2)
    m.upstream("openai", None, 0.1)
    m.overhead("anthropic", True, 0.0004)
    m.schema_change("search")
    m.approvals_pending(3)
    m.approval("approved")
    m.rejection_log_error()
    m.rejection_log_drop()
    m.admin_unauthorized_request()
    m.policy_reload(False)
    m.policy_reload(True)
    m.tool_hidden("search")
    m.tool_result_anomaly("oversized_result", "search")
    m.tool_result_rewritten("search", "withheld")
    m.state_error("redis")


def _families(body: bytes) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def test_every_contract_metric_present_with_type_and_labels() -> None:
    m = Metrics()
    _exercise(m)
    body, content_type = m.render(None)
    assert content_type.startswith("text/plain")
    families = _families(body)
    for name, (kind, labels) in CONTRACT.items():
        family = families[name]
        assert family.type == kind, name  # type: ignore[attr-defined]
        samples = family.samples  # type: ignore[attr-defined]
        assert samples, f"{name} has no samples"
        for sample in samples:
            assert set(sample.labels) - {"le"} == labels, (name, sample.labels)
    text = body.decode()
    # prometheus_client appends _total itself: the exposed names are the contract names.
    for name, (kind, _) in CONTRACT.items():
        if kind == "counter":
            assert f"\n{name}_total{{" in text or f"\n{name}_total " in text
    assert "_created" not in text
    assert 'sidecar_tool_calls_total{path="model",provider="anthropic",tool="search",verdict="allow"} 1.0' in text
    assert 'sidecar_upstream_request_duration_seconds_count{provider="openai",status="error"}' in text
    assert 'sidecar_proxy_overhead_seconds_count{provider="anthropic",stream="true"} 1.0' in text
    assert "sidecar_approvals_pending 3.0" in text
    for extra in (
        "sidecar_rejection_log_errors_total 1.0",
        "sidecar_rejection_log_dropped_total 1.0",
        "sidecar_admin_unauthorized_total 1.0",
        "sidecar_policy_reload_failures_total 1.0",
        'sidecar_tools_hidden_total{path="model",tool="search"} 1.0',
        'sidecar_tool_result_anomalies_total{kind="oversized_result",tool="search"} 1.0',
        'sidecar_tool_results_rewritten_total{action="withheld",tool="search"} 1.0',
    ):
        assert extra in text


def test_enumerated_labels_are_bounded() -> None:
    m = Metrics()
    m.tool_call("x", "mistral", "weird")
    m.argument_rejection("x", "pattern-mismatch")
    m.policy_decision("maybe", "rego-wasm", 0.001)
    text = m.render(None)[0].decode()
    m.tool_call("x", "anthropic", "allow", path="carrier-pigeon")
    assert 'sidecar_tool_calls_total{path="model",provider="other",tool="other",verdict="other"} 1.0' in text
    assert 'sidecar_argument_rejections_total{path="model",problem="other",tool="other"} 1.0' in text
    assert 'sidecar_policy_decisions_total{decision="error",path="model"} 1.0' in text
    assert 'sidecar_policy_decisions_total{decision="deny",path="mcp"} 0.0' in text
    text = m.render(None)[0].decode()
    assert 'sidecar_tool_calls_total{path="model",provider="anthropic",tool="other",verdict="allow"} 1.0' in text
    assert 'sidecar_policy_evaluation_seconds_count{engine="other"} 1.0' in text
    # small enumerations are exported at zero before the first event
    assert 'sidecar_approvals_total{outcome="expired"} 0.0' in text


def test_buckets_fit_what_they_measure() -> None:
    m = Metrics()
    m.policy_decision("allow", "embedded", 0.00002)
    m.tool_result("t", "ok", 400.0)
    m.overhead("openai", False, 0.00006)
    m.upstream("anthropic", 200, 500.0)
    text = m.render(None)[0].decode()
    assert 'sidecar_policy_evaluation_seconds_bucket{engine="embedded",le="1e-05"} 0.0' in text
    assert 'sidecar_policy_evaluation_seconds_bucket{engine="embedded",le="2.5e-05"} 1.0' in text
    assert 'sidecar_tool_call_duration_seconds_bucket{le="600.0",outcome="ok",path="model",tool="other"} 1.0' in text
    assert 'le="5e-05",provider="openai",stream="false"} 0.0' in text
    assert 'le="0.0001",provider="openai",stream="false"} 1.0' in text
    assert 'sidecar_upstream_request_duration_seconds_bucket{le="600.0",provider="anthropic"' in text


def test_openmetrics_negotiation() -> None:
    m = Metrics()
    _exercise(m)
    body, content_type = m.render("application/openmetrics-text; version=1.0.0,text/plain;q=0.5")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    assert b"# TYPE sidecar_tool_calls counter" in body
    body, content_type = m.render("text/plain;version=0.0.4;q=0.9,*/*;q=0.1")
    assert content_type.startswith("text/plain")
    assert b"# EOF" not in body


def test_tool_label_cap() -> None:
    m = Metrics(tool_label_cap=200)
    for i in range(250):
        m.declare_tool(f"tool_{i:03d}")
        m.tool_call(f"tool_{i:03d}", "openai", "allow")
    m.tool_call("invented_by_the_model", "openai", "reject")
    families = _families(m.render(None)[0])
    tools = {s.labels["tool"] for s in families["sidecar_tool_calls"].samples}  # type: ignore[attr-defined]
    assert len(tools) == 201
    assert "other" in tools
    assert "tool_199" in tools and "tool_200" not in tools
    other = [
        s.value
        for s in families["sidecar_tool_calls"].samples  # type: ignore[attr-defined]
        if s.labels["tool"] == "other"
    ]
    assert sum(other) == 51


def test_tool_labels_helper() -> None:
    labels = ToolLabels(cap=2)
    assert labels.label("never_declared") == "other"
    assert labels.declare("a") == "a"
    assert labels.declare("b") == "b"
    assert labels.declare("c") == "other"
    assert labels.declare("a") == "a"
    assert labels.declare("x" * 500) == "other"
    assert labels.label("a") == "a" and labels.label("c") == "other" and labels.label(None) == "other"
    assert len(labels) == 2


def test_status_summary_quantiles() -> None:
    m = Metrics()
    m.declare_tool("fetch")
    for i in range(1, 101):
        m.tool_call("fetch", "anthropic", "allow")
        m.tool_result("fetch", "error" if i % 10 == 0 else "ok", i / 100)
    m.tool_call("fetch", "anthropic", "reject")
    m.replay("fetch", "allowed")
    m.repair_round("exhausted", tools=["fetch"])
    summary = m.status_summary()
    fetch = summary["tools"]["fetch"]
    assert fetch["calls"] == 101
    assert fetch["calls_by_verdict"] == {"allow": 100, "reject": 1}
    assert fetch["results"] == {"ok": 90, "error": 10}
    assert fetch["error_rate"] == 0.1
    assert abs(fetch["latency_seconds"]["p50"] - 0.505) < 1e-9
    assert abs(fetch["latency_seconds"]["p95"] - 0.9505) < 1e-9
    assert fetch["replays"] == 1 and fetch["repairs"] == 1
    assert summary["repair_rounds"] == {"corrected": 0, "abandoned": 0, "exhausted": 1}
    assert m.snapshot()["tools"]["fetch"]["calls"] == 101


def test_reservoir_is_bounded() -> None:
    m = Metrics()
    m.declare_tool("t")
    for _ in range(3000):
        m.tool_result("t", "ok", 1.0)
    for _ in range(1024):
        m.tool_result("t", "ok", 2.0)
    latency = m.status_summary()["tools"]["t"]["latency_seconds"]
    assert latency["samples"] == 1024
    assert latency["p50"] == 2.0


def test_quantile_edges() -> None:
    assert quantile([], 0.5) is None
    assert quantile([3.0], 0.95) == 3.0


def test_tool_tokens_bounded_and_in_the_status_summary() -> None:
    m = Metrics(tool_label_cap=5)
    m.declare_tool("search")
    m.tool_tokens("search", "output", 10.5)
    m.tool_tokens("search", "output", 0.25)
    m.tool_tokens("search", "nonsense", 3)  # not a direction: counted as base-rate input
    m.tool_tokens("search", "input_cached", -5)  # never negative
    m.tool_tokens("invented", "output", 2)
    families = {f.name: f for f in text_string_to_metric_families(m.render()[0].decode())}
    samples = {(s.labels["tool"], s.labels["direction"]): s.value for s in families["sidecar_tool_tokens"].samples}
    assert samples == {("search", "output"): 10.75, ("search", "input"): 3.0, ("other", "output"): 2.0}
    summary = m.status_summary(also=["declared_only"])
    assert summary["tools"]["search"]["tokens"] == {"output": 11, "input": 3, "input_cached": 0, "input_cache_write": 0}
    assert summary["tools"]["declared_only"]["calls"] == 0
    assert summary["tools"]["declared_only"]["tokens"]["output"] == 0


def test_a_tool_declared_after_its_first_tokens_gets_its_own_series() -> None:
    """Tokens of a name not declared yet go to "other"; once declared, to its own label (the
    per-pair memory of where tokens go must not keep the first answer)."""
    m = Metrics(tool_label_cap=5)
    m.tool_tokens_spent([("late", "input", 2.0), (None, "output", 1.0)])
    m.declare_tool("late")
    m.tool_tokens_spent([("late", "input", 3.0), ("late", "input", 4.0), (None, "output", 1.0)])
    families = {f.name: f for f in text_string_to_metric_families(m.render()[0].decode())}
    samples = {(s.labels["tool"], s.labels["direction"]): s.value for s in families["sidecar_tool_tokens"].samples}
    assert samples == {("other", "input"): 2.0, ("late", "input"): 7.0, ("other", "output"): 2.0}
    assert m.status_summary()["tools"]["late"]["tokens"]["input"] == 7


def test_zero_tokens_show_the_series_at_zero_and_add_nothing() -> None:
    """A (tool, direction) pair a reply gives 0 tokens (no cache reads) has its series and its
    /v1/status total from that reply on, at 0, so a later first increment is seen as one."""
    m = Metrics(tool_label_cap=5)
    m.declare_tool("search")
    m.tool_tokens_spent([("search", "input", 5.0), ("search", "input_cached", 0.0)])
    m.tool_tokens_spent([("search", "input_cached", 0.0), ("search", "input", 0.0)])
    families = {f.name: f for f in text_string_to_metric_families(m.render()[0].decode())}
    samples = {(s.labels["tool"], s.labels["direction"]): s.value for s in families["sidecar_tool_tokens"].samples}
    assert samples == {("search", "input"): 5.0, ("search", "input_cached"): 0.0}
    m.tool_tokens_spent([("search", "input_cached", 3.0)])
    assert m.status_summary()["tools"]["search"]["tokens"]["input_cached"] == 3

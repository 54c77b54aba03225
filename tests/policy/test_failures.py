"""Failure mode: an engine error or timeout becomes on_error's decision, marked as error."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sidecar.policy import build_engine
from tests.policy.cases import call
from tests.policy.conftest import settings, start_stub


@pytest.mark.parametrize("on_error", ["deny", "allow"])
@pytest.mark.parametrize("knobs", [{"delay_s": 1.0}, {"fail_status": 500}], ids=["timeout", "http500"])
async def test_opa_failure_applies_on_error(on_error: str, knobs: dict[str, Any]) -> None:
    stub = await start_stub(**knobs)
    engine = build_engine(settings(engine="opa", opa_url=stub.url, opa_timeout_s=0.1, on_error=on_error), None)
    try:
        started = time.monotonic()
        decision = await engine.decide(call("support_tickets_search"))
        assert time.monotonic() - started < 0.8  # no retries, tight timeout
        assert decision.allow is (on_error == "allow")
        assert decision.error is not None
        assert decision.outcome == "error"
        assert engine.health()["ok"] is False
        result = await engine.result_decision(call("x", phase="tool_result", result={"anomalies": []}))
        assert result is not None and result.error is not None
        assert await engine.visible_tools({"tools": ["a"]}) is None  # all visible; calls still decided
    finally:
        await engine.close()
        await stub.runner.cleanup()


async def test_opa_unreachable_is_an_error() -> None:
    engine = build_engine(settings(engine="opa", opa_url="http://127.0.0.1:9", opa_timeout_s=0.2), None)
    decision = await engine.decide(call("support_tickets_search"))
    assert decision.allow is False and decision.error is not None
    await engine.close()


async def test_opa_bearer_token() -> None:
    stub = await start_stub(token="s3cret")
    good = build_engine(settings(engine="opa", opa_url=stub.url, opa_token="s3cret"), None)
    bad = build_engine(settings(engine="opa", opa_url=stub.url), None)
    try:
        assert (await good.decide(call("support_tickets_search"))).error is None
        refused = await bad.decide(call("support_tickets_search"))
        assert refused.error is not None and "401" in refused.error
    finally:
        await good.close()
        await bad.close()
        await stub.runner.cleanup()


async def test_opa_undefined_decision_denies(tmp_path) -> None:
    (tmp_path / "p.rego").write_text('package sidecar\nimport rego.v1\ndecision := {"allow": true} if input.x\n')
    stub = await start_stub(str(tmp_path))
    engine = build_engine(settings(engine="opa", opa_url=stub.url), None)
    try:
        decision = await engine.decide(call("a"))
        assert decision.allow is False and decision.error is None
        assert "undefined" in decision.reasons[0]
    finally:
        await engine.close()
        await stub.runner.cleanup()


@pytest.mark.parametrize("on_error", ["deny", "allow"])
async def test_embedded_runtime_error_applies_on_error(tmp_path, on_error: str) -> None:
    (tmp_path / "p.rego").write_text(
        "package sidecar\nimport rego.v1\n"
        'decision := {"allow": true, "reasons": [], "require_approval": null, "retryable": false}'
        " if { x := 1 / input.call.args.n; x > 0 }\n"
        'else := {"allow": false, "reasons": [], "require_approval": null, "retryable": false}\n'
    )
    engine = build_engine(settings(on_error=on_error), str(tmp_path))
    try:
        ok = await engine.decide(call("a", {"n": 1}))
        assert ok.allow is True and ok.error is None
        started = time.monotonic()
        failed = await engine.decide(call("a", {"n": 0}))
        assert time.monotonic() - started < 0.05  # no Rust backtrace capture on the error path
        assert failed.allow is (on_error == "allow")
        assert failed.error is not None and "divide by zero" in failed.error
    finally:
        await engine.close()


async def test_embedded_malformed_decision_is_an_error(tmp_path) -> None:
    (tmp_path / "p.rego").write_text('package sidecar\nimport rego.v1\ndecision := "yes"\n')
    engine = build_engine(settings(), str(tmp_path))
    decision = await engine.decide(call("a"))
    assert decision.allow is False and decision.error is not None
    await engine.close()

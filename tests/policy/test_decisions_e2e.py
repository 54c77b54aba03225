"""The policy decides every call end to end, through the official SDKs, for all protocols."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.agents import AGENTS
from tests.policy.conftest import POLICIES, Captured, declared_tools, metric, start_stub

SEARCH_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query"],
}
WIPE_SCHEMA = {"type": "object", "properties": {"customer": {"type": "string"}}}
REFUND_SCHEMA = {
    "type": "object",
    "properties": {"ticket_id": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["ticket_id", "amount"],
}
TOOLS = {"support_tickets_search": SEARCH_SCHEMA, "crm_wipe": WIPE_SCHEMA, "payments_refund": REFUND_SCHEMA}
SEARCH = ToolCallSpec("support_tickets_search", {"query": "refund", "limit": 5})
WIPE = ToolCallSpec("crm_wipe", {"customer": "c-1"})
WIPE_DENIED = {
    "status": "denied",
    "reasons": ["tool crm_wipe has no entry in the policy data and unlisted tools are not allowed"],
    "retryable": False,
}

MATRIX = pytest.mark.parametrize(
    ("kind", "stream"),
    [(k, s) for k in AGENTS for s in (False, True)],
    ids=[f"{k}-{'stream' if s else 'whole'}" for k in AGENTS for s in (False, True)],
)


@MATRIX
async def test_denied_call_is_repaired_with_the_policy_reason(
    model, start_sidecar, strict_policies: Path, kind: str, stream: bool, tmp_path: Path
) -> None:
    sidecar = await start_sidecar(policies=str(strict_policies))
    model.add_turns(Turn(text="Wiping.", tool_calls=[WIPE]), Turn(text="Searching instead.", tool_calls=[SEARCH]))
    received = await AGENTS[kind](sidecar.proxy_url, TOOLS).ask(stream)

    assert received.calls == [("support_tickets_search", {"query": "refund", "limit": 5})]  # never crm_wipe
    requests = model.model_requests
    assert len(requests) == 2
    assert AGENTS[kind].tool_outputs(requests[1]) == [WIPE_DENIED]
    assert await metric(sidecar.admin_url, "sidecar_policy_decisions_total", decision="deny") == 1
    assert await metric(sidecar.admin_url, "sidecar_policy_decisions_total", decision="allow") == 1
    assert await metric(sidecar.admin_url, "sidecar_policy_evaluation_seconds_count", engine="embedded") >= 2
    await sidecar.sidecar.rejections.aflush()
    log = [json.loads(line) for line in (tmp_path / "rejections.jsonl").read_text().splitlines()]
    assert [(r["tool"], r["action"], r["verdict"], r["guard"]) for r in log] == [
        ("crm_wipe", "repair", "deny", "policy")
    ]


async def test_shadow_mode_lets_the_call_through_and_records_it(
    model, start_sidecar, strict_policies: Path, policy_log: Captured, tmp_path: Path
) -> None:
    sidecar = await start_sidecar(policies=str(strict_policies), policy={"mode": "shadow"})
    model.add_turns(Turn(tool_calls=[WIPE]))
    received = await AGENTS["anthropic"](sidecar.proxy_url, TOOLS).ask(stream=True)

    assert received.calls == [("crm_wipe", {"customer": "c-1"})]
    assert len(model.model_requests) == 1
    assert await metric(sidecar.admin_url, "sidecar_policy_decisions_total", decision="deny") == 1
    assert await metric(sidecar.admin_url, "sidecar_tool_calls_total", tool="crm_wipe", verdict="allow") == 1
    [event] = policy_log.named("policy_decision")
    assert (event["tool"], event["decision"], event["action"]) == ("crm_wipe", "deny", "shadow")
    assert event["reasons"] == WIPE_DENIED["reasons"]
    await sidecar.sidecar.rejections.aflush()
    log = [json.loads(line) for line in (tmp_path / "rejections.jsonl").read_text().splitlines()]
    assert [(r["tool"], r["action"], r["status"]) for r in log] == [("crm_wipe", "shadow", "denied")]


async def test_off_mode_skips_evaluation(model, start_sidecar, strict_policies: Path) -> None:
    sidecar = await start_sidecar(policies=str(strict_policies), policy={"mode": "off"})
    model.add_turns(Turn(tool_calls=[WIPE]))
    received = await AGENTS["chat"](sidecar.proxy_url, TOOLS).ask(stream=False)

    assert received.calls == [("crm_wipe", {"customer": "c-1"})]
    for decision in ("allow", "deny", "approval", "error"):
        assert await metric(sidecar.admin_url, "sidecar_policy_decisions_total", decision=decision) == 0
    assert await metric(sidecar.admin_url, "sidecar_policy_evaluation_seconds_count", engine="embedded") == 0


@pytest.mark.parametrize("kind", list(AGENTS))
async def test_call_requiring_approval_is_answered_approval_required(model, start_sidecar, kind: str) -> None:
    sidecar = await start_sidecar(policies=POLICIES)
    refund = ToolCallSpec("payments_refund", {"ticket_id": "T-1", "amount": 250})
    model.add_turns(Turn(tool_calls=[refund]), Turn(text="The refund of 250 needs approval by finance."))
    received = await AGENTS[kind](sidecar.proxy_url, TOOLS).ask(stream=False)

    assert received.calls == []
    assert "needs approval by finance" in received.text
    [output] = AGENTS[kind].tool_outputs(model.model_requests[1])
    # An approval guard may add keys (an approval id): only what the policy decided is checked.
    assert output["status"] == "approval_required"
    assert output["reasons"] == [
        "payments_refund of 250 is above the limit of 100 and needs approval by group finance-approvers"
    ]
    assert output["retryable"] is True
    assert await metric(sidecar.admin_url, "sidecar_policy_decisions_total", decision="approval") == 1


@MATRIX
async def test_hidden_tool_is_removed_and_a_call_to_it_is_unknown(
    model, start_sidecar, kind: str, stream: bool, policy_log: Captured
) -> None:
    sidecar = await start_sidecar(policies=POLICIES)
    tools = {"support_tickets_search": SEARCH_SCHEMA, "internal_debug_dump": {"type": "object", "properties": {}}}
    model.add_turns(Turn(tool_calls=[ToolCallSpec("internal_debug_dump", {})]), Turn(tool_calls=[SEARCH]))
    received = await AGENTS[kind](sidecar.proxy_url, tools).ask(stream)

    assert received.calls == [("support_tickets_search", {"query": "refund", "limit": 5})]
    first, repair = model.model_requests
    assert declared_tools(first) == ["support_tickets_search"]  # the model never saw it
    assert declared_tools(repair) == ["support_tickets_search"]
    [output] = AGENTS[kind].tool_outputs(repair)
    assert output["status"] == "unknown_tool"
    assert await metric(sidecar.admin_url, "sidecar_tools_hidden_total", tool="internal_debug_dump") == 1
    [event] = policy_log.named("tools_hidden")
    assert event["tools"] == ["internal_debug_dump"] and event["applied"] is True


@pytest.mark.parametrize("on_error", ["deny", "allow"])
@pytest.mark.parametrize("knobs", [{"fail_status": 500}, {"delay_s": 1.0}], ids=["http500", "timeout"])
async def test_opa_failure_decides_by_on_error(model, start_sidecar, on_error: str, knobs: dict[str, float]) -> None:
    stub = await start_stub(**knobs)
    try:
        sidecar = await start_sidecar(
            policy={"engine": "opa", "opa_url": stub.url, "opa_timeout_s": 0.2, "on_error": on_error}
        )
        model.add_turns(Turn(tool_calls=[SEARCH]), Turn(text="The policy engine is down; I cannot search."))
        received = await AGENTS["responses"](sidecar.proxy_url, TOOLS).ask(stream=False)

        if on_error == "allow":
            assert received.calls == [("support_tickets_search", {"query": "refund", "limit": 5})]
        else:
            assert received.calls == []
            assert AGENTS["responses"].tool_outputs(model.model_requests[1]) == [
                {
                    "status": "denied",
                    "reasons": ["the policy engine failed; the call is refused (on_error=deny)"],
                    "retryable": False,
                }
            ]
        assert await metric(sidecar.admin_url, "sidecar_policy_decisions_total", decision="error") == 1
        assert await metric(sidecar.admin_url, "sidecar_policy_evaluation_seconds_count", engine="opa") >= 1
    finally:
        await stub.runner.cleanup()

"""The policy guard's input document, its per-turn counting, and result decisions, with the
embedded engine over the shipped policies (no HTTP)."""

from __future__ import annotations

import re
from typing import Any

import orjson
from multidict import CIMultiDict
from yarl import URL

from sidecar.config import load_settings
from sidecar.dialects import ANTHROPIC
from sidecar.exchange.filters import FilterChain
from sidecar.exchange.state import CallCheck, Exchange, ToolResultRecord
from sidecar.filters.policy import SESSION_COUNTS, PolicyFilter
from sidecar.filters.result_policy import ResultPolicy, result_rules
from sidecar.model import (
    FieldError,
    Provider,
    RequestView,
    ToolCall,
    ToolDeclaration,
    ToolResult,
    Verdict,
    VerdictKind,
)
from sidecar.policy import build_engine
from sidecar.policy.inputs import agent_identity
from sidecar.telemetry.metrics import Metrics
from tests.policy.conftest import POLICIES

REFUND = {"type": "object", "properties": {"amount": {"type": "number"}}}


def _exchange(*tools: str) -> Exchange:
    view = RequestView(model="claude-test", declarations={t: ToolDeclaration.create(t, REFUND) for t in tools})
    return Exchange("x1", Provider.ANTHROPIC, ANTHROPIC, "sess-1", view, {}, URL("http://u"), CIMultiDict())


def _setup(**settings: Any) -> tuple[PolicyFilter, Metrics]:
    flags = {"policies": POLICIES, "agent_id": "agent-7", "agent_labels": {"team": "support"}, **settings}
    config = load_settings(flags=flags, environ={})
    metrics = Metrics()
    return PolicyFilter(config, build_engine(config.policy, config.policies), metrics), metrics


class Ledger:
    def __init__(self, total: int, by_tool: dict[str, int]) -> None:
        self.counts = (total, by_tool)
        self.asked = 0

    async def session_counts(self, session: str) -> tuple[int, dict[str, int]]:
        self.asked += 1
        return self.counts


async def test_input_document_follows_the_contract() -> None:
    guard, _ = _setup()
    exchange = _exchange("payments_refund")
    call = ToolCall("toolu_1", "payments_refund", {"amount": 1.0}, '{"amount": 1.0}', index=0)
    check = CallCheck(call, exchange, parallel=1)
    check.validation = Verdict.allow()
    document = await guard.input_for(check)

    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", document.pop("time"))
    assert document == {
        "version": 1,
        "phase": "tool_call",
        "path": "model",  # a model's call (an MCP tools/call says "mcp", with input.mcp)
        "provider": "anthropic",
        "model": "claude-test",
        "agent": {"id": "agent-7", "namespace": "", "labels": {"team": "support"}},
        "session": {"id": "sess-1", "source": "derived", "calls_total": 0, "calls_by_tool": {}},
        "tool": {
            "name": "payments_refund",
            "declared": True,
            "kind": "function",
            "schema_hash": exchange.view.declarations["payments_refund"].schema_hash,
            "previous_schema_hash": None,  # this tool's schema never changed
        },
        "call": {"id": "toolu_1", "args": {"amount": 1.0}, "args_hash": call.args_hash, "index": 0, "parallel": 1},
        "validation": {"valid": True, "errors": []},
        "replay": {"count": 0, "first_seen": None},
        "approval": {"status": "none", "id": None, "approved_by": None},
    }
    check.validation = Verdict.reject("invalid_arguments", [FieldError("amount", "expected number", "number")])
    assert (await guard.input_for(check))["validation"] == {
        "valid": False,
        "errors": [{"field": "amount", "problem": "expected number", "expected": "number"}],
    }


def test_agent_identity_falls_back_to_the_pod() -> None:
    config = load_settings(environ={})
    assert agent_identity(config, {"POD_NAME": "agent-0", "POD_NAMESPACE": "support"}) == {
        "id": "agent-0",
        "namespace": "support",
        "labels": {},
    }
    labelled = load_settings(environ={"SIDECAR_AGENT_LABELS": "team=support,tier=prod", "SIDECAR_AGENT_ID": "a"})
    assert agent_identity(labelled, {"POD_NAME": "ignored"})["id"] == "a"
    assert labelled.agent_labels == {"team": "support", "tier": "prod"}


async def test_session_limit_counts_the_ledger_and_earlier_calls_of_the_turn() -> None:
    """payments_refund allows 5 per session: 3 delivered + 3 parallel → the third is denied."""
    guard, _ = _setup()
    ledger = Ledger(3, {"payments_refund": 3})
    guard.state = ledger
    exchange = _exchange("payments_refund")
    calls = [ToolCall(f"c{i}", "payments_refund", {"amount": 10}, "", index=i) for i in range(3)]
    checks = await FilterChain([guard]).check(exchange, calls)

    assert [c.verdict.kind for c in checks] == [VerdictKind.ALLOW, VerdictKind.ALLOW, VerdictKind.DENY]
    assert checks[2].verdict.model_payload() == {
        "status": "denied",
        "reasons": ["tool payments_refund may be called at most 5 times per session; this session has made 5 calls"],
        "retryable": False,
    }
    assert ledger.asked == 1  # one lookup per exchange
    # Counts already known for the exchange win over the ledger.
    fresh = _exchange("payments_refund")
    fresh.put(SESSION_COUNTS, (9, {"payments_refund": 5}))
    [check] = await FilterChain([guard]).check(fresh, calls[:1])
    assert check.verdict.kind is VerdictKind.DENY and ledger.asked == 1


async def test_approval_verdict_carries_the_request() -> None:
    guard, metrics = _setup()
    exchange = _exchange("payments_refund")
    call = ToolCall("c1", "payments_refund", {"amount": 500}, "")
    [check] = await FilterChain([guard]).check(exchange, [call])

    assert check.verdict.kind is VerdictKind.APPROVAL
    assert check.approval_request == {"group": "finance-approvers", "ttl_s": 900}
    assert check.verdict.model_payload()["approval"] == {"group": "finance-approvers", "ttl_s": 900}
    assert check.policy_reasons == check.verdict.reasons
    metrics.settle()  # counts held on the hot path are applied before a read
    assert metrics.policy_decisions.labels("approval", "model")._value.get() == 1


async def test_result_decisions_from_matched_records() -> None:
    config = load_settings(flags={"policies": POLICIES}, environ={})
    metrics = Metrics()
    engine = build_engine(config.policy, config.policies)
    results = ResultPolicy(config, engine, metrics, rules=result_rules(config, engine))
    exchange = _exchange("support_tickets_search")
    secret = "db password=Zq8!vR2#kLm"
    cases = [
        (ToolResultRecord("r1", "support_tickets_search", False, 10, 0.2, []), "ten bytes."),
        (ToolResultRecord("r2", "support_tickets_search", False, 100_000, 0.2, []), "x" * 100_000),
        (ToolResultRecord("r3", "support_tickets_search", False, 10, 0.2, []), secret),
        (ToolResultRecord("r4", "crm_export", True, 5, None, ["unknown_call"]), "oops"),
    ]
    decided = {}
    for record, content in cases:
        result = ToolResult(record.call_id, content, record.is_error, size=record.bytes)
        outcome = await results.outcome(exchange, result, record, record.tool or "")
        decided[record.call_id] = (outcome.action.value, list(outcome.reasons))
        # Decided once: the same result again (re-sent with the history) is remembered.
        assert await results.outcome(exchange, result, None, record.tool or "") is outcome

    assert decided == {
        "r1": ("allow", []),
        "r2": ("allow", ["result of support_tickets_search has anomaly oversized_result (100000 bytes)"]),
        "r3": (
            "withhold",
            ["result of support_tickets_search has anomaly secret_in_result and is withheld from the model"],
        ),
        "r4": ("allow", ["result of crm_export has anomaly unknown_call"]),
    }

    def count(decision: str) -> float:
        metrics.settle()  # counts held on the hot path are applied before a read
        return float(metrics.policy_decisions.labels(decision, "model")._value.get())

    assert (count("allow"), count("deny")) == (2, 1)  # r1 had nothing to say


class _InputBuilt(AssertionError):
    pass


def _plain_check(tool: str, replay_count: int = 0) -> CallCheck:
    call = ToolCall("toolu_1", tool, {"amount": 1.0}, '{"amount": 1.0}', index=0)
    check = CallCheck(call, _exchange(tool), parallel=1)
    check.validation = Verdict.allow()
    check.replay.count = replay_count
    return check


async def test_a_call_a_shortcut_answers_is_decided_without_the_whole_input(monkeypatch: Any) -> None:
    """The shipped rules' shortcuts read the call's own fields: session counts, agent and time
    are not built for them (`quick_decision`)."""
    guard, metrics = _setup(policies="builtin")
    built: list[CallCheck] = []

    async def whole_input(check: CallCheck, *args: Any) -> dict[str, Any]:
        built.append(check)
        raise _InputBuilt

    monkeypatch.setattr(guard, "input_for", whole_input)
    check = _plain_check("any_tool")
    assert await guard.on_call(check) is None
    assert check.policy_reasons == ["any_tool has no entry in the policy data; allowed as an unlisted tool"]
    assert built == []
    metrics.settle()
    assert metrics.policy_decisions.labels("allow", "model")._value.get() == 1
    # A replay is the chain's (no shortcut answers it): the whole input is built (here it
    # raises, so on_error refuses the call).
    replay = _plain_check("any_tool", replay_count=1)
    assert await guard.on_call(replay) is not None
    assert built == [replay]


async def test_a_decision_log_gets_the_whole_input_of_every_call(tmp_path: Any) -> None:
    log_file = tmp_path / "decisions.jsonl"
    guard, _ = _setup(policies="builtin", policy={"decision_log": {"path": str(log_file)}})
    assert guard.engine.quick_decision(PolicyFilter.call_fields(_plain_check("any_tool"))) is None
    assert await guard.on_call(_plain_check("any_tool")) is None
    await guard.engine.close()
    [line] = log_file.read_text().splitlines()
    recorded = orjson.loads(line)
    assert recorded["input"]["session"]["id"] == "sess-1" and recorded["input"]["agent"]["id"] == "agent-7"
    assert recorded["decision"]["rule"] == "unlisted"

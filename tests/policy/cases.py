"""The decision table both engines must agree on (inputs follow DESIGN.md's contract)."""

from __future__ import annotations

import copy
from typing import Any


def call(name: str, args: dict[str, Any] | None = None, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "version": 1,
        "phase": "tool_call",
        "provider": "anthropic",
        "model": "claude-test",
        "agent": {"id": "agent-1", "namespace": "support", "labels": {}},
        "session": {"id": "s1", "calls_total": 3, "calls_by_tool": {}},
        "tool": {"name": name, "declared": True, "schema_hash": "h"},
        "call": {"id": "toolu_1", "args": args or {}, "args_hash": "a", "index": 0, "parallel": 1},
        "validation": {"valid": True, "errors": []},
        "replay": {"count": 0, "first_seen": None},
        "approval": {"status": "none", "id": None, "approved_by": None},
        "time": "2026-11-30T10:00:00Z",
    }
    for key, value in over.items():
        doc[key] = {**doc.get(key, {}), **value} if isinstance(value, dict) else value
    return copy.deepcopy(doc)


ALLOWED = {"allow": True, "require_approval": None, "retryable": False}

# (id, input, expected decision dict)
DECISIONS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "read_only",
        call("support_tickets_search", {"query": "refund"}),
        {**ALLOWED, "rule": "read_only", "reasons": ["support_tickets_search is read-only"]},
    ),
    (
        "read_only_context",
        call("support_tickets_get_context", {"ticket_id": "t-1"}),
        {**ALLOWED, "rule": "read_only", "reasons": ["support_tickets_get_context is read-only"]},
    ),
    (
        "undeclared",
        call("support_tickets_search", tool={"declared": False}),
        {
            "allow": False,
            "rule": "undeclared",
            "require_approval": None,
            "retryable": True,
            "reasons": ["tool support_tickets_search is not declared in this request; call one of the declared tools"],
        },
    ),
    (
        "invalid_args",
        call("payments_refund", {"amount": "x"}, validation={"valid": False, "errors": [{"field": "amount"}]}),
        {
            "allow": False,
            "rule": "invalid_arguments",
            "require_approval": None,
            "retryable": True,
            "reasons": ["arguments of payments_refund do not match its schema (1 problem(s)); fix them and call again"],
        },
    ),
    (
        "hidden",
        call("internal_debug_dump"),
        {
            "allow": False,
            "rule": "hidden",
            "require_approval": None,
            "retryable": False,
            "reasons": ["tool internal_debug_dump is not available to this agent"],
        },
    ),
    (
        "refund_small",
        call("payments_refund", {"order_id": "o", "amount": 40}),
        {**ALLOWED, "rule": "within_limits", "reasons": []},
    ),
    (
        "refund_large",
        call("payments_refund", {"order_id": "o", "amount": 250.5}),
        {
            "allow": False,
            "rule": "amount",
            "require_approval": {"group": "finance-approvers", "ttl_s": 900},
            "retryable": True,
            "reasons": [
                "payments_refund of 250.5 is above the limit of 100 and needs approval by group finance-approvers"
            ],
        },
    ),
    (
        "refund_large_approved",
        call(
            "payments_refund",
            {"order_id": "o", "amount": 250},
            approval={"status": "approved", "id": "ap-7", "approved_by": "alice"},
        ),
        {**ALLOWED, "rule": "approved", "reasons": ["approved by alice (approval ap-7)"]},
    ),
    (
        "refund_limit",
        call("payments_refund", {"amount": 1}, session={"calls_by_tool": {"payments_refund": 5}}),
        {
            "allow": False,
            "rule": "call_limit",
            "require_approval": None,
            "retryable": False,
            "reasons": [
                "tool payments_refund may be called at most 5 times per session; this session has made 5 calls"
            ],
        },
    ),
    (
        "refund_replay",
        call("payments_refund", {"amount": 1}, replay={"count": 1}),
        {
            "allow": False,
            "rule": "replay",
            "require_approval": None,
            "retryable": False,
            "reasons": [
                "payments_refund with these arguments already ran in this session and is "
                "not repeatable; the replay guard answers it with the earlier result"
            ],
        },
    ),
    (
        "repeatable_replay",
        call("support_tickets_tag", {"tag": "x"}, replay={"count": 1}),
        {**ALLOWED, "rule": "within_limits", "reasons": []},
    ),
    (
        "reply_needs_approval",
        call("support_replies_send", {"to": "bob@example.com", "body": "hi"}),
        {
            "allow": False,
            "rule": "approval_always",
            "require_approval": {"group": "support-leads", "ttl_s": 3600},
            "retryable": True,
            "reasons": [
                "support_replies_send always needs approval by group support-leads; "
                "the approval covers exactly these arguments"
            ],
        },
    ),
    (
        "reply_blocked_display_name",
        call("support_replies_send", {"to": '"X" <ana@Mailinator.com.>', "body": "hi"}),
        {
            "allow": False,
            "rule": "blocked_recipient",
            "require_approval": None,
            "retryable": False,
            "reasons": [
                "support_replies_send to an address at mailinator.com is refused: that domain is blocked "
                "for this tool; use the customer's address on file"
            ],
        },
    ),
    (
        "reply_percent_hack",
        call("support_replies_send", {"to": "ana%mailinator.com@example.com", "body": "hi"}),
        {
            "allow": False,
            "rule": "blocked_recipient",
            "require_approval": None,
            "retryable": True,
            "reasons": [
                'support_replies_send: recipient "ana%mailinator.com@example.com" routes mail through its '
                "local part (% or !), which is refused"
            ],
        },
    ),
    (
        "always_approval",
        call("payments_close_account", {"account": "a"}),
        {
            "allow": False,
            "rule": "approval_always",
            "require_approval": {"group": "finance-approvers", "ttl_s": 3600},
            "retryable": True,
            "reasons": [
                "payments_close_account always needs approval by group finance-approvers; "
                "the approval covers exactly these arguments"
            ],
        },
    ),
    (
        "unlisted",
        call("brand_new_tool"),
        {
            **ALLOWED,
            "rule": "unlisted",
            "reasons": ["brand_new_tool has no entry in the policy data; allowed as an unlisted tool"],
        },
    ),
]

VISIBLE = [
    (
        "hidden_removed",
        {"phase": "tool_list", "tools": ["support_tickets_search", "internal_debug_dump", "zz"]},
        ["support_tickets_search", "zz"],
    ),
    ("empty", {"phase": "tool_list", "tools": []}, []),
]

RESULTS: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = [
    (
        "clean",
        call("support_tickets_search", phase="tool_result", result={"is_error": False, "bytes": 10, "anomalies": []}),
        None,
    ),
    (
        "flagged",
        call(
            "support_tickets_search",
            phase="tool_result",
            result={"is_error": False, "bytes": 10, "anomalies": ["truncated"]},
        ),
        {
            **ALLOWED,
            "action": "allow",
            "rule": "result_flagged",
            "reasons": ["result of support_tickets_search has anomaly truncated"],
        },
    ),
    (
        "blocked",
        call(
            "support_tickets_search",
            phase="tool_result",
            result={"is_error": False, "bytes": 1, "anomalies": ["secret_in_result"]},
        ),
        {
            "allow": False,
            "action": "withhold",
            "rule": "result_blocked",
            "require_approval": None,
            "retryable": False,
            "reasons": ["result of support_tickets_search has anomaly secret_in_result and is withheld from the model"],
        },
    ),
    (
        "injection marker in an untrusted tool's result",
        call(
            "support_tickets_get_context",
            phase="tool_result",
            result={"is_error": False, "bytes": 1, "anomalies": ["injection_marker"]},
        ),
        {
            "allow": False,
            "action": "withhold",
            "rule": "result_blocked",
            "require_approval": None,
            "retryable": False,
            "reasons": [
                "result of support_tickets_get_context has anomaly injection_marker and is withheld from the model"
            ],
        },
    ),
]

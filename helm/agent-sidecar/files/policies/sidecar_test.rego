# Tests for sidecar.rego, one group per rule. Run: `sidecar policy test policies -v`
# (or `opa test policies -v` where an opa binary is available).

package sidecar_test

import rego.v1

import data.sidecar

# A tool_call input as the sidecar sends it; tests override parts with object.union.
call(tool, args) := {
	"version": 1,
	"phase": "tool_call",
	"provider": "anthropic",
	"model": "claude-test",
	"agent": {"id": "agent-1", "namespace": "support", "labels": {}},
	"session": {"id": "s1", "calls_total": 0, "calls_by_tool": {}},
	"tool": {"name": tool, "declared": true, "schema_hash": "h"},
	"call": {"id": "toolu_1", "args": args, "args_hash": "a", "index": 0, "parallel": 1},
	"validation": {"valid": true, "errors": []},
	"replay": {"count": 0, "first_seen": null},
	"approval": {"status": "none", "id": null, "approved_by": null},
	"time": "2026-11-30T10:00:00Z",
}

search := call("support_tickets_search", {"query": "refund"})

refund(amount) := call("payments_refund", {"order_id": "o-1", "amount": amount})

reply(to) := call("support_replies_send", {"ticket_id": "t-1", "to": to, "body": "hi"})

# Rule 1: undeclared tools are refused (even read-only ones), retryable.
test_undeclared_tool_denied if {
	d := sidecar.decision with input as object.union(search, {"tool": {"declared": false}})
	d.allow == false
	d.retryable == true
	d.reasons == ["tool support_tickets_search is not declared in this request; call one of the declared tools"]
}

# Rule 2: invalid arguments are refused, retryable.
test_invalid_arguments_denied if {
	inp := object.union(search, {"validation": {"valid": false, "errors": [{"field": "query"}]}})
	d := sidecar.decision with input as inp
	d.allow == false
	d.retryable == true
	d.reasons == ["arguments of support_tickets_search do not match its schema (1 problem(s)); fix them and call again"]
}

# Rule 3: hidden tools are refused when called.
test_hidden_tool_denied if {
	d := sidecar.decision with input as call("internal_debug_dump", {})
	d.allow == false
	d.retryable == false
	d.reasons == ["tool internal_debug_dump is not available to this agent"]
}

# Rule 4: unlisted tools are refused when unlisted_tool.allow is false.
test_unlisted_tool_denied_when_configured if {
	d := sidecar.decision with input as call("brand_new_tool", {})
		with data.sidecar.unlisted_tool as {"side_effects": true, "allow": false}
	d.allow == false
	d.reasons == ["tool brand_new_tool has no entry in the policy data and unlisted tools are not allowed"]
}

# Rule 5: per-session call limit.
test_call_limit_reached_denied if {
	inp := object.union(refund(10), {"session": {"calls_by_tool": {"payments_refund": 5}}})
	d := sidecar.decision with input as inp
	d.allow == false
	d.retryable == false
	d.reasons == ["tool payments_refund may be called at most 5 times per session; this session has made 5 calls"]
}

test_call_limit_not_reached_allowed if {
	inp := object.union(refund(10), {"session": {"calls_by_tool": {"payments_refund": 4}}})
	d := sidecar.decision with input as inp
	d.allow == true
}

test_call_limit_applies_with_test_data if {
	inp := object.union(call("t", {}), {"session": {"calls_by_tool": {"t": 1}}})
	d := sidecar.decision with input as inp with data.sidecar.tools as {"t": {"side_effects": false, "max_calls_per_session": 1}}
	d.allow == false
}

# Rule 6: read-only tools are allowed, replays included.
test_read_only_allowed if {
	d := sidecar.decision with input as search
	d == {"allow": true, "reasons": ["support_tickets_search is read-only"], "require_approval": null, "retryable": false}
}

test_read_only_replay_allowed if {
	d := sidecar.decision with input as object.union(search, {"replay": {"count": 2}})
	d.allow == true
}

# Rule 7: replays of side-effecting tools are refused unless repeatable.
test_replay_of_side_effecting_tool_denied if {
	d := sidecar.decision with input as object.union(refund(10), {"replay": {"count": 1}})
	d.allow == false
	d.retryable == false
	d.reasons == ["payments_refund with these arguments already ran in this session and is not repeatable; the replay guard answers it with the earlier result"]
}

test_replay_of_repeatable_tool_allowed if {
	d := sidecar.decision with input as object.union(call("support_tickets_tag", {}), {"replay": {"count": 1}})
	d.allow == true
}

test_replay_of_unlisted_tool_denied if {
	d := sidecar.decision with input as object.union(call("brand_new_tool", {}), {"replay": {"count": 1}})
	d.allow == false
}

# Rule 8: an approved approval satisfies the requirement.
test_approved_approval_allows if {
	inp := object.union(refund(500), {"approval": {"status": "approved", "id": "ap-1", "approved_by": "alice"}})
	d := sidecar.decision with input as inp
	d.allow == true
	d.reasons == ["approved by alice (approval ap-1)"]
}

test_pending_approval_still_needs_approval if {
	inp := object.union(refund(500), {"approval": {"status": "pending", "id": "ap-1"}})
	d := sidecar.decision with input as inp
	d.allow == false
	d.require_approval.group == "finance-approvers"
}

test_approval_does_not_bypass_replay_guard if {
	inp := object.union(refund(500), {"replay": {"count": 1}, "approval": {"status": "approved", "id": "ap-1", "approved_by": "alice"}})
	d := sidecar.decision with input as inp
	d.allow == false
}

# Rule 9: approval.always.
test_always_needs_approval if {
	d := sidecar.decision with input as call("payments_close_account", {"account": "a-1"})
	d.allow == false
	d.retryable == true
	d.require_approval == {"group": "finance-approvers", "ttl_s": 3600}
	d.reasons == ["payments_close_account always needs approval by group finance-approvers"]
}

# Rule 10: amount threshold.
test_refund_above_limit_needs_approval if {
	d := sidecar.decision with input as refund(250)
	d.allow == false
	d.retryable == true
	d.require_approval == {"group": "finance-approvers", "ttl_s": 900}
	d.reasons == ["payments_refund of 250 is above the limit of 100 and needs approval by group finance-approvers"]
}

test_refund_at_limit_allowed if {
	d := sidecar.decision with input as refund(100)
	d == {"allow": true, "reasons": [], "require_approval": null, "retryable": false}
}

test_non_number_amount_is_not_compared if {
	# The lockdown refuses a string amount; the threshold rule just does not apply.
	d := sidecar.decision with input as refund("250")
	d.allow == true
}

test_approval_defaults_used if {
	d := sidecar.decision with input as call("t", {"n": 5})
		with data.sidecar.tools as {"t": {"approval": {"amount_arg": "n", "max_amount": 1}}}
		with data.sidecar.approval_defaults as {"group": "ops", "ttl_s": 60}
	d.require_approval == {"group": "ops", "ttl_s": 60}
}

# Rule 5b: recipients at a blocked domain are refused, case-insensitively, approved or not.
test_reply_to_blocked_domain_denied if {
	d := sidecar.decision with input as reply("Ana@Mailinator.COM")
	d == {
		"allow": false,
		"reasons": ["support_replies_send to an address at mailinator.com is refused: that domain is blocked for this tool; use the customer's address on file"],
		"require_approval": null,
		"retryable": false,
	}
}

test_reply_to_blocked_domain_denied_even_if_approved if {
	approved := object.union(reply("x@guerrillamail.com"), {"approval": {"status": "approved", "id": "a1", "approved_by": "lead"}})
	d := sidecar.decision with input as approved
	d.allow == false
}

test_blocked_domain_is_the_whole_domain if {
	d := sidecar.decision with input as reply("x@notmailinator.com")
	d.require_approval.group == "support-leads" # outside example.com, but not blocked
}

# Rule 11: recipient outside the allowed domains.
test_reply_outside_domain_needs_approval if {
	d := sidecar.decision with input as reply("someone@gmail.com")
	d.allow == false
	d.require_approval == {"group": "support-leads", "ttl_s": 3600}
	d.reasons == ["support_replies_send to an address outside example.com needs approval by group support-leads"]
}

test_reply_inside_domain_allowed if {
	d := sidecar.decision with input as reply("Customer@Example.COM")
	d.allow == true
}

test_reply_lookalike_domain_needs_approval if {
	d := sidecar.decision with input as reply("x@example.com.evil.io")
	d.allow == false
}

test_reply_non_string_recipient_needs_approval if {
	d := sidecar.decision with input as reply(42)
	d.allow == false
}

# Rule 12: unlisted tools are allowed, and the reason says so.
test_unlisted_tool_allowed_with_reason if {
	d := sidecar.decision with input as call("brand_new_tool", {})
	d == {
		"allow": true,
		"reasons": ["brand_new_tool has no entry in the policy data; allowed as an unlisted tool"],
		"require_approval": null,
		"retryable": false,
	}
}

test_unlisted_default_with_null_entry if {
	d := sidecar.decision with input as call("brand_new_tool", {}) with data.sidecar.unlisted_tool as null
	d.allow == true
}

# Rule 13: side-effecting tools within their thresholds are allowed.
test_side_effecting_within_thresholds_allowed if {
	d := sidecar.decision with input as refund(20)
	d.allow == true
	d.reasons == []
}

# Rule 14: visible_tools hides `hidden: true` tools.
test_visible_tools_hides_hidden if {
	v := sidecar.visible_tools with input as {"phase": "tool_list", "tools": ["support_tickets_search", "internal_debug_dump", "brand_new_tool"]}
	v == {"support_tickets_search", "brand_new_tool"}
}

test_visible_tools_empty_list if {
	v := sidecar.visible_tools with input as {"phase": "tool_list", "tools": []}
	count(v) == 0
}

# Rule 15: blocking anomalies withhold the result.
test_result_with_blocking_anomaly_withheld if {
	inp := object.union(search, {"phase": "tool_result", "result": {"is_error": false, "bytes": 10, "anomalies": ["secret_in_result"]}})
	d := sidecar.result_decision with input as inp
	d.allow == false
	d.reasons == ["result of support_tickets_search has anomaly secret_in_result and is withheld from the model"]
}

# Rule 16: other anomalies and oversize results are flagged.
test_result_anomaly_flagged if {
	inp := object.union(search, {"phase": "tool_result", "result": {"is_error": false, "bytes": 70000, "anomalies": ["truncated"]}})
	d := sidecar.result_decision with input as inp
	d.allow == true
	d.reasons == [
		"result of support_tickets_search has anomaly truncated",
		"result of support_tickets_search is 70000 bytes, above the limit of 65536",
	]
}

test_clean_result_has_no_decision if {
	inp := object.union(search, {"phase": "tool_result", "result": {"is_error": false, "bytes": 10, "anomalies": []}})
	not sidecar.result_decision with input as inp
}

# Tests of the support example (`example:support`): its data.json with the generic rules.
# One test per bypass reported in issue 14, each of which the library now refuses or sends
# to a human. Run: `sidecar policy test example:support -v` (or `opa test DIR -v` on a copy
# made by `sidecar policy init DIR --example support`).

package support_test

import rego.v1

import data.sidecar

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

approved(inp) := object.union(inp, {"approval": {"status": "approved", "id": "ap-1", "approved_by": "lee"}})

reply(to) := call("support_replies_send", {"ticket_id": "T-1", "to": to, "body": "hi"})

refund(amount) := call("payments_refund", {"order_id": "o-1", "amount": amount})

blocked_reason := "support_replies_send to an address at mailinator.com is refused: that domain is blocked for this tool; use the customer's address on file"

# --- support_replies_send: every reply needs approval, bound to its exact arguments ------

test_reply_always_needs_approval if {
	d := sidecar.decision with input as reply("ana@example.com")
	d.allow == false
	d.rule == "approval_always"
	d.require_approval == {"group": "support-leads", "ttl_s": 3600}
	d.reasons == ["support_replies_send always needs approval by group support-leads; the approval covers exactly these arguments"]
}

test_reply_by_draft_and_revision_needs_approval if {
	# A send declared by draft id and revision (the draft holds the recipient) has no
	# recipient argument to check, so its entry carries no blocked_recipients (block at the
	# tool that writes the draft): approval still applies to every call. Approvals are looked
	# up by the call's arguments hash, so one covers that draft at that revision only.
	entry := json.remove(data.sidecar.tools.support_replies_send, ["blocked_recipients"])
	inp := call("support_replies_send", {"draft_id": "d-7", "revision": 3})
	d := sidecar.decision with input as inp with data.sidecar.tools.support_replies_send as entry
	d.rule == "approval_always"
	d.require_approval.group == "support-leads"
}

test_reply_without_recipient_denied if {
	# With blocked_recipients on `to`, a send without `to` cannot be checked: refused.
	d := sidecar.decision with input as call("support_replies_send", {"ticket_id": "T-1", "body": "hi"})
	d.allow == false
	d.require_approval == null
	d.reasons == ["support_replies_send: recipient is missing"]
}

test_reply_approved_goes_through if {
	d := sidecar.decision with input as approved(reply("ana@example.com"))
	d.allow == true
	d.rule == "approved"
}

# --- blocked recipients: the reported bypasses are refused outright ---------------------

test_blocked_plain if {
	d := sidecar.decision with input as reply("ana@mailinator.com")
	d.allow == false
	d.require_approval == null
	d.reasons == [blocked_reason]
}

test_blocked_trailing_dot if {
	d := sidecar.decision with input as reply("ana@mailinator.com.")
	d.reasons == [blocked_reason]
}

test_blocked_subdomain if {
	d := sidecar.decision with input as reply("ana@eu.mailinator.com")
	d.allow == false
	d.require_approval == null
	d.rule == "blocked_recipient"
}

test_blocked_display_name if {
	d := sidecar.decision with input as reply("\"X\" <ana@mailinator.com>")
	d.reasons == [blocked_reason]
}

test_blocked_display_name_unquoted if {
	d := sidecar.decision with input as reply("Ana Customer <ana@mailinator.com>")
	d.reasons == [blocked_reason]
}

test_blocked_trailing_spaces if {
	d := sidecar.decision with input as reply("ana@mailinator.com   ")
	d.reasons == [blocked_reason]
}

test_blocked_case if {
	d := sidecar.decision with input as reply("ANA@MAILINATOR.COM")
	d.reasons == [blocked_reason]
}

test_blocked_percent_hack if {
	d := sidecar.decision with input as reply("ana%mailinator.com@example.com")
	d.allow == false
	d.require_approval == null
	d.rule == "blocked_recipient"
	d.reasons == ["support_replies_send: recipient \"ana%mailinator.com@example.com\" routes mail through its local part (% or !), which is refused"]
}

test_blocked_second_address if {
	d := sidecar.decision with input as reply("ana@example.com, ana@mailinator.com")
	d.allow == false
	d.require_approval == null
}

test_blocked_unicode_domain_asks_for_punycode if {
	d := sidecar.decision with input as reply("ana@müller.de")
	d.allow == false
	d.require_approval == null
	d.retryable == true
	contains(d.reasons[0], "punycode (xn--)")
}

test_blocked_even_if_approved if {
	d := sidecar.decision with input as approved(reply("ana@mailinator.com"))
	d.allow == false
}

test_guerrillamail_blocked if {
	d := sidecar.decision with input as reply("x@sharklasers.guerrillamail.com")
	d.rule == "blocked_recipient"
}

# --- payments_refund: amounts that cannot be compared need approval ---------------------

test_refund_small_allowed if {
	d := sidecar.decision with input as refund(40)
	d.allow == true
	d.rule == "within_limits"
}

test_refund_large_needs_approval if {
	d := sidecar.decision with input as refund(250)
	d.rule == "amount"
	d.require_approval == {"group": "finance-approvers", "ttl_s": 900}
}

test_refund_amount_string_needs_approval if {
	d := sidecar.decision with input as refund("250")
	d.allow == false
	d.rule == "invalid_amount"
	d.require_approval == {"group": "finance-approvers", "ttl_s": 900}
}

test_refund_amount_omitted_needs_approval if {
	d := sidecar.decision with input as call("payments_refund", {"order_id": "o-1"})
	d.allow == false
	d.rule == "invalid_amount"
	d.reasons == ["payments_refund: argument amount is missing; it needs approval by group finance-approvers"]
}

test_refund_amount_negative_needs_approval if {
	d := sidecar.decision with input as refund(-250)
	d.allow == false
	d.rule == "invalid_amount"
	d.require_approval.group == "finance-approvers"
}

test_refund_limit_per_session if {
	d := sidecar.decision with input as object.union(refund(1), {"session": {"calls_by_tool": {"payments_refund": 5}}})
	d.rule == "call_limit"
}

# --- the rest of the example -------------------------------------------------------------

test_search_read_only if {
	d := sidecar.decision with input as call("support_tickets_search", {"query": "refund"})
	d.allow == true
	d.rule == "read_only"
}

test_close_account_always_needs_approval if {
	d := sidecar.decision with input as call("payments_close_account", {"account": "a-1"})
	d.require_approval == {"group": "finance-approvers", "ttl_s": 3600}
}

test_debug_dump_hidden if {
	d := sidecar.decision with input as call("internal_debug_dump", {})
	d.rule == "hidden"
	v := sidecar.visible_tools with input as {"phase": "tool_list", "tools": ["support_tickets_search", "internal_debug_dump"]}
	v == {"support_tickets_search"}
}

test_unlisted_tool_allowed_and_named if {
	d := sidecar.decision with input as call("brand_new_tool", {})
	d.rule == "unlisted"
}

result(tool, anomalies) := object.union(call(tool, {}), {"phase": "tool_result", "result": {"is_error": false, "bytes": 10, "anomalies": anomalies}})

test_secret_in_result_withheld if {
	d := sidecar.result_decision with input as result("support_tickets_search", ["secret_in_result"])
	d.rule == "result_blocked"
	d.action == "withhold"
}

# Ticket text is written by customers: the search and context tools are `untrusted`, so the
# sidecar looks for injection markers in their results, and this policy withholds them.
test_injection_marker_in_ticket_withheld if {
	d := sidecar.result_decision with input as result("support_tickets_get_context", ["injection_marker"])
	d.action == "withhold"
	d.reasons == ["result of support_tickets_get_context has anomaly injection_marker and is withheld from the model"]
}

test_possible_secret_only_flagged if {
	d := sidecar.result_decision with input as result("support_tickets_search", ["possible_secret"])
	d.action == "allow"
}

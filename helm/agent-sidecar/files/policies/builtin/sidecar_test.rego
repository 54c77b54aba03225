# Tests of the generic rules in sidecar.rego, one group per rule id. They bring their own
# per-tool data (`decide` below), so they pass with any data.json beside them: the packaged
# default (`sidecar policy test`), the support example (`sidecar policy test example:support`)
# or a copy made by `sidecar policy init`. The same file runs with `opa test DIR -v`.

package sidecar_test

import rego.v1

import data.sidecar

# Test data: one tool per kind of rule.
tools_fixture := {
	"search": {"side_effects": false},
	"refund": {"side_effects": true, "max_calls_per_session": 5, "approval": {
		"amount_arg": "amount",
		"max_amount": 100,
		"group": "finance",
		"ttl_s": 900,
	}},
	"refund_strict": {"approval": {"amount_arg": "amount", "max_amount": 100, "on_invalid": "deny"}},
	"refund_min": {"approval": {"amount_arg": "amount", "max_amount": 100, "min_amount": 1}},
	"refund_broken": {"approval": {"amount_arg": "amount"}},
	"mail": {
		"blocked_recipients": {"recipient_arg": "to", "domains": ["blocked.test", "*.blocked.test", "xn--bcher-kva.test"]},
		"approval": {"recipient_arg": "to", "allowed_domains": ["example.com", "xn--mnchen-3ya.de"], "group": "leads"},
	},
	"mail_allow": {"approval": {"recipient_arg": "to", "allowed_domains": ["example.com", "xn--mnchen-3ya.de"], "group": "leads"}},
	"mail_sub": {"approval": {"recipient_arg": "to", "allowed_domains": ["example.com", "*.example.com"]}},
	"mail_block_approval": {"blocked_recipients": {"recipient_arg": "to", "domains": ["blocked.test"], "on_invalid": "approval"}},
	"mail_strict": {"approval": {"recipient_arg": "to", "allowed_domains": ["example.com"], "on_invalid": "deny"}},
	"mail_broken": {"blocked_recipients": {"recipient_arg": "to"}},
	"close": {"approval": {"always": true, "group": "finance"}},
	"tag": {"side_effects": true, "repeatable": true},
	"dump": {"side_effects": false, "hidden": true},
	"pinned": {"side_effects": false, "schema_hash": "h"},
	"pinned_approval": {"side_effects": false, "schema_hash": "h", "schema_pin": "approval"},
}

unlisted_fixture := {"side_effects": true, "repeatable": false, "allow": true}

defaults_fixture := {"group": "operators", "ttl_s": 3600}

# The decision for `inp` with the test data above.
decide(inp) := d if {
	d := sidecar.decision with input as inp
		with data.sidecar.tools as tools_fixture
		with data.sidecar.unlisted_tool as unlisted_fixture
		with data.sidecar.approval_defaults as defaults_fixture
}

# A tool_call input as the sidecar sends it; tests override parts with object.union.
call(tool, args) := {
	"version": 1,
	"phase": "tool_call",
	"provider": "anthropic",
	"model": "claude-test",
	"agent": {"id": "agent-1", "namespace": "support", "labels": {}},
	"session": {"id": "s1", "calls_total": 0, "calls_by_tool": {}},
	"tool": {"name": tool, "declared": true, "kind": "function", "schema_hash": "h"},
	"call": {"id": "toolu_1", "args": args, "args_hash": "a", "index": 0, "parallel": 1},
	"validation": {"valid": true, "errors": []},
	"replay": {"count": 0, "first_seen": null},
	"approval": {"status": "none", "id": null, "approved_by": null},
	"time": "2026-11-30T10:00:00Z",
}

approved(inp) := object.union(inp, {"approval": {"status": "approved", "id": "ap-1", "approved_by": "alice"}})

refund(amount) := call("refund", {"order_id": "o-1", "amount": amount})

mail(to) := call("mail", {"to": to, "body": "hi"})

allow_mail(to) := call("mail_allow", {"to": to, "body": "hi"})

# --- undeclared -------------------------------------------------------------------------

test_undeclared_tool_denied if {
	d := decide(object.union(call("search", {}), {"tool": {"declared": false}}))
	d.allow == false
	d.retryable == true
	d.rule == "undeclared"
	d.reasons == ["tool search is not declared in this request; call one of the declared tools"]
}

# --- tool kinds (input.tool.kind): the same rules decide every kind --------------------

# A call the provider ran itself (web search, its MCP calls) of a server tool the request did
# not enable: refused (the sidecar withholds its result).
test_undeclared_server_tool_denied if {
	d := decide(object.union(call("web_search", {"query": "q"}), {"tool": {"declared": false, "kind": "server", "schema_hash": ""}}))
	d.allow == false
	d.rule == "undeclared"
}

# An enabled server tool with no data entry passes as any unlisted tool does, reason included.
test_declared_server_tool_allowed_as_unlisted if {
	d := decide(object.union(call("web_search", {"query": "q"}), {"tool": {"kind": "server", "schema_hash": ""}}))
	d.allow == true
	d.rule == "unlisted"
}

# A provider-defined tool (Anthropic's bash, Responses shell) has no schema: a tool pinned to a
# schema cannot be replaced by one of the same name.
test_provider_defined_tool_under_a_pinned_name_denied if {
	d := decide(object.union(call("pinned", {"command": "ls"}), {"tool": {"kind": "provider_defined", "schema_hash": ""}}))
	d.allow == false
	d.rule == "schema_pin"
}

# Per-tool data applies whatever the kind: a hidden custom tool is refused.
test_hidden_custom_tool_denied if {
	d := decide(object.union(call("dump", {"input": "x"}), {"tool": {"kind": "custom", "schema_hash": ""}}))
	d.rule == "hidden"
}

# --- invalid_arguments ------------------------------------------------------------------

test_invalid_arguments_denied if {
	d := decide(object.union(call("search", {}), {"validation": {"valid": false, "errors": [{"field": "query"}]}}))
	d.allow == false
	d.retryable == true
	d.rule == "invalid_arguments"
	d.reasons == ["arguments of search do not match its schema (1 problem(s)); fix them and call again"]
}

# --- hidden -----------------------------------------------------------------------------

test_hidden_tool_denied if {
	d := decide(call("dump", {}))
	d == {"allow": false, "reasons": ["tool dump is not available to this agent"], "require_approval": null, "retryable": false, "rule": "hidden"}
}

# --- unlisted_denied / unlisted ---------------------------------------------------------

test_unlisted_tool_denied_when_configured if {
	d := sidecar.decision with input as call("brand_new", {})
		with data.sidecar.tools as tools_fixture
		with data.sidecar.unlisted_tool as {"side_effects": true, "allow": false}
	d.allow == false
	d.rule == "unlisted_denied"
	d.reasons == ["tool brand_new has no entry in the policy data and unlisted tools are not allowed"]
}

test_unlisted_tool_allowed_with_reason if {
	d := decide(call("brand_new", {}))
	d == {
		"allow": true,
		"reasons": ["brand_new has no entry in the policy data; allowed as an unlisted tool"],
		"require_approval": null,
		"retryable": false,
		"rule": "unlisted",
	}
}

test_unlisted_default_without_any_entry if {
	d := sidecar.decision with input as object.union(call("brand_new", {}), {"replay": {"count": 1}})
		with data.sidecar.tools as {}
		with data.sidecar.unlisted_tool as null
	d.allow == false
	d.rule == "replay"
}

# --- schema_pin -------------------------------------------------------------------------

test_schema_pin_same_hash_allowed if {
	d := decide(call("pinned", {}))
	d.allow == true
	d.rule == "read_only"
}

test_schema_pin_changed_denied if {
	d := decide(object.union(call("pinned", {}), {"tool": {"schema_hash": "other"}}))
	d.allow == false
	d.require_approval == null
	d.rule == "schema_pin"
	d.reasons == ["tool pinned is declared with schema other, but the policy pins schema h; the tool's schema changed"]
}

test_schema_pin_missing_hash_denied if {
	d := decide(json.remove(call("pinned", {}), ["tool/schema_hash"]))
	d.allow == false
	d.rule == "schema_pin"
	d.reasons == ["tool pinned is declared with schema (none), but the policy pins schema h; the tool's schema changed"]
}

test_schema_pin_changed_needs_approval if {
	d := decide(object.union(call("pinned_approval", {}), {"tool": {"schema_hash": "other"}}))
	d.allow == false
	d.rule == "schema_pin"
	d.require_approval == {"group": "operators", "ttl_s": 3600}
	d.reasons == ["tool pinned_approval is declared with schema other, but the policy pins schema h; the tool's schema changed; it needs approval by group operators"]
}

test_schema_pin_changed_and_approved_allowed if {
	d := decide(approved(object.union(call("pinned_approval", {}), {"tool": {"schema_hash": "other"}})))
	d.allow == true
}

# --- call_limit -------------------------------------------------------------------------

test_call_limit_reached_denied if {
	d := decide(object.union(refund(10), {"session": {"calls_by_tool": {"refund": 5}}}))
	d.allow == false
	d.retryable == false
	d.rule == "call_limit"
	d.reasons == ["tool refund may be called at most 5 times per session; this session has made 5 calls"]
}

test_call_limit_not_reached_allowed if {
	d := decide(object.union(refund(10), {"session": {"calls_by_tool": {"refund": 4}}}))
	d.allow == true
}

# --- read_only --------------------------------------------------------------------------

test_read_only_allowed if {
	d := decide(call("search", {"query": "refund"}))
	d == {"allow": true, "reasons": ["search is read-only"], "require_approval": null, "retryable": false, "rule": "read_only"}
}

test_read_only_replay_allowed if {
	d := decide(object.union(call("search", {}), {"replay": {"count": 2}}))
	d.allow == true
}

# --- replay -----------------------------------------------------------------------------

test_replay_of_side_effecting_tool_denied if {
	d := decide(object.union(refund(10), {"replay": {"count": 1}}))
	d.allow == false
	d.retryable == false
	d.rule == "replay"
	d.reasons == ["refund with these arguments already ran in this session and is not repeatable; the replay guard answers it with the earlier result"]
}

test_replay_of_repeatable_tool_allowed if {
	d := decide(object.union(call("tag", {}), {"replay": {"count": 1}}))
	d.allow == true
}

test_replay_of_unlisted_tool_denied if {
	d := decide(object.union(call("brand_new", {}), {"replay": {"count": 1}}))
	d.allow == false
	d.rule == "replay"
}

test_approval_does_not_bypass_replay if {
	d := decide(approved(object.union(refund(500), {"replay": {"count": 1}})))
	d.allow == false
}

# --- approved ---------------------------------------------------------------------------

test_approved_approval_allows if {
	d := decide(approved(refund(500)))
	d.allow == true
	d.rule == "approved"
	d.reasons == ["approved by alice (approval ap-1)"]
}

test_pending_approval_still_needs_approval if {
	d := decide(object.union(refund(500), {"approval": {"status": "pending", "id": "ap-1"}}))
	d.allow == false
	d.require_approval.group == "finance"
}

# --- approval_always --------------------------------------------------------------------

test_always_needs_approval if {
	d := decide(call("close", {"account": "a-1"}))
	d.allow == false
	d.retryable == true
	d.rule == "approval_always"
	d.require_approval == {"group": "finance", "ttl_s": 3600}
	d.reasons == ["close always needs approval by group finance; the approval covers exactly these arguments"]
}

# --- amount / invalid_amount (fail closed) ----------------------------------------------

test_refund_above_limit_needs_approval if {
	d := decide(refund(250))
	d.allow == false
	d.rule == "amount"
	d.require_approval == {"group": "finance", "ttl_s": 900}
	d.reasons == ["refund of 250 is above the limit of 100 and needs approval by group finance"]
}

test_refund_at_limit_allowed if {
	d := decide(refund(100))
	d == {"allow": true, "reasons": [], "require_approval": null, "retryable": false, "rule": "within_limits"}
}

test_refund_amount_as_string_needs_approval if {
	d := decide(refund("250"))
	d.allow == false
	d.rule == "invalid_amount"
	d.require_approval.group == "finance"
	d.reasons == ["refund: argument amount is \"250\", not a number; it needs approval by group finance"]
}

test_refund_amount_small_string_needs_approval if {
	d := decide(refund("5"))
	d.rule == "invalid_amount"
	d.require_approval.group == "finance"
}

test_refund_amount_omitted_needs_approval if {
	d := decide(call("refund", {"order_id": "o-1"}))
	d.allow == false
	d.rule == "invalid_amount"
	d.reasons == ["refund: argument amount is missing; it needs approval by group finance"]
}

test_refund_amount_null_needs_approval if {
	d := decide(refund(null))
	d.rule == "invalid_amount"
	d.require_approval.group == "finance"
}

test_refund_amount_negative_needs_approval if {
	d := decide(refund(-50))
	d.allow == false
	d.rule == "invalid_amount"
	d.reasons == ["refund: argument amount is -50, below the minimum of 0; it needs approval by group finance"]
}

test_refund_amount_bool_or_object_needs_approval if {
	decide(refund(true)).rule == "invalid_amount"
	decide(refund({"value": 1})).rule == "invalid_amount"
	decide(refund([1])).rule == "invalid_amount"
}

test_refund_amount_below_configured_minimum if {
	d := decide(call("refund_min", {"amount": 0.5}))
	d.rule == "invalid_amount"
	d.require_approval != null
}

test_refund_invalid_amount_denied_when_configured if {
	d := decide(call("refund_strict", {"amount": "250"}))
	d.allow == false
	d.require_approval == null
	d.retryable == true
	d.rule == "invalid_amount"
	d.reasons == ["refund_strict: argument amount is \"250\", not a number"]
}

test_refund_invalid_amount_denied_even_if_approved if {
	d := decide(approved(call("refund_strict", {})))
	d.allow == false
}

test_malformed_amount_settings_need_approval if {
	d := decide(call("refund_broken", {"amount": 5}))
	d.allow == false
	d.rule == "invalid_amount"
	d.reasons == ["refund_broken: the policy data for this tool has no valid approval.amount_arg and max_amount; it needs approval by group operators"]
}

test_approval_defaults_used if {
	d := sidecar.decision with input as call("t", {"n": 5})
		with data.sidecar.tools as {"t": {"approval": {"amount_arg": "n", "max_amount": 1}}}
		with data.sidecar.approval_defaults as {"group": "ops", "ttl_s": 60}
	d.require_approval == {"group": "ops", "ttl_s": 60}
}

# --- blocked_recipient ------------------------------------------------------------------

test_blocked_domain_denied if {
	d := decide(mail("ana@blocked.test"))
	d == {
		"allow": false,
		"reasons": ["mail to an address at blocked.test is refused: that domain is blocked for this tool; use the customer's address on file"],
		"require_approval": null,
		"retryable": false,
		"rule": "blocked_recipient",
	}
}

test_blocked_domain_case_insensitive if decide(mail("Ana@BLOCKED.Test")).rule == "blocked_recipient"

test_blocked_domain_trailing_dot if decide(mail("ana@blocked.test.")).reasons[0] == decide(mail("ana@blocked.test")).reasons[0]

test_blocked_domain_surrounding_whitespace if decide(mail("  ana@blocked.test \n")).rule == "blocked_recipient"

test_blocked_domain_display_name if {
	decide(mail("\"Ana\" <ana@blocked.test>")).reasons[0] == decide(mail("ana@blocked.test")).reasons[0]
	decide(mail("Ana Example <ana@blocked.test>")).reasons[0] == decide(mail("ana@blocked.test")).reasons[0]
	decide(mail("\"Ana, <x@example.com>\" <ana@blocked.test>")).require_approval == null
}

test_blocked_subdomain_by_wildcard_entry if {
	d := decide(mail("ana@mx.eu.blocked.test"))
	d.allow == false
	d.require_approval == null
	d.reasons == ["mail to an address at mx.eu.blocked.test is refused: that domain is blocked for this tool; use the customer's address on file"]
}

test_blocked_is_the_whole_domain if {
	d := decide(mail("ana@notblocked.test"))
	d.rule == "recipient" # not blocked: outside the allowed domains
}

test_blocked_percent_hack_denied if {
	d := decide(mail("ana%blocked.test@example.com"))
	d.allow == false
	d.require_approval == null
	d.retryable == true
	d.rule == "blocked_recipient"
	d.reasons == ["mail: recipient \"ana%blocked.test@example.com\" routes mail through its local part (% or !), which is refused"]
}

test_blocked_bang_path_denied if decide(mail("blocked.test!ana@example.com")).rule == "blocked_recipient"

test_blocked_punycode_entry_matches if decide(mail("x@XN--BCHER-KVA.test")).rule == "blocked_recipient"

test_blocked_unicode_domain_refused_with_hint if {
	d := decide(mail("x@bücher.test"))
	d.allow == false
	d.require_approval == null
	d.reasons == ["mail: recipient \"x@bücher.test\" has a domain that is not ASCII; write it in its punycode (xn--) form"]
}

test_blocked_invalid_recipients_denied if {
	every bad in [
		null, 42, "", "ana", "ana@", "@blocked.test", "a@b@blocked.test", "ana@blocked.test, bob@example.com",
		"bob@example.com, ana@blocked.test", "ana@blocked.test (Ana)", "\"ana\"@example.com",
		"ana@[127.0.0.1]", "ana @example.com", "Ana <ana@example.com", "x@example..com", "x@example.com..",
		"x@-example.com", "ana@blocked.test <bob@example.com>", "<ana@blocked.test>, <bob@example.com>",
	] {
		d := decide(mail(bad))
		d.allow == false
		d.rule == "blocked_recipient"
		d.require_approval == null
	}
}

test_blocked_missing_recipient_denied if {
	d := decide(call("mail", {"body": "hi"}))
	d.rule == "blocked_recipient"
	d.reasons == ["mail: recipient is missing"]
}

test_blocked_invalid_recipient_needs_approval_when_configured if {
	d := decide(call("mail_block_approval", {"to": "x%y@z.test"}))
	d.rule == "blocked_recipient"
	d.require_approval.group == "operators"
	decide(approved(call("mail_block_approval", {"to": "x%y@z.test"}))).allow == true
	decide(approved(call("mail_block_approval", {"to": "x@blocked.test"}))).allow == false
}

test_blocked_malformed_settings_denied if {
	d := decide(call("mail_broken", {"to": "x@example.com"}))
	d.allow == false
	d.rule == "blocked_recipient"
	d.reasons == ["mail_broken: the policy data for this tool has no valid blocked_recipients.recipient_arg and domains"]
}

test_blocked_denied_even_if_approved if decide(approved(mail("x@blocked.test"))).allow == false

# --- recipient / invalid_recipient (allowed_domains) ------------------------------------

test_recipient_inside_domain_allowed if {
	every ok in [
		"customer@example.com", "Customer@Example.COM", "customer@example.com.", " customer@example.com ",
		"\"Customer, Ana\" <customer@example.com>", "Ana <customer@example.com>",
		"\"evil@blocked.test\" <customer@example.com>", "x@xn--mnchen-3ya.de",
	] {
		d := decide(allow_mail(ok))
		d.allow == true
	}
}

test_recipient_outside_domain_needs_approval if {
	d := decide(allow_mail("someone@gmail.com"))
	d.allow == false
	d.rule == "recipient"
	d.require_approval == {"group": "leads", "ttl_s": 3600}
	d.reasons == ["mail_allow to an address outside example.com, xn--mnchen-3ya.de needs approval by group leads"]
}

test_recipient_subdomain_needs_approval_without_wildcard if {
	d := decide(allow_mail("x@mail.example.com"))
	d.rule == "recipient"
	d.require_approval.group == "leads"
}

test_recipient_subdomain_allowed_by_wildcard_entry if {
	decide(call("mail_sub", {"to": "x@mail.example.com"})).allow == true
	decide(call("mail_sub", {"to": "x@example.com"})).allow == true
	decide(call("mail_sub", {"to": "x@badexample.com"})).allow == false
}

test_recipient_lookalike_domain_needs_approval if {
	decide(allow_mail("x@example.com.evil.io")).rule == "recipient"
	decide(allow_mail("x@evil-example.com")).rule == "recipient"
}

test_recipient_percent_hack_needs_approval if {
	d := decide(allow_mail("x%evil.io@example.com"))
	d.allow == false
	d.rule == "invalid_recipient"
	d.reasons == ["mail_allow: recipient \"x%evil.io@example.com\" routes mail through its local part (% or !), which is refused; it needs approval by group leads"]
}

test_recipient_unicode_domain_needs_approval if {
	d := decide(allow_mail("x@münchen.de"))
	d.rule == "invalid_recipient"
	d.require_approval.group == "leads"
	contains(d.reasons[0], "punycode")
}

test_recipient_homograph_needs_approval if decide(allow_mail("x@еxample.com")).rule == "invalid_recipient" # Cyrillic е

test_recipient_invalid_needs_approval if {
	every bad in [null, 42, ["x@example.com"], "x@example.com, y@evil.io", "x@example.com (me)", "<x@example.com> y@evil.io"] {
		d := decide(allow_mail(bad))
		d.allow == false
		d.rule == "invalid_recipient"
		d.require_approval.group == "leads"
	}
}

test_recipient_missing_needs_approval if {
	d := decide(call("mail_sub", {"body": "hi"}))
	d.rule == "invalid_recipient"
	d.reasons == ["mail_sub: recipient is missing; it needs approval by group operators"]
}

test_recipient_invalid_denied_when_configured if {
	d := decide(call("mail_strict", {"to": "x%evil.io@example.com"}))
	d.allow == false
	d.require_approval == null
	d.rule == "invalid_recipient"
}

# --- within_limits ----------------------------------------------------------------------

test_side_effecting_within_thresholds_allowed if {
	d := decide(refund(20))
	d.allow == true
	d.rule == "within_limits"
	d.reasons == []
}

# Approval settings that hold no threshold (the threshold branches test
# `tool_settings.approval` first): a side-effecting tool within its limits.
test_approval_settings_without_thresholds_within_limits if {
	every settings in [null, false, "yes", [], {}, {"group": "finance"}] {
		d := sidecar.decision with input as call("t", {"amount": 500, "to": "x@other.test"})
			with data.sidecar.tools as {"t": {"approval": settings}}
		d.rule == "within_limits"
	}
}

# The unlisted-tool settings' thresholds apply to unlisted tools like a listed tool's.
test_unlisted_tool_thresholds_apply if {
	d := sidecar.decision with input as call("brand_new", {"amount": 500})
		with data.sidecar.tools as {}
		with data.sidecar.unlisted_tool as {"approval": {"amount_arg": "amount", "max_amount": 100}}
	d.rule == "amount"
	d.require_approval.group == "operators"
}

# --- visible_tools ----------------------------------------------------------------------

test_visible_tools_hides_hidden if {
	v := sidecar.visible_tools with input as {"phase": "tool_list", "tools": ["search", "dump", "brand_new"]}
		with data.sidecar.tools as tools_fixture
	v == {"search", "brand_new"}
}

test_visible_tools_empty_list if {
	v := sidecar.visible_tools with input as {"phase": "tool_list", "tools": []}
	count(v) == 0
}

# --- result_blocked / result_redacted / result_flagged --------------------------------------

result_of(anomalies, size) := object.union(call("search", {}), {"phase": "tool_result", "result": {"is_error": false, "bytes": size, "anomalies": anomalies}})

test_result_with_blocking_anomaly_withheld if {
	d := sidecar.result_decision with input as result_of(["secret_in_result"], 10)
		with data.sidecar.results as {"block_anomalies": ["secret_in_result"]}
	d.allow == false
	d.action == "withhold"
	d.rule == "result_blocked"
	d.reasons == ["result of search has anomaly secret_in_result and is withheld from the model"]
}

test_result_blocking_wins_over_redacting if {
	d := sidecar.result_decision with input as result_of(["possible_secret", "secret_in_result"], 10)
		with data.sidecar.results as {"block_anomalies": ["secret_in_result"], "redact_anomalies": ["possible_secret"]}
	d.action == "withhold"
	d.reasons == ["result of search has anomaly secret_in_result and is withheld from the model"]
}

test_result_redacted_names_the_kinds if {
	d := sidecar.result_decision with input as result_of(["unknown_call", "possible_secret", "injection_marker"], 10)
		with data.sidecar.results as {"redact_anomalies": ["possible_secret", "injection_marker"]}
	d.allow == true
	d.action == "redact"
	d.rule == "result_redacted"
	d.redact == ["possible_secret", "injection_marker"]
	d.reasons == [
		"result of search has anomaly possible_secret; the matched text is redacted",
		"result of search has anomaly injection_marker; the matched text is redacted",
	]
}

test_result_anomaly_flagged if {
	d := sidecar.result_decision with input as result_of(["unknown_call", "oversized_result"], 70000)
		with data.sidecar.results as {"block_anomalies": []}
	d.allow == true
	d.action == "allow"
	d.rule == "result_flagged"
	d.reasons == [
		"result of search has anomaly unknown_call",
		"result of search has anomaly oversized_result (70000 bytes)",
	]
}

test_result_without_results_data_is_only_flagged if {
	d := sidecar.result_decision with input as result_of(["secret_in_result"], 10) with data.sidecar.results as {}
	d.action == "allow"
	d.rule == "result_flagged"
}

test_clean_result_has_no_decision if {
	not sidecar.result_decision with input as result_of([], 10) with data.sidecar.tools as tools_fixture
}

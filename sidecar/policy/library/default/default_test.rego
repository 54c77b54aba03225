# Tests of the packaged default (`builtin`: what `sidecar run` enforces without
# --policies): its data.json with the generic rules. Undeclared tools and invalid arguments
# are refused, every tool is unlisted and so side-effecting (replays are refused), nothing
# needs approval.

package default_test

import rego.v1

import data.sidecar

call(tool, args) := {
	"version": 1,
	"phase": "tool_call",
	"tool": {"name": tool, "declared": true, "schema_hash": "h"},
	"call": {"id": "c1", "args": args, "args_hash": "a", "index": 0, "parallel": 1},
	"session": {"id": "s1", "calls_total": 0, "calls_by_tool": {}},
	"validation": {"valid": true, "errors": []},
	"replay": {"count": 0, "first_seen": null},
	"approval": {"status": "none", "id": null, "approved_by": null},
}

test_undeclared_refused if {
	d := sidecar.decision with input as object.union(call("anything", {}), {"tool": {"declared": false}})
	d.allow == false
	d.rule == "undeclared"
}

test_invalid_arguments_refused if {
	d := sidecar.decision with input as object.union(call("anything", {}), {"validation": {"valid": false, "errors": [{}]}})
	d.allow == false
	d.rule == "invalid_arguments"
}

test_declared_tool_allowed_as_unlisted if {
	d := sidecar.decision with input as call("payments_refund", {"amount": 1000000})
	d.allow == true
	d.require_approval == null
	d.rule == "unlisted"
}

test_replay_refused if {
	d := sidecar.decision with input as object.union(call("anything", {}), {"replay": {"count": 1}})
	d.allow == false
	d.rule == "replay"
}

test_every_tool_visible if {
	v := sidecar.visible_tools with input as {"phase": "tool_list", "tools": ["a", "b"]}
	v == {"a", "b"}
}

result(tool, anomalies) := object.union(call(tool, {}), {"phase": "tool_result", "result": {"is_error": false, "bytes": 10, "anomalies": anomalies}})

test_secret_in_result_withheld if {
	d := sidecar.result_decision with input as result("anything", ["secret_in_result"])
	d.action == "withhold"
	d.rule == "result_blocked"
}

test_partially_inspected_result_withheld if {
	d := sidecar.result_decision with input as result("anything", ["oversized_result", "partially_inspected"])
	d.action == "withhold"
	d.reasons == ["result of anything has anomaly partially_inspected and is withheld from the model"]
}

test_possible_secret_and_injection_marker_only_flagged if {
	d := sidecar.result_decision with input as result("anything", ["possible_secret", "injection_marker"])
	d.action == "allow"
	d.rule == "result_flagged"
}

# The sidecar's shipped policy library (package sidecar). See docs/policies.md.
#
# The sidecar asks three questions, one per phase:
#   data.sidecar.decision         phase tool_call:   may this tool call reach the agent?
#   data.sidecar.visible_tools    phase tool_list:   which declared tools may the model see?
#   data.sidecar.result_decision  phase tool_result: anything to say about a result? (undefined: no)
#
# Per-tool settings come from policies/data.json, as data.sidecar.tools.<tool name>:
#   side_effects           bool     false = read-only (default true: assume side effects)
#   repeatable             bool     true = a replay of the same call may run again
#   hidden                 bool     true = not shown to the model, and refused if called
#   max_calls_per_session  int      refuse once the session has made this many calls
#   max_result_bytes       int      flag results larger than this
#   blocked_recipients     object   recipients that are refused outright:
#       recipient_arg      string   argument holding an e-mail address ...
#       domains            [string] ... whose domain must not be one of these
#   approval               object   when a human must approve (all keys optional):
#       always             bool     every call needs approval
#       amount_arg         string   argument holding an amount ...
#       max_amount         number   ... above which approval is needed
#       recipient_arg      string   argument holding an e-mail address ...
#       allowed_domains    [string] ... outside of which approval is needed
#       group              string   who approves (else data.sidecar.approval_defaults.group)
#       ttl_s              int      how long the approval stays valid (else approval_defaults)
# Tools without an entry get data.sidecar.unlisted_tool (shipped: side-effecting, allowed,
# with a reason saying so, so the operator can find and list them). Without that entry
# either, the built-in default below is the same.
#
# Style: `decision` is ONE rule with an else-chain: the first matching rule decides, in the
# order written. This is deliberate: regorus pays a few microseconds per rule definition
# evaluated, and a first-match chain keeps a decision around 40 us where a set of partial
# rules costs 3x that. Add a rule by inserting a branch at the right place in the chain.
#
# Only Rego that both regorus 0.13 and OPA 1.x accept is used (docs/policies.md lists it).
# Rule names must not equal keys of data.json under "sidecar" (tools, unlisted_tool,
# approval_defaults, results): base and virtual documents share data.sidecar. And never
# read data.sidecar as a whole from this package: it contains this package's rules, which
# OPA rejects as recursion.

package sidecar

import rego.v1

# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------

# Settings of the called tool: its data.json entry, else the unlisted-tool default.
tool_settings := s if {
	s := data.sidecar.tools[input.tool.name]
} else := s if {
	s := data.sidecar.unlisted_tool
} else := {"side_effects": true, "repeatable": false, "allow": true}

# Only an explicit `side_effects: false` makes a tool read-only.
read_only if tool_settings.side_effects == false

approval_group := g if {
	g := tool_settings.approval.group
} else := g if {
	g := data.sidecar.approval_defaults.group
} else := "operators"

approval_ttl_s := t if {
	t := tool_settings.approval.ttl_s
} else := t if {
	t := data.sidecar.approval_defaults.ttl_s
} else := 3600

deny(reason, retryable) := {"allow": false, "reasons": [reason], "require_approval": null, "retryable": retryable}

# A call waiting for approval is retryable: the same call passes once approved.
needs_approval(reason) := {
	"allow": false,
	"reasons": [reason],
	"require_approval": {"group": approval_group, "ttl_s": approval_ttl_s},
	"retryable": true,
}

allowed(reasons) := {"allow": true, "reasons": reasons, "require_approval": null, "retryable": false}

# True when `recipient` is an address in one of `domains` (case-insensitive).
recipient_allowed(recipient, domains) if {
	is_string(recipient)
	parts := split(lower(recipient), "@")
	count(parts) == 2
	some domain in domains
	parts[1] == lower(domain)
}

# The lower-cased domain of an e-mail address (undefined for anything else).
address_domain(address) := lower(parts[1]) if {
	is_string(address)
	parts := split(address, "@")
	count(parts) == 2
}

calls_so_far := n if {
	n := input.session.calls_by_tool[input.tool.name]
} else := 0

# ---------------------------------------------------------------------------------------
# decision (phase tool_call): the first matching rule decides.
# ---------------------------------------------------------------------------------------

# Rule 1: undeclared tools are refused. The model may only call tools the agent declared.
decision := deny(sprintf("tool %s is not declared in this request; call one of the declared tools", [input.tool.name]), true) if {
	input.tool.declared == false

	# Rule 2: arguments that failed schema validation are refused. The argument lockdown
	# normally refuses them before the policy runs; the policy must not allow them anyway.
} else := deny(sprintf("arguments of %s do not match its schema (%d problem(s)); fix them and call again", [input.tool.name, count(object.get(input.validation, "errors", []))]), true) if {
	input.validation.valid == false

	# Rule 3: hidden tools (data.json `hidden: true`) are not shown to the model
	# (visible_tools), and a call to one is refused all the same.
} else := deny(sprintf("tool %s is not available to this agent", [input.tool.name]), false) if {
	tool_settings.hidden == true

	# Rule 4: tools missing from data.json are refused when unlisted_tool.allow is false.
} else := deny(sprintf("tool %s has no entry in the policy data and unlisted tools are not allowed", [input.tool.name]), false) if {
	tool_settings.allow == false
	not data.sidecar.tools[input.tool.name]

	# Rule 5: per-session call limit (calls_by_tool counts the calls made before this one).
} else := deny(sprintf("tool %s may be called at most %d times per session; this session has made %d calls", [input.tool.name, limit, calls_so_far]), false) if {
	limit := tool_settings.max_calls_per_session
	calls_so_far >= limit

	# Rule 5b: a recipient (argument `blocked_recipients.recipient_arg`) at one of
	# `blocked_recipients.domains` is refused outright: no approval can allow it.
} else := deny(sprintf("%s to an address at %s is refused: that domain is blocked for this tool; use the customer's address on file", [input.tool.name, domain]), false) if {
	domain := address_domain(input.call.args[tool_settings.blocked_recipients.recipient_arg])
	domain in {lower(d) | some d in tool_settings.blocked_recipients.domains}

	# Rule 6: read-only tools are allowed (replays included: running them again is harmless).
} else := allowed([sprintf("%s is read-only", [input.tool.name])]) if {
	read_only

	# Rule 7: a replay (same tool, same arguments, already ran in this session) of a
	# side-effecting tool is refused unless the tool is `repeatable`: the sidecar's replay
	# guard answers it with the remembered result instead of running it twice.
} else := deny(sprintf("%s with these arguments already ran in this session and is not repeatable; the replay guard answers it with the earlier result", [input.tool.name]), false) if {
	input.replay.count > 0
	not tool_settings.repeatable == true

	# Rule 8: an approved approval satisfies any approval requirement below.
} else := allowed([sprintf("approved by %v (approval %v)", [input.approval.approved_by, input.approval.id])]) if {
	input.approval.status == "approved"

	# Rule 9: tools with `approval.always` need approval for every call.
} else := needs_approval(sprintf("%s always needs approval by group %s", [input.tool.name, approval_group])) if {
	tool_settings.approval.always == true

	# Rule 10: an amount above `approval.max_amount` (argument `approval.amount_arg`) needs approval.
} else := needs_approval(sprintf("%s of %v is above the limit of %v and needs approval by group %s", [input.tool.name, amount, limit, approval_group])) if {
	limit := tool_settings.approval.max_amount
	amount := input.call.args[tool_settings.approval.amount_arg]
	is_number(amount)
	amount > limit

	# Rule 11: a recipient (argument `approval.recipient_arg`) outside
	# `approval.allowed_domains` needs approval.
} else := needs_approval(sprintf("%s to an address outside %s needs approval by group %s", [input.tool.name, concat(", ", tool_settings.approval.allowed_domains), approval_group])) if {
	recipient := input.call.args[tool_settings.approval.recipient_arg]
	not recipient_allowed(recipient, tool_settings.approval.allowed_domains)

	# Rule 12: unlisted tools that got this far are allowed, and the reason says so, so the
	# operator can spot them in logs and traces and give them an entry.
} else := allowed([sprintf("%s has no entry in the policy data; allowed as an unlisted tool", [input.tool.name])]) if {
	not data.sidecar.tools[input.tool.name]

	# Rule 13: everything else (side-effecting, within its thresholds) is allowed.
} else := allowed([])

# ---------------------------------------------------------------------------------------
# visible_tools (phase tool_list): the declared tools the model may see.
# ---------------------------------------------------------------------------------------

# Rule 14: tools with `hidden: true` in data.json are removed from the request's tool list.
visible_tools contains name if {
	some name in input.tools
	not data.sidecar.tools[name].hidden == true
}

# ---------------------------------------------------------------------------------------
# result_decision (phase tool_result). Undefined when there is nothing to say.
# ---------------------------------------------------------------------------------------

# Anomalies listed in data.sidecar.results.block_anomalies withhold the result; any other
# anomaly is only flagged (the result reaches the model, the reasons go to logs and traces).
default result_block_anomalies := []

result_block_anomalies := data.sidecar.results.block_anomalies

result_anomalies := a if {
	a := input.result.anomalies
} else := []

# Rule 15: a result with a blocking anomaly is withheld.
result_decision := {"allow": false, "reasons": blocked, "require_approval": null, "retryable": false} if {
	blocked := [sprintf("result of %s has anomaly %v and is withheld from the model", [input.tool.name, a]) |
		some a in result_anomalies
		a in result_block_anomalies
	]
	count(blocked) > 0

	# Rule 16: other anomalies, and results above the tool's `max_result_bytes`, are flagged.
} else := {"allow": true, "reasons": flagged, "require_approval": null, "retryable": false} if {
	anomalies := [sprintf("result of %s has anomaly %v", [input.tool.name, a]) | some a in result_anomalies]
	oversize := [sprintf("result of %s is %d bytes, above the limit of %d", [input.tool.name, input.result.bytes, limit]) |
		limit := tool_settings.max_result_bytes
		input.result.bytes > limit
	]
	flagged := array.concat(anomalies, oversize)
	count(flagged) > 0
}

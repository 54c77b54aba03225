# The sidecar's shipped policy library (package sidecar). See docs/policies.md.
#
# The sidecar asks three questions, one per phase:
#   data.sidecar.decision         phase tool_call:   may this tool call reach the agent?
#   data.sidecar.visible_tools    phase tool_list:   which declared tools may the model see?
#   data.sidecar.result_decision  phase tool_result: anything to say about a result? (undefined: no)
#
# These rules are generic: what they do per tool comes from data.json, as
# data.sidecar.tools.<tool name> (the packaged `builtin` data lists no tool; the support
# example, `example:support`, lists the support agent's tools):
#   side_effects           bool     false = read-only (default true: assume side effects)
#   repeatable             bool     true = a replay of the same call may run again
#   hidden                 bool     true = not shown to the model, and refused if called
#   max_calls_per_session  int      refuse once the session has made this many calls
#   max_result_bytes       int      flag results larger than this
#   schema_hash            string   the declared schema this tool must have (`sidecar schemas
#                                   show` prints it); another schema is refused or needs approval
#   schema_pin             string   "deny" (default) or "approval": what a different schema gets
#   blocked_recipients     object   recipients that are refused outright:
#       recipient_arg      string   argument holding an e-mail address ...
#       domains            [string] ... whose domain must not be one of these
#       on_invalid         string   "deny" (default) or "approval": a recipient that is missing
#                                   or not one plain address (see "Addresses" below)
#   approval               object   when a human must approve (all keys optional):
#       always             bool     every call needs approval
#       amount_arg         string   argument holding an amount ...
#       max_amount         number   ... above which approval is needed
#       min_amount         number   ... below which the amount is invalid (default 0)
#       recipient_arg      string   argument holding an e-mail address ...
#       allowed_domains    [string] ... outside of which approval is needed
#       on_invalid         string   "approval" (default) or "deny": an amount or recipient that
#                                   is missing, of the wrong type, unparseable or out of range
#       group              string   who approves (else data.sidecar.approval_defaults.group)
#       ttl_s              int      how long the approval stays valid (else approval_defaults)
# Tools without an entry get data.sidecar.unlisted_tool; without that entry either, the
# built-in default below: side-effecting (replays refused), allowed, with a reason saying so.
#
# Fail closed: a threshold rule never reads "cannot tell" as "allowed". An argument it needs
# that is missing, of the wrong type, unparseable or out of range, and threshold settings that
# are themselves malformed, give `on_invalid` (approval unless the data says deny).
#
# Addresses (blocked_recipients, approval.recipient_arg): the argument must be one mailbox,
# `user@domain`, `Display Name <user@domain>` or `"Quoted, Name" <user@domain>` (RFC 5322
# name-addr), surrounding whitespace ignored. The domain is compared lower-cased, with one
# trailing dot removed. A domain list entry `example.com` matches that domain only;
# `*.example.com` matches its subdomains (list both for both). Invalid, hence `on_invalid`:
# several addresses, comments, quoted local parts, a `%` or `!` in the local part (the
# percent hack routes mail to another host), domain literals, and domains that are not ASCII:
# neither engine has an IDNA builtin, so Unicode and punycode forms cannot be matched to each
# other here. Write list entries for international domains in punycode (xn--…): `sidecar
# policy check` reports Unicode entries with their punycode form, and the reason given to the
# model asks it to write the address in that form.
#
# Every decision carries `rule`, the id of the rule that decided (docs/policies.md lists
# them): the decision log and `sidecar policy replay` report flips per rule.
#
# Style: `decision` is ONE rule with an else-chain: the first matching rule decides, in the
# order written. This is deliberate: regorus pays a few microseconds per rule definition
# evaluated, and a first-match chain keeps a decision around 40 us where a set of partial
# rules costs 3x that. Add a rule by inserting a branch at the right place in the chain.
# For the same reason a branch tests the tool setting it depends on itself
# (`tool_settings.side_effects == false`; `tool_settings.schema_hash != null` before the
# `schema_changed` helper, which starts with that test): a tool without the setting never pays
# for a helper rule. Measured in a loop, a read-only tool's decision 19-20 -> 14 us.
# The threshold branches start with `tool_settings.approval` (true for any approval settings,
# false or undefined without them) before `amount_rule` or `recipient_rule`: together those
# two helpers cost more than all the chain's other failing branches. Counted under callgrind,
# an unlisted tool's decision (every branch tried) 408 k -> 268 k instructions.
#
# Only Rego that both regorus 0.13 and OPA 1.x accept is used (docs/policies.md lists it;
# the test suite runs these rules and their tests on both evaluators).
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

deny(rule, reason, retryable) := {
	"allow": false,
	"reasons": [reason],
	"require_approval": null,
	"retryable": retryable,
	"rule": rule,
}

# A call waiting for approval is retryable: the same call passes once approved.
needs_approval(rule, reason) := {
	"allow": false,
	"reasons": [reason],
	"require_approval": {"group": approval_group, "ttl_s": approval_ttl_s},
	"retryable": true,
	"rule": rule,
}

allowed(rule, reasons) := {"allow": true, "reasons": reasons, "require_approval": null, "retryable": false, "rule": rule}

calls_so_far := n if {
	n := input.session.calls_by_tool[input.tool.name]
} else := 0

# An argument of this call, null when absent.
arg(name) := v if {
	v := input.call.args[name]
} else := null

# "recipient" and the value as the model wrote it, for reasons.
recipient_text(v) := "recipient" if {
	is_null(v)
} else := sprintf("recipient %s", [json.marshal(v)])

# --- Addresses (see the header) -------------------------------------------------------
#
# Every helper here is total (a value for every input, never undefined): OPA evaluates
# `not f(x)` as undefined, not true, when x is undefined, where regorus says true, so a
# helper that can be undefined would make the two engines decide differently.

# The addr-spec of a mailbox: the part in <...> of a name-addr, else the whole text; null
# when it is neither. The display name may hold quoted strings; outside them it must not
# look like another address.
mailbox_spec(text) := trim_space(found[0][2]) if {
	found := regex.find_all_string_submatch_n(`^([^<>]*)<([^<>]*)>$`, text, 1)
	count(found) == 1
	unquoted := regex.replace(found[0][1], `"(?:[^"\\]|\\.)*"`, "")
	not regex.match(`[@,;:"\\()]`, unquoted)
} else := text if {
	not regex.match(`[<>]`, text)
} else := null

# [local part, domain] of a plain addr-spec (one @, no quoting, comments or whitespace), or null.
addr_parts(spec) := [found[0][1], found[0][2]] if {
	is_string(spec)
	found := regex.find_all_string_submatch_n(`^([^@\s"(),:;<>\[\]\\]+)@([^@\s"(),:;<>\[\]\\]+)$`, spec, 1)
	count(found) == 1
} else := null

normal_domain(d) := trim_suffix(lower(d), ".")

ascii_hostname(d) if regex.match(`^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$`, d)

# {"problem": why `value` is not one plain address ("" when it is), "domain": its domain}.
address(value) := {"problem": "is missing", "domain": ""} if {
	is_null(value)
} else := {"problem": sprintf("is a %s, not a string", [type_name(value)]), "domain": ""} if {
	not is_string(value)
} else := address_of(addr_parts(mailbox_spec(trim_space(value))))

address_of(parts) := {"problem": "is not one mailbox (user@domain or Name <user@domain>)", "domain": ""} if {
	is_null(parts)
} else := {"problem": "routes mail through its local part (% or !), which is refused", "domain": ""} if {
	regex.match(`[%!]`, parts[0])
} else := {"problem": "has a domain that is not ASCII; write it in its punycode (xn--) form", "domain": ""} if {
	regex.match(`[^\x00-\x7f]`, parts[1])
} else := {"problem": "has a domain that is not a host name", "domain": ""} if {
	not ascii_hostname(normal_domain(parts[1]))
} else := {"problem": "", "domain": normal_domain(parts[1])}

# `domain` is listed: `example.com` exactly, or a subdomain of a `*.example.com` entry.
domain_listed(domain, entries) if {
	some entry in entries
	is_string(entry)
	normal_domain(entry) == domain
}

domain_listed(domain, entries) if {
	some entry in entries
	is_string(entry)
	startswith(entry, "*.")
	endswith(domain, normal_domain(trim_prefix(entry, "*")))
}

# A key of the tool's blocked_recipients / approval settings, null when absent.
blocked_setting(key) := v if {
	v := tool_settings.blocked_recipients[key]
} else := null

approval_setting(key) := v if {
	v := tool_settings.approval[key]
} else := null

data_problem(section, keys) := sprintf("the policy data for this tool has no valid %s.%s", [section, concat(" and ", keys)])

blocked_value := arg(blocked_setting("recipient_arg"))

# Parsed once per decision: a rule's value is computed once, a function's on every use (the
# address helpers run several regexes).
blocked_address := address(blocked_value)

blocked_on_invalid := s if {
	s := blocked_setting("on_invalid")
	s != null
} else := "deny"

# Why the recipient cannot be checked against the blocked domains ("" when it can).
blocked_problem := data_problem("blocked_recipients", ["recipient_arg", "domains"]) if {
	not is_string(blocked_setting("recipient_arg"))
} else := data_problem("blocked_recipients", ["recipient_arg", "domains"]) if {
	not is_array(blocked_setting("domains"))
} else := sprintf("%s %s", [recipient_text(blocked_value), blocked_address.problem]) if {
	blocked_address.problem != ""
} else := ""

# --- Approval thresholds ----------------------------------------------------------------

approval_on_invalid := s if {
	s := approval_setting("on_invalid")
	s != null
} else := "approval"

amount_rule if approval_setting("amount_arg") != null

amount_rule if approval_setting("max_amount") != null

amount := arg(approval_setting("amount_arg"))

min_amount := m if {
	m := approval_setting("min_amount")
	m != null
} else := 0

# Why the amount cannot be compared ("" when it can).
amount_problem := data_problem("approval", ["amount_arg", "max_amount"]) if {
	not is_string(approval_setting("amount_arg"))
} else := data_problem("approval", ["amount_arg", "max_amount"]) if {
	not is_number(approval_setting("max_amount"))
} else := data_problem("approval", ["min_amount"]) if {
	not is_number(min_amount)
} else := sprintf("argument %s is missing", [approval_setting("amount_arg")]) if {
	is_null(amount)
} else := sprintf("argument %s is %s, not a number", [approval_setting("amount_arg"), json.marshal(amount)]) if {
	not is_number(amount)
} else := sprintf("argument %s is %v, below the minimum of %v", [approval_setting("amount_arg"), amount, min_amount]) if {
	amount < min_amount
} else := ""

recipient_rule if approval_setting("recipient_arg") != null

recipient_rule if approval_setting("allowed_domains") != null

recipient_value := arg(approval_setting("recipient_arg"))

recipient_address := address(recipient_value)

recipient_listed if {
	is_array(approval_setting("allowed_domains"))
	domain_listed(recipient_address.domain, approval_setting("allowed_domains"))
}

# Why the recipient cannot be compared with the allowed domains ("" when it can).
recipient_problem := data_problem("approval", ["recipient_arg", "allowed_domains"]) if {
	not is_string(approval_setting("recipient_arg"))
} else := data_problem("approval", ["recipient_arg", "allowed_domains"]) if {
	not is_array(approval_setting("allowed_domains"))
} else := sprintf("%s %s", [recipient_text(recipient_value), recipient_address.problem]) if {
	recipient_address.problem != ""
} else := ""

# --- Schema pin -------------------------------------------------------------------------

schema_pin := s if {
	s := tool_settings.schema_pin
	s != null
} else := "deny"

declared_schema := h if {
	h := input.tool.schema_hash
	is_string(h)
} else := "(none)"

# A pinned hash and no declared one (or another one) is a change.
schema_changed if {
	pinned := tool_settings.schema_hash
	pinned != null
	declared_schema != pinned
}

schema_reason := sprintf("tool %s is declared with schema %v, but the policy pins schema %v; the tool's schema changed", [input.tool.name, declared_schema, tool_settings.schema_hash])

# ---------------------------------------------------------------------------------------
# decision (phase tool_call): the first matching rule decides.
# ---------------------------------------------------------------------------------------

# Three shortcuts come first, one branch each for the commonest answers, for a call declared
# and with valid arguments: a read-only tool; a listed side-effecting tool without thresholds;
# an unlisted tool that `unlisted_tool` allows (every call, with the `builtin` data, which
# lists no tool). Each matches only where every branch before its rule below fails, so it
# gives what the chain gives (tests/policy/test_decision_shortcuts.py compares the library
# with and without them on generated tool settings and inputs, on both engines). A setting
# that any earlier branch reads must be absent, not merely false-looking (`object.filter`):
# `max_calls_per_session: false` or `null` still limits in the chain, because a number sorts
# after both. Measured in a loop (regorus `eval_rule`, the benchmark's 50 tools, alternated
# with the chain alone): read_only 23.5 -> 14.3 us, within_limits 30.4 -> 17.7, unlisted
# 33.5 -> 22.6; a decision they do not answer pays 10-22 us for trying them (a replay
# 25.4 -> 36.1, an approval threshold 118.2 -> 135.7). The values are written out rather than
# built with `allowed` (about 2 us), and so are the conditions the last two share (one helper
# rule for their four input tests measured about 4 us slower); the unlisted shortcut reads
# `data.sidecar.unlisted_tool` itself: through `tool_settings` it took 6 us more. Without that
# entry the chain decides, as before.
#
# While this file is in force exactly as shipped (and alone), the sidecar answers these three
# branches in Python without asking regorus (sidecar/policy/shortcuts.py, tested against these
# rules): about 8 us where regorus took 65 in the benchmark's mix. Edit the file, or add a
# module, and regorus evaluates every decision, these branches included: the same answers.

# Rule read_only, shortcut: as the read_only branch below.
decision := {"allow": true, "reasons": [sprintf("%s is read-only", [input.tool.name])], "require_approval": null, "retryable": false, "rule": "read_only"} if {
	s := data.sidecar.tools[input.tool.name]
	s.side_effects == false
	input.tool.declared == true
	input.validation.valid == true
	count(object.filter(s, ["hidden", "schema_hash", "max_calls_per_session", "blocked_recipients"])) == 0

	# Rule within_limits, shortcut: a listed side-effecting tool without thresholds, no replay,
	# no approval (as the within_limits branch at the end of the chain).
} else := {"allow": true, "reasons": [], "require_approval": null, "retryable": false, "rule": "within_limits"} if {
	s := data.sidecar.tools[input.tool.name]
	is_object(s) # object.filter fails on anything else: an evaluation error, not undefined
	not s.side_effects == false
	input.tool.declared == true
	input.validation.valid == true
	input.replay.count == 0
	input.approval.status != "approved"
	count(object.filter(s, ["hidden", "schema_hash", "max_calls_per_session", "blocked_recipients", "approval"])) == 0

	# Rule unlisted, shortcut: as the unlisted branch near the end of the chain, for unlisted-tool
	# settings that allow, are side-effecting and set no threshold (`tool_settings` of a tool
	# without an entry, when data.sidecar.unlisted_tool is defined).
} else := {"allow": true, "reasons": [sprintf("%s has no entry in the policy data; allowed as an unlisted tool", [input.tool.name])], "require_approval": null, "retryable": false, "rule": "unlisted"} if {
	not data.sidecar.tools[input.tool.name]
	input.tool.declared == true
	input.validation.valid == true
	input.replay.count == 0
	input.approval.status != "approved"
	s := data.sidecar.unlisted_tool
	is_object(s)
	not s.side_effects == false
	not s.allow == false
	count(object.filter(s, ["hidden", "schema_hash", "max_calls_per_session", "blocked_recipients", "approval"])) == 0

	# Rule undeclared: the model may only call tools the agent declared.
} else := deny("undeclared", sprintf("tool %s is not declared in this request; call one of the declared tools", [input.tool.name]), true) if {
	input.tool.declared == false

	# Rule invalid_arguments: arguments that failed schema validation. The argument lockdown
	# normally refuses them before the policy runs; the policy must not allow them anyway.
} else := deny("invalid_arguments", sprintf("arguments of %s do not match its schema (%d problem(s)); fix them and call again", [input.tool.name, count(object.get(input.validation, "errors", []))]), true) if {
	input.validation.valid == false

	# Rule hidden: hidden tools (`hidden: true`) are not shown to the model (visible_tools),
	# and a call to one is refused all the same.
} else := deny("hidden", sprintf("tool %s is not available to this agent", [input.tool.name]), false) if {
	tool_settings.hidden == true

	# Rule unlisted_denied: tools missing from data.json, when unlisted_tool.allow is false.
} else := deny("unlisted_denied", sprintf("tool %s has no entry in the policy data and unlisted tools are not allowed", [input.tool.name]), false) if {
	tool_settings.allow == false
	not data.sidecar.tools[input.tool.name]

	# Rule schema_pin: the declared schema is not the pinned `schema_hash` (schema_pin deny).
} else := deny("schema_pin", schema_reason, false) if {
	tool_settings.schema_hash != null
	schema_changed
	schema_pin != "approval"

	# ... or it needs approval (schema_pin approval), which an approval of this call lifts.
} else := needs_approval("schema_pin", sprintf("%s; it needs approval by group %s", [schema_reason, approval_group])) if {
	tool_settings.schema_hash != null
	schema_changed
	input.approval.status != "approved"

	# Rule call_limit: per-session call limit (calls_by_tool counts the calls made before this one).
} else := deny("call_limit", sprintf("tool %s may be called at most %d times per session; this session has made %d calls", [input.tool.name, limit, calls_so_far]), false) if {
	limit := tool_settings.max_calls_per_session
	calls_so_far >= limit

	# Rule blocked_recipient: a recipient at one of `blocked_recipients.domains` is refused
	# outright: no approval can allow it.
} else := deny("blocked_recipient", sprintf("%s to an address at %s is refused: that domain is blocked for this tool; use the customer's address on file", [input.tool.name, blocked_address.domain]), false) if {
	tool_settings.blocked_recipients != null
	blocked_problem == ""
	domain_listed(blocked_address.domain, blocked_setting("domains"))

	# ... and a recipient that cannot be checked gets blocked_recipients.on_invalid.
} else := deny("blocked_recipient", sprintf("%s: %s", [input.tool.name, blocked_problem]), true) if {
	tool_settings.blocked_recipients != null
	blocked_problem != ""
	blocked_on_invalid != "approval"
} else := needs_approval("blocked_recipient", sprintf("%s: %s; it needs approval by group %s", [input.tool.name, blocked_problem, approval_group])) if {
	tool_settings.blocked_recipients != null
	blocked_problem != ""
	input.approval.status != "approved"

	# Rule read_only: read-only tools are allowed (replays included: running them again is
	# harmless). Only an explicit `side_effects: false` makes a tool read-only.
} else := allowed("read_only", [sprintf("%s is read-only", [input.tool.name])]) if {
	tool_settings.side_effects == false

	# Rule replay: a replay (same tool, same arguments, already ran in this session) of a
	# side-effecting tool is refused unless the tool is `repeatable`: the sidecar's replay
	# guard answers it with the remembered result instead of running it twice.
} else := deny("replay", sprintf("%s with these arguments already ran in this session and is not repeatable; the replay guard answers it with the earlier result", [input.tool.name]), false) if {
	input.replay.count > 0
	not tool_settings.repeatable == true

	# Rules invalid_amount / invalid_recipient with on_invalid deny: no approval lifts these.
} else := deny("invalid_amount", sprintf("%s: %s", [input.tool.name, amount_problem]), true) if {
	tool_settings.approval
	amount_rule
	amount_problem != ""
	approval_on_invalid == "deny"
} else := deny("invalid_recipient", sprintf("%s: %s", [input.tool.name, recipient_problem]), true) if {
	tool_settings.approval
	recipient_rule
	recipient_problem != ""
	approval_on_invalid == "deny"

	# Rule approved: an approved approval of this exact call (approvals are keyed by the
	# call's arguments hash) satisfies any approval requirement below.
} else := allowed("approved", [sprintf("approved by %v (approval %v)", [input.approval.approved_by, input.approval.id])]) if {
	input.approval.status == "approved"

	# Rule approval_always: tools with `approval.always` need approval for every call.
} else := needs_approval("approval_always", sprintf("%s always needs approval by group %s; the approval covers exactly these arguments", [input.tool.name, approval_group])) if {
	tool_settings.approval.always == true

	# Rule invalid_amount: an amount that cannot be compared needs approval (on_invalid).
} else := needs_approval("invalid_amount", sprintf("%s: %s; it needs approval by group %s", [input.tool.name, amount_problem, approval_group])) if {
	tool_settings.approval
	amount_rule
	amount_problem != ""

	# Rule amount: an amount above `approval.max_amount` needs approval.
} else := needs_approval("amount", sprintf("%s of %v is above the limit of %v and needs approval by group %s", [input.tool.name, amount, approval_setting("max_amount"), approval_group])) if {
	tool_settings.approval
	amount_rule
	amount > approval_setting("max_amount")

	# Rule invalid_recipient: a recipient that is not one plain address needs approval (on_invalid).
} else := needs_approval("invalid_recipient", sprintf("%s: %s; it needs approval by group %s", [input.tool.name, recipient_problem, approval_group])) if {
	tool_settings.approval
	recipient_rule
	recipient_problem != ""

	# Rule recipient: a recipient outside `approval.allowed_domains` needs approval.
} else := needs_approval("recipient", sprintf("%s to an address outside %s needs approval by group %s", [input.tool.name, concat(", ", tool_settings.approval.allowed_domains), approval_group])) if {
	tool_settings.approval
	recipient_rule
	not recipient_listed

	# Rule unlisted: unlisted tools that got this far are allowed, and the reason says so, so
	# the operator can spot them in logs and traces and give them an entry.
} else := allowed("unlisted", [sprintf("%s has no entry in the policy data; allowed as an unlisted tool", [input.tool.name])]) if {
	not data.sidecar.tools[input.tool.name]

	# Rule within_limits: everything else (side-effecting, within its thresholds) is allowed.
} else := allowed("within_limits", [])

# ---------------------------------------------------------------------------------------
# visible_tools (phase tool_list): the declared tools the model may see.
# ---------------------------------------------------------------------------------------

# Tools with `hidden: true` in data.json are removed from the request's tool list.
visible_tools contains name if {
	some name in input.tools
	not data.sidecar.tools[name].hidden == true
}

# ---------------------------------------------------------------------------------------
# result_decision (phase tool_result). Undefined when there is nothing to say.
# ---------------------------------------------------------------------------------------

# The sidecar inspects every tool result before it goes upstream and lists what it found in
# input.result.anomalies (secret_in_result, possible_secret, oversized_result above the
# tool's max_result_bytes, injection_marker for tools marked untrusted, partially_inspected,
# and the results filter's unknown_call, duplicate_result, tool_name_mismatch). The decision's
# `action` is applied to the request: "withhold" (the model gets a notice in place of the
# result), "redact" (the located findings of the kinds in `redact` are replaced), "allow".
# Anomalies in data.sidecar.results.block_anomalies withhold the result; those in
# redact_anomalies are redacted; any other anomaly is only flagged (the result reaches the
# model, the reasons go to the logs).
default result_block_anomalies := []

result_block_anomalies := data.sidecar.results.block_anomalies

default result_redact_anomalies := []

result_redact_anomalies := data.sidecar.results.redact_anomalies

result_anomalies := a if {
	a := input.result.anomalies
} else := []

result_reason(a) := sprintf("result of %s has anomaly %s (%d bytes)", [input.tool.name, a, input.result.bytes]) if {
	a == "oversized_result"
} else := sprintf("result of %s has anomaly %v", [input.tool.name, a])

# Rule result_blocked: a result with a blocking anomaly is withheld.
result_decision := {"allow": false, "action": "withhold", "reasons": blocked_reasons, "require_approval": null, "retryable": false, "rule": "result_blocked"} if {
	blocked_reasons := [sprintf("%s and is withheld from the model", [result_reason(a)]) |
		some a in result_anomalies
		a in result_block_anomalies
	]
	count(blocked_reasons) > 0

	# Rule result_redacted: the located findings of these kinds are replaced, the rest is forwarded.
} else := {"allow": true, "action": "redact", "redact": kinds, "reasons": reasons, "require_approval": null, "retryable": false, "rule": "result_redacted"} if {
	kinds := [a | some a in result_anomalies; a in result_redact_anomalies]
	count(kinds) > 0
	reasons := [sprintf("%s; the matched text is redacted", [result_reason(a)]) | some a in kinds]

	# Rule result_flagged: any other anomaly; the result reaches the model.
} else := {"allow": true, "action": "allow", "reasons": flagged, "require_approval": null, "retryable": false, "rule": "result_flagged"} if {
	flagged := [result_reason(a) | some a in result_anomalies]
	count(flagged) > 0
}

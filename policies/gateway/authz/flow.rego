# METADATA
# title: Session flow (the lethal trifecta) and quotas
# description: |
#   Cross-cutting (any kind), on the gateway's session state (input.state,
#   version 1; the gateway gives it to the tools its [state] tools names).
#   - "labels": what an allowed call of the tool attaches to the caller's
#     session when it runs (the decision's "labels"). A tool labelled
#     "external_egress" is refused in a session whose labels include both
#     "reads_secret" and "untrusted_content" (private data + untrusted content
#     + external communication), and without session state or a session.
#   - "quotas": [{"scope", "window_s", "limit"}]: refused once the count of
#     allowed calls in input.state.counts[scope][window_s] reached limit;
#     handed to the gateway (the decision's "quotas"), which reserves them
#     atomically, so concurrent calls and replicas never run more than limit.
#   Decisions on state are never cached by the gateway.
package gateway.authz.flow

import data.gateway.authz.lib.denial
import data.gateway.authz.lib.misconfigured
import data.gateway.authz.lib.setting
import data.gateway.authz.lib.tool

module := "flow"

# The counter scopes the gateway counts (gateway.state.SCOPES).
scopes := {"caller", "caller_tool", "tenant", "tenant_tool", "session", "session_tool"}

trifecta := "external communication is not allowed in a session that read a secret and saw untrusted content"

# The module can deny a call only for a tool with "labels" or "quotas": main.rego
# evaluates deny only when this holds.
applies if object.get(tool, "labels", null) != null

applies if object.get(tool, "quotas", null) != null

labels_setting := setting("labels", [])

quotas_setting := setting("quotas", [])

label_list := sort({label | some label in labels_setting; valid_label(label)}) if {
	is_array(labels_setting)
} else := []

valid_label(label) if {
	is_string(label)
	regex.match(`^[a-z][a-z0-9_.:-]{0,63}$`, label)
}

valid_quota(q) if {
	is_object(q)
	count(object.keys(q)) == 3
	q.scope in scopes
	is_number(q.window_s)
	q.window_s == floor(q.window_s)
	q.window_s > 0
	is_number(q.limit)
	q.limit == floor(q.limit)
	q.limit >= 0
}

# The quotas as the decision hands them to the gateway.
quota_list := [{"scope": q.scope, "window_s": q.window_s, "limit": q.limit} |
	some q in quotas_setting
	valid_quota(q)
] if {
	is_array(quotas_setting)
} else := []

egress if "external_egress" in label_list

needs_state if egress

needs_state if count(quota_list) > 0

# input.state in the version this module knows.
state := input.state if {
	is_object(input.state)
	input.state.version == 1
}

session := state.session if is_object(state.session)

deny contains denial(module, misconfigured, "setting labels is not an array of labels") if {
	not is_array(labels_setting)
}

deny contains denial(module, misconfigured, "setting labels has a member that is not a label") if {
	is_array(labels_setting)
	some label in labels_setting
	not valid_label(label)
}

deny contains denial(module, misconfigured, "setting quotas is not an array") if {
	not is_array(quotas_setting)
}

deny contains denial(module, misconfigured, "setting quotas has a member that is not a {scope, window_s, limit} object") if {
	is_array(quotas_setting)
	some q in quotas_setting
	not valid_quota(q)
}

deny contains denial(module, "this call needs the session state", "no input.state version 1 (is the tool in the gateway's [state] tools?)") if {
	needs_state
	not state
}

deny contains denial(module, "external communication needs a session", "external egress without a session") if {
	egress
	state
	not session
}

deny contains denial(module, trifecta, "lethal trifecta: the session has reads_secret and untrusted_content") if {
	egress
	"reads_secret" in session.labels
	"untrusted_content" in session.labels
}

deny contains denial(module, "the quota for this call is used up", concat("", ["quota ", q.scope, "/", format_int(q.window_s, 10), "s of ", format_int(q.limit, 10), " reached"])) if {
	state
	some q in quota_list
	quota_reached(q)
}

# A count the gateway did not give (a scope this call lacks, a window it does not
# count) is reached: it cannot be checked.
quota_reached(q) if {
	not is_number(object.get(state.counts, [q.scope, format_int(q.window_s, 10)], null))
}

quota_reached(q) if {
	n := object.get(state.counts, [q.scope, format_int(q.window_s, 10)], null)
	is_number(n)
	n >= q.limit
}

# The decision's members for an allowed call (main.rego adds them).
members := {"labels": label_list, "quotas": quota_list}

# METADATA
# title: Obligations (policy contract version 2) - approval and output redaction
# description: |
#   Cross-cutting (any kind). An allowed call of a tool with these settings
#   carries obligations the gateway must fulfil (main.rego adds "obligations"
#   to the decision; the gateway refuses a call whose obligation it cannot
#   fulfil):
#   - "approval": {"arg", "above", "role", "ttl_s" (optional)}: a call whose
#     number argument "arg" is above "above" (or not a number) needs a person
#     holding "role" to approve this exact call (require_approval), until the
#     gateway presents that approval as input.context.approval, given by
#     someone other than the caller.
#   - "redact": {"pointers", "patterns", "replacement" (optional)}: the output
#     is redacted (redact_output): JSON pointers into the structured output,
#     "*" for every member or element; ECMA-262 patterns in every text.
package gateway.authz.obligations

import data.gateway.authz.lib.arguments
import data.gateway.authz.lib.ctx
import data.gateway.authz.lib.denial
import data.gateway.authz.lib.misconfigured
import data.gateway.authz.lib.setting
import data.gateway.authz.lib.tool

module := "obligations"

# The module can deny a call only for a tool with "approval" or "redact": main.rego
# evaluates deny only when this holds.
applies if object.get(tool, "approval", null) != null

applies if object.get(tool, "redact", null) != null

approval_setting := setting("approval", null)

redact_setting := setting("redact", null)

valid_approval(a) if {
	is_object(a)
	is_string(a.arg)
	is_number(a.above)
	is_string(a.role)
	a.role != ""
	valid_ttl(object.get(a, "ttl_s", 900))
}

valid_ttl(t) if {
	is_number(t)
	t > 0
	t <= 604800
}

string_array(x) if {
	is_array(x)
	every s in x {
		is_string(s)
	}
}

valid_redact(r) if {
	is_object(r)
	string_array(object.get(r, "pointers", []))
	string_array(object.get(r, "patterns", []))
	count(object.get(r, "pointers", [])) + count(object.get(r, "patterns", [])) > 0
	is_string(object.get(r, "replacement", "[redacted]"))
}

# An approval the gateway presents, given by another person holding the role.
approved if {
	given := ctx.approval
	is_object(given)
	is_array(given.approver_roles)
	approval_setting.role in given.approver_roles
	is_string(given.approved_by)
	given.approved_by != ctx.subject
}

within_threshold if {
	value := arguments[approval_setting.arg]
	is_number(value)
	value <= approval_setting.above
}

needs_approval if {
	valid_approval(approval_setting)
	not within_threshold
	not approved
}

approval_obligation := object.union(
	{
		"type": "require_approval",
		"role": approval_setting.role,
		"message": concat("", ["this call needs the approval of a ", approval_setting.role]),
	},
	approval_ttl,
)

approval_ttl := {"ttl_s": approval_setting.ttl_s} if {
	is_number(approval_setting.ttl_s)
} else := {}

redact_obligation := object.union(
	{"type": "redact_output"},
	{k: v | some k in ["pointers", "patterns", "replacement"]; v := redact_setting[k]},
)

deny contains denial(module, misconfigured, "setting approval is not {arg, above, role, ttl_s}") if {
	approval_setting != null
	not valid_approval(approval_setting)
}

deny contains denial(module, misconfigured, "setting redact is not {pointers, patterns, replacement}") if {
	redact_setting != null
	not valid_redact(redact_setting)
}

obligations contains approval_obligation if needs_approval

obligations contains redact_obligation if valid_redact(redact_setting)

# The decision's members for an allowed call (main.rego adds them); the order of the
# obligations does not matter to the gateway.
members := {"obligations": sort(obligations)} if {
	count(obligations) > 0
} else := {}

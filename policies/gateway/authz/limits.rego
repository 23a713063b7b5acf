# METADATA
# title: Numeric limits per role
# description: |
#   A tool may declare "limits": a list of {"arg": <argument>, "limit": <key>,
#   "min": <number, default 0>}. The argument must be a number with
#   min <= value <= L, where L is the largest "limits.<key>" among the caller's
#   roles. A caller none of whose roles defines the key may not call the tool
#   with that argument at all. Tools of kind "payment" must declare limits.
package gateway.authz.limits

import data.gateway.authz.lib.arguments
import data.gateway.authz.lib.caller_role_defs
import data.gateway.authz.lib.denial
import data.gateway.authz.lib.deny_all
import data.gateway.authz.lib.gate_error
import data.gateway.authz.lib.gate_warning
import data.gateway.authz.lib.misconfigured
import data.gateway.authz.lib.missing
import data.gateway.authz.lib.role_defs
import data.gateway.authz.lib.roles
import data.gateway.authz.lib.setting
import data.gateway.authz.lib.tool
import data.gateway.authz.rbac.tool_roles

module := "limits"

exceeded := "the amount exceeds what the caller's roles allow"

# The module can deny a call only for a tool with a "limits" setting, or of kind
# payment: main.rego evaluates deny only when this holds.
applies if object.get(tool, "limits", null) != null

applies if tool.kind == "payment"

limits_setting := setting("limits", [])

limit_list := limits_setting if {
	is_array(limits_setting)
} else := []

# valid_spec(spec) holds for a well-formed limit specification.
valid_spec(spec) if {
	is_object(spec)
	is_string(spec.arg)
	is_string(spec.limit)
	is_number(object.get(spec, "min", 0))
}

# Well-formed limit specifications of the called tool.
specs contains spec if {
	some spec in limit_list
	valid_spec(spec)
}

# role_limit(key) is the largest limit the caller's roles grant for key.
role_limit(key) := max(values) if {
	values := [v | some def in caller_role_defs; v := def.limits[key]; is_number(v)]
	count(values) > 0
}

# The limit keys of the specifications, with the caller's role_limit when defined
# (computed once per key).
spec_limits[key] := role_limit(key) if {
	some spec in specs
	key := spec.limit
}

# The numeric limited arguments, by argument name.
amounts[name] := value if {
	some spec in specs
	name := spec.arg
	value := arguments[name]
	is_number(value)
}

deny contains denial(module, misconfigured, "setting limits is not an array") if {
	not is_array(limits_setting)
}

deny contains denial(module, misconfigured, "setting limits has a member that is not a {arg, limit, min} object") if {
	count(specs) < count(limit_list) # some member is not in specs
	some spec in limit_list
	not valid_spec(spec)
}

deny contains denial(module, misconfigured, "payment tool declares no limits") if {
	tool.kind == "payment"
	count(specs) == 0
}

deny contains denial(module, "a required argument is missing", sprintf("limited argument \"%s\" is missing", [name])) if {
	some spec in specs
	name := spec.arg
	not amounts[name]
	missing(name)
}

deny contains denial(module, "the amount is invalid", sprintf("limited argument \"%s\" is not a number", [name])) if {
	some spec in specs
	name := spec.arg
	not amounts[name] # not arg_is_number(name)
	not missing(name)
}

deny contains denial(module, "the amount is invalid", sprintf("limited argument \"%s\" is below the minimum", [name])) if {
	some spec in specs
	name := spec.arg
	value := amounts[name]
	value < object.get(spec, "min", 0)
}

deny contains denial(module, exceeded, sprintf("no role in %s defines limit \"%s\" for argument \"%s\"", [roles_text, key, spec.arg])) if {
	some spec in specs
	key := spec.limit
	not spec_limits[key]
}

deny contains denial(module, exceeded, sprintf("limited argument \"%s\" exceeds limit \"%s\" = %v of the caller's roles", [name, key, limit])) if {
	some spec in specs
	name := spec.arg
	value := amounts[name]
	key := spec.limit
	limit := spec_limits[key]
	value > limit
}

# For the policy gate (gate.rego): the settings that name arguments, and the limits.
gate_settings := {"limits": {"names": "members", "field": "arg", "types": ["integer", "number"], "required": false}}

gate_problems contains gate_error(concat("", ["kind \"payment\" requires setting limits: ", deny_all])) if {
	tool.kind == "payment"
	object.get(tool, "limits", null) == null
}

gate_problems contains gate_error(concat("", ["setting limits is empty: ", deny_all])) if {
	tool.kind == "payment"
	tool.limits == []
}

gate_problems contains gate_error(concat("", ["setting limits member ", format_int(i, 10), " is not an {arg, limit, min} object: ", deny_all])) if {
	some i, spec in limit_list
	not valid_spec(spec)
}

gate_problems contains gate_error(concat("", ["limit ", json.marshal(spec.limit), " (argument ", json.marshal(spec.arg), ") is defined by no role: ", deny_all])) if {
	some spec in specs
	not defined_limits[spec.limit]
}

gate_problems contains gate_warning(concat("", ["limit ", json.marshal(spec.limit), " (argument ", json.marshal(spec.arg), ") is defined by no role that grants the tool: only callers who also hold another role can call it"])) if {
	count(tool_roles) > 0
	some spec in specs
	defined_limits[spec.limit]
	not granted_limits[spec.limit]
}

# The limit keys some role defines, and those some role granting the tool defines.
defined_limits contains key if {
	some def in role_defs
	some key, value in def.limits
	is_number(value)
}

granted_limits contains key if {
	some r in tool_roles
	some key, value in role_defs[r].limits
	is_number(value)
}

roles_text := concat("", ["[", concat(", ", sort(roles)), "]"])

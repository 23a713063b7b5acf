# METADATA
# title: Numeric limits per role
# description: |
#   A tool may declare "limits": a list of {"arg": <argument>, "limit": <key>,
#   "min": <number, default 0>}. The argument must be a number with
#   min <= value <= L, where L is the largest "limits.<key>" among the caller's
#   roles. A caller none of whose roles defines the key may not call the tool
#   with that argument at all. Tools of kind "payment" must declare limits.
package gateway.authz.limits

import data.gateway.authz.lib

module := "limits"

exceeded := "the amount exceeds what the caller's roles allow"

limit_list := lib.setting("limits", []) if {
	is_array(lib.setting("limits", []))
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
	values := [v | some def in lib.caller_role_defs; v := def.limits[key]; is_number(v)]
	count(values) > 0
}

deny contains lib.denial(module, lib.misconfigured, "setting limits is not an array") if {
	value := lib.setting("limits", [])
	not is_array(value)
}

deny contains lib.denial(module, lib.misconfigured, "setting limits has a member that is not a {arg, limit, min} object") if {
	some spec in limit_list
	not valid_spec(spec)
}

deny contains lib.denial(module, lib.misconfigured, "payment tool declares no limits") if {
	lib.tool.kind == "payment"
	count(specs) == 0
}

deny contains lib.denial(module, "a required argument is missing", sprintf("limited argument \"%s\" is missing", [spec.arg])) if {
	some spec in specs
	lib.missing(spec.arg)
}

deny contains lib.denial(module, "the amount is invalid", sprintf("limited argument \"%s\" is not a number", [spec.arg])) if {
	some spec in specs
	not lib.missing(spec.arg)
	not lib.arg_is_number(spec.arg)
}

deny contains lib.denial(module, "the amount is invalid", sprintf("limited argument \"%s\" is below the minimum", [spec.arg])) if {
	some spec in specs
	value := lib.arguments[spec.arg]
	is_number(value)
	value < object.get(spec, "min", 0)
}

deny contains lib.denial(module, exceeded, sprintf("no role in %s defines limit \"%s\" for argument \"%s\"", [roles_text, spec.limit, spec.arg])) if {
	some spec in specs
	not role_limit(spec.limit)
}

deny contains lib.denial(module, exceeded, sprintf("limited argument \"%s\" exceeds limit \"%s\" = %v of the caller's roles", [spec.arg, spec.limit, limit])) if {
	some spec in specs
	value := lib.arguments[spec.arg]
	is_number(value)
	limit := role_limit(spec.limit)
	value > limit
}

roles_text := concat("", ["[", concat(", ", sort(lib.roles)), "]"])

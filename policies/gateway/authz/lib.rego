# METADATA
# title: Shared helpers
# description: |
#   Safe accessors for the input document and the policy data. Every accessor
#   type-checks before it calls a builtin, so no rule can raise an error on
#   malformed input (regorus raises where OPA would be undefined).
package gateway.authz.lib

# Policy configuration, loaded from policies/data.json ("gateway" -> "config").
config := data.gateway.config if {
	is_object(data.gateway.config)
} else := {}

# The sections below read data.gateway.config directly rather than through config:
# when config is not an object, data.gateway.config.<section> is undefined, so they
# come out the same, with one rule fewer to evaluate per decision.

# Tool settings by tool name.
tools := data.gateway.config.tools if {
	is_object(data.gateway.config.tools)
} else := {}

# Role definitions by role name.
role_defs := data.gateway.config.roles if {
	is_object(data.gateway.config.roles)
} else := {}

# Known tenants by tenant id.
tenants := data.gateway.config.tenants if {
	is_object(data.gateway.config.tenants)
} else := {}

# Tenant-owned resources: resource kind -> resource id -> owning tenant.
resources := data.gateway.config.resources if {
	is_object(data.gateway.config.resources)
} else := {}

# True when the caller supplied a context object.
context_present if is_object(input.context)

# Caller-owned context; {} when missing or malformed.
ctx := input.context if {
	is_object(input.context)
} else := {}

# True when the request carries an arguments object.
arguments_present if is_object(input.arguments)

# The validated tool arguments; {} when missing or malformed.
arguments := input.arguments if {
	is_object(input.arguments)
} else := {}

# The gateway's parsed facts about the arguments (input.facts, version 1), by the JSON
# pointer of the argument; {} when missing, malformed or of another version.
argument_facts := input.facts.arguments if {
	is_object(input.facts)
	input.facts.version == 1
	is_object(input.facts.arguments)
} else := {}

# pointer(name) is the JSON pointer (RFC 6901) of the top-level argument name.
pointer(name) := concat("", ["/", replace(replace(name, "~", "~0"), "/", "~1")])

# The tool name, when it is a non-empty string.
tool_name := input.tool.name if {
	is_string(input.tool.name)
	input.tool.name != ""
}

# The settings of the called tool, when the tool is configured.
tool := tools[tool_name] if is_object(tools[tool_name])

# The caller's subject, when it is a non-blank string.
subject := ctx.subject if {
	is_string(ctx.subject)
	trim_space(ctx.subject) != ""
}

# The caller's roles: the string members of context.roles.
roles := [r | some r in ctx.roles; is_string(r)] if {
	is_array(ctx.roles)
} else := []

# The caller's tenant, when it is a well-formed, known tenant id. Tenant ids are
# lowercase slugs, ^[a-z0-9][a-z0-9_-]{0,62}$ (checked with string builtins, which
# cost far less than a regex); this also makes them safe to splice into paths.
tenant := t if {
	t := ctx.tenant
	is_string(t)
	is_object(tenants[t])
	t != ""
	count(t) <= 63
	trim(t, "abcdefghijklmnopqrstuvwxyz0123456789_-") == ""
	not startswith(t, "-")
	not startswith(t, "_")
}

# The definitions of the caller's known roles.
caller_role_defs := [def | some r in roles; def := role_defs[r]; is_object(def)]

# string_list(x) is the string members of x when x is an array, else [].
string_list(x) := [s | some s in x; is_string(s)] if {
	is_array(x)
} else := []

# setting(name, fallback) is the called tool's setting, or fallback when unset (null counts as unset).
setting(name, fallback) := object.get(tool, name, fallback) if {
	object.get(tool, name, null) != null
} else := fallback

# missing(name) holds when the argument is absent or null.
missing(name) if object.get(arguments, name, null) == null

# arg_is_string(name) holds when the argument is present and a string.
# Use "not lib.arg_is_string(name)" rather than "not is_string(lib.arguments[name])":
# OPA and regorus disagree on "not" over a builtin call whose argument is undefined.
arg_is_string(name) if is_string(arguments[name])

# arg_is_number(name) holds when the argument is present and a number.
arg_is_number(name) if is_number(arguments[name])

# has_control(s) holds when the string has ASCII control characters (including NUL and DEL).
has_control(s) if regex.match(`[\x00-\x1F\x7F]`, s)

# has_non_ascii(s) holds when the string has any character outside ASCII.
has_non_ascii(s) if regex.match(`[^\x00-\x7F]`, s)

# denial(module, message, reason) builds a denial: a public message and an audit-only reason.
denial(module, message, reason) := {"message": message, "reason": concat(": ", [module, reason])}

# Public message for a tool whose settings are missing or inconsistent.
misconfigured := "this tool is not configured correctly"

# Policy gate findings (gate.rego): an error means every call of the tool is denied, or a
# check is silently skipped; a warning is suspicious but harmless to decisions.
gate_error(problem) := {"severity": "error", "problem": problem}

gate_warning(problem) := {"severity": "warning", "problem": problem}

# What a gate error does to calls.
deny_all := "every call is denied"

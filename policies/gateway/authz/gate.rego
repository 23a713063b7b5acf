# METADATA
# title: Policy gate
# description: |
#   Answers data.gateway.authz.gate.problems for `gateway gate`: whether every
#   served tool has a decision path in this library, checked against the data
#   before any call is made. Input: {"tools": [{"tool": <the tool as the
#   decision input has it>, "facts": {"sql": [<JSON pointer>, ...]}}, ...]}:
#   the served tools, with the arguments the gateway gives the policy facts
#   for. Output: a set of {"tool", "severity": "error" | "warning", "problem"}.
#   An error means every call of the tool is denied (or a check is silently
#   skipped); a warning is suspicious but harmless to decisions.
#
#   The known kinds are rbac.kinds. Each module in `modules` describes the
#   settings it reads that name arguments (`gate_settings`) and adds its own
#   checks (`gate_problems`); the checks of one tool run with that tool's entry
#   as the input, so they read the tool's settings through the same rules as
#   the decision does.
package gateway.authz.gate

import data.gateway.authz.lib.deny_all
import data.gateway.authz.lib.gate_error
import data.gateway.authz.lib.gate_warning
import data.gateway.authz.lib.tool
import data.gateway.authz.lib.tools
import data.gateway.authz.rbac.kinds
import data.gateway.authz.rbac.tool_roles

# The modules that read tool settings: the kind each constrains ("" for every kind),
# the settings naming arguments it reads, and its own checks. A setting is described
# as {"names": how it names arguments, "types": the JSON types those arguments must be
# able to take, "required": whether the module's kind needs it}; "names" is
#   "list"    an array of argument names
#   "one"     one argument name
#   "keys"    an object whose keys are argument names (and "value" says what its
#             values are)
#   "members" an array of objects whose member "field" is an argument name
# and "facts" (optional) names the facts the gateway must give the policy for each
# argument ("sql": see policies/README.md, "Argument facts"), "facts_hint" says how a
# tool definition asks for them.
modules := {
	"paths": {"kind": "filesystem", "settings": data.gateway.authz.paths.gate_settings, "problems": data.gateway.authz.paths.gate_problems},
	"urls": {"kind": "url", "settings": data.gateway.authz.urls.gate_settings, "problems": set()},
	"sql": {"kind": "sql", "settings": data.gateway.authz.sql.gate_settings, "problems": set()},
	"exec": {"kind": "exec", "settings": data.gateway.authz.exec.gate_settings, "problems": set()},
	"mcp_resource": {"kind": "mcp_resource", "settings": data.gateway.authz.mcp.gate_settings, "problems": set()},
	"mcp_prompt": {"kind": "mcp_prompt", "settings": data.gateway.authz.mcp.gate_settings, "problems": set()},
	"tenancy": {"kind": "", "settings": data.gateway.authz.tenancy.gate_settings, "problems": data.gateway.authz.tenancy.gate_problems},
	"limits": {"kind": "", "settings": data.gateway.authz.limits.gate_settings, "problems": data.gateway.authz.limits.gate_problems},
}

# The names of the served tools.
served contains entry.tool.name if {
	some entry in input.tools
	is_string(entry.tool.name)
}

# METADATA
# entrypoint: true
problems contains object.union(found, {"tool": entry.tool.name}) if {
	some entry in input.tools
	is_string(entry.tool.name)

	# Each tool's checks see that tool as the input, as its decision would.
	checked := tool_problems with input as entry # regal ignore:with-outside-test-context
	some found in checked
}

problems contains {"tool": name, "severity": "warning", "problem": "has settings in data.gateway.config.tools but no served tool has this name"} if {
	some name, _ in tools
	not name in served
	not data.gateway.authz.mcp.actions[name] # MCP actions are decided, never served as tools
}

# -- the checks of one tool (input: one entry of input.tools) --------------------------

tool_problems contains gate_error(concat("", ["has no settings (an object) in data.gateway.config.tools: ", deny_all, " (\"this tool is not available\")"])) if {
	not tool
}

tool_problems contains gate_error(concat("", ["no role in data.gateway.config.roles grants it: ", deny_all])) if {
	count(tool_roles) == 0
}

tool_problems contains gate_error(concat("", ["kind ", json.marshal(object.get(tool, "kind", null)), " is not one of ", concat(", ", sort(kinds)), ": ", deny_all, " (\"this tool is not available\")"])) if {
	tool
	not known_kind
}

tool_problems contains found if {
	tool
	some found in setting_problems
}

tool_problems contains found if {
	tool
	some module in modules
	some found in module.problems
}

known_kind := tool.kind if tool.kind in kinds

# The settings the modules that apply to the tool read, by name (a setting read by
# more than one module is described alike by each).
applying[name] := spec if {
	some module in modules
	module_applies(module)
	some name, spec in module.settings
}

module_applies(module) if module.kind == ""

module_applies(module) if module.kind == known_kind

# The setting's value; absent and null both mean "use the default", as in lib.setting.
value(name) := tool[name] if present(name)

present(name) if tool[name] != null

absent(name) if not present(name)

absent(name) if value(name) == ""

names_list(name) := names if {
	names := value(name)
	is_array(names)
	every n in names {
		is_string(n)
	}
}

# Every argument a setting names: {"setting", "name", "types", "required", "facts", "hint"}.
uses contains use(name, spec, n, true) if {
	some name, spec in applying
	spec.names == "list"
	some n in names_list(name)
}

uses contains use(name, spec, n, spec.required) if {
	some name, spec in applying
	spec.names == "one"
	n := value(name)
	is_string(n)
	n != ""
}

uses contains use(name, spec, n, true) if {
	some name, spec in applying
	spec.names == "keys"
	names := value(name)
	is_object(names)
	some n, _ in names
}

uses contains use(name, spec, n, true) if {
	some name, spec in applying
	spec.names == "members"
	members := value(name)
	is_array(members)
	some member in members
	n := member[spec.field]
	is_string(n)
}

use(setting, spec, n, must_require) := {
	"setting": setting,
	"name": n,
	"types": {t | some t in spec.types},
	"required": must_require,
	"facts": object.get(spec, "facts", ""),
	"hint": object.get(spec, "facts_hint", ""),
}

# A setting of the tool's kind that the tool lacks.
setting_problems contains gate_error(concat("", ["kind ", json.marshal(tool.kind), " requires setting ", name, ": ", deny_all])) if {
	some name, spec in applying
	spec.required
	spec.names in {"list", "one"}
	absent(name)
}

setting_problems contains gate_error(concat("", ["setting ", name, " is not an array of argument names (strings): the policies ignore it, or its members that are not strings"])) if {
	some name, spec in applying
	spec.names == "list"
	present(name)
	not names_list(name)
}

setting_problems contains gate_error(concat("", ["setting ", name, " is empty: ", deny_all])) if {
	some name, spec in applying
	spec.names == "list"
	spec.required
	names_list(name) == []
}

setting_problems contains gate_error(concat("", ["setting ", name, " is not an argument name: ", consequence])) if {
	some name, spec in applying
	spec.names == "one"
	not absent(name)
	not is_string(value(name))
	consequence := ignored(spec.required)
}

setting_problems contains gate_error(concat("", ["setting ", name, " is not an object of argument -> ", spec.value, ": ", deny_all])) if {
	some name, spec in applying
	spec.names == "keys"
	present(name)
	not is_object(value(name))
}

setting_problems contains gate_error(concat("", ["setting ", name, " is not an array: ", deny_all])) if {
	some name, spec in applying
	spec.names == "members"
	present(name)
	not is_array(value(name))
}

# A setting of another kind: the policies never read it for this tool.
setting_problems contains gate_warning(concat("", ["setting ", name, " is ignored for kind ", json.marshal(known_kind)])) if {
	some module in modules
	not module_applies(module)
	some name, _ in module.settings
	not applying[name]
	present(name)
}

setting_problems contains gate_error(concat("", ["setting ", u.setting, " names argument ", json.marshal(u.name), ", which is not a property of the input schema: ", deny_all])) if {
	some u in uses
	not declared[u.name]
}

setting_problems contains gate_error(concat("", ["setting ", u.setting, " names argument ", json.marshal(u.name), ", whose schema type (", type_text(types), ") is not ", concat(" or ", sort(u.types)), ": ", deny_all])) if {
	some u in uses
	declared[u.name]
	types := property_types(u.name)
	count(types & u.types) == 0
}

setting_problems contains gate_warning(concat("", ["argument ", json.marshal(u.name), " (setting ", u.setting, ") is not required by the input schema: a call without it is denied"])) if {
	some u in uses
	u.required
	declared[u.name]
	not u.name in required_names
}

setting_problems contains gate_error(concat("", ["setting ", u.setting, " names argument ", json.marshal(u.name), ", for which the gateway gives the policy no ", u.facts, " facts (", u.hint, "): ", deny_all])) if {
	some u in uses
	u.facts != ""
	declared[u.name]
	not pointer_of(u.name) in object.get(input.facts, u.facts, [])
}

ignored(true) := deny_all

ignored(false) := "the policies ignore it, so that argument is never checked"

type_text(types) := concat(", ", sort(types)) if count(types) > 0

else := "none"

pointer_of(name) := concat("", ["/", replace(replace(name, "~", "~0"), "/", "~1")])

# -- the input schema: its top-level properties, and those of a top-level allOf ---------

schema := input.tool.input_schema if is_object(input.tool.input_schema)

else := {}

schema_parts := array.concat([schema], [part | some part in schema.allOf; is_object(part)]) if {
	is_array(schema.allOf)
} else := [schema]

declared contains name if {
	some part in schema_parts
	is_object(part.properties)
	some name, _ in part.properties
}

required_names contains name if {
	some part in schema_parts
	is_array(part.required)
	some name in part.required
	is_string(name)
}

# The schema of a property (the last part that declares it wins).
property(name) := found[count(found) - 1] if {
	found := [p | some part in schema_parts; is_object(part.properties); p := part.properties[name]]
	count(found) > 0
}

# The JSON types a property may take; undefined when its schema does not say.
property_types(name) := set() if {
	property(name) == false
} else := {property(name).type} if {
	is_string(property(name).type)
} else := {t | some t in property(name).type; is_string(t)} if {
	is_array(property(name).type)
}

# METADATA
# title: Role-based tool permissions
# description: |
#   A tool may be called only when it is configured in data (tools -> kind and
#   settings) and one of the caller's roles lists it (roles -> tools).
package gateway.authz.rbac

import data.gateway.authz.lib

module := "rbac"

# Tool kinds this library knows how to constrain.
kinds := {"filesystem", "url", "sql", "exec", "payment", "generic"}

# The caller's roles that grant the called tool.
granting_roles contains r if {
	some r in lib.roles
	def := lib.role_defs[r]
	is_object(def)
	lib.tool_name in lib.string_list(def.tools)
}

# The called tool is configured with a known kind.
known_kind if lib.tool.kind in kinds

# Some role of the caller grants the tool, and the tool is configured with a known kind.
permitted if {
	count(granting_roles) > 0
	known_kind
}

deny contains lib.denial(module, "this tool is not available", sprintf("tool \"%s\" has no settings in data.gateway.config.tools", [lib.tool_name])) if {
	not lib.tool
}

deny contains lib.denial(module, "this tool is not available", sprintf("tool \"%s\" has an unsupported kind", [lib.tool_name])) if {
	lib.tool
	not known_kind
}

deny contains lib.denial(module, "the caller's roles do not permit this tool", sprintf("no role in %s grants tool \"%s\"", [roles_text, lib.tool_name])) if {
	lib.tool
	count(granting_roles) == 0
}

roles_text := concat("", ["[", concat(", ", sort(lib.roles)), "]"])

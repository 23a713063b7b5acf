# METADATA
# title: Caller context and request shape
# description: |
#   Denies calls without a caller identity, with a malformed caller context,
#   an unknown tenant, or a malformed request (tool name, arguments).
#   The caller context is owned by the application, never by the model.
package gateway.authz.caller

import data.gateway.authz.lib

module := "caller"

identity_required := "caller identity is required"

deny contains lib.denial(module, identity_required, "input.context is missing or is not an object") if {
	not lib.context_present
}

deny contains lib.denial(module, identity_required, "context.subject is missing, blank or not a string") if {
	not lib.subject
}

deny contains lib.denial(module, "caller roles are malformed", "context.roles is present but is not an array of strings") if {
	object.get(lib.ctx, "roles", null) != null
	not valid_roles
}

deny contains lib.denial(module, "caller tenant is not recognised", "context.tenant is present but is not a known tenant id") if {
	object.get(lib.ctx, "tenant", null) != null
	not lib.tenant
}

deny contains lib.denial(module, "the request is malformed", "input.tool.name is missing, empty or not a string") if {
	not lib.tool_name
}

deny contains lib.denial(module, "the request is malformed", "input.arguments is missing or is not an object") if {
	not lib.arguments_present
}

valid_roles if {
	is_array(lib.ctx.roles)
	count(lib.string_list(lib.ctx.roles)) == count(lib.ctx.roles)
}

# The caller context and the request shape are acceptable.
valid if count(deny) == 0

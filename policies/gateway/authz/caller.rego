# METADATA
# title: Caller context and request shape
# description: |
#   Denies calls without a caller identity, with a malformed caller context,
#   an unknown tenant, or a malformed request (tool name, arguments).
#   The caller context is owned by the application, never by the model.
package gateway.authz.caller

import data.gateway.authz.lib.arguments_present
import data.gateway.authz.lib.context_present
import data.gateway.authz.lib.ctx
import data.gateway.authz.lib.denial
import data.gateway.authz.lib.roles
import data.gateway.authz.lib.subject
import data.gateway.authz.lib.tenant
import data.gateway.authz.lib.tool_name

module := "caller"

identity_required := "caller identity is required"

deny contains denial(module, identity_required, "input.context is missing or is not an object") if {
	not context_present
}

deny contains denial(module, identity_required, "context.subject is missing, blank or not a string") if {
	not subject
}

deny contains denial(module, "caller roles are malformed", "context.roles is present but is not an array of strings") if {
	not roles_ok
}

deny contains denial(module, "caller tenant is not recognised", "context.tenant is present but is not a known tenant id") if {
	not tenant_ok
}

deny contains denial(module, "the request is malformed", "input.tool.name is missing, empty or not a string") if {
	not tool_name
}

deny contains denial(module, "the request is malformed", "input.arguments is missing or is not an object") if {
	not arguments_present
}

# The caller context and the request shape are acceptable: no deny rule above holds.
# Stated positively (each condition is the negation of one deny rule), so that an
# allowed call never evaluates the deny set.
valid if {
	subject # implies context_present: lib.ctx is {} without a context object
	tool_name
	is_object(input.arguments) # arguments_present
	roles_ok
	tenant_ok
}

# context.roles is an array of strings (lib.roles keeps its string members), absent or null.
# (An else chain: regorus stops at the first branch that holds.)
roles_ok if {
	is_array(ctx.roles)
	count(roles) == count(ctx.roles)
} else if {
	object.get(ctx, "roles", null) == null
}

# context.tenant is a known tenant id, absent or null.
tenant_ok if {
	tenant
} else if {
	object.get(ctx, "tenant", null) == null
}

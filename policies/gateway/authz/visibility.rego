# METADATA
# title: Tool visibility
# description: |
#   Answers data.gateway.authz.visibility.decision (visibility version 1): whether a
#   caller is shown a tool in a listing. The input has the tool's definition and the
#   caller context, no arguments: {"tool", "context", "visibility": {"version": 1}}.
#   A caller sees a tool exactly when a call of it would pass the caller and access
#   stages (a valid caller context, a role that grants the configured tool, an acting
#   agent entrusted with it): what it could possibly call, nothing more. Listing is
#   never a substitute for the call-time decision, which still decides every call.
package gateway.authz.visibility

import data.gateway.authz.lib.subject
import data.gateway.authz.lib.tool_name

# The only version of the visibility input this policy knows.
version_ok if input.visibility.version == 1

visible if {
	version_ok
	subject
	tool_name
	data.gateway.authz.caller.roles_ok
	data.gateway.authz.caller.tenant_ok
	data.gateway.authz.rbac.permitted
}

# METADATA
# entrypoint: true
decision := {"allow": true, "cache": {"ttl_s": data.gateway.authz.ttl_s}} if {
	visible
} else := {"allow": false, "cache": {"ttl_s": data.gateway.authz.ttl_s}}

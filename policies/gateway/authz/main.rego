# METADATA
# title: Gateway authorization entry point
# description: |
#   Answers data.gateway.authz.decision (policy contract version 1):
#   {"allow": bool, "message": public text, "reasons": [audit-only text],
#    "cache": {"ttl_s": seconds}}.
#   Default deny: a call is allowed only when the caller context is valid, a
#   role grants the configured tool, and no module denies it. The public
#   message comes from the first failing stage only (caller, then access, then
#   arguments), so an unauthorised caller learns nothing about argument rules;
#   the reasons list every denial of every module.
package gateway.authz

import data.gateway.authz.caller
import data.gateway.authz.exec
import data.gateway.authz.lib
import data.gateway.authz.limits
import data.gateway.authz.paths
import data.gateway.authz.rbac
import data.gateway.authz.sql
import data.gateway.authz.tenancy
import data.gateway.authz.urls

# Stage 1: who is calling, and is the request well-formed.
caller_denials := caller.deny

# Stage 2: may this caller use this tool at all.
access_denials := rbac.deny

# Stage 3: are the arguments acceptable for this caller.
argument_denials := ((((tenancy.deny | paths.deny) | urls.deny) | sql.deny) | limits.deny) | exec.deny

denials := (caller_denials | access_denials) | argument_denials

default allow := false

allow if {
	caller.valid
	rbac.permitted
	count(denials) == 0
}

# The denials whose messages the caller may see.
public_denials := caller_denials if {
	count(caller_denials) > 0
} else := access_denials if {
	count(access_denials) > 0
} else := argument_denials

message := "the call is authorized" if {
	allow
} else := concat("; ", sort({d.message | some d in public_denials})) if {
	count(public_denials) > 0
} else := "the call is not authorized"

reasons := [sprintf("rbac: tool \"%s\" granted by role(s) %s", [lib.tool_name, concat(", ", sort(rbac.granting_roles))])] if {
	allow
} else := sort({d.reason | some d in denials}) if {
	count(denials) > 0
} else := ["default deny: no rule allowed the call"]

# Time to live for caching this decision. Every rule here is a pure function
# of the input and data, so decisions are cacheable; a tool may lower or
# disable (0) caching with its "cache_ttl_s" setting. Any rule that reads the
# clock or external state must make this 0.
ttl_s := lib.tool.cache_ttl_s if {
	valid_ttl(lib.tool.cache_ttl_s)
} else := lib.config.cache_ttl_s if {
	valid_ttl(lib.config.cache_ttl_s)
} else := 0

valid_ttl(x) if {
	is_number(x)
	x >= 0
	x == floor(x)
}

decision := {
	"allow": allow,
	"message": message,
	"reasons": reasons,
	"cache": {"ttl_s": ttl_s},
}

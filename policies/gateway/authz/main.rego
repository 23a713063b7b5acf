# METADATA
# title: Gateway authorization entry point
# description: |
#   Answers data.gateway.authz.decision (policy contract version 1):
#   {"allow": bool, "message": public text, "reasons": [audit-only text],
#    "cache": {"ttl_s": seconds}}.
#   Default deny: a call is allowed only when the caller context is valid, a
#   role grants the configured tool, and no module denies it. The public
#   message comes from the first failing stage only (caller, then access, then
#   arguments), so an unauthorised caller learns nothing about argument rules.
#   The argument modules are evaluated only once the caller and access stages
#   pass; the reasons list every denial of the stages evaluated.
package gateway.authz

import data.gateway.authz.lib.tool
import data.gateway.authz.lib.tool_name

# The modules are referenced by full rule paths, never through an imported package
# (`import data.gateway.authz.caller` then `caller.deny`): regorus evaluates every rule
# of an imported package the first time one of its rules is referenced that way.

# Stage 1: who is calling, and is the request well-formed. (caller.valid holds
# exactly when caller.deny is empty, and costs less.)
caller_denials := set() if {
	data.gateway.authz.caller.valid
} else := data.gateway.authz.caller.deny

# Stage 2: may this caller use this tool at all. (rbac.deny is empty when
# rbac.permitted holds.)
access_denials := set() if {
	data.gateway.authz.rbac.permitted
} else := data.gateway.authz.rbac.deny

# Stage 3: are the arguments acceptable for this caller; asked only when stages 1
# and 2 pass, so a denied caller's arguments (however large) are never evaluated.
# A module's deny set is evaluated only when the module applies to the called tool
# (it is empty otherwise),
# so a call pays only for the modules that concern it. The first branch is a fast
# path for the commonest tools: no stage-3 module applies to a generic tool without
# tenant, resource or limit settings (see tenancy.applies and limits.applies; the
# kind modules apply to other kinds only).
argument_denials := set() if {
	not data.gateway.authz.caller.valid
} else := set() if {
	not data.gateway.authz.rbac.permitted
} else := argument_module_denials

argument_module_denials := set() if {
	tool.kind == "generic"
	object.get(tool, "tenant_args", null) == null
	object.get(tool, "resource_args", null) == null
	object.get(tool, "limits", null) == null
	object.get(tool, "labels", null) == null
	object.get(tool, "quotas", null) == null
	object.get(tool, "approval", null) == null
	object.get(tool, "redact", null) == null
} else := (((tenancy_denials | limits_denials) | flow_denials) | obligations_denials) | kind_denials

tenancy_denials := data.gateway.authz.tenancy.deny if {
	data.gateway.authz.tenancy.applies
} else := set()

limits_denials := data.gateway.authz.limits.deny if {
	data.gateway.authz.limits.applies
} else := set()

flow_denials := data.gateway.authz.flow.deny if {
	data.gateway.authz.flow.applies
} else := set()

obligations_denials := data.gateway.authz.obligations.deny if {
	data.gateway.authz.obligations.applies
} else := set()

# The deny set of the module for the tool's kind: each of these modules applies to
# exactly one kind (its "applies" rule), and its deny set is empty for other kinds.
kind_denials := data.gateway.authz.paths.deny if {
	tool.kind == "filesystem"
} else := data.gateway.authz.urls.deny if {
	tool.kind == "url"
} else := data.gateway.authz.sql.deny if {
	tool.kind == "sql"
} else := data.gateway.authz.exec.deny if {
	tool.kind == "exec"
} else := data.gateway.authz.mcp.deny if {
	tool.kind in {"mcp_resource", "mcp_prompt"}
} else := set()

denials := (caller_denials | access_denials) | argument_denials

# caller.valid and rbac.permitted imply that the first two stages deny nothing.
allow if {
	data.gateway.authz.caller.valid
	data.gateway.authz.rbac.permitted
	count(argument_denials) == 0
} else := false

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

# concat, not sprintf, on the allow path: the compiled policy runs concat natively, while
# sprintf is a host call (tool_name is always a string, so the text is the same).
reasons := [concat("", ["rbac: tool \"", tool_name, "\" granted by role(s) ", concat(", ", sort(data.gateway.authz.rbac.granting_roles))])] if {
	allow
} else := sort({d.reason | some d in denials}) if {
	count(denials) > 0
} else := ["default deny: no rule allowed the call"]

# Time to live for caching this decision. Every rule here is a pure function
# of the input and data, so decisions are cacheable; a tool may lower or
# disable (0) caching with its "cache_ttl_s" setting. Any rule that reads the
# clock or external state must make this 0.
ttl_s := tool.cache_ttl_s if {
	valid_ttl(tool.cache_ttl_s)
} else := data.gateway.config.cache_ttl_s if {
	valid_ttl(data.gateway.config.cache_ttl_s)
} else := 0

valid_ttl(x) if {
	is_number(x)
	x >= 0
	x == floor(x)
}

# What an allowed call of a tool with flow settings carries to the gateway: the labels
# its session gets when it runs and the quotas reserved before it runs (flow.rego).
flow_members := data.gateway.authz.flow.members if {
	allow
	data.gateway.authz.flow.applies
} else := {}

# What an allowed call of a tool with approval or redact settings obliges the gateway to
# do: the decision's "obligations" (policy contract version 2, obligations.rego).
obligation_members := data.gateway.authz.obligations.members if {
	allow
	data.gateway.authz.obligations.applies
} else := {}

# A refusal for OAuth scopes the caller's token lacks names them (the decision's "step_up"
# member), so that the surface can answer insufficient_scope and the client step up.
step_up_member := {"step_up": {"scopes": data.gateway.authz.rbac.step_up_scopes}} if {
	not allow
	data.gateway.authz.caller.valid
	data.gateway.authz.rbac.step_up_scopes
} else := {}

# METADATA
# entrypoint: true
decision := object.union_n([
	{
		"allow": allow,
		"message": message,
		"reasons": reasons,
		"cache": {"ttl_s": ttl_s},
	},
	flow_members,
	obligation_members,
	step_up_member,
])

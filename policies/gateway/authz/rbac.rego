# METADATA
# title: Role-based tool permissions
# description: |
#   A tool may be called only when it is configured in data (tools -> kind and
#   settings) and one of the caller's roles lists it (roles -> tools).
package gateway.authz.rbac

import data.gateway.authz.lib.ctx
import data.gateway.authz.lib.denial
import data.gateway.authz.lib.role_defs
import data.gateway.authz.lib.roles
import data.gateway.authz.lib.tool
import data.gateway.authz.lib.tool_name

module := "rbac"

# Tool kinds this library knows how to constrain.
kinds := {"filesystem", "url", "sql", "exec", "payment", "mcp_resource", "mcp_prompt", "generic"}

# The caller's roles that grant the called tool.
granting_roles contains r if {
	some r in roles
	def := role_defs[r]
	is_object(def)
	is_array(def.tools)
	tool_name in def.tools # tool_name is a string, so only string members can match
}

# The roles that grant the called tool, whoever calls (the policy gate reads them).
tool_roles contains r if {
	some r, def in role_defs
	is_object(def)
	is_array(def.tools)
	tool_name in def.tools
}

# The called tool is configured with a known kind.
known_kind if tool.kind in kinds

# Some role of the caller grants the tool, the tool is configured with a known kind, and
# an acting agent (delegation) is entrusted with it.
permitted if {
	tool.kind in kinds # known_kind
	count(granting_roles) > 0
	delegation_ok
	scopes_ok
}

# OAuth scopes (tool setting "scopes"): a call needs every listed scope in context.scopes
# (the scopes of the caller's access token). The decision then names the missing ones
# (main.rego, "step_up"), so that the client can ask for a token that has them.
scopes_ok if {
	object.get(tool, "scopes", null) == null
} else if {
	is_array(tool.scopes)
	count(missing_scopes) == 0
}

missing_scopes := {s | some s in tool.scopes; is_string(s)} - held_scopes if {
	is_array(tool.scopes)
} else := set()

# The scopes a refusal names for step-up: only when the scopes are why a caller whose
# roles (and acting agent) grant the tool is refused.
step_up_scopes := sort(missing_scopes) if {
	count(missing_scopes) > 0
	tool.kind in kinds
	count(granting_roles) > 0
	delegation_ok
}

held_scopes := {s | some s in ctx.scopes; is_string(s)} if {
	is_array(ctx.scopes)
} else := set()

# Delegation (RFC 8693 "act"): a caller context with an "actor" is an agent acting for
# the subject. It may use only the tools that both the subject's roles grant and
# data.gateway.config.agents entrusts the agent with; an unknown agent, or an actor that
# is not an object with a string subject, may use nothing.
delegated if object.get(ctx, "actor", null) != null

delegation_ok if not delegated

delegation_ok if {
	is_string(ctx.actor.subject)
	agent := agents[ctx.actor.subject]
	is_object(agent)
	is_array(agent.tools)
	tool_name in agent.tools
}

agents := data.gateway.config.agents if {
	is_object(data.gateway.config.agents)
} else := {}

deny contains denial(module, "this tool is not available", sprintf("tool \"%s\" has no settings in data.gateway.config.tools", [tool_name])) if {
	not tool
}

deny contains denial(module, "this tool is not available", sprintf("tool \"%s\" has an unsupported kind", [tool_name])) if {
	tool
	not known_kind
}

deny contains denial(module, "the caller's roles do not permit this tool", sprintf("no role in %s grants tool \"%s\"", [roles_text, tool_name])) if {
	tool
	count(granting_roles) == 0
}

deny contains denial(module, "the acting agent may not use this tool", sprintf("the acting agent is not entrusted with tool \"%s\"", [tool_name])) if {
	tool
	count(granting_roles) > 0
	not delegation_ok
}

deny contains denial(module, "the caller's token lacks a required scope", concat("", ["missing scope(s): ", concat(", ", sort(missing_scopes))])) if {
	tool
	count(granting_roles) > 0
	count(missing_scopes) > 0
}

deny contains denial(module, "this tool is not configured correctly", "tool setting \"scopes\" is not an array") if {
	tool
	not object.get(tool, "scopes", null) == null
	not is_array(tool.scopes)
}

roles_text := concat("", ["[", concat(", ", sort(roles)), "]"])

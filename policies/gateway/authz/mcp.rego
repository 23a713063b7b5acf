# METADATA
# title: MCP resources and prompts of upstream servers
# description: |
#   The gateway's actions on upstream MCP servers (contract "MCP actions", version 1):
#   tool "mcp.resources.read" / "mcp.resources.subscribe" (kind "mcp_resource") with
#   arguments {"action", "version", "server", "uri"}, and "mcp.prompts.get" (kind
#   "mcp_prompt") with {"action", "version", "server", "prompt", "arguments"}.
#   A resource is allowed only when its URI is plain (see uri_plain) and starts with
#   one of the tool's "uri_prefixes" ("{tenant}" is the caller's tenant); a prompt
#   only when it is listed in "prompts" and every argument is text of at most
#   "max_argument_length" characters. "servers", when set, lists the upstreams the
#   action may reach. No setting, no access.
package gateway.authz.mcp

import data.gateway.authz.lib.arguments
import data.gateway.authz.lib.denial
import data.gateway.authz.lib.has_control
import data.gateway.authz.lib.misconfigured
import data.gateway.authz.lib.setting
import data.gateway.authz.lib.string_list
import data.gateway.authz.lib.tenant
import data.gateway.authz.lib.tool
import data.gateway.authz.lib.tool_name

module := "mcp"

kinds := {"mcp_resource", "mcp_prompt"}

applies if tool.kind in kinds

# For the policy gate: no setting of these kinds names an argument (the contract fixes them).
gate_settings := {}

# The action each reserved tool name stands for; anything else is not an MCP action.
actions := {
	"mcp.resources.read": "resources/read",
	"mcp.resources.subscribe": "resources/subscribe",
	"mcp.prompts.get": "prompts/get",
}

action_kinds := {
	"resources/read": "mcp_resource",
	"resources/subscribe": "mcp_resource",
	"prompts/get": "mcp_prompt",
}

contract_version := 1

expected_action := actions[tool_name]

# The arguments are this tool's action, in the version of the contract this module reads.
well_formed if {
	arguments.action == expected_action
	arguments.version == contract_version
	action_kinds[expected_action] == tool.kind
	is_string(arguments.server)
}

servers_setting := setting("servers", null)

# -- resources -----------------------------------------------------------------------

prefix_settings := string_list(setting("uri_prefixes", []))

# The configured prefixes, "{tenant}" replaced by the caller's tenant (dropped without one).
prefixes contains p if {
	some p in prefix_settings
	not contains(p, "{tenant}")
}

prefixes contains replace(p, "{tenant}", tenant) if {
	some p in prefix_settings
	contains(p, "{tenant}")
}

resource_uri := arguments.uri if is_string(arguments.uri)

# A URI of one scheme with only unreserved characters, "/", ":", "@", "," "+" and "=":
# no percent-encoding, query, fragment, backslash, white space or control characters, and
# no "." or ".." segment, so that a prefix means what it says.
uri_plain if {
	regex.match(`^[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9._~/:@,+=-]*$`, resource_uri)
	not dot_segment
}

dot_segment if {
	some segment in split(resource_uri, "/")
	segment in {".", ".."}
}

under_prefix if {
	some p in prefixes
	count(p) > 0
	startswith(resource_uri, p)
	not contains(substring(resource_uri, count(p) - 1, -1), "//") # from the prefix's last character
}

# -- prompts --------------------------------------------------------------------------

prompt_settings := string_list(setting("prompts", []))

max_argument_length := n if {
	n := setting("max_argument_length", 4096)
	is_number(n)
} else := -1

prompt_arguments := arguments.arguments if is_object(arguments.arguments)

plain_text(value) if {
	is_string(value)
	count(value) <= max_argument_length
	not has_control(value)
}

# -- the denials ----------------------------------------------------------------------

deny contains denial(module, "this request is not understood", "the arguments are not an MCP action of this tool (contract version 1)") if {
	applies
	not well_formed
}

deny contains denial(module, misconfigured, "setting servers is not an array of strings") if {
	applies
	servers_setting != null
	not is_array(servers_setting)
}

deny contains denial(module, "this server is not available", "the upstream server is not listed in servers") if {
	applies
	well_formed
	is_array(servers_setting)
	not arguments.server in string_list(servers_setting)
}

deny contains denial(module, misconfigured, "setting uri_prefixes is missing or empty") if {
	tool.kind == "mcp_resource"
	count(prefix_settings) == 0
}

deny contains denial(module, "the resource is not allowed", "the uri is not a string") if {
	tool.kind == "mcp_resource"
	well_formed
	not resource_uri
}

deny contains denial(module, "the resource is not allowed", "the uri is not plain (encoding, query, dot segments or unusual characters)") if {
	tool.kind == "mcp_resource"
	well_formed
	resource_uri
	not uri_plain
}

deny contains denial(module, "the resource is not allowed", "the uri is under none of the allowed prefixes") if {
	tool.kind == "mcp_resource"
	well_formed
	uri_plain
	not under_prefix
}

deny contains denial(module, "the prompt is not allowed", "the prompt is not listed in prompts") if {
	tool.kind == "mcp_prompt"
	well_formed
	not arguments.prompt in prompt_settings
}

deny contains denial(module, "the prompt arguments are not allowed", "a prompt argument is not text, too long or has control characters") if {
	tool.kind == "mcp_prompt"
	well_formed
	some value in prompt_arguments
	not plain_text(value)
}

deny contains denial(module, "the prompt arguments are not allowed", "the prompt arguments are not an object") if {
	tool.kind == "mcp_prompt"
	well_formed
	not prompt_arguments
}

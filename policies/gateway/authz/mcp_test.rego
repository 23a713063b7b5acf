package gateway.authz.mcp_test

import data.gateway.authz.fixtures_test as fx
import data.gateway.authz.mcp

read(u) := {"action": "resources/read", "version": 1, "server": "files", "uri": u}

subscribe(u) := {"action": "resources/subscribe", "version": 1, "server": "files", "uri": u}

prompt(name, args) := {"action": "prompts/get", "version": 1, "server": "files", "prompt": name, "arguments": args}

acme_report := "file:///srv/tenants/acme/report.txt"

# -- through the decision, with the shipped data -----------------------------------------

test_reader_reads_a_resource_of_its_tenant if {
	fx.allowed(fx.as_role("reader", "mcp.resources.read", read(acme_report)))
}

test_reader_subscribes_to_a_resource_of_its_tenant if {
	fx.allowed(fx.as_role("reader", "mcp.resources.subscribe", subscribe(acme_report)))
}

test_reader_gets_a_listed_prompt if {
	fx.allowed(fx.as_role("reader", "mcp.prompts.get", prompt("summarize", {"topic": "q3"})))
}

complete(name) := {"action": "completion/complete", "version": 1, "server": "files", "ref": {"type": "ref/prompt", "name": name}, "argument": {"name": "topic", "value": "q"}, "context": {}}

test_a_completion_is_granted_to_no_role_by_the_shipped_data if {
	every role in ["reader", "writer", "admin"] {
		not fx.allowed(fx.as_role(role, "mcp.completion.complete", complete("summarize")))
	}
}

test_another_tenants_resource_is_denied if {
	d := fx.as_role("reader", "mcp.resources.read", read("file:///srv/tenants/globex/payroll.txt"))
	fx.has_message(d, "the resource is not allowed")
	fx.has_reason(d, "under none of the allowed prefixes")
}

test_a_role_without_the_action_is_denied if {
	d := fx.as_role("clerk", "mcp.resources.read", read(acme_report))
	fx.has_message(d, "the caller's roles do not permit this tool")
}

test_without_a_caller_context_a_read_is_denied if {
	d := fx.decide("mcp.resources.read", read(acme_report), {})
	d.allow == false
}

test_without_a_tenant_the_tenant_prefix_grants_nothing if {
	d := fx.decide("mcp.resources.read", read(acme_report), {"subject": "alice", "roles": ["reader"]})
	fx.has_reason(d, "under none of the allowed prefixes")
}

# Variants of one class: a URI that leaves the prefix by its spelling is never plain.
test_uris_that_escape_the_prefix_by_spelling_are_denied if {
	escapes := [
		"file:///srv/tenants/acme/../globex/payroll.txt",
		"file:///srv/tenants/acme/./../globex/x",
		"file:///srv/tenants/acme/%2e%2e/globex/x",
		"file:///srv/tenants/acme/%2E%2E/globex/x",
		"file:///srv/tenants/acme/..",
		"file:///srv/tenants/acme/x?y=../../etc/passwd",
		"file:///srv/tenants/acme/x#frag",
		"file:///srv/tenants/acme\\..\\globex\\x",
		"file:///srv/tenants/acme/ x",
		"file:///srv/tenants/acme/x\n",
		"file:///srv/tenants/acme/\u00e9",
		"FILE:///srv/tenants/acme/x",
	]
	every u in escapes {
		d := fx.as_role("reader", "mcp.resources.read", read(u))
		d.allow == false
	}
}

test_a_double_slash_after_the_prefix_is_denied if {
	d := fx.as_role("reader", "mcp.resources.read", read("file:///srv/tenants/acme//etc/passwd"))
	fx.has_reason(d, "under none of the allowed prefixes")
}

test_a_prefix_is_not_a_sibling_directory if {
	d := fx.as_role("reader", "mcp.resources.read", read("file:///srv/tenants/acme-evil/x"))
	d.allow == false
}

test_an_unlisted_prompt_is_denied if {
	d := fx.as_role("reader", "mcp.prompts.get", prompt("exfiltrate", {}))
	fx.has_message(d, "the prompt is not allowed")
}

test_prompt_arguments_must_be_short_plain_text if {
	long := concat("", [x | some _ in numbers.range(1, 5000); x := "a"])
	every args in [{"topic": long}, {"topic": "a\u0000b"}, {"topic": 7}] {
		d := fx.as_role("reader", "mcp.prompts.get", prompt("summarize", args))
		fx.has_message(d, "the prompt arguments are not allowed")
	}
}

test_prompt_arguments_that_are_not_an_object_are_denied if {
	d := fx.as_role("reader", "mcp.prompts.get", prompt("summarize", "topic"))
	fx.has_message(d, "the prompt arguments are not allowed")
}

# The arguments must be this tool's own action, in contract version 1.
test_arguments_of_another_action_or_version_are_not_understood if {
	wrong := [
		subscribe(acme_report),
		object.union(read(acme_report), {"version": 2}),
		object.remove(read(acme_report), ["action"]),
		object.union(read(acme_report), {"server": 1}),
	]
	every args in wrong {
		d := fx.as_role("reader", "mcp.resources.read", args)
		fx.has_message(d, "this request is not understood")
	}
}

test_a_read_as_a_prompt_tool_is_not_understood if {
	d := fx.as_role("reader", "mcp.prompts.get", object.union(read(acme_report), {"action": "prompts/get"}))
	d.allow == false
}

test_servers_limit_the_upstreams_an_action_reaches if {
	fx.allowed(fx.as_role("reader", "mcp.resources.read", read(acme_report))) with data.gateway.config.tools["mcp.resources.read"].servers as ["files"]
	d := fx.as_role("reader", "mcp.resources.read", object.union(read(acme_report), {"server": "other"})) with data.gateway.config.tools["mcp.resources.read"].servers as ["files"]
	fx.has_message(d, "this server is not available")
}

test_malformed_settings_are_misconfiguration if {
	d1 := fx.as_role("reader", "mcp.resources.read", read(acme_report)) with data.gateway.config.tools["mcp.resources.read"].servers as "files"
	fx.has_message(d1, "this tool is not configured correctly")
	d2 := fx.as_role("reader", "mcp.resources.read", read(acme_report)) with data.gateway.config.tools["mcp.resources.read"].uri_prefixes as []
	fx.has_message(d2, "this tool is not configured correctly")
}

test_a_fixed_prefix_needs_no_tenant if {
	fx.allowed(fx.decide("mcp.resources.read", read("file:///srv/shared/a.txt"), {"subject": "alice", "roles": ["reader"]})) with data.gateway.config.tools["mcp.resources.read"].uri_prefixes as ["file:///srv/shared/"]
}

test_a_non_numeric_max_argument_length_allows_no_arguments if {
	d := fx.as_role("reader", "mcp.prompts.get", prompt("summarize", {"topic": "q3"})) with data.gateway.config.tools["mcp.prompts.get"].max_argument_length as "big"
	fx.has_message(d, "the prompt arguments are not allowed")
}

# -- the module alone ------------------------------------------------------------------

test_the_module_does_not_apply_to_other_kinds if {
	not mcp.applies with input as fx.request("read_file", {"path": "/x"}, fx.context(["reader"], "acme"))
	count(mcp.deny) == 0 with input as fx.request("read_file", {"path": "/x"}, fx.context(["reader"], "acme"))
}

package gateway.authz.visibility_test

import data.gateway.authz.fixtures_test as fx

listing(tool, ctx) := {
	"tool": {"name": tool, "description": "test tool", "input_schema": {"type": "object"}},
	"context": ctx,
	"visibility": {"version": 1},
}

shown(tool, ctx) := d.allow if {
	d := data.gateway.authz.visibility.decision with input as listing(tool, ctx)
}

test_a_granted_tool_is_shown if {
	shown("read_file", fx.context(["reader"], "acme"))
}

test_a_tool_no_role_grants_is_hidden if {
	not shown("write_file", fx.context(["reader"], "acme"))
}

test_an_unconfigured_tool_is_hidden if {
	not shown("nonexistent", fx.context(["reader", "writer"], "acme"))
}

test_no_subject_sees_nothing if {
	not shown("read_file", {"roles": ["reader"], "tenant": "acme"})
}

test_an_empty_context_sees_nothing if {
	not shown("read_file", {})
}

test_malformed_roles_see_nothing if {
	not shown("read_file", {"subject": "alice", "roles": "reader", "tenant": "acme"})
}

test_an_unknown_tenant_sees_nothing if {
	not shown("read_file", fx.context(["reader"], "initech"))
}

test_another_visibility_version_is_hidden if {
	d := data.gateway.authz.visibility.decision with input as object.union(
		listing("read_file", fx.context(["reader"], "acme")),
		{"visibility": {"version": 2}},
	)
	d.allow == false
}

test_no_visibility_member_is_hidden if {
	d := data.gateway.authz.visibility.decision with input as object.remove(
		listing("read_file", fx.context(["reader"], "acme")),
		["visibility"],
	)
	d.allow == false
}

test_the_visibility_decision_is_cacheable_like_the_call_decision if {
	d := data.gateway.authz.visibility.decision with input as listing("read_file", fx.context(["reader"], "acme"))
	d.cache.ttl_s == data.gateway.config.cache_ttl_s
}

# Consistency with the allow rules: for every role and configured tool, the tool is shown
# exactly when the role grants it (the access stage of a call would pass).
test_visibility_agrees_with_the_access_stage_for_every_role_and_tool if {
	disagreements := {[role, tool] |
		some role, def in data.gateway.config.roles
		some tool, _ in data.gateway.config.tools
		(shown(tool, fx.context([role], "acme")) != tool) in def.tools
	}
	count(disagreements) == 0
	count(data.gateway.config.roles) > 0
}

# A call that is allowed is of a tool that is shown to the same caller.
test_an_allowed_call_is_of_a_shown_tool if {
	fx.allowed(fx.as_role("reader", "read_file", {"path": "/srv/tenants/acme/report.txt"}))
	shown("read_file", fx.context(["reader"], "acme"))
}

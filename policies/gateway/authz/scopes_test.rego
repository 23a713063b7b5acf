package gateway.authz.scopes_test

import data.gateway.authz.fixtures_test as fx

report := {"path": "/srv/tenants/acme/report.txt"}

# alice (reader, acme) with the scopes of her access token.
with_scopes(scopes) := object.union(fx.context(["reader"], "acme"), {"scopes": scopes})

decide(scopes) := fx.decide("read_file", report, with_scopes(scopes))

test_a_token_with_the_required_scope_may_call if {
	fx.allowed(decide(["files.read", "other"])) with data.gateway.config.tools.read_file.scopes as ["files.read"]
}

test_a_token_without_a_required_scope_is_refused_naming_it if {
	d := decide(["other"]) with data.gateway.config.tools.read_file.scopes as ["files.read", "files.audit"]
	fx.has_message(d, "the caller's token lacks a required scope")
	d.step_up == {"scopes": ["files.audit", "files.read"]}
	fx.has_reason(d, "missing scope(s): files.audit, files.read")
}

test_a_caller_without_scopes_lacks_them_all if {
	d := fx.as_role("reader", "read_file", report) with data.gateway.config.tools.read_file.scopes as ["files.read"]
	d.step_up == {"scopes": ["files.read"]}
}

test_an_allowed_call_and_other_refusals_have_no_step_up if {
	not "step_up" in object.keys(decide([]))
	d := fx.as_role("analyst", "read_file", report) with data.gateway.config.tools.read_file.scopes as ["files.read"]
	d.allow == false
	not "step_up" in object.keys(d)
}

test_a_malformed_scopes_setting_refuses_everyone if {
	d := decide(["files.read"]) with data.gateway.config.tools.read_file.scopes as "files.read"
	fx.has_message(d, "this tool is not configured correctly")
}

test_a_tool_needing_a_scope_is_hidden_from_a_token_without_it if {
	listing := {
		"tool": {"name": "read_file", "description": "", "input_schema": {"type": "object"}},
		"context": with_scopes(["other"]),
		"visibility": {"version": 1},
	}
	d := data.gateway.authz.visibility.decision with input as listing
		with data.gateway.config.tools.read_file.scopes as ["files.read"]
	d.allow == false
	e := data.gateway.authz.visibility.decision with input as object.union(listing, {"context": with_scopes(["files.read"])})
		with data.gateway.config.tools.read_file.scopes as ["files.read"]
	e.allow == true
}

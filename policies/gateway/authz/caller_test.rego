package gateway.authz.caller_test

import data.gateway.authz.caller
import data.gateway.authz.fixtures_test as fx

add_tool := {"name": "add", "description": "", "input_schema": {}}

test_valid_context_allowed if {
	fx.allowed(fx.as_role("reader", "add", {}))
}

test_missing_context_denied if {
	d := data.gateway.authz.decision with input as {"tool": add_tool, "arguments": {}}
	d.message == "caller identity is required"
	fx.has_reason(d, "caller: input.context is missing or is not an object")
	fx.has_reason(d, "caller: context.subject is missing")
}

test_empty_context_denied if {
	d := data.gateway.authz.decision with input as {"tool": add_tool, "arguments": {}, "context": {}}
	d.message == "caller identity is required"
	fx.has_reason(d, "caller: context.subject is missing, blank or not a string")
	not fx.has_reason(d, "input.context is missing")
}

test_non_object_context_denied if {
	every ctx in ["alice", ["alice"], 1, true, null] {
		d := data.gateway.authz.decision with input as {"tool": add_tool, "arguments": {}, "context": ctx}
		d.message == "caller identity is required"
		fx.has_reason(d, "caller: input.context is missing or is not an object")
	}
}

test_bad_subject_denied if {
	every subject in ["", "   ", 42, null, ["alice"], {"id": "alice"}, false] {
		d := fx.decide("add", {}, {"subject": subject, "roles": ["reader"], "tenant": "acme"})
		d.message == "caller identity is required"
		fx.has_reason(d, "context.subject is missing, blank or not a string")
	}
}

test_subject_without_tenant_allowed_for_untenanted_tool if {
	fx.allowed(fx.decide("add", {}, {"subject": "svc", "roles": ["reader"]}))
}

test_malformed_roles_denied if {
	every roles in ["reader", {"reader": true}, ["reader", 1], 7] {
		d := fx.decide("add", {}, {"subject": "alice", "roles": roles, "tenant": "acme"})
		d.message == "caller roles are malformed"
		fx.has_reason(d, "context.roles is present but is not an array of strings")
	}
}

test_missing_roles_denied_by_rbac if {
	d := fx.decide("add", {}, {"subject": "alice", "tenant": "acme"})
	d.message == "the caller's roles do not permit this tool"
}

test_unknown_tenant_denied if {
	every tenant in ["initech", "ACME", "acme/../globex", "", 3, ["acme"]] {
		d := fx.decide("add", {}, fx.context(["reader"], tenant))
		d.message == "caller tenant is not recognised"
		fx.has_reason(d, "context.tenant is present but is not a known tenant id")
	}
}

test_malformed_tool_name_denied if {
	every tool in [{}, {"name": ""}, {"name": 5}, "add", null] {
		d := data.gateway.authz.decision with input as {"tool": tool, "arguments": {}, "context": fx.context(["reader"], "acme")}
		d.message == "the request is malformed"
		fx.has_reason(d, "input.tool.name is missing, empty or not a string")
	}
}

test_malformed_arguments_denied if {
	every args in [null, [], "{}", 1] {
		d := data.gateway.authz.decision with input as {"tool": add_tool, "arguments": args, "context": fx.context(["reader"], "acme")}
		d.message == "the request is malformed"
		fx.has_reason(d, "input.arguments is missing or is not an object")
	}
}

test_missing_arguments_denied if {
	d := data.gateway.authz.decision with input as {"tool": add_tool, "context": fx.context(["reader"], "acme")}
	d.message == "the request is malformed"
}

# caller.valid states "caller.deny is empty" positively (main.rego uses it to skip the
# deny set); the two must agree on every shape of context and request.
test_valid_exactly_when_nothing_denied if {
	subjects := [{"subject": "alice"}, {"subject": " "}, {"subject": 7}, {}]
	role_parts := [{"roles": ["reader"]}, {"roles": []}, {"roles": null}, {"roles": ["reader", 1]}, {"roles": "reader"}, {}]
	tenant_parts := [{"tenant": "acme"}, {"tenant": null}, {"tenant": "initech"}, {"tenant": "ACME"}, {"tenant": 3}, {}]
	contexts := [object.union_n([s, r, t]) |
		some s in subjects
		some r in role_parts
		some t in tenant_parts
	]
	requests := [
		{"tool": add_tool, "arguments": {}},
		{"tool": {"name": ""}, "arguments": {}},
		{"tool": add_tool, "arguments": []},
		{"arguments": {}},
	]
	inputs := array.concat(
		[object.union(r, {"context": c}) | some r in requests; some c in contexts],
		[{"tool": add_tool, "arguments": {}, "context": "alice"}, {"tool": add_tool, "arguments": {}}, {}],
	)
	every inp in inputs {
		n := count(caller.deny) with input as inp
		valid_agrees(inp, n)
	}
}

valid_agrees(inp, 0) if caller.valid with input as inp

valid_agrees(inp, n) if {
	n > 0
	not caller.valid with input as inp
}

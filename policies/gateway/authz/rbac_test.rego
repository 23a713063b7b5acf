package gateway.authz.rbac_test

import data.gateway.authz.fixtures_test as fx
import data.gateway.authz.rbac

test_role_grants_tool if {
	fx.allowed(fx.as_role("reader", "add", {"a": 1, "b": 2}))
	fx.allowed(fx.as_role("analyst", "add", {"a": 1, "b": 2}))
}

test_role_without_tool_denied if {
	d := fx.as_role("operator", "add", {"a": 1, "b": 2})
	d.message == "the caller's roles do not permit this tool"
	fx.has_reason(d, "rbac: no role in [operator] grants tool \"add\"")
}

test_no_roles_denied if {
	d := fx.decide("add", {}, fx.context([], "acme"))
	d.message == "the caller's roles do not permit this tool"
	fx.has_reason(d, "rbac: no role in [] grants tool \"add\"")
}

test_unknown_role_ignored if {
	d := fx.decide("add", {}, fx.context(["admin", "root"], "acme"))
	d.message == "the caller's roles do not permit this tool"
	fx.allowed(fx.decide("add", {}, fx.context(["admin", "reader"], "acme")))
}

test_role_names_are_case_sensitive if {
	d := fx.decide("add", {}, fx.context(["Reader"], "acme"))
	d.allow == false
}

test_any_granting_role_suffices if {
	fx.allowed(fx.decide("write_file", {"path": "/srv/tenants/acme/x"}, fx.context(["reader", "writer"], "acme")))
}

test_unconfigured_tool_denied_even_if_granted if {
	d := fx.as_role("reader", "delete_everything", {}) with data.gateway.config.roles.reader.tools as ["delete_everything"]
	d.message == "this tool is not available"
	fx.has_reason(d, "rbac: tool \"delete_everything\" has no settings")
}

test_a_tool_whose_settings_are_not_an_object_is_not_available if {
	every bad in ["generic", ["generic"], 1, true] {
		d := fx.as_role("reader", "add", {}) with data.gateway.config.tools.add as bad
		d.message == "this tool is not available"
		fx.has_reason(d, "rbac: tool \"add\" has no settings")
	}
}

test_unknown_kind_denied if {
	d := fx.as_role("reader", "add", {}) with data.gateway.config.tools.add.kind as "magic"
	d.message == "this tool is not available"
	fx.has_reason(d, "rbac: tool \"add\" has an unsupported kind")
}

test_null_kind_denied if {
	d := fx.as_role("reader", "add", {}) with data.gateway.config.tools.add.kind as null
	d.message == "this tool is not available"
	not rbac.permitted with input as fx.request("add", {}, fx.context(["reader"], "acme"))
		with data.gateway.config.tools.add.kind as null
}

test_malformed_role_definition_ignored if {
	d := fx.as_role("reader", "add", {}) with data.gateway.config.roles.reader as ["add"]
	d.message == "the caller's roles do not permit this tool"
	d2 := fx.as_role("reader", "add", {}) with data.gateway.config.roles.reader.tools as "add"
	d2.message == "the caller's roles do not permit this tool"
}

test_granting_roles if {
	rbac.granting_roles == {"reader", "writer"} with input as fx.request("add", {}, fx.context(["reader", "writer", "clerk"], "acme"))
}

package gateway.authz.lib_test

import data.gateway.authz.fixtures_test as fx
import data.gateway.authz.lib

test_string_list if {
	lib.string_list(["a", 1, "b", null]) == ["a", "b"]
	lib.string_list("a") == []
	lib.string_list({"a": "b"}) == []
}

test_setting_fallbacks if {
	lib.setting("kind", "none") == "sql" with input as fx.request("query_db", {}, {})
	lib.setting("nope", 7) == 7 with input as fx.request("query_db", {}, {})
	lib.setting("kind", "none") == "none" with input as fx.request("unknown_tool", {}, {})
	lib.setting("kind", "none") == "none" with input as fx.request("query_db", {}, {})
		with data.gateway.config.tools.query_db.kind as null
}

test_missing if {
	lib.missing("a") with input as {"arguments": {}}
	lib.missing("a") with input as {"arguments": {"a": null}}
	not lib.missing("a") with input as {"arguments": {"a": false}}
	not lib.missing("a") with input as {"arguments": {"a": ""}}
}

test_argument_types if {
	lib.arg_is_string("a") with input as {"arguments": {"a": ""}}
	not lib.arg_is_string("a") with input as {"arguments": {"a": 1}}
	not lib.arg_is_string("a") with input as {"arguments": {}}
	lib.arg_is_number("a") with input as {"arguments": {"a": 1.5}}
	not lib.arg_is_number("a") with input as {"arguments": {"a": "1"}}
}

test_character_classes if {
	lib.has_control("a\u0000")
	lib.has_control("a\u007f")
	not lib.has_control("a b~")
	lib.has_non_ascii("\u00e9")
	not lib.has_non_ascii("plain ASCII ~")
}

test_tenant_requires_known_slug if {
	lib.tenant == "acme" with input as {"context": {"tenant": "acme"}}
	not lib.tenant with input as {"context": {"tenant": "initech"}}
	not lib.tenant with input as {"context": {"tenant": "Acme"}}
	not lib.tenant with input as {"context": {"tenant": "acme"}} with data.gateway.config.tenants.acme as "x"
}

test_roles_keep_strings_only if {
	lib.roles == ["reader", "writer"] with input as {"context": {"roles": ["reader", 1, "writer"]}}
	lib.roles == [] with input as {"context": {"roles": "reader"}}
	lib.roles == [] with input as {}
}

test_caller_role_defs if {
	lib.caller_role_defs == [{"tools": ["query_db"], "sql_write_tools": ["query_db"]}] with input as {"context": {"roles": ["dba", "ghost"]}}
}

test_request_parts_default if {
	lib.arguments == {} with input as {}
	lib.arguments == {} with input as {"arguments": []}
	lib.ctx == {} with input as {"context": "alice"}
	not lib.tool_name with input as {"tool": {"name": ""}}
}

test_config_sections_default_to_empty if {
	lib.tools == {} with data.gateway.config.tools as 1
	lib.role_defs == {} with data.gateway.config.roles as 1
	lib.tenants == {} with data.gateway.config.tenants as 1
	lib.resources == {} with data.gateway.config.resources as 1
	lib.config == {} with data.gateway.config as 1
}

test_denial_shape if {
	lib.denial("m", "public", "detail") == {"message": "public", "reason": "m: detail"}
}

test_an_object_override_below_the_tools_merges_and_tools_with_replaces if {
	partial := {"arg": "amount", "above": 1}
	lib.tools.pay.approval.role == "treasurer" with data.gateway.config.tools.pay.approval as partial
	lib.tools.pay.approval == partial with data.gateway.config.tools as fx.tools_with("pay", "approval", partial)
	lib.tools.pay.kind == "payment" with data.gateway.config.tools as fx.tools_with("pay", "approval", partial)
	lib.tools.query_db == data.gateway.config.tools.query_db with data.gateway.config.tools as fx.tools_with("pay", "approval", partial)
}

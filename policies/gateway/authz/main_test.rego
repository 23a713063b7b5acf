package gateway.authz.main_test

import data.gateway.authz.caller
import data.gateway.authz.exec
import data.gateway.authz.fixtures_test as fx
import data.gateway.authz.flow
import data.gateway.authz.limits
import data.gateway.authz.mcp
import data.gateway.authz.obligations
import data.gateway.authz.paths
import data.gateway.authz.rbac
import data.gateway.authz.sql
import data.gateway.authz.tenancy
import data.gateway.authz.urls

test_allowed_decision_shape if {
	d := fx.as_role("reader", "add", {"query": "q"})
	d == {
		"allow": true,
		"message": "the call is authorized",
		"reasons": ["rbac: tool \"add\" granted by role(s) reader"],
		"cache": {"ttl_s": 60},
	}
}

test_granting_roles_listed_sorted if {
	d := fx.decide("add", {}, fx.context(["writer", "reader", "operator"], "acme"))
	d.allow == true
	d.reasons == ["rbac: tool \"add\" granted by role(s) reader, writer"]
}

test_default_deny_without_input if {
	d := data.gateway.authz.decision
	d.allow == false
	d.message == "caller identity is required; the request is malformed"
	is_array(d.reasons)
	count(d.reasons) > 0
}

test_empty_input_denied if {
	d := data.gateway.authz.decision with input as {}
	d.allow == false
	fx.has_reason(d, "input.context is missing")
}

test_decision_is_plain_json if {
	d := fx.as_role("reader", "read_file", {"path": "/etc/passwd"})
	is_boolean(d.allow)
	is_string(d.message)
	is_array(d.reasons)
	is_number(d.cache.ttl_s)
	object.keys(d) == {"allow", "message", "reasons", "cache"}
}

test_reasons_sorted_and_unique if {
	d := fx.as_role("writer", "write_file", {"path": "srv/../x//y%2e"})
	d.allow == false
	d.reasons == sort(d.reasons)
	count(d.reasons) == count({r | some r in d.reasons})
}

test_caller_stage_hides_later_stages if {
	# No subject and a forbidden tool and a bad path: only the caller message is public.
	d := fx.decide("write_file", {"path": "/etc/passwd"}, {"roles": ["reader"], "tenant": "acme"})
	d.message == "caller identity is required"
	fx.has_reason(d, "rbac: no role")
	not fx.has_reason(d, "paths:") # the argument stage is not evaluated
}

test_access_stage_hides_argument_stage if {
	d := fx.as_role("reader", "write_file", {"path": "/etc/passwd"})
	d.message == "the caller's roles do not permit this tool"
	not fx.has_reason(d, "paths:") # the argument stage is not evaluated
}

test_argument_messages_joined_sorted if {
	d := fx.as_role("reader", "read_file", {"path": "rel//x"})
	d.message == "path is not allowed: doubled slashes are not allowed; path is not allowed: it must be absolute"
}

test_ttl_from_global_setting if {
	d := fx.as_role("reader", "add", {})
	d.cache.ttl_s == 60
}

test_ttl_from_tool_setting if {
	d := fx.decide("pay", {"amount": 5, "from_account": "acct-acme-001"}, fx.context(["clerk"], "acme"))
	d.allow == true
	d.cache.ttl_s == 0
}

test_ttl_zero_when_unset if {
	d := fx.as_role("reader", "add", {}) with data.gateway.config.cache_ttl_s as null
	d.cache.ttl_s == 0
}

test_ttl_invalid_values_ignored if {
	every bad in [-1, 1.5, "60", true] {
		d := fx.as_role("reader", "add", {}) with data.gateway.config.tools.add.cache_ttl_s as bad
		d.cache.ttl_s == 60
	}
}

test_ttl_on_denials if {
	d := data.gateway.authz.decision with input as {}
	d.cache.ttl_s == 60
}

test_default_deny_when_nothing_denies_but_nothing_permits if {
	# A permitted call still needs rbac.permitted; simulate a stage-less failure.
	d := fx.as_role("reader", "add", {}) with rbac.permitted as false
	d.allow == false
	d.message == "the call is not authorized"
	d.reasons == ["default deny: no rule allowed the call"]
}

test_missing_data_denies if {
	d := fx.decide("add", {}, {"subject": "alice", "roles": ["reader"]}) with data.gateway.config as {}
	d.allow == false
	d.message == "this tool is not available"
}

test_non_object_config_denies if {
	d := fx.as_role("reader", "add", {}) with data.gateway.config as "broken"
	d.allow == false
	d.cache.ttl_s == 0
}

test_only_true_allows if {
	every role in ["reader", "writer", "analyst"] {
		d := fx.as_role(role, "add", {})
		d.allow == true
	}
	d2 := fx.as_role("clerk", "add", {})
	d2.allow == false
}

# main.rego evaluates a module's deny set only when the module applies (and none on the
# fast path for plain generic tools), and skips the caller and rbac deny sets when
# caller.valid and rbac.permitted hold. The stage sets must still equal the plain unions.
all_argument_denials := (((((((tenancy.deny | mcp.deny) | flow.deny) | obligations.deny) | paths.deny) | urls.deny) | sql.deny) | limits.deny) | exec.deny

dispatch_inputs := [fx.request(tool, args, ctx) |
	some tool in ["add", "search", "read_file", "write_file", "fetch_url", "query_db", "pay", "run_command", "mcp.resources.read", "mcp.prompts.get", "nope"]
	some args in [
		{},
		{
			"path": "/srv/tenants/acme/x", "url": "https://api.example.com/", "query": "select 1",
			"database": "acme_sales", "amount": 5, "from_account": "acct-acme-001", "command": "ls",
			"tenant": "acme",
		},
		{
			"path": "../x", "url": "http://10.0.0.1:8080/", "query": "drop table t; --",
			"database": "globex_hr", "amount": "5", "from_account": "nope", "command": "rm",
			"args": ["-rf", "/"], "tenant": "globex",
		},
	]
	some ctx in [fx.context(["reader", "clerk", "operator", "writer"], "acme"), {"subject": "alice", "roles": ["reader"]}]
]

# The argument modules are evaluated only once the caller and access stages pass.
expected_argument_denials := all_argument_denials if {
	caller.valid
	rbac.permitted
} else := set()

stages_agree if {
	every inp in dispatch_inputs {
		got := [data.gateway.authz.caller_denials, data.gateway.authz.access_denials, data.gateway.authz.argument_denials] with input as inp
		want := [caller.deny, rbac.deny, expected_argument_denials] with input as inp
		got == want
	}
}

test_arguments_are_not_evaluated_for_an_invalid_caller if {
	inp := fx.request("run_command", {"command": "rm", "args": ["-rf", "/"]}, {"roles": ["operator"]})
	data.gateway.authz.argument_denials == set() with input as inp
	d := data.gateway.authz.decision with input as inp
	d.allow == false
	every r in d.reasons {
		not startswith(r, "exec")
	}
	count(exec.deny) > 0 with input as inp
}

test_arguments_are_not_evaluated_for_a_caller_without_access if {
	inp := fx.request("run_command", {"command": "rm", "args": ["-rf", "/"]}, fx.context(["reader"], "acme"))
	data.gateway.authz.argument_denials == set() with input as inp
	d := data.gateway.authz.decision with input as inp
	d.allow == false
	count(d.reasons) > 0
	every r in d.reasons {
		not startswith(r, "exec")
	}
	count(exec.deny) > 0 with input as inp
}

test_arguments_are_evaluated_once_caller_and_access_pass if {
	inp := fx.request("run_command", {"command": "rm", "args": ["-rf", "/"]}, fx.context(["operator"], "acme"))
	data.gateway.authz.argument_denials == exec.deny with input as inp
	count(data.gateway.authz.argument_denials) > 0 with input as inp
}

test_stage_dispatch_matches_all_modules if {
	stages_agree
}

test_stage_dispatch_generic_tool_with_tenant_args if {
	stages_agree with data.gateway.config.tools.add.tenant_args as ["tenant"]
}

test_stage_dispatch_generic_tool_with_resource_args if {
	stages_agree with data.gateway.config.tools.add.resource_args as {"database": "databases"}
}

test_stage_dispatch_generic_tool_with_limits if {
	stages_agree with data.gateway.config.tools.add.limits as [{"arg": "amount", "limit": "payment_amount"}]
}

test_stage_dispatch_generic_tool_with_malformed_limits if {
	stages_agree with data.gateway.config.tools.add.limits as "bad"
}

test_stage_dispatch_generic_tool_with_labels if {
	stages_agree with data.gateway.config.tools.add.labels as ["reads_secret", "external_egress"]
}

test_stage_dispatch_generic_tool_with_quotas if {
	stages_agree with data.gateway.config.tools.add.quotas as [{"scope": "caller", "window_s": 60, "limit": 1}]
}

test_stage_dispatch_generic_tool_with_approval if {
	stages_agree with data.gateway.config.tools.add.approval as {"arg": "amount", "above": 1, "role": "treasurer"}
}

test_stage_dispatch_generic_tool_with_malformed_approval if {
	stages_agree with data.gateway.config.tools.add.approval as "bad"
}

test_stage_dispatch_generic_tool_with_redact if {
	stages_agree with data.gateway.config.tools.add.redact as {"patterns": ["x"]}
}

test_stage_dispatch_generic_tool_with_malformed_redact if {
	stages_agree with data.gateway.config.tools.add.redact as "bad"
}

test_stage_dispatch_generic_tool_with_malformed_labels if {
	stages_agree with data.gateway.config.tools.add.labels as "bad"
}

test_stage_dispatch_generic_tool_with_malformed_quotas if {
	stages_agree with data.gateway.config.tools.add.quotas as "bad"
}

test_stage_dispatch_payment_kind_without_limits if {
	stages_agree with data.gateway.config.tools.add.kind as "payment"
}

test_stage_dispatch_null_tenant_args if {
	stages_agree with data.gateway.config.tools.search.tenant_args as null
}

test_stage_dispatch_filesystem_without_tenant_roots if {
	stages_agree with data.gateway.config.tools.read_file.roots as ["/srv/shared/"]
}

test_stage_dispatch_generic_tool_with_path_settings if {
	stages_agree with data.gateway.config.tools.write_file.kind as "generic"
}

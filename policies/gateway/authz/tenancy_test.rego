package gateway.authz.tenancy_test

import data.gateway.authz.fixtures_test as fx
import data.gateway.authz.tenancy

# Tenant arguments (search: tenant_args ["tenant"]).

test_own_tenant_allowed if {
	fx.allowed(fx.as_role("reader", "search", {"tenant": "acme", "query": "q"}))
}

test_other_tenant_denied if {
	d := fx.as_role("reader", "search", {"tenant": "globex", "query": "q"})
	d.message == "the request refers to data outside the caller's tenant"
	fx.has_reason(d, "tenancy: tenant argument \"tenant\" names tenant \"globex\", caller tenant is \"acme\"")
}

test_tenant_argument_case_and_spacing_tricks_denied if {
	every t in ["ACME", "Acme", " acme", "acme ", "acme/", "acme\u0000", "ａｃｍｅ", "*", ""] {
		d := fx.as_role("reader", "search", {"tenant": t, "query": "q"})
		d.message == "the request refers to data outside the caller's tenant"
	}
}

test_tenant_argument_not_string_denied if {
	every t in [["acme"], {"id": "acme"}, 1, true] {
		d := fx.as_role("reader", "search", {"tenant": t, "query": "q"})
		d.message == "the request refers to data outside the caller's tenant"
		fx.has_reason(d, "tenant argument \"tenant\" is not a string")
	}
}

test_tenant_argument_missing_denied if {
	every args in [{"query": "q"}, {"tenant": null, "query": "q"}] {
		d := fx.as_role("reader", "search", args)
		d.message == "a required argument is missing"
		fx.has_reason(d, "tenancy: tenant argument \"tenant\" is missing")
	}
}

test_caller_without_tenant_denied if {
	d := fx.decide("search", {"tenant": "acme", "query": "q"}, {"subject": "alice", "roles": ["reader"]})
	d.message == "a caller tenant is required for this tool"
	fx.has_reason(d, "tenancy: the tool is tenant-scoped but the caller has no known tenant")
}

test_untenanted_tool_needs_no_tenant if {
	fx.allowed(fx.decide("add", {"a": 1}, {"subject": "alice", "roles": ["reader"]}))
	not tenancy.tenant_scoped with input as fx.request("add", {}, fx.context(["reader"], "acme"))
}

test_filesystem_tenant_roots_make_tool_tenant_scoped if {
	tenancy.tenant_scoped with input as fx.request("write_file", {}, fx.context(["writer"], "acme"))
	d := fx.decide("write_file", {"path": "/srv/tenants/acme/a"}, {"subject": "alice", "roles": ["writer"]})
	fx.has_message(d, "a caller tenant is required for this tool")
	fx.has_message(d, "path is not allowed: it is outside the allowed directories")
}

# Tenant-owned resources (query_db: database -> databases; pay: from_account -> accounts).

test_own_resource_allowed if {
	fx.allowed(fx.as_role("analyst", "query_db", {"database": "acme_sales", "query": "select 1"}))
	fx.allowed(fx.decide("pay", {"from_account": "acct-acme-002", "amount": 10}, fx.context(["clerk"], "acme")))
}

test_foreign_resource_denied_without_leaking_owner if {
	d := fx.as_role("analyst", "query_db", {"database": "globex_hr", "query": "select 1"})
	d.message == "the requested resource is not available to the caller's tenant"
	not contains(d.message, "globex")
	fx.has_reason(d, "tenancy: resource argument \"database\" names a databases resource owned by tenant \"globex\", caller tenant is \"acme\"")
}

test_unknown_resource_denied_with_same_message if {
	d := fx.as_role("analyst", "query_db", {"database": "does_not_exist", "query": "select 1"})
	d.message == "the requested resource is not available to the caller's tenant"
	fx.has_reason(d, "tenancy: resource argument \"database\" names an unknown databases resource")
}

test_resource_tricks_denied if {
	every db in ["ACME_SALES", "acme_sales ", "acme_sales/../globex_hr", "acme_sales\u0000"] {
		d := fx.as_role("analyst", "query_db", {"database": db, "query": "select 1"})
		d.message == "the requested resource is not available to the caller's tenant"
	}
}

test_foreign_account_denied if {
	d := fx.decide("pay", {"from_account": "acct-globex-001", "amount": 10}, fx.context(["clerk"], "acme"))
	d.message == "the requested resource is not available to the caller's tenant"
	d2 := fx.decide("pay", {"from_account": "acct-globex-001", "amount": 10}, fx.context(["clerk"], "globex"))
	fx.allowed(d2)
}

test_resource_argument_not_string_denied if {
	d := fx.as_role("analyst", "query_db", {"database": ["acme_sales"], "query": "select 1"})
	d.message == "the requested resource is not available to the caller's tenant"
	fx.has_reason(d, "resource argument \"database\" is not a string")
}

test_resource_argument_missing_denied if {
	d := fx.as_role("analyst", "query_db", {"query": "select 1"})
	d.message == "a required argument is missing"
	fx.has_reason(d, "tenancy: resource argument \"database\" is missing")
}

test_resource_without_caller_tenant_denied if {
	d := fx.decide("query_db", {"database": "acme_sales", "query": "select 1"}, {"subject": "alice", "roles": ["analyst"]})
	d.message == "a caller tenant is required for this tool"
}

test_unconfigured_resource_kind_is_misconfiguration if {
	d := fx.as_role("analyst", "query_db", {"database": "acme_sales", "query": "select 1"}) with data.gateway.config.tools.query_db.resource_args as {"database": "warehouses"}
	d.message == "this tool is not configured correctly"
	fx.has_reason(d, "tenancy: resource kind for argument \"database\" is not a configured resource kind")
}

test_a_resource_kind_that_is_not_an_object_is_not_configured if {
	every bad in [["acme_sales"], "acme_sales", 1] {
		d := fx.as_role("analyst", "query_db", {"database": "acme_sales", "query": "select 1"}) with data.gateway.config.resources.databases as bad
		d.message == "this tool is not configured correctly"
		fx.has_reason(d, "tenancy: resource kind for argument \"database\" is not a configured resource kind")
	}
}

test_malformed_resource_args_is_misconfiguration if {
	d := fx.as_role("analyst", "query_db", {"database": "acme_sales", "query": "select 1"}) with data.gateway.config.tools.query_db.resource_args as ["database"]
	d.message == "this tool is not configured correctly"
	fx.has_reason(d, "setting resource_args is not an object")
}

test_malformed_resource_owner_treated_as_unknown if {
	d := fx.as_role("analyst", "query_db", {"database": "acme_sales", "query": "select 1"}) with data.gateway.config.resources.databases.acme_sales as ["acme"]
	fx.has_reason(d, "names an unknown databases resource")
}

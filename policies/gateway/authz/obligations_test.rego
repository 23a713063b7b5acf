package gateway.authz.obligations_test

import data.gateway.authz.fixtures_test as fx

treasurer := fx.context(["treasurer"], "acme")

payment(amount) := {"from_account": "acct-acme-001", "to_account": "acct-globex-001", "amount": amount}

approval_by(subject, roles) := object.union(treasurer, {"approval": {
	"id": "apr_1",
	"approved_by": subject,
	"approver_roles": roles,
	"approved_at": "2026-12-01T12:00:00+00:00",
}})

require_approval := {
	"type": "require_approval",
	"role": "treasurer",
	"message": "this call needs the approval of a treasurer",
}

test_a_payment_above_the_threshold_needs_a_treasurers_approval if {
	d := fx.decide("pay", payment(5000), treasurer)
	d.allow == true
	d.obligations == [require_approval]
}

test_a_payment_at_the_threshold_needs_no_approval if {
	d := fx.decide("pay", payment(1000), treasurer)
	fx.allowed(d)
	not d.obligations
}

test_an_approval_by_another_treasurer_lifts_the_obligation if {
	d := fx.decide("pay", payment(5000), approval_by("tina@example.com", ["treasurer"]))
	fx.allowed(d)
	not d.obligations
}

test_an_approval_by_the_caller_themself_does_not_count if {
	d := fx.decide("pay", payment(5000), approval_by("alice@example.com", ["treasurer"]))
	d.obligations == [require_approval]
}

test_an_approval_by_someone_without_the_role_does_not_count if {
	d := fx.decide("pay", payment(5000), approval_by("tina@example.com", ["clerk"]))
	d.obligations == [require_approval]
}

test_a_malformed_approval_does_not_count if {
	ctx := object.union(treasurer, {"approval": "yes"})
	d := fx.decide("pay", payment(5000), ctx)
	d.obligations == [require_approval]
}

test_a_denied_payment_carries_no_obligation if {
	d := fx.decide("pay", payment(50000), treasurer)
	d.allow == false
	not d.obligations
}

test_a_non_number_argument_needs_approval if {
	# null and false order below every number in Rego, "5" above them: each needs approval.
	every amount in ["5", null, false, [1], {"n": 1}] {
		d := fx.as_role("reader", "add", {"amount": amount}) with data.gateway.config.tools.add.approval as {"arg": "amount", "above": 10, "role": "treasurer"}
		d.obligations == [require_approval]
	}
	d := fx.as_role("reader", "add", {}) with data.gateway.config.tools.add.approval as {"arg": "amount", "above": 10, "role": "treasurer"}
	d.obligations == [require_approval]
}

test_query_db_output_has_its_ssn_column_redacted if {
	d := fx.as_role("analyst", "query_db", {"database": "acme_sales", "query": "SELECT id, name FROM customers WHERE region = 'eu'"})
	d.allow == true
	d.obligations == [{"type": "redact_output", "pointers": ["/rows/*/ssn"]}]
}

test_the_approval_ttl_and_redaction_settings_are_passed_on if {
	d := fx.decide("pay", payment(5000), treasurer) with data.gateway.config.tools.pay.approval.ttl_s as 60
		with data.gateway.config.tools.pay.redact as {"patterns": ["acct-[a-z]+"], "replacement": "*"}
	d.obligations == [
		object.union(require_approval, {"ttl_s": 60}),
		{"type": "redact_output", "patterns": ["acct-[a-z]+"], "replacement": "*"},
	]
}

query_db_call := {"database": "acme_sales", "query": "SELECT id, name FROM customers WHERE region = 'eu'"}

# The approval and redact settings are objects: they are replaced whole with fx.tools_with
# (a `with` of an object below data.gateway.config.tools would be merged into them).
test_a_malformed_approval_setting_denies if {
	every bad in [
		"approve",
		{"above": 1000, "role": "treasurer"},
		{"arg": 5, "above": 1000, "role": "treasurer"},
		{"arg": "amount", "role": "treasurer"},
		{"arg": "amount", "above": "1000", "role": "treasurer"},
		{"arg": "amount", "above": 1000},
		{"arg": "amount", "above": 1000, "role": 7},
		{"arg": "amount", "above": 1000, "role": ""},
		{"arg": "amount", "above": 1000, "role": "treasurer", "ttl_s": 0},
		{"arg": "amount", "above": 1000, "role": "treasurer", "ttl_s": 604801},
		{"arg": "amount", "above": 1000, "role": "treasurer", "ttl_s": "60"},
	] {
		d := fx.decide("pay", payment(5), treasurer) with data.gateway.config.tools as fx.tools_with("pay", "approval", bad)
		fx.has_reason(d, "obligations: setting approval is not")
		fx.has_message(d, "this tool is not configured correctly")
	}
}

test_an_approval_ttl_of_up_to_a_week_is_valid if {
	every ttl in [1, 604800] {
		good := {"arg": "amount", "above": 1000, "role": "treasurer", "ttl_s": ttl}
		d := fx.decide("pay", payment(5000), treasurer) with data.gateway.config.tools as fx.tools_with("pay", "approval", good)
		d.obligations == [object.union(require_approval, {"ttl_s": ttl})]
	}
}

test_a_malformed_redact_setting_denies if {
	every bad in [
		"/rows",
		["/rows"],
		{"pointers": "/rows"},
		{"pointers": ["/rows", 1]},
		{"patterns": "x"},
		{"patterns": [1]},
		{"pointers": ["/rows"], "replacement": 5},
	] {
		d := fx.as_role("analyst", "query_db", query_db_call) with data.gateway.config.tools as fx.tools_with("query_db", "redact", bad)
		fx.has_reason(d, "obligations: setting redact is not")
	}
}

test_an_empty_redact_setting_denies if {
	every bad in [{}, {"pointers": []}, {"patterns": []}, {"pointers": [], "patterns": []}, {"replacement": "*"}] {
		d := fx.as_role("analyst", "query_db", query_db_call) with data.gateway.config.tools as fx.tools_with("query_db", "redact", bad)
		fx.has_reason(d, "obligations: setting redact is not")
	}
}

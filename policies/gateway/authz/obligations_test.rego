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
	d := fx.as_role("reader", "add", {"amount": "5"}) with data.gateway.config.tools.add.approval as {"arg": "amount", "above": 10, "role": "treasurer"}
	d.obligations == [object.union(require_approval, {})]
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

test_a_malformed_approval_setting_denies if {
	d := fx.decide("pay", payment(5), treasurer) with data.gateway.config.tools.pay.approval.above as "1000"
	fx.has_reason(d, "obligations: setting approval is not")
	fx.has_message(d, "this tool is not configured correctly")
}

test_a_malformed_redact_setting_denies if {
	d := fx.as_role("analyst", "query_db", {"database": "acme_sales", "query": "SELECT id, name FROM customers WHERE region = 'eu'"}) with data.gateway.config.tools.query_db.redact as {"pointers": "/rows"}
	fx.has_reason(d, "obligations: setting redact is not")
}

test_an_empty_redact_setting_denies if {
	d := fx.as_role("analyst", "query_db", {"database": "acme_sales", "query": "SELECT id, name FROM customers WHERE region = 'eu'"}) with data.gateway.config.tools.query_db.redact.pointers as []
	fx.has_reason(d, "obligations: setting redact is not")
}

package gateway.authz.limits_test

import data.gateway.authz.fixtures_test as fx
import data.gateway.authz.limits

pay(roles, amount) := fx.decide("pay", {"from_account": "acct-acme-001", "to": "acct-globex-001", "amount": amount}, fx.context(roles, "acme"))

exceeded := "the amount exceeds what the caller's roles allow"

test_amount_within_limit_allowed if {
	every amount in [0.01, 1, 99.99, 100, 100.0] {
		fx.allowed(pay(["clerk"], amount))
	}
}

test_amount_over_limit_denied if {
	every amount in [100.01, 101, 1e6, 1e300] {
		d := pay(["clerk"], amount)
		d.message == exceeded
		fx.has_reason(d, "limits: limited argument \"amount\" exceeds limit \"payment_amount\" = 100 of the caller's roles")
	}
}

test_highest_role_limit_applies if {
	fx.allowed(pay(["clerk", "treasurer"], 5000))
	fx.allowed(pay(["treasurer"], 10000))
	d := pay(["clerk", "treasurer"], 10000.5)
	fx.has_reason(d, "= 10000 of the caller's roles")
}

test_role_limit if {
	limits.role_limit("payment_amount") == 10000 with input as fx.request("pay", {}, fx.context(["clerk", "treasurer"], "acme"))
	not limits.role_limit("payment_amount") with input as fx.request("pay", {}, fx.context(["reader"], "acme"))
}

test_no_limit_for_roles_denied if {
	d := pay(["clerk"], 10) with data.gateway.config.roles.clerk.limits.payment_amount as null
	d.message == exceeded
	fx.has_reason(d, "limits: no role in [clerk] defines limit \"payment_amount\" for argument \"amount\"")
}

test_non_numeric_role_limit_ignored if {
	d := pay(["clerk"], 10) with data.gateway.config.roles.clerk.limits.payment_amount as "1000"
	fx.has_reason(d, "defines limit \"payment_amount\"")
}

test_below_minimum_denied if {
	every amount in [0, -5, 0.001, -1e300] {
		d := pay(["clerk"], amount)
		d.message == "the amount is invalid"
		fx.has_reason(d, "limits: limited argument \"amount\" is below the minimum")
	}
}

test_non_numeric_amount_denied if {
	every amount in ["50", "1e2", true, [50], {"value": 50}] {
		d := pay(["clerk"], amount)
		d.message == "the amount is invalid"
		fx.has_reason(d, "limits: limited argument \"amount\" is not a number")
	}
}

test_missing_amount_denied if {
	d := fx.decide("pay", {"from_account": "acct-acme-001"}, fx.context(["clerk"], "acme"))
	d.message == "a required argument is missing"
	fx.has_reason(d, "limits: limited argument \"amount\" is missing")
}

test_payment_without_limits_is_misconfiguration if {
	d := pay(["clerk"], 10) with data.gateway.config.tools.pay.limits as []
	d.message == "this tool is not configured correctly"
	fx.has_reason(d, "limits: payment tool declares no limits")
}

test_malformed_limits_is_misconfiguration if {
	d := pay(["clerk"], 10) with data.gateway.config.tools.pay.limits as {"arg": "amount"}
	fx.has_reason(d, "limits: setting limits is not an array")
	every bad in [
		["amount"],
		[{"arg": "amount"}],
		[{"arg": 5, "limit": "payment_amount"}],
		[{"arg": "amount", "limit": 5}],
		[{"arg": "amount", "limit": "payment_amount", "min": "0"}],
	] {
		d2 := pay(["clerk"], 10) with data.gateway.config.tools.pay.limits as bad
		d2.message == "this tool is not configured correctly"
		fx.has_reason(d2, "limits: setting limits has a member that is not a {arg, limit, min} object")
	}
}

test_limits_apply_to_any_kind if {
	lim := [{"arg": "b", "limit": "add_operand"}]
	d := fx.as_role("reader", "add", {"a": 1, "b": 5}) with data.gateway.config.tools.add.limits as lim
	d.message == exceeded
	fx.allowed(fx.as_role("reader", "add", {"a": 1, "b": 5})) with data.gateway.config.tools.add.limits as lim
		with data.gateway.config.roles.reader.limits as {"add_operand": 5}
	d2 := fx.as_role("reader", "add", {"a": 1, "b": -1}) with data.gateway.config.tools.add.limits as lim
		with data.gateway.config.roles.reader.limits as {"add_operand": 5}
	d2.message == "the amount is invalid"
}

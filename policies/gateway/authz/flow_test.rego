package gateway.authz.flow_test

import data.gateway.authz.fixtures_test as fx

# state(labels, counts) is input.state (version 1) for a session with these labels.
state(labels, counts) := {
	"version": 1,
	"session": {"calls": count(labels), "labels": labels, "tools": {}, "history": []},
	"counts": counts,
}

no_counts := {"caller_tool": {"60": 0, "3600": 0, "86400": 0}, "tenant": {"60": 0, "3600": 0, "86400": 0}}

with_state(tool, st) := d if {
	inp := object.union(fx.request(tool, {}, fx.context(["agent"], "acme")), {"state": st})
	d := data.gateway.authz.decision with input as inp
}

without_state(tool) := fx.as_role("agent", tool, {})

test_an_allowed_call_carries_its_tools_labels if {
	d := without_state("read_secret")
	fx.allowed(d)
	d.labels == ["reads_secret"]
	d.quotas == []
}

test_a_tool_without_flow_settings_carries_no_flow_members if {
	d := fx.as_role("reader", "add", {"a": 1, "b": 2})
	fx.allowed(d)
	not d.labels
	not d.quotas
}

test_a_denied_call_carries_no_labels if {
	d := fx.as_role("reader", "read_secret", {})
	d.allow == false
	not d.labels
}

test_egress_after_a_secret_and_untrusted_content_is_refused if {
	d := with_state("send_email", state(["reads_secret", "untrusted_content"], no_counts))
	fx.has_message(d, "external communication is not allowed in a session that read a secret and saw untrusted content")
	fx.has_reason(d, "flow: lethal trifecta")
}

test_egress_after_only_one_leg_of_the_trifecta_is_allowed if {
	fx.allowed(with_state("send_email", state(["reads_secret"], no_counts)))
	fx.allowed(with_state("send_email", state(["untrusted_content", "external_egress"], no_counts)))
	fx.allowed(with_state("send_email", state([], no_counts)))
}

test_the_trifecta_holds_whatever_other_labels_the_session_has if {
	d := with_state("send_email", state(["a", "reads_secret", "z", "untrusted_content"], no_counts))
	d.allow == false
}

test_egress_without_state_or_without_a_session_is_refused if {
	fx.has_message(without_state("send_email"), "this call needs the session state")
	no_session := {"version": 1, "session": null, "counts": no_counts}
	fx.has_message(with_state("send_email", no_session), "external communication needs a session")
	fx.has_message(with_state("send_email", {"version": 2, "session": null}), "this call needs the session state")
	fx.has_message(with_state("send_email", "yes"), "this call needs the session state")
}

test_a_quota_below_its_limit_is_allowed_and_handed_to_the_gateway if {
	counts := {"caller_tool": {"3600": 4}, "tenant": {"60": 99}}
	d := with_state("pay_vendor", state([], counts))
	fx.allowed(d)
	d.quotas == [
		{"scope": "caller_tool", "window_s": 3600, "limit": 5},
		{"scope": "tenant", "window_s": 60, "limit": 100},
	]
}

test_a_quota_at_its_limit_is_refused if {
	d := with_state("pay_vendor", state([], {"caller_tool": {"3600": 5}, "tenant": {"60": 0}}))
	fx.has_message(d, "the quota for this call is used up")
	fx.has_reason(d, "flow: quota caller_tool/3600s of 5 reached")
	t := with_state("pay_vendor", state([], {"caller_tool": {"3600": 0}, "tenant": {"60": 100}}))
	fx.has_reason(t, "flow: quota tenant/60s of 100 reached")
}

test_a_quota_whose_count_is_missing_or_not_a_number_is_refused if {
	fx.has_message(with_state("pay_vendor", state([], {"tenant": {"60": 0}})), "the quota for this call is used up")
	d := with_state("pay_vendor", state([], {"caller_tool": {"3600": "0"}, "tenant": {"60": 0}}))
	d.allow == false
}

test_quotas_without_state_are_refused if {
	fx.has_message(without_state("pay_vendor"), "this call needs the session state")
}

test_malformed_flow_settings_are_misconfigurations if {
	d1 := without_state("read_secret") with data.gateway.config.tools.read_secret.labels as "reads_secret"
	fx.has_message(d1, "this tool is not configured correctly")
	d2 := without_state("read_secret") with data.gateway.config.tools.read_secret.labels as ["Reads Secret"]
	fx.has_reason(d2, "not a label")
	d3 := without_state("pay_vendor") with data.gateway.config.tools.pay_vendor.quotas as {"scope": "caller"}
	fx.has_reason(d3, "setting quotas is not an array")
	bad := [{"scope": "planet", "window_s": 60, "limit": 1}]
	d4 := with_state("pay_vendor", state([], no_counts)) with data.gateway.config.tools.pay_vendor.quotas as bad
	fx.has_reason(d4, "not a {scope, window_s, limit} object")
	frac := [{"scope": "caller", "window_s": 1.5, "limit": 1}]
	d5 := with_state("pay_vendor", state([], no_counts)) with data.gateway.config.tools.pay_vendor.quotas as frac
	fx.has_reason(d5, "not a {scope, window_s, limit} object")
	extra := [{"scope": "caller", "window_s": 60, "limit": 1, "x": 1}]
	d6 := with_state("pay_vendor", state([], no_counts)) with data.gateway.config.tools.pay_vendor.quotas as extra
	fx.has_reason(d6, "not a {scope, window_s, limit} object")
	every q in [
		{"scope": "caller", "window_s": 60},
		{"scope": "caller", "window_s": 0, "limit": 1},
		{"scope": "caller", "window_s": "60", "limit": 1},
		{"scope": "caller", "window_s": 60, "limit": -1},
		{"scope": "caller", "window_s": 60, "limit": 1.5},
		{"scope": "caller", "window_s": 60, "limit": "1"},
		"caller",
	] {
		d := with_state("pay_vendor", state([], no_counts)) with data.gateway.config.tools.pay_vendor.quotas as [q]
		fx.has_reason(d, "not a {scope, window_s, limit} object")
	}
}

package gateway.authz.delegation_test

import data.gateway.authz.fixtures_test as fx

# alice (role reader, tenant acme) with an acting agent.
acting(agent) := object.union(fx.context(["reader"], "acme"), {"actor": agent})

report := {"path": "/srv/tenants/acme/report.txt"}

test_an_entrusted_agent_may_call_for_the_user if {
	fx.allowed(fx.decide("read_file", report, acting({"subject": "report-bot"})))
}

test_an_agent_may_not_call_a_tool_it_is_not_entrusted_with if {
	d := fx.decide("fetch_url", {"url": "https://api.example.com/x"}, acting({"subject": "report-bot"}))
	fx.has_message(d, "the acting agent may not use this tool")
	fx.has_reason(d, "not entrusted with tool \"fetch_url\"")
}

test_an_agent_gets_no_more_than_the_user if {
	# report-bot is entrusted with read_file, but a caller without a granting role is denied.
	d := fx.decide("read_file", report, object.union(fx.context(["analyst"], "acme"), {"actor": {"subject": "report-bot"}}))
	fx.has_message(d, "the caller's roles do not permit this tool")
}

test_an_unknown_agent_may_call_nothing if {
	d := fx.decide("read_file", report, acting({"subject": "other-bot"}))
	fx.has_message(d, "the acting agent may not use this tool")
}

test_a_malformed_actor_may_call_nothing if {
	every actor in ["report-bot", {"sub": "report-bot"}, {"subject": 1}, {}, []] {
		d := fx.decide("read_file", report, acting(actor))
		d.allow == false
	}
}

test_without_an_actor_the_user_calls_alone if {
	fx.allowed(fx.as_role("reader", "fetch_url", {"url": "https://api.example.com/x"}))
}

test_a_null_actor_is_no_actor if {
	fx.allowed(fx.decide("read_file", report, acting(null)))
}

listing(tool) := {
	"tool": {"name": tool, "description": "", "input_schema": {"type": "object"}},
	"context": acting({"subject": "report-bot"}),
	"visibility": {"version": 1},
}

test_the_listing_shows_an_agent_only_what_it_is_entrusted_with if {
	shown := {tool |
		some tool in data.gateway.config.roles.reader.tools
		d := data.gateway.authz.visibility.decision with input as listing(tool)
		d.allow
	}
	shown == {"read_file", "search"}
}

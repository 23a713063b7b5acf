package gateway.authz.gate_test

import data.gateway.authz.gate

string := {"type": "string"}

entry(name, properties, sql) := {
	"tool": {"name": name, "description": "", "input_schema": {
		"type": "object", "properties": properties,
		"required": [p | some p, _ in properties],
	}},
	"facts": {"sql": sql},
}

# The problems about one tool, served alone.
about(e) := {object.remove(p, ["tool"]) | some p in gate.problems with input as {"tools": [e]}; p.tool == e.tool.name}

read_file := entry("read_file", {"path": string}, [])

query_db := entry("query_db", {"query": string, "database": string}, ["/query"])

test_a_configured_tool_has_no_problem if {
	about(read_file) == set()
	about(query_db) == set()
}

test_configured_tools_not_served_are_warnings if {
	ps := gate.problems with input as {"tools": [read_file]}
	some p in ps
	p == {"tool": "pay", "severity": "warning", "problem": "has settings in data.gateway.config.tools but no served tool has this name"}
	every q in ps {
		q.severity == "warning"
	}
}

test_an_unknown_kind_is_an_error if {
	ps := about(read_file) with data.gateway.config.tools.read_file.kind as "math"
	some p in ps
	p.severity == "error"
	startswith(p.problem, "kind \"math\" is not one of exec, filesystem, generic")
}

test_a_setting_naming_no_property_is_an_error if {
	ps := about(entry("read_file", {"file": string}, []))
	ps == {{"severity": "error", "problem": "setting path_args names argument \"path\", which is not a property of the input schema: every call is denied"}}
}

test_an_sql_argument_without_facts_is_an_error if {
	ps := about(entry("query_db", {"query": string, "database": string}, []))
	some p in ps
	contains(p.problem, "the gateway gives the policy no sql facts")
}

test_a_setting_of_another_kind_is_a_warning if {
	ps := about(read_file) with data.gateway.config.tools.read_file.url_args as ["path"]
	ps == {{"severity": "warning", "problem": "setting url_args is ignored for kind \"filesystem\""}}
}

test_a_tool_without_settings_or_role_is_two_errors if {
	ps := about(entry("ghost", {}, []))
	count(ps) == 2
	every p in ps {
		p.severity == "error"
	}
}

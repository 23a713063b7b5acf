package gateway.authz.sql_test

import data.gateway.authz.fixtures_test as fx
import data.gateway.authz.lib
import data.gateway.authz.sql_fixtures_test as sqlfx

# The facts the gateway gives the policy for q (generated from the real parser by
# tests/policy/sql_fixtures.py); a query without an entry is one that does not parse.
facts_of(q) := sqlfx.facts[q] if {
	is_object(sqlfx.facts[q])
} else := {"parsed": false, "error": "syntax"}

with_facts(facts) := {"version": 1, "arguments": {"/query": {"sql": facts}}}

# replace_facts(document, facts) is the document with its facts member replaced (not merged).
replace_facts(document, facts) := object.union(object.remove(document, ["facts"]), {"facts": facts})

request(role, args, facts) := replace_facts(
	fx.request("query_db", args, fx.context([role], "acme")),
	with_facts(facts),
)

decide(role, args, facts) := d if {
	d := data.gateway.authz.decision with input as request(role, args, facts)
}

query(role, q) := decide(role, {"database": "acme_sales", "query": q}, facts_of(q))

read_only := "query is not allowed: only read-only queries are allowed"

forbidden := "query is not allowed: this kind of statement is not allowed"

not_allowed_function := "query is not allowed: it calls a function that is not allowed"

not_allowed_construct := "query is not allowed: it uses a construct that is not allowed"

not_allowed_operator := "query is not allowed: it uses an operator that is not allowed"

not_sql := "query is not allowed: it is not valid SQL"

test_read_queries_allowed if {
	every q in [
		"SELECT id, name FROM customers WHERE region = 'eu'",
		"select count(*) from orders",
		"  select 1  ",
		"select 1;",
		"WITH recent AS (SELECT * FROM orders WHERE day > now() - interval '1 day') SELECT * FROM recent",
		"select updated_at, deleted_flag, created_by from t",
		"select * from t where a = $1",
		"select 1 -- a comment",
		"select /* a comment */ 1",
		"select 'pg_sleep(1)', 'drop table t; delete'",
		"select lower(name) from t where name like 'a%' and id between 1 and 9",
		"select pg_catalog.count(*) from t",
	] {
		fx.allowed(query("analyst", q))
	}
}

test_write_statements_denied_for_readers if {
	every q in [
		"INSERT INTO t VALUES (1)",
		"update t set a = 1",
		"DELETE FROM t",
		"merge into t using s on t.id = s.id when matched then delete",
	] {
		d := query("analyst", q)
		d.message == read_only
		fx.has_reason(d, "not a SelectStmt")
	}
}

test_hidden_writes_in_select_denied if {
	every q in [
		"with d as (delete from t returning *) select * from d",
		"with x as (insert into t values (1) returning id) select id from x",
		"select * into new_table from t",
		"select * from t for update",
		"select * from t for no key update",
		"select * from t for share",
		"select * from t for key share",
		"select * from (select * from t for share) s",
	] {
		d := query("analyst", q)
		d.message == read_only
		fx.has_reason(d, "writes (a data-modifying statement, SELECT INTO or a row lock)")
	}
}

test_multiple_statements_denied if {
	every q in ["select 1; drop table t", "select 1;delete from t", "select 1; select 2;"] {
		d := query("analyst", q)
		fx.has_message(d, "query is not allowed: only a single statement is allowed")
		fx.has_reason(d, "statements")
	}
}

test_what_does_not_parse_is_denied if {
	every q in ["selec 1", "sel/**/ect 1", "select (1", "upsert into t values (1)", "select 1 */"] {
		d := query("analyst", q)
		d.message == not_sql
		fx.has_reason(d, "does not parse as PostgreSQL")
	}
}

test_quoting_escapes_and_case_cannot_hide_a_denied_function if {
	every q in [
		"select \"pg_read_file\"('/etc/passwd')",
		"select pg_catalog.\"pg_sleep\"(1)",
		"select U&\"pg\\005fsleep\"(1)",
		"SELECT PG_SLEEP (1)",
		"select /* x */ pg_sleep(1)",
	] {
		d := query("analyst", q)
		d.message == not_allowed_function
		fx.has_reason(d, "calls the denied function")
	}
}

test_functions_outside_the_allow_list_denied if {
	every q in [
		"select pg_sleep_for('5 minutes')",
		"select pg_sleep_until('tomorrow')",
		"select lo_from_bytea(0, 'x')",
		"select lo_put(16384, 0, 'x')",
		"select current_setting('data_directory')",
		"select myschema.count(*) from t",
		"select \"Count\"(*) from t",
		"select x.y.count(*) from t",
	] {
		d := query("analyst", q)
		d.message == not_allowed_function
		fx.has_reason(d, "not in allowed_functions")
	}
}

test_functions_anywhere_in_the_tree_are_seen if {
	every q in [
		"select id from t where id in (select pg_sleep_for('1s'))",
		"with x as (select lo_put(1, 0, 'x')) select * from x",
		"select id from t order by lo_put(1, 0, 'x')",
		"select count(*) over (partition by lo_put(1, 0, 'x')) from t",
		"select * from t, lateral (select lo_put(1, 0, 'x')) s",
		"values (lo_put(1, 0, 'x'))",
		"select * from t tablesample system_time(1000)",
		"select * from lo_put(1, 0, 'x')",
	] {
		d := query("analyst", q)
		d.message == not_allowed_function
	}
}

test_no_function_is_allowed_without_an_allow_list if {
	d := query("analyst", "select count(*) from orders") with data.gateway.config.tools.query_db.allowed_functions as null
	d.message == not_allowed_function
}

test_a_schema_qualified_allow_entry_allows_that_function_only if {
	fx.allowed(query("analyst", "select myschema.count(*) from t")) with data.gateway.config.tools.query_db.allowed_functions as ["myschema.count"]
	d := query("analyst", "select count(*) from orders") with data.gateway.config.tools.query_db.allowed_functions as ["myschema.count"]
	d.message == not_allowed_function
}

test_the_deny_list_adds_to_the_allow_list if {
	d := query("analyst", "select pg_sleep(1)") with data.gateway.config.tools.query_db.allowed_functions as ["pg_sleep"]
	d.message == not_allowed_function
	fx.has_reason(d, "calls the denied function \"pg_sleep\"")
	every q in ["select pg_catalog.lower('A')", "select lower('A')"] {
		d2 := query("analyst", q) with data.gateway.config.tools.query_db.denied_functions as ["pg_catalog.lower"]
		fx.has_reason(d2, "calls the denied function \"pg_catalog.lower\"")
	}
}

test_unsafe_denied_function_entries_are_harmless if {
	fx.allowed(query("analyst", "select 1")) with data.gateway.config.tools.query_db.denied_functions as ["a.*", "(", 7]
}

test_operators_outside_the_built_in_ones_denied if {
	every q in ["select `pg_sleep`(1)", "select 1 operator(myschema.+) 2", "select 1 === 2"] {
		d := query("analyst", q)
		d.message == not_allowed_operator
	}
	fx.allowed(query("analyst", "select 1 operator(pg_catalog.+) 2"))
	fx.allowed(query("analyst", "select 1 operator(myschema.+) 2")) with data.gateway.config.tools.query_db.allowed_operators as ["myschema.+"]
}

test_other_statements_denied_for_readers if {
	every q in [
		"show tables", "explain select 1", "set role admin", "begin", "copy t to '/tmp/x'",
		"do $$ begin perform 1; end $$", "call proc()", "lock table t", "listen x",
	] {
		d := query("analyst", q)
		fx.has_message(d, read_only)
	}
}

test_ddl_and_other_statements_denied_for_writers if {
	every q in [
		"drop table t", "truncate t", "create table x (a int)", "alter table t add column x int",
		"grant all on t to bob", "copy t to '/tmp/x'", "copy (select 1) to program 'id'", "vacuum",
		"call proc()", "execute stmt", "do $$ begin perform 1; end $$", "set role admin",
		"show tables", "explain analyze delete from t", "begin", "lock table t", "prepare p as select 1",
	] {
		d := query("dba", q)
		fx.has_message(d, forbidden)
	}
}

test_writes_allowed_for_writer_role if {
	every q in [
		"insert into t (a) values (1)",
		"insert into t (a) values (default) on conflict (a) do update set a = excluded.a returning a",
		"update t set a = 1 where id = 2",
		"update t set (a, b) = (select 1, 2)",
		"delete from t where id = 2",
		"with x as (select 1) insert into t select * from x",
		"merge into t using s on t.id = s.id when matched then delete",
		"select * from t for update",
		"select 1",
	] {
		fx.allowed(query("dba", q))
	}
}

test_writers_may_not_call_what_readers_may_not if {
	every q in ["insert into t values (lo_put(1, 0, 'x'))", "delete from t returning pg_sleep(1)"] {
		d := query("dba", q)
		d.message == not_allowed_function
	}
}

test_writers_may_not_create_tables_with_select_into if {
	d := query("dba", "select * into x from t")
	d.message == not_allowed_construct
	fx.has_reason(d, "IntoClause")
}

test_writer_still_single_statement if {
	d := query("dba", "delete from t; drop table t")
	fx.has_message(d, "query is not allowed: only a single statement is allowed")
}

test_writer_grant_is_per_tool if {
	d := query("dba", "delete from t") with data.gateway.config.roles.dba.sql_write_tools as ["other_db"]
	d.message == read_only
}

test_unknown_constructs_denied_unless_allowed if {
	q := "select xmlparse(document '<a/>')"
	d := query("analyst", q)
	d.message == not_allowed_construct
	fx.has_reason(d, "parse nodes outside the known constructs: XmlExpr")
	fx.allowed(query("analyst", q)) with data.gateway.config.tools.query_db.allowed_node_types as ["XmlExpr"]
}

test_a_backslash_in_a_standard_string_denied if {
	d := query("analyst", "select 'a\\' from t")
	fx.has_message(d, "a backslash in a '...' string is ambiguous")
	fx.allowed(query("analyst", "select E'a\\\\' from t"))
}

test_empty_query_denied if {
	every q in ["", "   ", "-- nothing"] {
		d := query("analyst", q)
		d.message == "query is not allowed: it is empty"
	}
}

test_too_long_query_denied if {
	long := concat("", ["select 1", concat("", [x | some _ in numbers.range(1, 10001); x := " "])])
	d := query("analyst", long)
	fx.has_message(d, "query is not allowed: it is too long")
	fx.has_reason(d, "is longer than 10000 characters")
}

test_non_string_query_denied if {
	every q in [["select 1"], {"sql": "select 1"}, 1] {
		d := decide("analyst", {"database": "acme_sales", "query": q}, facts_of("select 1"))
		d.message == "query is not allowed: it must be a string"
	}
}

test_missing_query_denied if {
	d := fx.as_role("analyst", "query_db", {"database": "acme_sales"})
	d.message == "a required argument is missing"
	fx.has_reason(d, "sql: sql argument \"query\" is missing")
}

test_missing_sql_args_is_misconfiguration if {
	d := query("analyst", "select 1") with data.gateway.config.tools.query_db.sql_args as null
	d.message == "this tool is not configured correctly"
	fx.has_reason(d, "sql: sql tool has no sql_args")
}

test_a_query_without_facts_is_denied if {
	args := {"database": "acme_sales", "query": "select 1"}
	every document in [
		object.remove(fx.request("query_db", args, fx.context(["analyst"], "acme")), ["facts"]),
		replace_facts(request("analyst", args, {}), {"version": 2, "arguments": {"/query": {"sql": facts_of("select 1")}}}),
		replace_facts(request("analyst", args, {}), "select 1"),
		replace_facts(request("analyst", args, {}), {"version": 1, "arguments": {"/other": {"sql": facts_of("select 1")}}}),
		request("analyst", args, "select 1"),
	] {
		d := data.gateway.authz.decision with input as document
		d.message == "this tool is not configured correctly"
		fx.has_reason(d, "has no parser facts")
	}
}

test_facts_that_do_not_say_parsed_are_denied if {
	args := {"database": "acme_sales", "query": "select 1"}
	every facts in [
		{"parsed": false, "error": "syntax"},
		{"parsed": true},
		object.union(facts_of("select 1"), {"parsed": "true"}),
		object.union(facts_of("select 1"), {"functions": "count"}),
	] {
		d := decide("analyst", args, facts)
		d.message == not_sql
	}
}

test_a_marked_argument_is_found_by_its_json_pointer if {
	lib.pointer("query") == "/query"
	lib.pointer("a/b~c") == "/a~1b~0c"
	args := {"database": "acme_sales", "a/b": "select 1"}
	document := replace_facts(
		fx.request("query_db", args, fx.context(["analyst"], "acme")),
		{"version": 1, "arguments": {"/a~1b": {"sql": facts_of("select 1")}}},
	)
	fx.allowed(data.gateway.authz.decision) with input as document with data.gateway.config.tools.query_db.sql_args as ["a/b"]
}

package gateway.authz.sql_test

import data.gateway.authz.fixtures_test as fx

query(role, q) := fx.as_role(role, "query_db", {"database": "acme_sales", "query": q})

read_only := "query is not allowed: only read-only queries are allowed"

forbidden := "query is not allowed: this kind of statement is not allowed"

test_read_queries_allowed if {
	every q in [
		"SELECT id, name FROM customers WHERE region = 'eu'",
		"select count(*) from orders",
		"  select 1  ",
		"select 1;",
		"select 1 ; ",
		"WITH recent AS (SELECT * FROM orders WHERE day > now() - interval '1 day') SELECT * FROM recent",
		"select updated_at, deleted_flag, created_by from t", # keywords only as parts of words
		"select * from t where a = $1",
		"select\n  a,\n  b\nfrom t",
		"select(1)",
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
		"upsert into t values (1)",
	] {
		d := query("analyst", q)
		d.message == read_only
		fx.has_reason(d, "does not start with SELECT or WITH")
	}
}

test_hidden_writes_in_select_denied if {
	every q in [
		"with d as (delete from t returning *) select * from d", # data-modifying CTE
		"with x as (insert into t values (1) returning id) select id from x",
		"select * into new_table from t", # SELECT INTO creates a table
		"select * from t for update", # row locks
		"SELECT * FROM t FOR UPDATE",
	] {
		d := query("analyst", q)
		d.message == read_only
		fx.has_reason(d, "contains the data-changing keyword")
	}
}

test_multiple_statements_denied if {
	every q in [
		"select 1; drop table t",
		"select 1;delete from t",
		"select 1;;",
		"select ';'",
		"select 1; select 2;",
	] {
		d := query("analyst", q)
		fx.has_message(d, "query is not allowed: only a single statement is allowed")
		fx.has_reason(d, "contains ';' before its end")
	}
}

test_comments_denied if {
	every q in [
		"select 1 -- ; drop table t",
		"select 1 /* hidden */",
		"select 1 /*! delete from t */",
		"select 1 # mysql comment",
		"select 1 */",
		"sel/**/ect 1",
	] {
		d := query("analyst", q)
		fx.has_message(d, "query is not allowed: SQL comments are not allowed")
		fx.has_reason(d, "contains a comment marker")
	}
}

test_comment_hiding_write_denied if {
	d := query("analyst", "select 1 /* ; */ ; de/**/lete from t")
	fx.has_message(d, "query is not allowed: SQL comments are not allowed")
	fx.has_message(d, "query is not allowed: only a single statement is allowed")
}

test_ddl_denied_for_everyone if {
	every role in ["analyst", "dba"] {
		every q in [
			"drop table t",
			"truncate t",
			"create table x (a int)",
			"alter table t add column x int",
			"grant all on t to bob",
			"copy t to '/tmp/x'",
			"vacuum",
			"call proc()",
			"execute stmt",
			"pragma writable_schema = 1",
			"attach database 'x' as y",
		] {
			d := query(role, q)
			d.allow == false
			fx.has_reason(d, "contains the forbidden keyword")
		}
	}
}

test_forbidden_keyword_inside_select_denied if {
	d := query("analyst", "select * from t lock in share mode")
	d.message == forbidden
	d2 := query("dba", "select * into outfile '/tmp/x' from t")
	d2.message == forbidden
}

test_denied_functions if {
	every q in [
		"select pg_sleep(10)",
		"select PG_SLEEP (10)",
		"select pg_read_file('/etc/passwd')",
		"select * from dblink('host=evil', 'select 1') as t(a int)",
		"select set_config('role', 'admin', false)",
		"select nextval('seq')",
		"select sleep(5)",
		"select benchmark(1000000, md5('x'))",
	] {
		d := query("analyst", q)
		d.message == "query is not allowed: it calls a function that is not allowed"
		fx.has_reason(d, "calls the denied function")
	}
}

test_function_names_as_columns_allowed if {
	fx.allowed(query("analyst", "select sleep_minutes, benchmark_score from stats"))
}

test_writes_allowed_for_writer_role if {
	every q in [
		"insert into t (a) values (1)",
		"update t set a = 1 where id = 2",
		"delete from t where id = 2",
		"with x as (select 1) insert into t select * from x",
		"select * from t for update",
		"select 1",
	] {
		fx.allowed(query("dba", q))
	}
}

test_writer_still_single_statement_without_comments if {
	d := query("dba", "delete from t; drop table t")
	fx.has_message(d, "query is not allowed: only a single statement is allowed")
	d2 := query("dba", "delete from t -- where id = 1")
	fx.has_message(d2, "query is not allowed: SQL comments are not allowed")
}

test_writer_other_statements_denied if {
	every q in ["set role admin", "explain analyze delete from t", "replace into t values (1)", "show tables"] {
		d := query("dba", q)
		fx.has_message(d, forbidden)
		fx.has_reason(d, "does not start with SELECT, WITH, INSERT, UPDATE, DELETE or MERGE")
	}
}

test_writer_grant_is_per_tool if {
	d := query("dba", "delete from t") with data.gateway.config.roles.dba.sql_write_tools as ["other_db"]
	d.message == read_only
}

test_other_statements_denied_for_readers if {
	every q in ["show tables", "explain select 1", "set role admin", "(select 1)", "values (1)", "begin"] {
		d := query("analyst", q)
		d.message == read_only
	}
}

test_non_ascii_and_control_denied if {
	every q in [
		"select 'caf\u00e9'",
		"select 1\u037e drop table t", # Greek question mark looks like ';'
		"select 1\uff1b drop table t", # fullwidth semicolon
		"s\u0435lect 1", # Cyrillic e
		"select 1\u0000",
		"select\u000b1",
	] {
		d := query("analyst", q)
		d.message == "query is not allowed: it contains disallowed characters"
		fx.has_reason(d, "contains non-ASCII or control characters")
	}
}

test_empty_query_denied if {
	every q in ["", "   ", "\n\t"] {
		d := query("analyst", q)
		d.message == "query is not allowed: it is empty"
	}
}

test_too_long_query_denied if {
	long := concat("", ["select 1", concat("", [x | some _ in numbers.range(1, 10001); x := " "])])
	d := query("analyst", long)
	d.message == "query is not allowed: it is too long"
	fx.has_reason(d, "is longer than 10000 characters")
}

test_non_string_query_denied if {
	every q in [["select 1"], {"sql": "select 1"}, 1] {
		d := query("analyst", q)
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

test_unsafe_denied_function_names_ignored if {
	fx.allowed(query("analyst", "select 1")) with data.gateway.config.tools.query_db.denied_functions as ["a.*", "(", 7]
}

"""SQL facts: what PostgreSQL's parser finds in a query, and how they reach the input document."""

from __future__ import annotations

import json
import subprocess
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import Authorization, ToolDefinition
from gateway.policy import (
    FACTS_VERSION,
    MAX_SQL_LENGTH,
    SQL_MEDIA_TYPE,
    CallerContext,
    InputDocument,
    sql_facts,
    sql_locations,
)
from tests.policy import sql_fixtures


def fn(name: str, schema: str | None = None, catalog: str | None = None) -> dict[str, Any]:
    return {"catalog": catalog, "schema": schema, "name": name}


PG_SLEEP: Final = fn("pg_sleep")

#: (query, the functions the parser must report).
FUNCTIONS: Final[dict[str, tuple[str, list[dict[str, Any]]]]] = {
    "quoted": ("select \"pg_read_file\"('/etc/passwd')", [fn("pg_read_file")]),
    "unquoted-folded": ("SELECT PG_READ_FILE('/x')", [fn("pg_read_file")]),
    "quoted-keeps-case": ('select "PG_Sleep"(1)', [fn("PG_Sleep")]),
    "schema-qualified-quoted": ('select pg_catalog."pg_sleep"(1)', [fn("pg_sleep", "pg_catalog")]),
    "quoted-schema": ('select "pg_catalog".pg_sleep(1)', [fn("pg_sleep", "pg_catalog")]),
    "catalog-qualified": ("select db.pg_catalog.pg_sleep(1)", [fn("pg_sleep", "pg_catalog", "db")]),
    "unicode-escape": ('select U&"pg\\005fsleep"(1)', [PG_SLEEP]),
    "unicode-escape-custom": ("select U&\"pg!005fsleep\" UESCAPE '!' (1)", [PG_SLEEP]),
    "space-before-paren": ("select pg_sleep   (1)", [PG_SLEEP]),
    "comment-before-paren": ("select pg_sleep/* x */(1)", [PG_SLEEP]),
    "newline-comment": ("select pg_sleep --x\n(1)", [PG_SLEEP]),
    "pg_sleep_for": ("select pg_sleep_for('1s')", [fn("pg_sleep_for")]),
    "pg_sleep_until": ("select pg_sleep_until('tomorrow')", [fn("pg_sleep_until")]),
    "lo_from_bytea": ("select lo_from_bytea(0, 'x')", [fn("lo_from_bytea")]),
    "lo_put": ("select lo_put(1, 0, 'x')", [fn("lo_put")]),
    "subquery": ("select * from t where a in (select pg_sleep(1))", [PG_SLEEP]),
    "scalar-subquery": ("select (select (select pg_sleep(1)))", [PG_SLEEP]),
    "exists": ("select exists (select pg_sleep(1))", [PG_SLEEP]),
    "cte": ("with x as (select pg_sleep(1)) select * from x", [PG_SLEEP]),
    "recursive-cte": (
        "with recursive r(n) as (select 1 union all select pg_sleep(1)::int from r) select 1",
        [PG_SLEEP],
    ),
    "order-by": ("select a from t order by pg_sleep(1)", [PG_SLEEP]),
    "group-by": ("select 1 from t group by pg_sleep(1)", [PG_SLEEP]),
    "having": ("select 1 from t having pg_sleep(1) is null", [PG_SLEEP]),
    "limit": ("select 1 limit (select pg_sleep(1))::int", [PG_SLEEP]),
    "window": ("select count(*) over (partition by pg_sleep(1)) from t", [fn("count"), PG_SLEEP]),
    "named-window": ("select 1 from t window w as (order by pg_sleep(1))", [PG_SLEEP]),
    "filter": (
        "select count(*) filter (where pg_sleep(1) is null) from t",
        [fn("count"), PG_SLEEP],
    ),
    "within-group": (
        "select percentile_cont(0.5) within group (order by pg_sleep(1)) from t",
        [fn("percentile_cont"), PG_SLEEP],
    ),
    "function-argument": ("select lower(pg_sleep(1)::text)", [fn("lower"), PG_SLEEP]),
    "lateral": ("select * from t, lateral (select pg_sleep(1)) s", [PG_SLEEP]),
    "from-function": ("select * from pg_sleep(1)", [PG_SLEEP]),
    "rows-from": ("select * from rows from (pg_sleep(1))", [PG_SLEEP]),
    "join-condition": ("select 1 from a join b on pg_sleep(1) is null", [PG_SLEEP]),
    "values": ("values (pg_sleep(1))", [PG_SLEEP]),
    "case": ("select case when pg_sleep(1) is null then 1 end", [PG_SLEEP]),
    "cast-argument": ("select cast(pg_sleep(1) as text)", [PG_SLEEP]),
    "array": ("select array[pg_sleep(1)]", [PG_SLEEP]),
    "row": ("select row(pg_sleep(1))", [PG_SLEEP]),
    "coalesce": ("select coalesce(null, pg_sleep(1))", [PG_SLEEP]),
    "union": ("select 1 union select pg_sleep(1)", [PG_SLEEP]),
    "insert-values": ("insert into t values (pg_sleep(1))", [PG_SLEEP]),
    "insert-default-list": ("insert into t (a) select pg_sleep(1)", [PG_SLEEP]),
    "on-conflict": (
        "insert into t values (1) on conflict (a) do update set a = pg_sleep(1)",
        [PG_SLEEP],
    ),
    "returning": ("delete from t returning pg_sleep(1)", [PG_SLEEP]),
    "update-from": ("update t set a = 1 from (select pg_sleep(1)) s", [PG_SLEEP]),
    "tablesample-method": (
        "select * from t tablesample system_time(1000)",
        [fn("system_time")],
    ),
    "sql-syntax-function": (
        "select extract(year from now())",
        [fn("now"), fn("extract", "pg_catalog")],
    ),
    "call": ("call pg_sleep(1)", [PG_SLEEP]),
    "literal-is-not-a-call": ("select 'pg_sleep(1)'", []),
    "dollar-literal-is-not-a-call": ("select $$pg_sleep(1)$$", []),
    "column-is-not-a-call": ("select pg_sleep from t", []),
}


@pytest.mark.parametrize(("query", "expected"), FUNCTIONS.values(), ids=FUNCTIONS.keys())
def test_sql_facts_report_every_function_called_anywhere_as_postgresql_resolves_it(
    query: str, expected: list[dict[str, Any]]
) -> None:
    actual = sql_facts(query)

    assert actual["parsed"] is True
    assert sorted(actual["functions"], key=json.dumps) == sorted(expected, key=json.dumps)


#: (query, locking clauses, writes).
WRITES: Final[dict[str, tuple[str, list[str], bool]]] = {
    "plain-select": ("select a from t", [], False),
    "for-update": ("select a from t for update", ["for update"], True),
    "for-no-key-update": ("select a from t for no key update", ["for no key update"], True),
    "for-share": ("select a from t for share", ["for share"], True),
    "for-key-share": ("select a from t for key share", ["for key share"], True),
    "for-share-nowait": ("select a from t for share of t nowait", ["for share"], True),
    "lock-in-a-subquery": (
        "select * from (select a from t for key share) s",
        ["for key share"],
        True,
    ),
    "lock-in-a-cte": ("with x as (select a from t for update) select 1", ["for update"], True),
    "data-modifying-cte": ("with d as (delete from t returning *) select * from d", [], True),
    "insert-cte": ("with d as (insert into t values (1) returning *) select 1", [], True),
    "update-cte": ("with d as (update t set a = 1 returning *) select 1", [], True),
    "select-into": ("select * into x from t", [], True),
    "explain-analyze": ("explain analyze delete from t", [], True),
    "explain": ("explain select 1", [], True),
    "copy": ("copy t to '/tmp/x'", [], True),
    "do": ("do $$ begin perform 1; end $$", [], True),
    "set": ("set role admin", [], True),
    "create": ("create table t (a int default pg_sleep(1))", [], True),
    "begin": ("begin", [], True),
}


@pytest.mark.parametrize(("query", "locking", "writes"), WRITES.values(), ids=WRITES.keys())
def test_sql_facts_say_whether_anything_writes_or_locks(
    query: str, locking: list[str], writes: bool
) -> None:
    actual = sql_facts(query)

    assert (actual["locking"], actual["writes"]) == (locking, writes)


#: (query, top-level statement kinds).
STATEMENTS: Final[dict[str, tuple[str, list[str]]]] = {
    "one": ("select 1", ["SelectStmt"]),
    "trailing-semicolon": ("select 1;", ["SelectStmt"]),
    "two": ("select 1; drop table t", ["SelectStmt", "DropStmt"]),
    "hidden-by-a-comment-end": ("select 1 /* x */; delete from t", ["SelectStmt", "DeleteStmt"]),
    "semicolon-in-a-literal": ("select ';'", ["SelectStmt"]),
    "semicolon-in-a-comment": ("select 1 -- ; delete from t", ["SelectStmt"]),
    "only-a-comment": ("-- nothing", []),
    "empty": ("", []),
    "copy": ("copy t to program 'id'", ["CopyStmt"]),
    "do": ("do 'begin end'", ["DoStmt"]),
    "call": ("call f()", ["CallStmt"]),
    "set": ("set statement_timeout = 0", ["VariableSetStmt"]),
    "transaction": ("commit", ["TransactionStmt"]),
}


@pytest.mark.parametrize(("query", "statements"), STATEMENTS.values(), ids=STATEMENTS.keys())
def test_sql_facts_list_the_top_level_statements(query: str, statements: list[str]) -> None:
    assert sql_facts(query)["statements"] == statements


def test_sql_facts_report_tables_but_not_ctes_in_scope() -> None:
    cases = {
        "with x as (select 1) select * from x, orders": ["orders"],
        "with a as (select * from a) select * from a": ["a"],  # the inner a is a table
        "with recursive a as (select * from a) select * from a": [],
        "with orders as (select 1) delete from orders": ["orders"],  # a target is a table
        "select * from (with x as (select 1) select * from x) s, x": ["x"],
        "select * from pg_catalog.pg_authid": ["pg_authid"],
    }
    for query, names in cases.items():
        assert [r["name"] for r in sql_facts(query)["relations"]] == names, query
    assert sql_facts("select * from pg_catalog.pg_authid")["relations"] == [
        {"catalog": None, "schema": "pg_catalog", "name": "pg_authid"}
    ]


def test_sql_facts_report_operators_so_backticks_are_seen() -> None:
    assert sql_facts("select `pg_sleep`(1)")["operators"] == [{"schema": None, "name": "`"}]
    assert sql_facts("select 1 operator(s.+) 2")["operators"] == [{"schema": "s", "name": "+"}]
    assert {o["name"] for o in sql_facts("select a from t where a like 'x'")["operators"]} == {"~~"}


def test_sql_facts_flag_a_backslash_in_a_standard_string_only() -> None:
    # With standard_conforming_strings off, the server would read pg_sleep(1) as code here.
    smuggled = sql_facts("select 'a\\' || ' , pg_sleep(1) --'")
    assert (smuggled["functions"], smuggled["backslash_in_string"]) == ([], True)
    assert sql_facts("select E'a\\\\'")["backslash_in_string"] is False
    assert sql_facts("select $$a\\$$")["backslash_in_string"] is False
    assert sql_facts("select 'caf\u00e9', 'a\\'")["backslash_in_string"] is True


def test_sql_facts_list_every_node_type_so_unknown_constructs_can_be_refused() -> None:
    actual = sql_facts("select xmlparse(document '<a/>')")["node_types"]

    assert "XmlExpr" in actual


UNPARSED: Final[dict[str, tuple[str, str]]] = {
    "syntax": ("selec 1", "syntax"),
    "unterminated-literal": ("select 'a", "syntax"),
    "mysql-comment-is-not-pg": ("select 1 # x; drop", "syntax"),
    "nul-would-truncate": ("select 1\x00; drop table t", "nul"),
    "lone-surrogate": ("select '\udc00'", "encoding"),
    "too-long": ("select 1" + " " * MAX_SQL_LENGTH, "too_long"),
    "long-nesting": ("select " + "abs(" * 5_000 + "1" + ")" * 5_000, "too_long"),
    # Within the length bound PostgreSQL's parser never exhausts its stack (9,000 nested
    # parentheses still parse); deeper nesting is refused by the bound first.
    "subqueries-nested-past-the-bound": (
        "select " + "(select " * 2300 + "1" + ")" * 2300,
        "too_long",
    ),
}


@pytest.mark.parametrize(("query", "error"), UNPARSED.values(), ids=UNPARSED.keys())
def test_sql_facts_of_what_does_not_parse_say_so_without_quoting_it(query: str, error: str) -> None:
    actual = sql_facts(query)

    assert actual == {"parsed": False, "error": error}


@settings(max_examples=400, deadline=None)
@given(text=st.text(max_size=200))
def test_sql_facts_never_raise_on_arbitrary_text(text: str) -> None:
    actual = sql_facts(text)

    assert actual["parsed"] in (True, False)
    json.dumps(actual)  # JSON-ready
    if not actual["parsed"]:
        assert actual == {"parsed": False, "error": actual["error"]}


SQL_ALPHABET: Final = st.sampled_from(
    [
        "select",
        " ",
        "(",
        ")",
        "'",
        '"',
        "$$",
        "$1",
        ";",
        "--",
        "/*",
        "*/",
        "\n",
        "U&",
        "\\",
        "`",
        ",",
        "from",
        "t",
        "pg_sleep",
        "with",
        "as",
        "for",
        "update",
        "into",
        "E",
        "1",
        "=",
        "::",
        "[",
        "]",
        "lateral",
        "values",
        "*",
    ]
)


@settings(max_examples=400, deadline=None)
@given(tokens=st.lists(SQL_ALPHABET, max_size=30))
def test_sql_facts_never_raise_on_sql_like_text(tokens: list[str]) -> None:
    actual = sql_facts("".join(tokens))

    assert actual["parsed"] in (True, False)
    if actual["parsed"]:
        assert set(actual) == {
            "parsed",
            "statements",
            "functions",
            "relations",
            "locking",
            "operators",
            "node_types",
            "writes",
            "backslash_in_string",
        }


def test_sql_facts_hand_out_fresh_copies() -> None:
    first = sql_facts("select count(*) from t")
    first["functions"].append(fn("pg_sleep"))
    first["functions"][0]["name"] = "pg_sleep"

    assert sql_facts("select count(*) from t")["functions"] == [fn("count")]


# -- markers and the input document ---------------------------------------------------------

SQL_STRING: Final = {"type": "string", "contentMediaType": SQL_MEDIA_TYPE}


def definition(schema: dict[str, Any]) -> ToolDefinition:
    return ToolDefinition("q", {"type": "object", **schema})


def test_sql_locations_come_from_content_media_type_anywhere_in_the_schema() -> None:
    schema = {
        "properties": {
            "query": SQL_STRING,
            "plain": {"type": "string"},
            "nested": {"type": "object", "properties": {"sql": SQL_STRING}},
            "many": {"type": "array", "items": SQL_STRING},
            "ref": {"$ref": "#/$defs/sql"},
            "upper": {"type": "string", "contentMediaType": "Application/SQL"},
        },
        "allOf": [{"properties": {"extra": SQL_STRING}}],
        "$defs": {"sql": SQL_STRING},
    }

    actual = sql_locations(definition(schema))

    assert set(actual) == {
        ("query",),
        ("nested", "sql"),
        ("many", None),
        ("ref",),
        ("upper",),
        ("extra",),
    }


def test_sql_locations_survive_a_recursive_ref() -> None:
    node = {"properties": {"q": SQL_STRING, "next": {"$ref": "#/$defs/node"}}}
    schema: dict[str, Any] = {"$defs": {"node": node}, "$ref": "#/$defs/node"}

    actual = sql_locations(definition(schema))

    assert ("q",) in actual


def facts_of(schema: dict[str, Any], arguments: Any) -> dict[str, Any]:
    document = InputDocument(
        Authorization(definition(schema), json.dumps(arguments).encode()), CallerContext()
    )
    value: dict[str, Any] = json.loads(document.to_json())["facts"]
    return value


def test_input_document_carries_sql_facts_keyed_by_json_pointer() -> None:
    schema = {
        "properties": {
            "query": SQL_STRING,
            "nested": {"properties": {"a/b": SQL_STRING}},
            "many": {"items": SQL_STRING},
        }
    }
    arguments = {"query": "select 1", "nested": {"a/b": "select 2"}, "many": ["select 3", 4]}

    actual = facts_of(schema, arguments)

    assert actual["version"] == FACTS_VERSION == 1
    assert set(actual["arguments"]) == {"/query", "/nested/a~1b", "/many/0"}
    assert actual["arguments"]["/query"] == {"sql": sql_facts("select 1")}


def test_input_document_has_empty_facts_for_a_tool_without_markers() -> None:
    assert facts_of({"properties": {"query": {"type": "string"}}}, {"query": "select 1"}) == {
        "version": 1,
        "arguments": {},
    }


def test_input_document_digest_changes_with_the_facts() -> None:
    arguments = b'{"query":"select 1"}'
    marked = InputDocument(
        Authorization(definition({"properties": {"query": SQL_STRING}}), arguments)
    )
    plain = InputDocument(
        Authorization(definition({"properties": {"query": {"type": "string"}}}), arguments)
    )

    assert b'"facts":{"arguments":{"/query"' in marked.to_json()
    assert marked.digest != plain.digest


def test_input_document_facts_do_not_depend_on_argument_layout() -> None:
    schema = definition({"properties": {"query": SQL_STRING, "n": {"type": "integer"}}})
    first = InputDocument(Authorization(schema, b'{"query":"select 1","n":1}'))
    second = InputDocument(Authorization(schema, b'{ "n" : 1 , "query" : "select 1" }'))

    assert first.facts_json == second.facts_json
    assert first.digest == second.digest


def test_the_rego_sql_fixtures_are_what_the_parser_says(opa_binary: str) -> None:
    result = subprocess.run(
        [
            opa_binary,
            "eval",
            "--format",
            "json",
            "--data",
            str(sql_fixtures.FIXTURE_MODULE),
            f"data.{sql_fixtures.PACKAGE}.facts",
        ],
        capture_output=True,
        check=True,
        timeout=60,
    )
    stored = json.loads(result.stdout)["result"][0]["expressions"][0]["value"]

    assert stored == sql_fixtures.expected_facts(opa_binary), (
        "regenerate: .venv/bin/python -m tests.policy.sql_fixtures <opa>"
    )

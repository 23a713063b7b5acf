"""SQL arguments are decided on PostgreSQL's parse of them, identically on both engines.

Every case goes through the real :class:`PolicyAuthorizer` and :class:`InputDocument` on
the embedded engine and on a real OPA server, both loading the shipped policies
and data, with the example ``query_db`` tool (its ``query`` argument marked as SQL by
``contentMediaType: application/sql``). The table holds the variants of one class: a
function, a lock or a write that a lexical check can miss because quoting, escapes,
qualification, nesting or a name nobody listed hides it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from gateway import Authorization
from gateway.policy import (
    CallerContext,
    EmbeddedEngine,
)
from gateway.testing import OpaServer
from tests.policy.differential_corpus import EXAMPLE_DEFINITIONS, context
from tests.policy.wasm_support import decide_on_both_engines, shipped_engine, shipped_opa_server

POLICY_DIR: Final = Path(__file__).resolve().parents[2] / "policies"

READER: Final = CallerContext(context(("reader",)))
DBA: Final = CallerContext(context(("dba",)))

#: Queries a reader must be refused, by what they hide.
READER_DENIED: Final[dict[str, str]] = {
    "quoted-name": "select \"pg_read_file\"('/etc/passwd')",
    "schema-qualified-quoted": 'select pg_catalog."pg_sleep"(1)',
    "schema-qualified": "select pg_catalog.pg_read_file('/etc/passwd')",
    "unicode-escaped-name": 'select U&"pg\\005fsleep"(1)',
    "unicode-escaped-custom-escape": "select U&\"pg!005fsleep\" UESCAPE '!' (1)",
    "mysql-backticks": "select `pg_sleep`(1)",
    "upper-case-name": "SELECT PG_READ_FILE('/etc/passwd')",
    "pg_sleep_for": "select pg_sleep_for('5 minutes')",
    "pg_sleep_until": "select pg_sleep_until('tomorrow')",
    "lo_from_bytea": "select lo_from_bytea(0, 'x')",
    "lo_put": "select lo_put(16384, 0, 'x')",
    "in-a-subquery": "select id from orders where id in (select pg_sleep(1))",
    "in-a-scalar-subquery": "select (select lo_import('/etc/passwd'))",
    "in-a-cte": "with x as (select pg_sleep(1)) select * from x",
    "in-order-by": "select id from orders order by pg_sleep(1)",
    "in-a-window": "select count(*) over (partition by pg_sleep(1)) from orders",
    "in-a-filter": "select count(*) filter (where pg_sleep(1) is null) from orders",
    "in-lateral": "select * from orders, lateral (select pg_sleep(1)) s",
    "in-from": "select * from pg_read_file('/etc/passwd')",
    "in-values": "values (pg_sleep(1))",
    "in-a-cast": "select pg_sleep(1)::text",
    "in-a-case": "select case when true then pg_sleep(1) end",
    "behind-a-comment": "select /* harmless */ pg_sleep(1) -- done",
    "not-allow-listed": "select current_setting('data_directory')",
    "tablesample-method": "select * from orders tablesample system_time(1000)",
    "for-update": "select * from orders for update",
    "for-no-key-update": "select * from orders for no key update",
    "for-share": "select * from orders for share",
    "for-key-share": "select * from orders for key share",
    "for-share-in-subquery": "select * from (select * from orders for share) s",
    "data-modifying-cte": "with d as (delete from orders returning *) select * from d",
    "select-into": "select * into stolen from orders",
    "insert": "insert into orders values (1)",
    "two-statements": "select 1; select 2",
    "hidden-second-statement": "select 1; drop table orders",
    "copy": "copy orders to '/tmp/x'",
    "copy-program": "copy (select 1) to program 'id'",
    "do-block": "do $$ begin perform pg_sleep(1); end $$",
    "call": "call do_things()",
    "set": "set statement_timeout = 0",
    "explain-analyze": "explain analyze delete from orders",
    "transaction": "begin",
    "does-not-parse": "selec 1",
    "empty": "   ",
    "only-a-comment": "-- nothing",
}

#: Queries a reader may run: the parser sees through literals and comments.
READER_ALLOWED: Final[dict[str, str]] = {
    "plain": "SELECT id FROM orders",
    "aggregate": "select count(*), sum(amount) from orders where status = 'open'",
    "function-name-in-a-literal": "select 'pg_sleep(1)' as text",
    "keyword-in-a-literal": "select id from orders where note = 'drop; delete'",
    "comment": "select id /* the key */ from orders -- all of them",
    "cte": "with recent as (select id from orders) select count(*) from recent",
    "trailing-semicolon": "select 1;",
    "parameter": "select id from orders where id = $1",
}

#: (query, allowed) for a role with write access to the tool.
DBA_CASES: Final[dict[str, tuple[str, bool]]] = {
    "insert": ("insert into orders (id) values (1)", True),
    "update": ("update orders set status = 'done' where id = 1", True),
    "for-update": ("select * from orders for update", True),
    "insert-calling-a-denied-function": ("insert into orders values (pg_sleep(1))", False),
    "update-calling-an-unlisted-function": ("update orders set a = lo_put(1, 0, 'x')", False),
    "returning-a-denied-function": ("delete from orders returning pg_read_file('x')", False),
    "ddl": ("drop table orders", False),
    "truncate": ("truncate orders", False),
    "two-writes": ("insert into orders values (1); delete from orders", False),
}


@pytest.fixture(scope="module")
def sources() -> Iterator[EmbeddedEngine]:
    """The shipped policies on the embedded engine."""
    with shipped_engine(timeout_s=30.0) as engine:
        yield engine


@pytest.fixture(scope="module")
def opa(opa_binary: str) -> Iterator[OpaServer]:
    """A real OPA serving the shipped modules and data (no test modules)."""
    with shipped_opa_server(opa_binary) as server:
        yield server


async def _decide_both(
    sources: EmbeddedEngine, server: OpaServer, query: str, ctx: CallerContext
) -> list[tuple[bool, str | None]]:
    arguments = json.dumps({"database": "acme_sales", "query": query}).encode()
    authorization = Authorization(EXAMPLE_DEFINITIONS["query_db"], arguments)
    return await decide_on_both_engines(sources, server, authorization, ctx)


def _assert_public_safe(message: str | None, query: str) -> None:
    assert message is not None
    for piece in query.split():
        if len(piece) > 6:
            assert piece not in message, "a denial message quotes the argument"


@pytest.mark.parametrize("query", READER_DENIED.values(), ids=READER_DENIED.keys())
def test_a_reader_is_refused_what_the_parser_finds(
    sources: EmbeddedEngine, opa: OpaServer, query: str
) -> None:
    outcomes = asyncio.run(_decide_both(sources, opa, query, READER))
    assert outcomes[0] == outcomes[1], "the engines disagree"
    allowed, message = outcomes[0]
    assert allowed is False
    _assert_public_safe(message, query)


@pytest.mark.parametrize("query", READER_ALLOWED.values(), ids=READER_ALLOWED.keys())
def test_a_reader_may_run_a_plain_read(sources: EmbeddedEngine, opa: OpaServer, query: str) -> None:
    outcomes = asyncio.run(_decide_both(sources, opa, query, READER))
    assert outcomes == [(True, "the call is authorized")] * 2


@pytest.mark.parametrize(("query", "allowed"), DBA_CASES.values(), ids=DBA_CASES.keys())
def test_a_writer_may_write_but_not_call_what_the_list_refuses(
    sources: EmbeddedEngine, opa: OpaServer, query: str, allowed: bool
) -> None:
    outcomes = asyncio.run(_decide_both(sources, opa, query, DBA))
    assert outcomes[0] == outcomes[1], "the engines disagree"
    assert outcomes[0][0] is allowed

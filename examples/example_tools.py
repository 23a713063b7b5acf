"""Example tools served by examples/gateway.toml: harmless stand-ins for real ones.

Each one matches a tool configured in policies/data.json, so the shipped policies decide
on real arguments: paths, URLs, SQL, payments, commands and tenant-scoped searches.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gateway import Func, function_tool


@function_tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@function_tool
def search(
    tenant: str, query: Annotated[str, Field(min_length=1, max_length=200)]
) -> dict[str, object]:
    """Search the tenant's documents (returns a canned answer)."""
    return {"tenant": tenant, "query": query, "hits": []}


@function_tool
def read_file(path: Annotated[str, Field(min_length=1, max_length=4096)]) -> str:
    """Read a file below /srv/tenants/<tenant>/ or /srv/shared/ (reads nothing here)."""
    return f"(contents of {path})"


@function_tool
def fetch_url(url: Annotated[str, Field(min_length=1, max_length=2048)]) -> str:
    """Fetch an allowed HTTPS URL (fetches nothing here)."""
    return f"(body of {url})"


#: Marks a string argument as SQL (RFC 6922): the gateway parses it for the policy.
SQL = {"contentMediaType": "application/sql"}


@function_tool
def query_db(
    database: str,
    query: Annotated[str, Field(min_length=1, max_length=10000, json_schema_extra=SQL)],
) -> dict[str, object]:
    """Run a read-only SQL query on a tenant database (runs nothing here)."""
    return {"database": database, "rows": []}


@function_tool
def pay(
    from_account: str, to_account: str, amount: Annotated[float, Field(gt=0, le=1_000_000)]
) -> str:
    """Pay an amount from one of the tenant's accounts (moves no money here)."""
    return f"paid {amount} from {from_account} to {to_account}"


TOOLS: list[Func] = [add, search, read_file, fetch_url, query_db, pay]

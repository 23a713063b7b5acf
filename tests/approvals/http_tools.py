"""A tool for the obligation tests: it shows the arguments it saw beside rows with a secret."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gateway import Func, function_tool

#: Marks a string argument as SQL, as the example tools do.
SQL = {"contentMediaType": "application/sql"}


@function_tool
def ledger(mode: str, limit: int = 1, amount: float = 0) -> dict[str, object]:
    """Answer with the arguments it was called with and two rows holding an ssn column."""
    return {
        "seen": {"mode": mode, "limit": limit, "amount": amount},
        "rows": [{"name": "ann", "ssn": "123-45-6789"}, {"name": "ben", "ssn": "987-65-4321"}],
    }


TOOLS: list[Func] = [ledger]


@function_tool
def query_db(
    database: str,
    query: Annotated[str, Field(min_length=1, max_length=10000, json_schema_extra=SQL)],
) -> dict[str, object]:
    """The example query_db's schema, answering rows that hold an ssn column."""
    return {"database": database, "rows": [{"name": "ann", "ssn": "123-45-6789"}]}


@function_tool
def pay(
    from_account: str, to_account: str, amount: Annotated[float, Field(gt=0, le=1_000_000)]
) -> str:
    """The example pay (moves no money)."""
    return f"paid {amount} from {from_account} to {to_account}"


#: The example pay and a query_db with rows, for the shipped policies.
SHIPPED_TOOLS: list[Func] = [pay, query_db]

"""A tool for the obligation tests: it shows the arguments it saw beside rows with a secret."""

from __future__ import annotations

from gateway import Func, function_tool


@function_tool
def ledger(mode: str, limit: int = 1, amount: float = 0) -> dict[str, object]:
    """Answer with the arguments it was called with and two rows holding an ssn column."""
    return {
        "seen": {"mode": mode, "limit": limit, "amount": amount},
        "rows": [{"name": "ann", "ssn": "123-45-6789"}, {"name": "ben", "ssn": "987-65-4321"}],
    }


TOOLS: list[Func] = [ledger]

"""The console tests' tools: a payment that counts every time it really runs, and a lookup."""

from __future__ import annotations

import threading

from gateway import Func, function_tool

#: Every payment that ran, by reference (the tests read it: a payment must run exactly once).
RUNS: list[str] = []
_LOCK = threading.Lock()


@function_tool
def pay(reference: str, to_account: str, amount: float, card_number: str) -> str:
    """Pay (records the run; moves no money)."""
    with _LOCK:
        RUNS.append(reference)
    return f"paid {amount} to {to_account}"


@function_tool
def lookup(account: str) -> str:
    """Look an account up."""
    return f"account {account}"


TOOLS: list[Func] = [pay, lookup]

"""The tools the suite's HTTP service serves (``reliability.tools:TOOLS``).

They match tools configured in the shipped ``policies/data.json``, so the shipped policies
decide on them, and each counts its executions so that the load run can compare them with
the responses and the audit trail.
"""

from __future__ import annotations

import collections
import threading
from typing import Annotated, Final

from pydantic import Field

from gateway import Func, function_tool

_LOCK: Final = threading.Lock()
#: Executions per tool name since the last :func:`reset`.
EXECUTIONS: Final[collections.Counter[str]] = collections.Counter()


def _count(name: str) -> None:
    with _LOCK:
        EXECUTIONS[name] += 1


def reset() -> None:
    """Forget every execution counted so far."""
    with _LOCK:
        EXECUTIONS.clear()


def executions() -> dict[str, int]:
    """A snapshot of the counters."""
    with _LOCK:
        return dict(EXECUTIONS)


@function_tool
async def add(a: int, b: int) -> str:
    """Add two integers."""
    _count("add")
    return str(a + b)


@function_tool
async def pay(
    from_account: str, to_account: str, amount: Annotated[float, Field(gt=0, le=1_000_000)]
) -> str:
    """Pay an amount from one of the tenant's accounts (moves no money)."""
    _count("pay")
    return f"paid {amount} from {from_account} to {to_account}"


TOOLS: Final[list[Func]] = [add, pay]

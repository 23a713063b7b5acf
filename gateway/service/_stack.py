"""The fastest stack available to both surfaces: uvloop's event loop and httptools' HTTP parser.

Both are dependencies of the gateway; a platform without them (uvloop has no Windows build)
falls back to uvicorn's asyncio loop and h11 parser, which behave the same, only slower.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypedDict, TypeVar

_T = TypeVar("_T")


class Stack(TypedDict):
    """The ``loop`` and ``http`` options of ``uvicorn.Config`` / ``uvicorn.run``."""

    loop: Literal["uvloop", "asyncio"]
    http: Literal["httptools", "h11"]


def _importable(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def server_stack() -> Stack:
    """The stack to serve on: uvloop and httptools when importable, else asyncio and h11."""
    return {
        "loop": "uvloop" if _importable("uvloop") else "asyncio",
        "http": "httptools" if _importable("httptools") else "h11",
    }


def run_on_fastest_loop(main: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run ``main()`` to completion on a uvloop event loop when importable (else asyncio)."""
    if _importable("uvloop"):
        import uvloop  # noqa: PLC0415 - optional at import time

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main())
    return asyncio.run(main())

"""The fastest stack available to both surfaces: uvloop's event loop and httptools' HTTP parser.

Both are dependencies of the gateway; a platform without them (uvloop has no Windows build)
falls back to uvicorn's asyncio loop and h11 parser, which behave the same, only slower.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib.util
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Literal, TypedDict, TypeVar

import sniffio

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


@contextlib.contextmanager
def named_asyncio() -> Iterator[None]:
    """Name the event loop run inside as asyncio to anyio, as ``anyio.run`` does.

    Starlette, uvicorn's lifespan and the MCP SDK use anyio, and every anyio primitive (a
    memory stream, a cancel scope, a lock, a task group) first asks which event loop it runs
    on. Unnamed, the answer is ``asyncio.get_running_loop()``, which on Python 3.11 makes a
    ``getpid`` system call each time (anyio's lookup measured 1.58 us here; about 33 lookups
    per MCP tool call). Named through sniffio's context variable (inherited by every task
    started inside), the lookup is a context-variable read (0.39 us). The name is set for the
    caller's context while held and restored after.
    """
    token = sniffio.current_async_library_cvar.set("asyncio")
    try:
        yield
    finally:
        sniffio.current_async_library_cvar.reset(token)


def loop_context() -> contextvars.Context:
    """A fresh context for a task that must see nothing of its creator's but the loop's name.

    ``contextvars.Context()`` would drop the name too (see :func:`named_asyncio`), and every
    anyio primitive in that task would pay the ``getpid`` lookup again; here only sniffio's
    name is carried, when it is set.
    """
    context = contextvars.Context()
    name = sniffio.current_async_library_cvar.get()
    if name is not None:
        context.run(sniffio.current_async_library_cvar.set, name)
    return context


def run_on_fastest_loop(main: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run ``main()`` to completion on a uvloop event loop when importable (else asyncio).

    The loop is named to anyio while it runs (:func:`named_asyncio`).
    """
    with named_asyncio():
        if _importable("uvloop"):
            import uvloop  # noqa: PLC0415 - optional at import time

            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(main())
        return asyncio.run(main())

"""Fakes for testing code that uses the gateway, without monkeypatching."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from gateway._authorization import Authorization, Decision
from gateway._contract import Invocation
from gateway._definition import ToolDefinition
from gateway._output import ToolOutput
from gateway.policy._context import CallerContext, current_caller


class FakeClock:
    """A monotonic clock that moves only when told to; pass it as ``clock=``."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        if seconds < 0:
            raise ValueError("a monotonic clock never goes back")
        with self._lock:
            self._now += seconds


class StaticAuthorizer:
    """Answers every authorization with the same bool or Decision (or raises ``error``)."""

    def __init__(self, answer: bool | Decision = False, *, error: Exception | None = None):
        self.answer = answer
        self.error = error

    async def authorize(self, authorization: Authorization) -> bool | Decision:
        """Return the fixed answer, or raise the fixed error."""
        if self.error is not None:
            raise self.error
        return self.answer


class RecordingAuthorizer:
    """Records every authorization (with the caller context in force), then delegates.

    ``calls`` holds ``(authorization, caller_context)`` pairs in arrival order.
    """

    def __init__(self, decide: Callable[[Authorization], bool | Decision] | bool = True):
        self._decide = decide
        self.calls: list[tuple[Authorization, CallerContext]] = []
        self._lock = threading.Lock()

    async def authorize(self, authorization: Authorization) -> bool | Decision:
        """Record, then answer."""
        with self._lock:
            self.calls.append((authorization, current_caller()))
        if isinstance(self._decide, bool):
            return self._decide
        return self._decide(authorization)

    @property
    def count(self) -> int:
        """How many authorizations were asked for."""
        with self._lock:
            return len(self.calls)


class RecordingTool:
    """A tool that records each invocation's arguments and answers with fixed output.

    Args:
        name: the tool name.
        schema: its input schema (default: any object).
        output: what every call returns (default: the arguments as text).
        gate: an optional event each call waits on before answering, to hold calls open.
    """

    def __init__(
        self,
        name: str = "recording",
        schema: dict[str, Any] | None = None,
        *,
        output: ToolOutput | None = None,
        gate: asyncio.Event | None = None,
    ) -> None:
        self._definition = ToolDefinition(name, schema or {"type": "object"})
        self._output = output
        self._gate = gate
        self._lock = threading.Lock()
        self.calls: list[bytes] = []
        self.definition_calls = 0

    def definition(self) -> ToolDefinition:
        """The fixed definition; counts how often it is asked for."""
        with self._lock:
            self.definition_calls += 1
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        """Record the arguments, optionally wait on the gate, answer."""
        with self._lock:
            self.calls.append(invocation.arguments)
        if self._gate is not None:
            await self._gate.wait()
        if self._output is not None:
            return self._output
        return ToolOutput.from_text(invocation.arguments.decode("utf-8"))

    @property
    def count(self) -> int:
        """How many times the tool ran."""
        with self._lock:
            return len(self.calls)

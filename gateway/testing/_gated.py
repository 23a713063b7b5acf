"""A policy engine whose evaluations wait at a gate: for tests of what must not wait."""

from __future__ import annotations

import asyncio

from gateway.policy._document import InputDocument
from gateway.policy._engine import EngineAnswer, PolicyEngine


class GatedEngine:
    """A :class:`gateway.policy.PolicyEngine` that answers as ``inner`` once :attr:`gate` opens.

    :attr:`waiting` counts the evaluations that reached the gate and have not passed it;
    :attr:`started` every evaluation asked for. Open the gate with ``gate.set()``.
    """

    def __init__(self, inner: PolicyEngine) -> None:
        self._inner = inner
        self.gate = asyncio.Event()
        self.started = 0
        self.waiting = 0

    @property
    def identity(self) -> str:
        """The inner engine's identity."""
        return self._inner.identity

    def revision(self) -> str:
        """The inner engine's revision."""
        return self._inner.revision()

    async def evaluate(self, path: str, document: InputDocument) -> EngineAnswer:
        """Wait for the gate, then answer as the inner engine does."""
        self.started += 1
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        return await self._inner.evaluate(path, document)

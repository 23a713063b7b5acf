"""Registry: an instance-scoped, thread-safe collection of bound tools."""

from __future__ import annotations

import threading

from gateway._contract import DEFAULT_LIMITS, AdmissionLimits, Binding, Tool, bind
from gateway._definition import ToolDefinition
from gateway._errors import DuplicateToolError, InvalidToolError


class Registry:
    """Tools by name, each bound once at registration.

    There is no global registry: each runtime owns its own. Registration is atomic for the
    whole batch, definitions are frozen at registration, and listings are in stable
    byte-wise name order.
    """

    __slots__ = ("_bindings", "_limits", "_lock")

    def __init__(self, *tools: Tool, limits: AdmissionLimits = DEFAULT_LIMITS) -> None:
        self._bindings: dict[str, Binding] = {}
        self._lock = threading.Lock()
        self._limits = limits
        self.register(*tools)

    def register(self, *tools: Tool) -> None:
        """Bind and add tools, all or nothing.

        Binding happens outside the lock, in argument order; the first error in index order
        wins. Nothing is added unless every tool binds and no name collides.

        Raises:
            InvalidToolError: ``tools[i]`` cannot be bound (the message starts ``tools[i]:``).
            DuplicateToolError: a name appears twice in the batch or is already registered.
        """
        pending: dict[str, Binding] = {}
        for index, tool in enumerate(tools):
            try:
                binding = bind(tool, limits=self._limits)
            except InvalidToolError as exc:
                raise InvalidToolError(f"tools[{index}]: {exc}") from exc
            name = binding.definition.name
            if name in pending:
                raise DuplicateToolError.because(f"{name!r} appears more than once in batch")
            pending[name] = binding
        with self._lock:
            for name in pending:
                if name in self._bindings:
                    raise DuplicateToolError.because(f"{name!r} is already registered")
            self._bindings.update(pending)

    def resolve(self, name: str) -> Binding | None:
        """The binding registered under exactly ``name`` (case-sensitive), or ``None``."""
        with self._lock:
            return self._bindings.get(name)

    def definitions(self) -> list[ToolDefinition]:
        """The registered definitions in byte-wise name order; the list is the caller's."""
        with self._lock:
            definitions = [binding.definition for binding in self._bindings.values()]
        definitions.sort(key=lambda definition: definition.name.encode("utf-8"))
        return definitions

    def __len__(self) -> int:
        with self._lock:
            return len(self._bindings)

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._bindings

    def __repr__(self) -> str:
        return f"Registry({[d.name for d in self.definitions()]!r})"

"""Optional tool capabilities and their resolution through decorator (wrapping) chains."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol, TypeVar, runtime_checkable

from gateway._errors import InvalidWrappingChainError

if TYPE_CHECKING:
    from gateway._contract import Tool

#: The most ``unwrap()`` steps a capability lookup takes; cycles end here.
MAX_WRAPPING_DEPTH: Final = 64

InputValidator = Callable[[bytes], None]
_T = TypeVar("_T")


@runtime_checkable
class WrappingTool(Protocol):
    """A decorator that stands in for another tool.

    ``unwrap()`` must return the same inner tool for the wrapper's lifetime and do no I/O.
    Optional capabilities resolve through the chain, outermost declaration first.
    """

    def unwrap(self) -> Tool:
        """Return the next inner tool."""
        ...


@runtime_checkable
class InputValidatingTool(Protocol):
    """A tool with admission rules that JSON Schema cannot express.

    ``input_validator()`` is called once, at bind. The returned callable must not retain the
    executable tool, must be deterministic, bounded, free of side effects and safe for
    concurrent use, and must neither mutate nor keep its argument. It raises to refuse.
    ``None`` means the schema is the complete admission contract.
    """

    def input_validator(self) -> InputValidator | None:
        """Return the independent validator, or ``None``."""
        ...


def capability(tool: object, protocol: type[_T]) -> _T | None:
    """Find the outermost node of ``tool``'s wrapping chain that implements ``protocol``.

    Returns ``None`` when a node is ``None`` or a non-wrapper that does not implement it.

    Raises:
        InvalidWrappingChainError: more than ``MAX_WRAPPING_DEPTH`` wrappers without a match
            (which is how a cycle ends).
    """
    node = tool
    depth = 0
    while node is not None:
        if isinstance(node, protocol):
            return node
        if not isinstance(node, WrappingTool):
            return None
        if depth == MAX_WRAPPING_DEPTH:
            raise InvalidWrappingChainError(
                f"tool: invalid wrapping chain: {type(tool).__name__} exceeds "
                f"{MAX_WRAPPING_DEPTH} wrappers"
            )
        node = node.unwrap()
        depth += 1
    return None

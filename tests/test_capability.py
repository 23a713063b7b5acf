"""Capability resolution through wrapping chains (seed §5, cases 23-24)."""

from __future__ import annotations

import re
from typing import Protocol, runtime_checkable

import pytest

from gateway import (
    MAX_WRAPPING_DEPTH,
    AuthorizerFunc,
    Guard,
    InvalidWrappingChainError,
    Invocation,
    Tool,
    ToolDefinition,
    ToolOutput,
    WrappingTool,
    capability,
)
from tests.helpers import OBJECT_SCHEMA, CountingTool, WrapperTool, chain, definition


@runtime_checkable
class Marked(Protocol):
    def marker(self) -> str: ...


class MarkedTool(CountingTool):
    def __init__(self, mark: str) -> None:
        super().__init__(definition("marked", OBJECT_SCHEMA))
        self.mark = mark

    def marker(self) -> str:
        return self.mark


class MarkedWrapper(WrapperTool):
    def __init__(self, inner: Tool, mark: str) -> None:
        super().__init__(inner)
        self.mark = mark

    def marker(self) -> str:
        return self.mark


class SelfWrapper:
    def definition(self) -> ToolDefinition:
        return definition("self", OBJECT_SCHEMA)

    async def call(self, invocation: Invocation) -> ToolOutput:
        return ToolOutput()

    def unwrap(self) -> Tool:
        return self


def find_marked(tool: object) -> Marked | None:
    return capability(tool, Marked)  # type: ignore[type-abstract]


def _cycle() -> WrapperTool:
    first = WrapperTool(None)
    second = WrapperTool(first)
    first.inner = second
    return first


def test_max_wrapping_depth_is_64() -> None:
    assert MAX_WRAPPING_DEPTH == 64


def test_case24_outermost_implementation_wins() -> None:
    inner = MarkedTool("inner")
    outer = MarkedWrapper(WrapperTool(inner), "outer")

    assert find_marked(outer) is outer
    assert find_marked(WrapperTool(inner)) is inner


def test_case24_capability_of_the_inner_tool_is_found_through_a_guard() -> None:
    inner = MarkedTool("inner")
    guard = Guard(tool=inner, authorizer=AuthorizerFunc(lambda authorization: True))

    assert find_marked(guard) is inner
    outer = MarkedWrapper(guard, "outer")
    assert find_marked(outer) is outer


def test_case24_capability_of_the_inner_tool_is_found_through_a_plain_wrapper() -> None:
    inner = MarkedTool("inner")

    found = find_marked(WrapperTool(WrapperTool(inner)))

    assert found is inner
    assert found is not None
    assert found.marker() == "inner"


@pytest.mark.parametrize(
    "tool",
    [
        pytest.param(None, id="none"),
        pytest.param(CountingTool(definition("plain", OBJECT_SCHEMA)), id="plain_tool"),
        pytest.param(WrapperTool(None), id="wrapper_of_none"),
        pytest.param(chain(3, CountingTool(definition("plain", OBJECT_SCHEMA))), id="chain"),
    ],
)
def test_capability_not_found_is_none_without_error(tool: object) -> None:
    assert find_marked(tool) is None


@pytest.mark.parametrize(
    "depth",
    [pytest.param(0, id="base"), pytest.param(1, id="one"), pytest.param(64, id="case23_64")],
)
def test_case23_up_to_64_wrappers_resolve(depth: int) -> None:
    base = MarkedTool("base")

    assert find_marked(chain(depth, base)) is base


def test_case23_64_wrappers_over_a_base_without_the_capability_are_not_an_error() -> None:
    assert find_marked(chain(64, CountingTool(definition("plain", OBJECT_SCHEMA)))) is None


def test_case23_65_wrappers_are_an_invalid_chain() -> None:
    with pytest.raises(
        InvalidWrappingChainError,
        match=f"^{re.escape('tool: invalid wrapping chain: WrapperTool exceeds 64 wrappers')}$",
    ):
        find_marked(chain(65, MarkedTool("base")))


@pytest.mark.parametrize(
    "tool",
    [
        pytest.param(SelfWrapper(), id="case23_self_wrapper"),
        pytest.param(_cycle(), id="case23_a_b"),
    ],
)
def test_case23_cycles_end_at_the_depth_bound(tool: object) -> None:
    with pytest.raises(InvalidWrappingChainError, match="exceeds 64 wrappers"):
        find_marked(tool)


def test_wrapping_chain_error_names_the_outer_type() -> None:
    with pytest.raises(
        InvalidWrappingChainError, match=r"^tool: invalid wrapping chain: SelfWrapper"
    ):
        find_marked(SelfWrapper())


def test_a_wrapper_is_recognised_structurally() -> None:
    assert isinstance(WrapperTool(None), WrappingTool)
    assert not isinstance(CountingTool(definition("plain", OBJECT_SCHEMA)), WrappingTool)


def test_invalid_wrapping_chain_error_code() -> None:
    assert InvalidWrappingChainError.code == "invalid_wrapping_chain"

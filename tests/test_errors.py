"""The error hierarchy: each class carries the seed's message prefix, and only it types it."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import (
    AuthorizationError,
    DuplicateToolError,
    Failure,
    FailureKind,
    GatewayError,
    InvalidDefinitionError,
    InvalidFailureError,
    InvalidInvocationError,
    InvalidToolCallError,
    InvalidToolError,
    InvalidToolOutputError,
    InvalidWrappingChainError,
    Registry,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    bind,
    capability,
)
from tests.helpers import OBJECT_SCHEMA, CountingTool, chain, definition

PACKAGE = Path(__file__).resolve().parent.parent / "gateway"

#: The seed's sentinel texts (seed §1, and chat's for definitions and calls).
PREFIXES: dict[type[GatewayError], str] = {
    GatewayError: "tool",
    InvalidToolError: "tool: invalid tool",
    InvalidDefinitionError: "tool: invalid tool definition",
    InvalidInvocationError: "tool: invalid invocation",
    InvalidToolCallError: "tool: invalid tool call",
    InvalidWrappingChainError: "tool: invalid wrapping chain",
    DuplicateToolError: "tool: duplicate tool",
    InvalidFailureError: "tool: invalid failure",
    InvalidToolOutputError: "tool: invalid tool output",
}


@pytest.mark.parametrize(
    ("error_class", "prefix"),
    [pytest.param(klass, prefix, id=klass.__name__) for klass, prefix in PREFIXES.items()],
)
def test_every_core_error_class_carries_the_seeds_prefix(
    error_class: type[GatewayError], prefix: str
) -> None:
    assert error_class.prefix == prefix


def test_because_joins_the_prefix_and_every_detail() -> None:
    error = InvalidToolError.because("input schema", "jsonschema: invalid schema")

    assert type(error) is InvalidToolError
    assert str(error) == "tool: invalid tool: input schema: jsonschema: invalid schema"


def test_a_tool_call_refusal_is_an_invalid_invocation_with_its_own_prefix() -> None:
    with pytest.raises(InvalidToolCallError) as caught:
        ToolCall("", "search").validate()

    assert isinstance(caught.value, InvalidInvocationError)
    assert str(caught.value) == "tool: invalid tool call: ID must not be empty"


def _bad_output() -> object:
    return ToolOutput.from_json("{")


def _duplicate() -> object:
    tool = CountingTool(definition("same", OBJECT_SCHEMA))
    return Registry(tool, tool)


def _mismatched_call() -> object:
    return bind(CountingTool(definition("search", OBJECT_SCHEMA))).prepare(
        ToolCall("c", "other", "{}")
    )


@runtime_checkable
class Marked(Protocol):
    def marker(self) -> str: ...


def _too_deep() -> object:
    return capability(chain(65, CountingTool(definition("deep", OBJECT_SCHEMA))), Marked)


MISUSES: list[tuple[Callable[[], object], type[GatewayError]]] = [
    (lambda: bind(None), InvalidToolError),  # type: ignore[arg-type]
    (lambda: ToolDefinition("bad name", OBJECT_SCHEMA), InvalidDefinitionError),
    (lambda: ToolCall("c", "").validate(), InvalidToolCallError),
    (_mismatched_call, InvalidInvocationError),
    (_too_deep, InvalidWrappingChainError),
    (_duplicate, DuplicateToolError),
    (lambda: Failure("unknown"), InvalidFailureError),
    (_bad_output, InvalidToolOutputError),
]


@pytest.mark.parametrize(
    ("misuse", "expected"),
    [pytest.param(misuse, expected, id=expected.__name__) for misuse, expected in MISUSES],
)
def test_every_core_error_message_starts_with_its_class_prefix(
    misuse: Callable[[], object], expected: type[GatewayError]
) -> None:
    with pytest.raises(GatewayError) as caught:
        misuse()

    assert type(caught.value) is expected
    assert str(caught.value).startswith(expected.prefix + ": ")


def test_failure_and_authorization_error_messages_start_with_the_root_prefix() -> None:
    messages = [
        str(Failure(FailureKind.REJECTED)),
        str(AuthorizationError("search", None)),
        str(AuthorizationError("", None)),
    ]

    assert messages == [
        "tool: rejected",
        'tool: authorization for "search" failed',
        "tool: authorization failed",
    ]


@given(call_id=st.text(max_size=8), name=st.text(max_size=8), arguments=st.text(max_size=16))
def test_any_refused_call_has_a_message_that_starts_with_its_class_prefix(
    call_id: str, name: str, arguments: str
) -> None:
    binding = bind(CountingTool(definition("search", OBJECT_SCHEMA)))
    refusals: list[InvalidInvocationError] = []
    try:
        binding.prepare(ToolCall(call_id, name, arguments))
    except InvalidInvocationError as exc:
        refusals.append(exc)

    assert [str(exc).startswith(type(exc).prefix + ": ") for exc in refusals] in ([], [True])


def _literal_starts(path: Path) -> list[tuple[int, str]]:
    # Every string constant, and the constant head of every f-string.
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            if isinstance(head, ast.Constant) and isinstance(head.value, str):
                found.append((node.lineno, head.value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append((node.lineno, node.value))
    return found


def test_no_core_module_types_an_error_classes_prefix_by_hand() -> None:
    sentinels = tuple(
        f"{prefix}:" for klass, prefix in PREFIXES.items() if klass is not GatewayError
    )
    typed = [
        f"{path.name}:{line}"
        for path in sorted(PACKAGE.glob("_*.py"))
        if path.name != "_errors.py"
        for line, text in _literal_starts(path)
        if text.startswith(sentinels)
    ]

    assert typed == []

"""Failure and FailureKind (seed §8, cases 49-53 and the Failure example of 58)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway import (
    AuthorizerFunc,
    Failure,
    FailureKind,
    GatewayError,
    Guard,
    InvalidFailureError,
    InvalidToolOutputError,
    TextContent,
    ToolCall,
    ToolOutput,
    bind,
    function_tool,
)


def _raise_wrapped(failure: Failure, message: str) -> RuntimeError:
    """Raise `failure` wrapped by another exception, and return the wrapper."""
    try:
        try:
            raise failure
        except Failure as inner:
            raise RuntimeError(message) from inner
    except RuntimeError as outer:
        return outer


def test_case49_failure_keeps_an_immutable_output_and_an_identical_unchained_cause() -> None:
    cause = OSError("operation failed")
    items: list[TextContent] = [TextContent("first"), TextContent("second")]
    output = ToolOutput.from_items(items, details=b'{"committed":["one"]}')
    failure = Failure(FailureKind.FAILED, output, cause)

    items.append(TextContent("third"))
    wrapped = _raise_wrapped(failure, "dependency call")

    assert failure.output.text() == "firstsecond"
    assert failure.output.json() == {"committed": ["one"]}
    assert wrapped.__cause__ is failure
    assert failure.kind is FailureKind.FAILED
    assert failure.cause is cause
    assert (failure.__cause__, failure.__context__) == (None, None)
    assert str(failure) == "tool: failed"


INVALID = [
    pytest.param({"kind": ""}, "kind ''", id="case50_empty_config"),
    pytest.param({"kind": "", "cause": ValueError("x")}, "kind ''", id="case53_zero_kind"),
    pytest.param({"kind": "unknown"}, "kind 'unknown'", id="case50_unknown_kind"),
    pytest.param({"kind": None}, "kind None", id="kind_none"),
    pytest.param({"kind": "FAILED"}, "kind 'FAILED'", id="kind_is_case_sensitive"),
    pytest.param({"kind": "failed"}, "failed outcome requires a cause", id="case50_no_cause"),
    pytest.param(
        {"kind": "failed", "cause": "not an exception"},
        "cause must be an exception",
        id="case50_cause_not_an_exception",
    ),
    pytest.param(
        {"kind": "rejected", "cause": "not an exception"},
        "cause must be an exception",
        id="case50_rejection_cause_not_an_exception",
    ),
    pytest.param(
        {"kind": "failed", "cause": ValueError("x"), "output": {"details": "{"}},
        "output must be a ToolOutput",
        id="case50_output_not_a_tool_output",
    ),
]


@pytest.mark.parametrize(("arguments", "message"), INVALID)
def test_case50_invalid_failures_are_refused(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(
        InvalidFailureError, match=f"^{re.escape(f'tool: invalid failure: {message}')}$"
    ):
        Failure(**arguments)


def test_case50_invalid_output_details_are_refused_before_a_failure_can_exist() -> None:
    with pytest.raises(InvalidToolOutputError, match="tool: invalid tool output: details"):
        Failure(FailureKind.FAILED, ToolOutput(details=b"{"), ValueError("x"))


def test_case51_rejection_without_a_cause_is_valid() -> None:
    failure = Failure(FailureKind.REJECTED, ToolOutput.from_text("inner refusal"))

    assert (failure.kind, failure.cause, str(failure)) == (
        FailureKind.REJECTED,
        None,
        "tool: rejected",
    )
    assert failure.output.text() == "inner refusal"


def test_case52_cause_chain_is_diagnostic_only() -> None:
    inner = Failure(FailureKind.REJECTED, "inner refusal")
    cause = ExceptionGroup("joined", [TimeoutError("deadline"), inner])
    outer = Failure(FailureKind.FAILED, "outer output", cause)

    wrapped = _raise_wrapped(outer, "outer call")

    assert wrapped.__cause__ is outer
    assert outer.kind is FailureKind.FAILED
    assert outer.cause is cause
    assert not isinstance(outer, TimeoutError)
    assert (outer.__cause__, outer.__context__) == (None, None)
    assert str(outer) == "tool: failed"


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        pytest.param(FailureKind.FAILED, FailureKind.FAILED, id="enum_failed"),
        pytest.param("failed", FailureKind.FAILED, id="text_failed"),
        pytest.param("rejected", FailureKind.REJECTED, id="text_rejected"),
    ],
)
def test_kind_accepts_the_enum_or_its_value(kind: Any, expected: FailureKind) -> None:
    assert Failure(kind, cause=ValueError("x")).kind is expected


def test_failure_kind_values_are_the_seed_strings() -> None:
    assert [kind.value for kind in FailureKind] == ["failed", "rejected"]
    assert str(FailureKind.REJECTED) == "rejected"


def test_message_is_only_the_kind_and_never_contains_the_cause() -> None:
    failure = Failure(FailureKind.FAILED, "public", RuntimeError("private database detail"))

    assert str(failure) == "tool: failed"
    assert failure.args == ("tool: failed",)
    assert "private" not in repr(failure)


@pytest.mark.parametrize(
    ("output", "expected_text"),
    [
        pytest.param(None, "", id="none_is_the_empty_output"),
        pytest.param("text", "text", id="text_is_wrapped"),
        pytest.param("", "", id="empty_text_is_the_empty_output"),
        pytest.param(ToolOutput.from_json("[1]"), "[1]", id="tool_output_kept"),
    ],
)
def test_output_accepts_a_tool_output_or_text(output: Any, expected_text: str) -> None:
    assert Failure(FailureKind.REJECTED, output).output.text() == expected_text


def test_a_base_exception_is_an_acceptable_cause() -> None:
    cause = KeyboardInterrupt()

    assert Failure(FailureKind.FAILED, cause=cause).cause is cause


def test_failure_is_a_gateway_error_with_a_stable_code() -> None:
    failure = Failure(FailureKind.REJECTED)

    assert isinstance(failure, GatewayError)
    assert Failure.code == "tool_failure"
    assert repr(failure) == "Failure(kind='rejected', output='')"


def test_case58_rejection_example_prints_kind_and_public_text() -> None:
    failure = Failure(FailureKind.REJECTED, "this operation is not permitted")

    printed = [f"{failure.kind} {failure.output.text()}", str(failure.cause is not None).lower()]

    assert printed == ["rejected this operation is not permitted", "false"]


async def test_case58_guard_example_with_a_false_policy_prints_rejected() -> None:
    @function_tool
    def search(query: str) -> str:
        return query

    binding = bind(Guard(tool=search, authorizer=AuthorizerFunc(lambda authorization: False)))
    invocation = binding.prepare(ToolCall("call", "search", '{"query":"scope"}'))

    with pytest.raises(Failure) as info:
        await binding.call(invocation)

    assert str(info.value.kind) == "rejected"
    assert info.value.output.text() == 'error: tool "search" is not authorized'

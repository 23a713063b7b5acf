"""ToolCall: the untrusted proposal (seed §2)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gateway import InvalidInvocationError, ToolCall


@pytest.mark.parametrize(
    ("call_id", "name", "arguments"),
    [
        pytest.param("", "", "", id="all_empty"),
        pytest.param(None, None, None, id="all_none"),
        pytest.param(1, ["x"], {"a": 1}, id="wrong_types"),
        pytest.param("call", "search", "{", id="malformed_arguments"),
    ],
)
def test_construction_never_fails_so_a_bad_proposal_can_still_be_refused(
    call_id: Any, name: Any, arguments: Any
) -> None:
    call = ToolCall(call_id, name, arguments)

    assert (call.id, call.name, call.arguments) == (call_id, name, arguments)


def test_arguments_default_to_blank_text() -> None:
    assert ToolCall("call", "search").arguments == ""


@pytest.mark.parametrize(
    ("call_id", "name", "arguments", "message"),
    [
        pytest.param("", "search", "{}", "ID must not be empty", id="empty_id"),
        pytest.param("", "", "{}", "ID must not be empty", id="id_checked_before_name"),
        pytest.param(None, "search", "{}", "ID must not be empty", id="id_not_text"),
        pytest.param("call", "", "{}", "name must not be empty", id="empty_name"),
        pytest.param("call", 3, "{}", "name must not be empty", id="name_not_text"),
        pytest.param("call", "search", 3, "arguments must be JSON text", id="arguments_int"),
        pytest.param("call", "search", None, "arguments must be JSON text", id="arguments_none"),
    ],
)
def test_validate_checks_id_then_name_then_argument_type(
    call_id: Any, name: Any, arguments: Any, message: str
) -> None:
    with pytest.raises(InvalidInvocationError, match=f"^tool: invalid tool call: {message}$"):
        ToolCall(call_id, name, arguments).validate()


@pytest.mark.parametrize(
    ("call_id", "name", "arguments"),
    [
        pytest.param(" ", "search", "", id="whitespace_id"),
        pytest.param("x" * 10_000, "search", "", id="long_id"),
        pytest.param("call", "not a tool name!", "", id="any_name_text"),
        pytest.param("call", "search", "{", id="malformed_arguments_not_checked_here"),
        pytest.param("call", "search", b"\xff", id="bytes_arguments"),
        pytest.param("call", "search", bytearray(b"{}"), id="bytearray_arguments"),
    ],
)
def test_validate_has_no_other_rules(call_id: str, name: str, arguments: Any) -> None:
    ToolCall(call_id, name, arguments).validate()


def test_tool_call_is_frozen() -> None:
    call = ToolCall("call", "search", "{}")

    with pytest.raises(dataclasses.FrozenInstanceError):
        call.name = "other"  # type: ignore[misc]
    assert call == ToolCall("call", "search", "{}")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (ToolCall("\ud800", "search"), "ID is not valid UTF-8 text"),
        (ToolCall("call", "sea\udfffrch"), "name is not valid UTF-8 text"),
    ],
    ids=["lone-surrogate-id", "lone-surrogate-name"],
)
def test_validate_refuses_ids_and_names_that_are_not_text(call: ToolCall, message: str) -> None:
    with pytest.raises(InvalidInvocationError, match=message):
        call.validate()

"""Fuzzing the trust boundary: ``Contract.prepare`` on hostile ids, names and arguments.

Whatever the input, ``prepare`` either admits it, and then the arguments are strict JSON
within the limits that an independent validator accepts against the tool's schema, or
refuses it with ``InvalidInvocationError``; nothing else ever comes out.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from gateway import (
    Binding,
    InvalidInvocationError,
    Invocation,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    bind,
    function_tool,
)
from tests.reliability.fuzzing import (
    MAX_BYTES,
    MAX_DEPTH,
    OPEN_SCHEMA,
    STRICT_SCHEMA,
    arguments,
    as_bytes,
    call_ids,
    check_admitted,
    names,
    nested,
    plausible_objects,
    sized,
)


class SchemaTool:
    """A tool that is only a definition: prepare never runs it."""

    def __init__(self, name: str, schema: dict[str, Any]) -> None:
        self._definition = ToolDefinition(name, schema)

    def definition(self) -> ToolDefinition:
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        raise AssertionError("prepare must never run the tool")


@function_tool
def add(a: int, b: int) -> str:
    """Add two integers (its own pydantic validator runs at admission too)."""
    return str(a + b)


STRICT = bind(SchemaTool("strict", STRICT_SCHEMA))
OPEN = bind(SchemaTool("open", OPEN_SCHEMA))
FUNC = bind(add)


def note(what: str) -> None:
    """Count admissions and refusals in hypothesis' statistics."""
    if currently_in_test_context():
        event(what)


def admit_or_refuse(binding: Binding, call: ToolCall, schema: dict[str, Any]) -> Invocation | None:
    """Run prepare; on admission check everything independently; on refusal, the type only."""
    refusal: str | None
    try:
        invocation = binding.prepare(call)
    except InvalidInvocationError as exc:
        refusal = str(exc)
    else:
        refusal = None
    if refusal is not None:
        assert refusal.startswith("tool: invalid "), refusal
        note("refused")
        return None
    note("admitted")
    raw = as_bytes(call.arguments)
    assert raw is not None, "text that is not UTF-8 was admitted"
    if invocation.arguments != raw:  # only blank arguments are replaced, by {}
        assert invocation.arguments == b"{}"
        assert raw.decode("utf-8").strip() == ""
    assert invocation.call_id == call.id
    assert call.id, "an empty id was admitted"
    assert invocation.tool_name == call.name == binding.definition.name
    check_admitted(invocation.arguments, schema)
    return invocation


@given(call_id=call_ids, name=names("strict"), raw=arguments)
@example(call_id="c", name="strict", raw='{"a": 1, "a": 2}')
@example(call_id="c", name="strict", raw='{"a": 1, "inner": {"k": 1, "k": 2}}')
@example(call_id="c", name="strict", raw='{"a": 1, "s": "\\ud800"}')
@example(call_id="c", name="strict", raw='{"a": 1, "s": "\ud800"}')
@example(call_id="c", name="strict", raw=b'{"a": 1, "s": "\xff"}')
@example(call_id="c", name="strict", raw='{"a": 1, "n": 1e400}')
@example(call_id="c", name="strict", raw='{"a": 1000.0}')
@example(call_id="c", name="strict", raw='{"a": 1000.0000000000000000001}')
@example(call_id="\ud800", name="strict", raw='{"a": 1}')
def test_prepare_admits_only_schema_valid_strict_json(
    call_id: str, name: str, raw: str | bytes
) -> None:
    admit_or_refuse(STRICT, ToolCall(call_id, name, raw), STRICT_SCHEMA)


@given(raw=plausible_objects)
def test_prepare_of_plausible_arguments_admits_exactly_what_validates(raw: str) -> None:
    admit_or_refuse(STRICT, ToolCall("call-1", "strict", raw), STRICT_SCHEMA)


@given(call_id=call_ids, raw=arguments, as_text=st.booleans())
def test_prepare_on_an_open_schema_still_enforces_strict_json_and_the_limits(
    call_id: str, raw: str | bytes, as_text: bool
) -> None:
    if as_text and isinstance(raw, bytes):
        raw = raw.decode("utf-8", "surrogateescape")  # undecodable bytes become lone surrogates
    admit_or_refuse(OPEN, ToolCall(call_id, "open", raw), OPEN_SCHEMA)


@given(call_id=call_ids, name=names("add"), raw=arguments)
@example(call_id="c", name="add", raw='{"a": 1.0, "b": 2}')
@example(call_id="c", name="add", raw='{"a": 1, "b": 2, "c": 3}')
@example(call_id="c", name="add", raw='{"a": 99999999999999999999999999, "b": 2}')
def test_prepare_of_a_function_tool_refuses_through_its_own_validator_too(
    call_id: str, name: str, raw: str | bytes
) -> None:
    admit_or_refuse(FUNC, ToolCall(call_id, name, raw), FUNC.definition.input_schema)


@pytest.mark.parametrize(
    ("depth", "admitted"),
    [(1, True), (MAX_DEPTH - 1, True), (MAX_DEPTH, True), (MAX_DEPTH + 1, False), (10**5, False)],
)
def test_nesting_is_admitted_up_to_the_limit_and_refused_past_it(
    depth: int, admitted: bool
) -> None:
    result = admit_or_refuse(OPEN, ToolCall("c", "open", nested(depth)), OPEN_SCHEMA)
    assert (result is not None) is admitted


@pytest.mark.parametrize(
    ("size", "admitted"), [(MAX_BYTES - 1, True), (MAX_BYTES, True), (MAX_BYTES + 1, False)]
)
def test_size_is_admitted_up_to_the_limit_and_refused_past_it(size: int, admitted: bool) -> None:
    document = sized(size)
    assert len(document.encode()) == size
    result = admit_or_refuse(OPEN, ToolCall("c", "open", document), OPEN_SCHEMA)
    assert (result is not None) is admitted


def test_a_huge_string_past_the_limit_is_refused_before_it_is_parsed() -> None:
    with pytest.raises(InvalidInvocationError, match="exceeds 1048576 bytes"):
        OPEN.prepare(ToolCall("c", "open", "[" * (MAX_BYTES + 1)))


@pytest.mark.parametrize(
    "raw",
    [
        '{"a": 1, "a": 1}',
        '{"a": 1, "inner": {"deep": [{"x": 1, "x": 1}]}}',
        '{"inner": {"k": 1, "k": 1}, "a": 1}',
    ],
)
def test_duplicate_members_are_refused_at_any_depth(raw: str) -> None:
    with pytest.raises(InvalidInvocationError, match="duplicate member"):
        STRICT.prepare(ToolCall("c", "strict", raw))

"""Func and function_tool: typed functions as tools (seed §6, cases 25-37)."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import enum
import json
import re
import socket
import threading
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typing_extensions import TypedDict

from gateway import (
    Failure,
    FailureKind,
    Func,
    InvalidInvocationError,
    InvalidToolError,
    InvalidToolOutputError,
    TextContent,
    ToolCall,
    ToolOutput,
    bind,
    function_tool,
)
from gateway._func import _overflow_risk

DIALECT = "https://json-schema.org/draft/2020-12/schema"
REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


async def run(tool: Func, arguments: str | bytes = "", *, name: str | None = None) -> ToolOutput:
    """Bind, prepare and call, the way every caller does."""
    binding = bind(tool)
    invocation = binding.contract.prepare(
        ToolCall("call", name or tool.definition().name, arguments)
    )
    return await binding.call(invocation)


def prepare(tool: Func, arguments: str | bytes) -> None:
    bind(tool).contract.prepare(ToolCall("call", tool.definition().name, arguments))


class Counter:
    """A function wrapper that counts how often the function really ran."""

    def __init__(self) -> None:
        self.calls = 0


# --- case 25 and the definition ----------------------------------------------------------------


async def test_case25_add_has_its_definition_and_adds() -> None:
    tool = Func(add, name="add", description="add two integers")

    definition = tool.definition()

    assert (definition.name, definition.description) == ("add", "add two integers")
    assert definition.input_schema == {
        "$schema": DIALECT,
        "additionalProperties": False,
        "properties": {
            "a": {"title": "A", "type": "integer"},
            "b": {"title": "B", "type": "integer"},
        },
        "required": ["a", "b"],
        "type": "object",
    }
    assert (await run(tool, '{"a":2,"b":3}')).text() == "5"


def test_case25_mutating_a_returned_schema_does_not_change_the_next_definition() -> None:
    tool = Func(add)

    tool.definition().input_schema["properties"].clear()

    assert set(tool.definition().input_schema["properties"]) == {"a", "b"}


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_case25_context_variables_of_the_caller_reach_the_function(kind: str) -> None:
    def sync_probe() -> str:
        return REQUEST_ID.get()

    async def async_probe() -> str:
        return REQUEST_ID.get()

    probe: Callable[[], Any] = sync_probe if kind == "sync" else async_probe
    token = REQUEST_ID.set("req-42")
    try:
        output = await run(Func(probe, name="probe"))
    finally:
        REQUEST_ID.reset(token)

    assert output.text() == "req-42"


def test_name_and_description_default_to_the_function_name_and_docstring() -> None:
    definition = Func(add).definition()

    assert (definition.name, definition.description) == ("add", "Add two integers.")


def test_function_tool_works_bare_and_with_options() -> None:
    @function_tool
    def bare(x: int) -> str:
        return str(x)

    @function_tool(name="named", description="custom")
    def configured(x: int) -> str:
        return str(x)

    assert isinstance(bare, Func)
    assert (bare.definition().name, bare.definition().description) == ("bare", "")
    assert (configured.definition().name, configured.definition().description) == (
        "named",
        "custom",
    )
    assert repr(configured) == "Func(name='named')"


def test_parameters_with_defaults_are_optional_in_the_schema() -> None:
    def search(query: str, limit: int = 10, exact: bool | None = None) -> str:
        return query

    schema = Func(search).definition().input_schema

    assert schema["required"] == ["query"]
    assert schema["properties"]["limit"] == {"default": 10, "title": "Limit", "type": "integer"}


# --- case 26, 29, 30: strict admission ---------------------------------------------------------


async def test_case26_unknown_members_are_refused_before_the_function_runs() -> None:
    counter = Counter()

    def counted(a: int, b: int) -> str:
        counter.calls += 1
        return str(a + b)

    with pytest.raises(
        InvalidInvocationError,
        match=r"\(root\): has a member the schema does not allow \(additionalProperties\)",
    ):
        prepare(Func(counted, name="add"), '{"a":1,"b":2,"extra":true}')
    assert counter.calls == 0


def optional_value(value: str = "") -> str:
    return value


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param("", id="case29_empty"),
        pytest.param("  ", id="case29_blank"),
        pytest.param("{}", id="case29_empty_object"),
    ],
)
async def test_case29_blank_or_empty_arguments_use_the_defaults(arguments: str) -> None:
    output = await run(Func(optional_value), arguments)

    assert (output.content, output.text()) == ((), "")


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param("null", id="case29_null"),
        pytest.param("[]", id="case29_array"),
        pytest.param('"text"', id="case29_string"),
        pytest.param('{"unknown":true}', id="case29_unknown_member"),
        pytest.param('{"value":"first","value":"second"}', id="case29_duplicate_member"),
        pytest.param("{} {}", id="case29_two_documents"),
        pytest.param("{", id="case29_malformed"),
        pytest.param('{"Value":"x"}', id="member_names_are_case_sensitive"),
        pytest.param('{"value":null}', id="null_is_not_a_string"),
    ],
)
def test_case29_anything_but_an_object_of_known_members_is_refused(arguments: str) -> None:
    with pytest.raises(InvalidInvocationError, match=r"^tool: invalid invocation: arguments: "):
        prepare(Func(optional_value), arguments)


def constrained(
    query: Annotated[str, pydantic.Field(min_length=2, max_length=5, pattern=r"^[a-z]+$")],
    limit: Annotated[int, pydantic.Field(ge=1, le=3)] = 1,
) -> str:
    return query * limit


async def test_case30_constraints_within_range_are_admitted() -> None:
    assert (await run(Func(constrained), '{"query":"valid","limit":3}')).text() == "validvalidvalid"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        pytest.param("{}", '(root): must have the member "query" (required)', id="case30_missing"),
        pytest.param(
            '{"query":"x"}',
            "/query: must be at least 2 characters long (minLength)",
            id="case30_too_short",
        ),
        pytest.param(
            '{"query":"toolong"}',
            "/query: must be at most 5 characters long (maxLength)",
            id="too_long",
        ),
        pytest.param(
            '{"query":"TOO"}',
            '/query: must match the pattern "^[a-z]+$" (pattern)',
            id="case30_pattern",
        ),
        pytest.param(
            '{"query":"valid","limit":4}', "/limit: must be at most 3 (maximum)", id="case30_range"
        ),
        pytest.param(
            '{"query":"valid","limit":0}', "/limit: must be at least 1 (minimum)", id="below"
        ),
    ],
)
def test_case30_constraints_out_of_range_are_refused(arguments: str, message: str) -> None:
    with pytest.raises(InvalidInvocationError, match=re.escape(message)):
        prepare(Func(constrained), arguments)


# --- supported annotations ---------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class Address:
    city: str
    zip_code: str = "00000"


@dataclasses.dataclass(frozen=True)
class Person:
    name: str
    address: Address


class Options(TypedDict):
    verbose: bool
    depth: int


def describe(
    *,
    person: Person,
    options: Options,
    color: Color,
    mode: Literal["fast", "slow"],
    pair: tuple[int, str],
    tags: list[str],
    scores: dict[str, float],
    nickname: str | None = None,
    nothing: None = None,
) -> dict[str, Any]:
    return {
        "person": [type(person).__name__, person.name, type(person.address).__name__],
        "city": person.address.city,
        "zip": person.address.zip_code,
        "options": options,
        "color": [type(color).__name__, color.value],
        "mode": mode,
        "pair": [type(pair).__name__, *pair],
        "tags": tags,
        "scores": scores,
        "nickname": nickname,
        "nothing": nothing,
    }


DESCRIBE_ARGUMENTS = {
    "person": {"name": "Ada", "address": {"city": "London"}},
    "options": {"verbose": True, "depth": 2},
    "color": "blue",
    "mode": "fast",
    "pair": [1, "one"],
    "tags": ["a"],
    "scores": {"x": 1.5, "y": 2},
}


async def test_nested_dataclasses_typed_dicts_and_enums_are_decoded_into_their_types() -> None:
    output = await run(Func(describe), _json(DESCRIBE_ARGUMENTS))

    assert output.json() == {
        "person": ["Person", "Ada", "Address"],
        "city": "London",
        "zip": "00000",
        "options": {"verbose": True, "depth": 2},
        "color": ["Color", "blue"],
        "mode": "fast",
        "pair": ["tuple", 1, "one"],
        "tags": ["a"],
        "scores": {"x": 1.5, "y": 2.0},
        "nickname": None,
        "nothing": None,
    }


def test_nested_types_are_closed_objects_in_the_schema() -> None:
    schema = Func(describe).definition().input_schema

    assert schema["$schema"] == DIALECT
    assert schema["$defs"]["Person"]["additionalProperties"] is False
    assert schema["$defs"]["Address"]["additionalProperties"] is False
    assert schema["$defs"]["Options"]["additionalProperties"] is False
    assert schema["$defs"]["Color"] == {"enum": ["red", "blue"], "title": "Color", "type": "string"}
    assert schema["properties"]["mode"]["enum"] == ["fast", "slow"]
    assert schema["properties"]["pair"]["prefixItems"] == [{"type": "integer"}, {"type": "string"}]
    assert sorted(schema["required"]) == sorted(DESCRIBE_ARGUMENTS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            {"person": {"name": "Ada", "address": {"city": "L", "x": 1}}},
            "/person/address: has a member the schema does not allow (additionalProperties)",
            id="nested_dataclass_extra",
        ),
        pytest.param(
            {"options": {"verbose": True, "depth": 2, "x": 1}},
            "/options: has a member the schema does not allow",
            id="typed_dict_extra",
        ),
        pytest.param(
            {"options": {"verbose": True}},
            '/options: must have the member "depth" (required)',
            id="typed_dict_missing",
        ),
        pytest.param(
            {"options": {"verbose": 1, "depth": 2}},
            "/options/verbose: must be a boolean (type)",
            id="int_for_bool",
        ),
        pytest.param(
            {"options": {"verbose": True, "depth": True}},
            "/options/depth: must be an integer (type)",
            id="bool_for_int",
        ),
        pytest.param(
            {"options": {"verbose": True, "depth": 2.0}},
            "Input should be a valid integer",
            id="float_for_int",
        ),
        pytest.param(
            {"color": "green"},
            "/color: must be one of the values the schema lists (enum)",
            id="enum_value",
        ),
        pytest.param(
            {"mode": "medium"},
            "/mode: must be one of the values the schema lists (enum)",
            id="literal",
        ),
        pytest.param({"pair": [1, 2]}, "/pair/1: must be a string (type)", id="tuple_item"),
        pytest.param(
            {"pair": [1, "a", 3]}, "/pair: must have at most 2 items (maxItems)", id="tuple_length"
        ),
        pytest.param({"tags": "a"}, "/tags: must be an array (type)", id="list"),
        pytest.param({"scores": {"x": "1"}}, "/scores/*: must be a number (type)", id="dict_value"),
        pytest.param(
            {"nickname": 5},
            "/nickname: must match at least one schema in anyOf (anyOf)",
            id="optional",
        ),
        pytest.param({"nothing": 0}, "/nothing: must be null (type)", id="none_type"),
    ],
)
def test_strict_decoding_refuses_values_of_the_wrong_shape(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInvocationError, match=re.escape(message)):
        prepare(Func(describe), _json({**DESCRIBE_ARGUMENTS, **change}))


async def test_optional_parameters_accept_null() -> None:
    output = await run(Func(describe), _json({**DESCRIBE_ARGUMENTS, "nickname": None}))

    assert output.json()["nickname"] is None


# --- cases 27-28: what cannot be a Func --------------------------------------------------------


def _plain(x: int) -> str:
    return str(x)


def _untyped(x):  # type: ignore[no-untyped-def]
    return x


def _varargs(*values: int) -> str:
    return str(values)


def _kwargs(**values: int) -> str:
    return str(values)


def _positional(x: int, /) -> str:
    return str(x)


def _private(_x: int) -> str:
    return str(_x)


def _socket(connection: socket.socket) -> str:
    return str(connection)


def _callable(callback: Callable[[int], int]) -> str:
    return str(callback)


class _OldTypedDict(typing.TypedDict):
    a: int


def _old_typed_dict(value: _OldTypedDict) -> str:
    return str(value)


INVALID_FUNCS = [
    pytest.param(None, {}, "function is nil", id="case27_none"),
    pytest.param("add", {}, "function is nil", id="case27_not_callable"),
    pytest.param(_plain, {"name": ""}, "name '' must be 1-64", id="case27_empty_name"),
    pytest.param(
        _plain, {"name": "bad name"}, "name 'bad name' must be 1-64", id="case27_bad_name"
    ),
    pytest.param(lambda: "x", {}, "name '<lambda>' must be 1-64", id="lambda_needs_a_name"),
    pytest.param(
        _plain, {"description": "\ud800"}, "description is not valid UTF-8", id="bad_description"
    ),
    pytest.param(_untyped, {}, "parameter 'x' needs a type annotation", id="case27_untyped"),
    pytest.param(_varargs, {}, "*args and **kwargs cannot be described", id="case27_varargs"),
    pytest.param(_kwargs, {}, "*args and **kwargs cannot be described", id="case27_kwargs"),
    pytest.param(_positional, {}, "positional-only parameter 'x'", id="positional_only"),
    pytest.param(_private, {}, "parameter '_x' must not start with an underscore", id="underscore"),
    pytest.param(
        _socket,
        {},
        "input type: Unable to generate pydantic-core schema",
        id="case27_non_json_type",
    ),
    pytest.param(_callable, {}, "input schema: Cannot generate a JsonSchema", id="callable_type"),
    pytest.param(
        _old_typed_dict, {}, "typing_extensions.TypedDict", id="typing_typed_dict_on_3_11"
    ),
]


@pytest.mark.parametrize(("fn", "options", "message"), INVALID_FUNCS)
def test_case27_functions_that_cannot_be_described_are_refused(
    fn: Any, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidToolError, match=re.escape(message)) as info:
        Func(fn, **options)
    assert str(info.value).startswith("tool: invalid tool: ")


def test_annotations_that_cannot_be_resolved_are_refused() -> None:
    def unresolved(x: int) -> str:
        return str(x)

    unresolved.__annotations__["x"] = "NoSuchType"

    with pytest.raises(
        InvalidToolError, match="signature of 'unresolved': name 'NoSuchType' is not defined"
    ):
        Func(unresolved)


def test_schema_derivation_errors_are_not_reported_as_definition_errors() -> None:
    with pytest.raises(InvalidToolError, match=r"^tool: invalid tool: '_callable': input schema: "):
        Func(_callable)


async def test_case28_func_call_refuses_anything_but_an_invocation() -> None:
    bad: Any = b'{"a":1,"b":2}'

    with pytest.raises(InvalidToolError, match=r"^tool: invalid tool: expected an Invocation$"):
        await Func(add).call(bad)


# --- cases 31-33: results and errors -----------------------------------------------------------


class Label(str):
    __slots__ = ()


@dataclasses.dataclass(frozen=True)
class Ok:
    ok: bool


class OkModel(pydantic.BaseModel):
    ok: bool


PREBUILT = ToolOutput.from_json('{"prebuilt":true}')

RESULTS = [
    pytest.param(Label("plain"), (TextContent("plain"),), None, "plain", id="case31_str_subclass"),
    pytest.param("", (), None, "", id="case31_empty_string"),
    pytest.param(Ok(ok=True), (), b'{"ok":true}', '{"ok":true}', id="case32_dataclass"),
    pytest.param({"ok": True}, (), b'{"ok":true}', '{"ok":true}', id="case32_dict"),
    pytest.param(OkModel(ok=True), (), b'{"ok":true}', '{"ok":true}', id="pydantic_model"),
    pytest.param(5, (), b"5", "5", id="integer"),
    pytest.param(None, (), b"null", "null", id="none_is_null"),
    pytest.param([1, "<&>"], (), b'[1,"<&>"]', '[1,"<&>"]', id="list_without_html_escaping"),
]


@pytest.mark.parametrize(("result", "content", "details", "text"), RESULTS)
async def test_case31_case32_results_become_text_or_json_details(
    result: object, content: tuple[object, ...], details: bytes | None, text: str
) -> None:
    def produce() -> object:
        return result

    output = await run(Func(produce, name="produce"))

    assert (output.content, output.details, output.text()) == (content, details, text)


async def test_a_tool_output_result_passes_through_identically() -> None:
    def produce() -> ToolOutput:
        return PREBUILT

    assert await run(Func(produce, name="produce")) is PREBUILT


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(RuntimeError("E"), id="case33_plain_error"),
        pytest.param(
            Failure(FailureKind.FAILED, "partial", OSError("disk")), id="case33_failure_stays"
        ),
        pytest.param(Failure(FailureKind.REJECTED, "no"), id="rejection_stays"),
    ],
)
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_case33_a_function_exception_passes_through_as_the_identical_object(
    error: Exception, kind: str
) -> None:
    def sync_fail() -> str:
        raise error

    async def async_fail() -> str:
        raise error

    fn: Callable[[], Any] = sync_fail if kind == "sync" else async_fail

    with pytest.raises(type(error)) as info:
        await run(Func(fn, name="fail"))
    assert info.value is error


@pytest.mark.parametrize(
    ("result", "message"),
    [
        pytest.param(object(), "Unable to serialize unknown type", id="case33_unknown_type"),
        pytest.param(float("nan"), "non-finite number NaN", id="nan"),
        pytest.param({"x": float("inf")}, "non-finite number Infinity", id="infinity"),
    ],
)
async def test_case33_an_unencodable_result_is_an_invalid_tool_output(
    result: object, message: str
) -> None:
    def produce() -> object:
        return result

    with pytest.raises(InvalidToolOutputError, match=r"^tool: encode function result: ") as info:
        await run(Func(produce, name="produce"))
    assert message in str(info.value)
    assert info.value.__cause__ is None


# --- case 34: custom decoding rules run at admission -------------------------------------------


class Calls:
    """How often the custom decoding rule and the function of `halve` ran."""

    decoder = 0
    function = 0


def must_be_even(n: int) -> int:
    Calls.decoder += 1
    if n % 2:
        raise ValueError("n must be even")
    return n


def halve(n: Annotated[int, pydantic.AfterValidator(must_be_even)]) -> str:
    Calls.function += 1
    return str(n // 2)


async def test_case34_custom_decoding_rules_refuse_at_prepare_before_anything_runs() -> None:
    Calls.decoder = Calls.function = 0
    binding = bind(Func(halve))

    # A custom rule's own text may quote the value, so only its location and kind show.
    with pytest.raises(
        InvalidInvocationError, match=re.escape("decode: /n: does not decode (value_error)")
    ):
        binding.contract.prepare(ToolCall("call", "halve", '{"n":3}'))
    invocation = binding.contract.prepare(ToolCall("call", "halve", '{"n":4}'))
    assert (Calls.decoder, Calls.function) == (2, 0)

    assert (await binding.call(invocation)).text() == "2"
    assert (Calls.decoder, Calls.function) == (3, 1)


def test_the_input_validator_is_the_strict_decoder_on_raw_bytes() -> None:
    validator = Func(constrained).input_validator()

    validator(b'{"query":"ok"}')
    with pytest.raises(
        ValueError,
        match=r"decode: /query: String should have at least 2 characters \(string_too_short\)",
    ):
        validator(b'{"query":"x"}')


# --- cases 35-36: representation-strict decoding -----------------------------------------------

FLOAT32_MAX = 3.4028234663852886e38


def representations(
    *,
    signed: Annotated[int, pydantic.Field(ge=-128, le=127)] = 0,
    unsigned: Annotated[int, pydantic.Field(ge=0, le=2**64 - 1)] = 0,
    real: Annotated[float, pydantic.Field(ge=-FLOAT32_MAX, le=FLOAT32_MAX)] = 0.0,
    data: pydantic.Base64Bytes = b"",
    number: int = 0,
    value: Any = None,
) -> str:
    return repr((signed, unsigned, real, data, number, value))


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param('{"signed":128}', id="case35_int8_overflow"),
        pytest.param('{"signed":1.0}', id="case35_fraction_literal"),
        pytest.param('{"signed":1e0}', id="case35_exponent_literal"),
        pytest.param('{"unsigned":-1}', id="case35_negative_unsigned"),
        pytest.param('{"unsigned":18446744073709551616}', id="case35_uint64_overflow"),
        pytest.param('{"real":1e39}', id="case35_float32_overflow"),
        pytest.param('{"data":"invalid base64"}', id="case35_invalid_base64"),
        pytest.param('{"number":"42"}', id="case35_string_for_int"),
        pytest.param('{"value":1e999}', id="case35_any_overflow"),
        pytest.param('{"value":[{"x":-1e400}]}', id="any_nested_overflow"),
        pytest.param('{"real":1e999}', id="float_overflow"),
        pytest.param('{"real":' + "9" * 400 + "}", id="float_overflow_without_exponent"),
        pytest.param('{"value":[{"x":-' + "9" * 309 + ".5}]}", id="any_overflow_without_exponent"),
        pytest.param('{"number":true}', id="bool_for_int"),
    ],
)
def test_case35_values_the_types_cannot_represent_are_refused(arguments: str) -> None:
    with pytest.raises(InvalidInvocationError, match=r"^tool: invalid invocation: arguments: "):
        prepare(Func(representations), arguments)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        pytest.param("{}", "(0, 0, 0.0, b'', 0, None)", id="case36_defaults"),
        pytest.param('{"signed":-128}', "(-128, 0, 0.0, b'', 0, None)", id="case36_int8_min"),
        pytest.param('{"signed":127}', "(127, 0, 0.0, b'', 0, None)", id="case36_int8_max"),
        pytest.param(
            '{"unsigned":18446744073709551615}',
            "(0, 18446744073709551615, 0.0, b'', 0, None)",
            id="case36_uint64_max",
        ),
        pytest.param('{"real":1.25}', "(0, 0, 1.25, b'', 0, None)", id="case36_float"),
        pytest.param('{"real":2}', "(0, 0, 2.0, b'', 0, None)", id="integer_literal_for_float"),
        pytest.param('{"data":"aGk="}', "(0, 0, 0.0, b'hi', 0, None)", id="case36_base64"),
        pytest.param('{"number":42}', "(0, 0, 0.0, b'', 42, None)", id="case36_integer"),
        pytest.param('{"value":{"k":[1,"x"]}}', "(0, 0, 0.0, b'', 0, {'k': [1, 'x']})", id="any"),
    ],
)
async def test_case36_representable_values_are_admitted_and_run(
    arguments: str, expected: str
) -> None:
    assert (await run(Func(representations), arguments)).text() == expected


# --- case 37 and execution model ---------------------------------------------------------------


async def test_case37_32_concurrent_calls_each_return_their_own_result() -> None:
    binding = bind(Func(add))
    invocations = [
        binding.contract.prepare(ToolCall(f"call-{index}", "add", '{"a":1,"b":2}'))
        for index in range(32)
    ]

    outputs = await asyncio.gather(*(binding.call(invocation) for invocation in invocations))

    assert [output.text() for output in outputs] == ["3"] * 32


async def test_a_sync_function_runs_in_a_worker_thread() -> None:
    def where() -> str:
        return str(threading.get_ident())

    output = await run(Func(where))

    assert output.text() != str(threading.get_ident())


async def test_an_async_function_runs_on_the_event_loop_thread() -> None:
    async def where() -> str:
        return str(threading.get_ident())

    output = await run(Func(where))

    assert output.text() == str(threading.get_ident())


async def test_a_blocking_sync_function_does_not_block_the_event_loop() -> None:
    started, release = threading.Event(), threading.Event()

    def blocking() -> str:
        started.set()
        return "released" if release.wait(timeout=10) else "loop was blocked"

    task = asyncio.create_task(run(Func(blocking)))
    assert await asyncio.to_thread(started.wait, 10)
    release.set()

    assert (await task).text() == "released"


def _json(value: object) -> str:
    return json.dumps(value)


# --- decoding refusals never quote an argument value or an undeclared member name -----------


class _Shape(pydantic.BaseModel):
    kind: Literal["circle"]
    radius: float


class _Square(pydantic.BaseModel):
    kind: Literal["square"]
    side: float


def _secretive(
    scores: dict[str, int],
    shape: Annotated[_Shape | _Square, pydantic.Field(discriminator="kind")],
    n: Annotated[int, pydantic.AfterValidator(must_be_even)] = 2,
) -> str:
    return "ok"


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({"scores": {"MARKER": "MARKER"}, "shape": {"kind": "circle", "radius": 1}}),
        pytest.param({"scores": {}, "shape": {"kind": "MARKER", "radius": 1}}, id="union_tag"),
        pytest.param({"scores": {}, "shape": {"kind": "circle", "radius": "MARKER"}}),
        pytest.param({"scores": {}, "shape": {"kind": "circle", "radius": 1}, "MARKER": 1}),
        pytest.param({"scores": {}, "shape": {"kind": "circle", "radius": 1}, "n": 987654321}),
        pytest.param({"scores": [987654321], "shape": None}, id="wrong_containers"),
    ],
)
def test_decoding_refusals_never_quote_a_value_or_an_undeclared_member_name(
    arguments: dict[str, Any],
) -> None:
    tool = Func(_secretive)
    contract = bind(tool).contract
    raw = json.dumps(arguments)
    with pytest.raises(InvalidInvocationError) as refused:
        contract.prepare(ToolCall("call", "_secretive", raw))
    # The strict decoder on its own, as at call time and where the schema would admit.
    with pytest.raises(ValueError, match=r"^decode: ") as decoded:
        tool.input_validator()(raw.encode())
    for marker in ("MARKER", "987654321"):
        assert marker not in str(refused.value)
        assert marker not in str(decoded.value)


def test_a_pydantic_only_format_leaves_the_derived_schema_and_the_decoder_enforces_it() -> None:
    def upload(data: bytes) -> str:
        return str(len(data))

    tool = Func(upload)
    schema = json.loads(tool.definition().input_schema_json)

    assert "format" not in schema["properties"]["data"]
    bind(tool)


# What the overflow check looked for when it was one regular expression: the translated
# form must agree with it on every input.
_OVERFLOW_RISK_PATTERN = re.compile(rb"[0-9][eE]|[0-9]{309}")


@given(
    st.one_of(
        st.binary(max_size=64),
        st.lists(
            st.sampled_from([b"0", b"9", b"5", b"e", b"E", b".", b"-", b"a", b'"']), max_size=40
        ).map(b"".join),
        st.tuples(st.integers(300, 320), st.binary(max_size=4)).map(lambda t: b"7" * t[0] + t[1]),
        st.tuples(st.binary(max_size=8), st.integers(300, 320)).map(lambda t: t[0] + b"1" * t[1]),
    )
)
def test_property_the_overflow_check_finds_what_its_pattern_finds(raw: bytes) -> None:
    assert _overflow_risk(raw) is (_OVERFLOW_RISK_PATTERN.search(raw) is not None)

"""bind, Binding, Contract and Invocation: the trust boundary (seed §3-§5, cases 1-23)."""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Annotated, Any

import jsonschema
import pydantic
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from gateway import (
    DEFAULT_LIMITS,
    AdmissionLimits,
    Binding,
    Contract,
    Func,
    InvalidDefinitionError,
    InvalidInvocationError,
    InvalidToolError,
    InvalidWrappingChainError,
    Invocation,
    Tool,
    ToolCall,
    ToolDefinition,
    _json,
    bind,
)
from tests.helpers import (
    OBJECT_SCHEMA,
    SEARCH_SCHEMA,
    CountingTool,
    RaisingTool,
    RecordingValidator,
    StubTool,
    ValidatingTool,
    ValidatingWrapper,
    WrapperTool,
    call,
    chain,
    definition,
    serialized,
)

INVOCATION = "tool: invalid invocation: "
NOT_JSON = INVOCATION + "arguments: value must be one valid RFC 7493 JSON document"
BIG_CONST_SCHEMA = {"type": "object", "properties": {"n": {"const": 9007199254740993}}}
EMPTY_SCHEMA = {"type": "object", "additionalProperties": False}


@dataclass(frozen=True)
class Admitted:
    arguments: bytes


@dataclass(frozen=True)
class Refused:
    message: str


SEED_PREPARE_CASES = [
    pytest.param(
        SEARCH_SCHEMA,
        ToolCall("", "search", '{"query":"ok"}'),
        Refused(INVOCATION + "tool: invalid tool call: ID must not be empty"),
        id="case01_empty_id",
    ),
    pytest.param(
        SEARCH_SCHEMA,
        ToolCall("", "", '{"query":"ok"}'),
        Refused(INVOCATION + "tool: invalid tool call: ID must not be empty"),
        id="case01_id_reported_before_name",
    ),
    pytest.param(
        SEARCH_SCHEMA,
        ToolCall("call", "", '{"query":"ok"}'),
        Refused(INVOCATION + "tool: invalid tool call: name must not be empty"),
        id="case01_empty_name",
    ),
    pytest.param(
        SEARCH_SCHEMA,
        ToolCall("call", "other"),
        Refused(INVOCATION + "call name 'other' does not match bound tool 'search'"),
        id="case02_name_mismatch",
    ),
    pytest.param(SEARCH_SCHEMA, call("{"), Refused(NOT_JSON), id="case03_malformed"),
    pytest.param(
        SEARCH_SCHEMA,
        call('{"query":"x"}'),
        Refused(INVOCATION + "arguments: /query: must be at least 2 characters long (minLength)"),
        id="case03_min_length",
    ),
    pytest.param(
        SEARCH_SCHEMA,
        call('{"query":"ok","extra":true}'),
        Refused(
            INVOCATION
            + "arguments: (root): has a member the schema does not allow (additionalProperties)"
        ),
        id="case04_additional_properties",
    ),
    pytest.param(
        SEARCH_SCHEMA,
        call('{"query":"scope"}'),
        Admitted(b'{"query":"scope"}'),
        id="case05_valid",
    ),
    pytest.param(EMPTY_SCHEMA, call(name="search"), Admitted(b"{}"), id="case06_missing_arguments"),
    pytest.param(EMPTY_SCHEMA, call("  "), Admitted(b"{}"), id="case06_blank_arguments"),
    pytest.param(
        OBJECT_SCHEMA,
        call('{"value":"first","value":"second"}'),
        Refused(NOT_JSON + " (duplicate member names in one object)"),
        id="case07_duplicate_names",
    ),
    pytest.param(
        OBJECT_SCHEMA,
        call('{"nested":{"value":1,"value":2}}'),
        Refused(NOT_JSON + " (duplicate member names in one object)"),
        id="case07_duplicate_nested_names",
    ),
    pytest.param(
        OBJECT_SCHEMA,
        call(b'{"value":"\xff"}'),
        Refused(NOT_JSON + " (document is not valid UTF-8)"),
        id="case08_byte_ff",
    ),
    pytest.param(
        OBJECT_SCHEMA,
        call('{"value":"\\ud800"}'),
        Refused(NOT_JSON + " (string contains a lone surrogate)"),
        id="case08_escaped_lone_surrogate",
    ),
    pytest.param(
        OBJECT_SCHEMA, call('{"value":"\ud800"}'), Refused(NOT_JSON), id="case08_raw_lone_surrogate"
    ),
    pytest.param(OBJECT_SCHEMA, call("{} {}"), Refused(NOT_JSON), id="case08_two_documents"),
    pytest.param(OBJECT_SCHEMA, call("{} x"), Refused(NOT_JSON), id="case08_trailing_garbage"),
    pytest.param(
        OBJECT_SCHEMA,
        call("null"),
        Refused(INVOCATION + "arguments: (root): must be an object (type)"),
        id="case09_null",
    ),
    pytest.param(
        OBJECT_SCHEMA,
        call("[]"),
        Refused(INVOCATION + "arguments: (root): must be an object (type)"),
        id="case09_array",
    ),
    pytest.param(
        OBJECT_SCHEMA,
        call('"text"'),
        Refused(INVOCATION + "arguments: (root): must be an object (type)"),
        id="case09_string",
    ),
    pytest.param(
        SEARCH_SCHEMA,
        call('  {"query":"scope"}\n'),
        Admitted(b'  {"query":"scope"}\n'),
        id="case10_whitespace_kept",
    ),
    pytest.param(
        BIG_CONST_SCHEMA,
        call('{"n":9007199254740993}'),
        Admitted(b'{"n":9007199254740993}'),
        id="case12_exact_big_number",
    ),
    pytest.param(
        BIG_CONST_SCHEMA,
        call('{"n":9007199254740992}'),
        Refused(INVOCATION + "arguments: /n: must equal the value the schema gives (const)"),
        id="case12_float64_neighbour",
    ),
]


@pytest.mark.parametrize(("schema", "tool_call", "expected"), SEED_PREPARE_CASES)
async def test_seed_prepare_cases(
    schema: dict[str, Any], tool_call: ToolCall, expected: Admitted | Refused
) -> None:
    tool = CountingTool(definition("search", schema))
    binding = bind(tool)

    if isinstance(expected, Admitted):
        invocation = binding.contract.prepare(tool_call)
        assert invocation.arguments == expected.arguments
    else:
        with pytest.raises(InvalidInvocationError, match=f"^{re.escape(expected.message)}"):
            binding.contract.prepare(tool_call)
    assert tool.calls == 0


async def test_case05_call_runs_the_tool_once_on_the_admitted_bytes() -> None:
    tool = CountingTool(definition())
    binding = bind(tool)
    invocation = binding.contract.prepare(call('{"query":"scope"}'))

    output = await binding.call(invocation)

    assert output.text() == '{"query":"scope"}'
    assert tool.calls == 1
    assert invocation.arguments == b'{"query":"scope"}'
    assert type(invocation.arguments) is bytes


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param("", id="empty_text"),
        pytest.param(b"", id="empty_bytes"),
        pytest.param(" \t\r\n", id="ascii_whitespace"),
        pytest.param("\u3000\u00a0\u2028", id="unicode_space"),
        pytest.param(bytearray(b"  "), id="bytearray"),
    ],
)
def test_blank_arguments_become_an_empty_object(arguments: Any) -> None:
    contract = bind(CountingTool(definition("search", EMPTY_SCHEMA))).contract

    assert contract.prepare(call(arguments)).arguments == b"{}"


def test_control_separators_are_not_blank() -> None:
    contract = bind(CountingTool(definition("search", EMPTY_SCHEMA))).contract

    with pytest.raises(InvalidInvocationError, match=re.escape(NOT_JSON)):
        contract.prepare(call("\x1c"))


def test_text_and_bytes_arguments_are_admitted_alike() -> None:
    contract = bind(CountingTool(definition())).contract

    assert contract.prepare(call('{"query":"é!"}')).arguments == '{"query":"é!"}'.encode()
    assert contract.prepare(call('{"query":"é!"}'.encode())).arguments == '{"query":"é!"}'.encode()


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("Search", id="case_sensitive"),
        pytest.param(" search", id="no_trimming_left"),
        pytest.param("search ", id="no_trimming_right"),
        pytest.param("search\x00", id="trailing_nul"),
    ],
)
def test_call_name_must_match_exactly(name: str) -> None:
    contract = bind(CountingTool(definition())).contract

    expected = f"call name {name!r} does not match bound tool 'search'"
    with pytest.raises(InvalidInvocationError, match=re.escape(expected)):
        contract.prepare(ToolCall("call", name, '{"query":"ok"}'))


def test_prepare_refuses_something_that_is_not_a_tool_call() -> None:
    contract = bind(CountingTool(definition())).contract
    bad: Any = {"id": "call", "name": "search"}

    with pytest.raises(
        InvalidInvocationError, match=r"^tool: invalid invocation: expected a ToolCall$"
    ):
        contract.prepare(bad)


def test_case11_there_is_no_zero_contract_to_prepare_with() -> None:
    state: Any = None

    with pytest.raises(InvalidToolError, match=r"^tool: invalid tool: contracts are made by bind"):
        Contract(object(), state)


def test_invocations_are_made_only_by_prepare() -> None:
    state: Any = None

    with pytest.raises(InvalidInvocationError, match=r"only Contract\.prepare creates invocations"):
        Invocation(object(), state, b"{}", "call", _json.decoded(b"{}", {}))


def test_bindings_are_made_only_by_bind() -> None:
    contract = bind(CountingTool(definition())).contract
    tool = CountingTool(definition())

    with pytest.raises(InvalidToolError, match=r"^tool: invalid tool: bindings are made by bind"):
        Binding(object(), contract, tool)


def test_invocation_exposes_its_call_id_and_tool_name_and_is_read_only() -> None:
    invocation = bind(CountingTool(definition())).contract.prepare(
        ToolCall("call-7", "search", '{"query":"ok"}')
    )

    assert (invocation.call_id, invocation.tool_name) == ("call-7", "search")
    assert repr(invocation) == "Invocation(tool='search', call_id='call-7')"
    with pytest.raises(AttributeError):
        invocation.arguments = b"{}"  # type: ignore[misc]


# --- admission limits ------------------------------------------------------------------------


def _document_of(size: int) -> bytes:
    head, tail = b'{"query":"', b'"}'
    return head + b"a" * (size - len(head) - len(tail)) + tail


def test_default_limits_are_one_mebibyte_and_depth_64() -> None:
    assert AdmissionLimits(max_argument_bytes=1 << 20, max_depth=64) == DEFAULT_LIMITS
    assert bind(CountingTool(definition())).contract.limits == DEFAULT_LIMITS


def test_arguments_of_exactly_the_size_limit_are_admitted() -> None:
    raw = _document_of(1 << 20)

    assert bind(CountingTool(definition())).contract.prepare(call(raw)).arguments == raw


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(_document_of((1 << 20) + 1), id="document"),
        pytest.param(b" " * ((1 << 20) + 1), id="blank_padding"),
    ],
)
def test_arguments_over_the_size_limit_are_refused(raw: bytes) -> None:
    contract = bind(CountingTool(definition())).contract

    with pytest.raises(
        InvalidInvocationError,
        match=f"^{re.escape(INVOCATION + 'arguments: document exceeds 1048576 bytes')}$",
    ):
        contract.prepare(call(raw))


@pytest.mark.parametrize(
    ("depth", "accepted"),
    [
        pytest.param(64, True, id="at_limit"),
        pytest.param(65, False, id="past_limit"),
        pytest.param(100_000, False, id="far_past_recursion_limit"),
    ],
)
def test_nesting_depth_is_bounded(depth: int, accepted: bool) -> None:
    contract = bind(CountingTool(definition("search", OBJECT_SCHEMA))).contract
    raw = ('{"a":' + "[" * (depth - 1) + "]" * (depth - 1) + "}").encode()

    if accepted:
        assert contract.prepare(call(raw)).arguments == raw
    else:
        with pytest.raises(InvalidInvocationError, match="nesting exceeds 64 levels"):
            contract.prepare(call(raw))


def test_custom_limits_apply_to_the_contract() -> None:
    limits = AdmissionLimits(max_argument_bytes=16, max_depth=2)
    contract = bind(CountingTool(definition("search", OBJECT_SCHEMA)), limits=limits).contract

    assert contract.prepare(call('{"a":[1]}')).arguments == b'{"a":[1]}'
    with pytest.raises(InvalidInvocationError, match="document exceeds 16 bytes"):
        contract.prepare(call('{"a":"0123456789"}'))
    with pytest.raises(InvalidInvocationError, match="nesting exceeds 2 levels"):
        contract.prepare(call('{"a":[[]]}'))


@pytest.mark.parametrize(
    "limits",
    [
        pytest.param({"max_argument_bytes": 1}, id="bytes"),
        pytest.param({"max_depth": 0}, id="depth"),
    ],
)
def test_limits_too_small_for_an_empty_object_are_refused(limits: dict[str, int]) -> None:
    with pytest.raises(InvalidToolError, match="admission limits are too small"):
        AdmissionLimits(**limits)


def test_bind_refuses_limits_of_the_wrong_type() -> None:
    bad: Any = {"max_depth": 3}

    with pytest.raises(InvalidToolError, match="limits must be AdmissionLimits"):
        bind(CountingTool(definition()), limits=bad)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b'{"query":1e999999}', id="huge_exponent"),
        pytest.param(b'{"query":' + b"9" * 5000 + b"}", id="5000_digit_integer"),
        pytest.param(b'{"query":1e99999999999999999999}', id="exponent_past_decimal_range"),
        pytest.param(b'{"query":NaN}', id="nan"),
        pytest.param(b'{"query":-Infinity}', id="infinity"),
    ],
)
def test_extreme_numbers_never_escape_as_anything_but_invalid_invocation(raw: bytes) -> None:
    contract = bind(CountingTool(definition())).contract

    with pytest.raises(InvalidInvocationError, match=f"^{re.escape(INVOCATION)}arguments: "):
        contract.prepare(call(raw))


# --- Binding.call ------------------------------------------------------------------------------


async def test_case13_binding_refuses_an_invocation_of_another_bind_of_an_identical_tool() -> None:
    first_tool, second_tool = StubTool("same"), StubTool("same")
    first, second = bind(first_tool), bind(second_tool)
    invocation = first.contract.prepare(ToolCall("call", "same", '{"query":"ok"}'))

    with pytest.raises(
        InvalidInvocationError,
        match=r"^tool: invalid invocation: invocation does not belong to binding$",
    ):
        await second.call(invocation)
    assert (first_tool.calls, second_tool.calls) == (0, 0)


async def test_binding_refuses_something_that_is_not_an_invocation() -> None:
    tool = StubTool()
    bad: Any = b'{"query":"ok"}'

    with pytest.raises(InvalidInvocationError, match="invocation does not belong to binding"):
        await bind(tool).call(bad)
    assert tool.calls == 0


async def test_binding_returns_the_tool_output_unchanged() -> None:
    tool = StubTool()
    binding = bind(tool)

    output = await binding.call(binding.prepare(call('{"query":"ok"}')))

    assert output is tool.result


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(RuntimeError("boom"), id="runtime_error"),
        pytest.param(InvalidToolError("tool-raised"), id="gateway_error"),
    ],
)
async def test_binding_lets_the_tool_exception_pass_through_identically(error: Exception) -> None:
    binding = bind(RaisingTool(error))

    with pytest.raises(type(error)) as info:
        await binding.call(binding.prepare(call("{}")))
    assert info.value is error


def test_binding_exposes_its_contract_definition_and_prepare() -> None:
    binding = bind(CountingTool(definition()))

    assert binding.definition is binding.contract.definition
    assert binding.prepare(call('{"query":"ok"}')).arguments == b'{"query":"ok"}'
    assert repr(binding) == "Binding(tool='search')"


# --- bind --------------------------------------------------------------------------------------


class HalfTool:
    """Has definition() but no call(): not a Tool."""

    def definition(self) -> ToolDefinition:
        return definition()


@pytest.mark.parametrize(
    "tool",
    [
        pytest.param(None, id="case14_none"),
        pytest.param(object(), id="case14_not_a_tool"),
        pytest.param(HalfTool(), id="case14_missing_call"),
    ],
)
def test_case14_bind_refuses_a_missing_tool(tool: Any) -> None:
    with pytest.raises(InvalidToolError, match=r"^tool: invalid tool: tool is nil$"):
        bind(tool)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        pytest.param("[]", "input schema must be a JSON object", id="case15_array"),
        pytest.param({}, 'input schema type must be "object"', id="case15_empty_object"),
        pytest.param(
            {"type": "array"}, 'input schema type must be "object"', id="case15_array_type"
        ),
        pytest.param("null", "input schema must be a JSON object", id="case15_null"),
        pytest.param(b"", "missing input schema", id="case15_no_schema"),
    ],
)
def test_case15_bind_refuses_a_schema_that_is_not_an_object_schema(
    schema: object, message: str
) -> None:
    with pytest.raises(
        InvalidToolError,
        match=re.escape(
            f"tool: invalid tool: definition: tool: invalid tool definition: {message}"
        ),
    ) as info:
        bind(StubTool(schema=schema))
    assert isinstance(info.value.__cause__, InvalidDefinitionError)


def _schema_of_size(size: int) -> bytes:
    head, tail = b'{"type":"object","description":"', b'"}'
    return head + b"a" * (size - len(head) - len(tail)) + tail


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        pytest.param(
            '{"type":"object","properties":{"query":{"type":"invalid"}}}',
            "schema violates its metaschema",
            id="case16_unknown_type",
        ),
        pytest.param(
            '{"type":"object","minLength":-1}',
            "schema violates its metaschema",
            id="case16_negative_min_length",
        ),
        pytest.param(
            '{"type":"object","properties":{"q":{"$ref":"https://example.com/q.json"}}}',
            "reference 'https://example.com/q.json' is external or does not resolve",
            id="case16_external_ref",
        ),
        pytest.param(
            _schema_of_size((1 << 20) + 1),
            "document exceeds 1048576 bytes",
            id="case16_over_one_mebibyte",
        ),
        pytest.param(
            '{"type":"object","properties":{"q":{"type":"string","pattern":"["}}}',
            "schema violates its metaschema: /properties/q/pattern: "
            'must be a valid "regex" (format)',
            id="invalid_pattern",
        ),
        pytest.param(
            '{"type":"object","x":' + '{"a":' * 900 + "1" + "}" * 900 + "}",
            "document nests too deeply",
            id="deeply_nested_schema",
        ),
    ],
)
def test_case16_bind_refuses_a_schema_that_does_not_compile(schema: object, message: str) -> None:
    expected = f"tool: invalid tool: input schema: jsonschema: invalid schema: {message}"
    with pytest.raises(InvalidToolError, match=re.escape(expected)) as info:
        bind(StubTool(schema=schema))
    assert info.value.__cause__ is None


def test_bind_accepts_a_schema_of_exactly_one_mebibyte() -> None:
    schema = _schema_of_size(1 << 20)

    assert bind(StubTool(schema=schema)).definition.input_schema_json == schema


@pytest.mark.parametrize(
    ("name", "description", "message"),
    [
        pytest.param("bad name", "", "name 'bad name' must be", id="case17_bad_name"),
        pytest.param("a" * 65, "", "must be 1-64 characters", id="case17_65_chars"),
        pytest.param("", "", "name '' must be", id="case17_empty_name"),
        pytest.param("ok", "\udcff", "description is not valid UTF-8", id="case17_bad_description"),
    ],
)
def test_case17_bind_refuses_invalid_names_and_descriptions(
    name: str, description: str, message: str
) -> None:
    with pytest.raises(InvalidToolError, match=re.escape(message)):
        bind(StubTool(name, description=description))


def test_case18_bind_asks_for_the_definition_exactly_once() -> None:
    tool = CountingTool(definition())
    binding = bind(tool)

    for _ in range(3):
        binding.contract.prepare(call('{"query":"ok"}'))
    _ = binding.contract.definition, binding.definition

    assert tool.definition_calls == 1


def test_case18_contract_is_frozen_against_later_tool_and_definition_changes() -> None:
    tool = StubTool("search")
    contract = bind(tool).contract

    tool.name = "renamed"
    tool.schema = {"type": "object", "properties": {"query": {"type": "integer"}}}
    contract.definition.input_schema["properties"] = {}

    assert contract.definition.name == "search"
    assert json.loads(contract.definition.input_schema_json) == SEARCH_SCHEMA
    assert contract.prepare(call('{"query":"ok"}')).arguments == b'{"query":"ok"}'


def test_bind_contains_a_definition_that_raises() -> None:
    class Broken(StubTool):
        def definition(self) -> ToolDefinition:
            raise self.error

        error = RuntimeError("definition backend down")

    with pytest.raises(
        InvalidToolError, match=r"^tool: invalid tool: definition: definition backend down$"
    ) as info:
        bind(Broken())
    assert info.value.__cause__ is Broken.error


def test_bind_refuses_a_definition_of_the_wrong_type() -> None:
    class Lying(StubTool):
        def definition(self) -> ToolDefinition:
            wrong: Any = {"name": "search"}
            return wrong  # type: ignore[no-any-return]

    with pytest.raises(InvalidToolError, match="definition\\(\\) must return a ToolDefinition"):
        bind(Lying())


# --- input validators -------------------------------------------------------------------------


def test_case20_validator_error_refuses_every_prepare_and_stays_reachable() -> None:
    # The validator's own text may quote the arguments: it stays in __cause__ only.
    error = ValueError("n must be even")
    tool = ValidatingTool(RecordingValidator(error))
    contract = bind(tool).contract

    for _ in range(2):
        with pytest.raises(
            InvalidInvocationError,
            match=r"^tool: invalid invocation: arguments: refused by the tool's input validator$",
        ) as info:
            contract.prepare(call('{"n":3}'))
        assert info.value.__cause__ is error
    assert tool.declarations == 1


def test_case21_a_raising_declaration_fails_bind() -> None:
    error = RuntimeError("declaration failed")
    tool = ValidatingTool(None, declaration_error=error)

    with pytest.raises(
        InvalidToolError, match=r"^tool: invalid tool: input validation: declaration failed$"
    ) as info:
        bind(tool)
    assert info.value.__cause__ is error


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(RuntimeError("validation failed"), id="case22_runtime_error"),
        pytest.param(KeyError("validation failed"), id="key_error"),
        pytest.param(RecursionError("validation failed"), id="recursion_error"),
    ],
)
def test_case22_any_validator_exception_becomes_invalid_invocation(error: Exception) -> None:
    contract = bind(ValidatingTool(RecordingValidator(error))).contract

    with pytest.raises(
        InvalidInvocationError, match="refused by the tool's input validator"
    ) as info:
        contract.prepare(call("{}"))
    assert info.value.__cause__ is error
    assert "validation failed" not in str(info.value)


def test_validator_runs_only_after_the_schema_passes_and_sees_the_exact_bytes() -> None:
    validator = RecordingValidator()
    contract = bind(ValidatingTool(validator, schema=SEARCH_SCHEMA)).contract

    with pytest.raises(InvalidInvocationError, match="at least 2 characters long"):
        contract.prepare(call('{"query":"x"}'))
    contract.prepare(call(' {"query" : "ok"} '))

    assert validator.seen == [b' {"query" : "ok"} ']


def test_validator_sees_the_normalized_empty_object_for_blank_arguments() -> None:
    validator = RecordingValidator()
    contract = bind(ValidatingTool(validator)).contract

    contract.prepare(call("   "))

    assert validator.seen == [b"{}"]


def test_a_none_declaration_means_the_schema_is_the_whole_contract() -> None:
    tool = ValidatingTool(None)

    assert bind(tool).contract.prepare(call('{"any":1}')).arguments == b'{"any":1}'
    assert tool.declarations == 1


def test_a_declared_validator_that_is_not_callable_fails_bind() -> None:
    bad: Any = "not callable"

    with pytest.raises(InvalidToolError, match="input validation: validator is not callable"):
        bind(ValidatingTool(bad))


def test_validator_is_found_through_wrappers() -> None:
    validator = RecordingValidator(ValueError("inner rule"))
    inner = ValidatingTool(validator)

    contract = bind(WrapperTool(WrapperTool(inner))).contract

    with pytest.raises(InvalidInvocationError) as info:
        contract.prepare(call("{}"))
    assert str(info.value.__cause__) == "inner rule"
    assert inner.declarations == 1


def test_the_outermost_declaration_wins_even_when_it_is_none() -> None:
    inner_validator = RecordingValidator(ValueError("inner rule"))
    inner = ValidatingTool(inner_validator)

    contract = bind(ValidatingWrapper(inner, None)).contract

    assert contract.prepare(call("{}")).arguments == b"{}"
    assert (inner.declarations, inner_validator.seen) == (0, [])


def test_the_outermost_validator_replaces_the_inner_one() -> None:
    inner = ValidatingTool(RecordingValidator(ValueError("inner rule")))
    outer_validator = RecordingValidator(ValueError("outer rule"))

    contract = bind(ValidatingWrapper(inner, outer_validator)).contract

    with pytest.raises(InvalidInvocationError) as info:
        contract.prepare(call("{}"))
    assert str(info.value.__cause__) == "outer rule"
    assert inner.declarations == 0


def test_case23_validator_declared_under_64_wrappers_is_found() -> None:
    contract = bind(chain(64, ValidatingTool(RecordingValidator(ValueError("deep rule"))))).contract

    with pytest.raises(InvalidInvocationError) as info:
        contract.prepare(call("{}"))
    assert str(info.value.__cause__) == "deep rule"


class CyclicWrapper(WrapperTool):
    """A wrapper with its own definition whose chain loops back on itself."""

    def __init__(self) -> None:
        super().__init__(None)

    def definition(self) -> ToolDefinition:
        return definition("cyclic", OBJECT_SCHEMA)


def _self_wrapper() -> Tool:
    wrapper = CyclicWrapper()
    wrapper.inner = wrapper
    return wrapper


def _two_cycle() -> Tool:
    first, second = CyclicWrapper(), CyclicWrapper()
    first.inner, second.inner = second, first
    return first


@pytest.mark.parametrize(
    "factory",
    [
        pytest.param(_self_wrapper, id="case23_self_wrapper"),
        pytest.param(_two_cycle, id="case23_a_b_cycle"),
        pytest.param(
            lambda: chain(65, ValidatingTool(RecordingValidator())), id="case23_65_wrappers"
        ),
    ],
)
def test_case23_an_invalid_wrapping_chain_fails_bind(factory: Any) -> None:
    with pytest.raises(
        InvalidToolError,
        match=re.escape("tool: invalid tool: input validation: tool: invalid wrapping chain: "),
    ) as info:
        bind(factory())
    assert isinstance(info.value.__cause__, InvalidWrappingChainError)


def test_an_unwrap_that_raises_fails_bind() -> None:
    class Exploding(CyclicWrapper):
        def unwrap(self) -> Tool | None:
            raise RuntimeError("unwrap exploded")

    with pytest.raises(InvalidToolError, match="input validation: unwrap exploded"):
        bind(Exploding())


# --- properties --------------------------------------------------------------------------------

DATE_TIME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"when": {"type": "string", "format": "date-time"}},
    "required": ["when"],
}
NESTED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "user": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 10},
                "tags": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                "address": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
            },
            "required": ["name"],
            "additionalProperties": False,
        }
    },
    "required": ["user"],
    "additionalProperties": False,
}
SCHEMAS = {
    "search": SEARCH_SCHEMA,
    "big_const": BIG_CONST_SCHEMA,
    "date_time": DATE_TIME_SCHEMA,
    "nested": NESTED_SCHEMA,
}


def probe(
    query: Annotated[str, pydantic.Field(min_length=2)],
    n: Annotated[int, pydantic.Field(ge=0, le=255)] = 0,
    when: datetime | None = None,
    anything: Any = None,
) -> str:
    return query


CONTRACTS: dict[str, Contract] = {
    name: bind(CountingTool(definition(name, schema))).contract for name, schema in SCHEMAS.items()
}
CONTRACTS["probe"] = bind(Func(probe)).contract

_SURROGATE_TEXT = st.text(
    st.one_of(st.characters(), st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])),
    max_size=12,
)
_TOKENS = st.sampled_from(
    [
        "{", "}", "[", "]", ":", ",", " ", "\n", '"query"', '"query"', '"n"', '"when"', '"user"',
        '"ok"', '"x"', '"anything"', "1", "-0", "1.0", "1e0", "true", "null", "NaN",
        "Infinity", "-Infinity", "1e999999", "1e99999999999999999999", "9" * 5000,
        "9007199254740993", '"\\ud800"', '"\\udfff"', '"\ud800"', '"\\u0000"', "\ufeff",
        '"2024-01-02T03:04:05Z"', "01", "+1", "'a'", "/*", "\x00", "\u3000",
    ]
)  # fmt: skip
_JSONISH = st.lists(_TOKENS, max_size=24).map("".join)
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.sampled_from(["ok", "scope", "", "x", "2024-01-02T03:04:05Z"]),
    _SURROGATE_TEXT,
)
_VALUES = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from(["query", "n", "when", "user", "a"]), children, max_size=3),
    ),
    max_leaves=12,
)


@st.composite
def _duplicate_key_document(draw: st.DrawFn) -> str:
    depth = draw(st.integers(min_value=0, max_value=5))
    inner = '{"k":1,"k":2}'
    for _ in range(depth):
        inner = '{"a":[' + inner + "]}"
    return inner


def _nested_document(depth: int) -> str:
    return '{"query":' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


_NUMBER_LITERALS = st.one_of(
    st.sampled_from(["1e999999", "-1e-999999", "1e99999999999999999999", "9" * 5000, "-0.0"]),
    st.from_regex(r"-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,30})?([eE][+-]?[0-9]{1,22})?", fullmatch=True),
)
_NUMBER_DOCUMENTS = st.builds(
    lambda key, number: f'{{"{key}":{number}}}',
    st.sampled_from(["query", "n", "anything", "a"]),
    _NUMBER_LITERALS,
)

_ARGUMENTS: st.SearchStrategy[str | bytes] = st.one_of(
    _NUMBER_DOCUMENTS,
    st.binary(max_size=48),
    _SURROGATE_TEXT,
    _JSONISH,
    _JSONISH.map(lambda text: text.encode("utf-8", "surrogatepass")),
    _VALUES.map(lambda value: json.dumps(value, ensure_ascii=False)),
    _VALUES.map(lambda value: json.dumps(value, ensure_ascii=True)),
    _duplicate_key_document(),
    st.integers(min_value=60, max_value=70).map(_nested_document),
    st.sampled_from(["[" * 100_000, "{" * 5_000, '{"query":"' + "\\ud800" * 10 + '"}']),
)
_IDS: st.SearchStrategy[Any] = st.one_of(
    st.just("call"), st.text(max_size=4), st.none(), st.integers(), st.binary(max_size=4)
)
_NAMES: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from([*CONTRACTS, "Search", ""]), st.text(max_size=8), st.none()
)


def _outcome(contract: Contract, tool_call: ToolCall) -> Invocation | InvalidInvocationError:
    try:
        return contract.prepare(tool_call)
    except InvalidInvocationError as exc:
        return exc


def _admit_or_refuse(contract: Contract, tool_call: ToolCall) -> None:
    """Prepare `tool_call`; only InvalidInvocationError may escape, and admission is verbatim."""
    outcome = _outcome(contract, tool_call)
    if isinstance(outcome, InvalidInvocationError):
        event("refused")
        assert str(outcome).startswith("tool: invalid invocation: ")
        return
    event("admitted")
    arguments = tool_call.arguments
    raw = arguments.encode("utf-8") if isinstance(arguments, str) else bytes(arguments)
    assert isinstance(outcome, Invocation)
    assert outcome.arguments == (b"{}" if _blank(raw) else raw)


def _blank(raw: bytes) -> bool:
    """Empty after trimming Go's unicode.IsSpace set: ASCII space, NEL and categories Z."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(c in "\t\n\v\f\r\x85" or unicodedata.category(c) in {"Zs", "Zl", "Zp"} for c in text)


@given(
    contract_name=st.sampled_from(sorted(CONTRACTS)),
    call_id=_IDS,
    name=_NAMES,
    arguments=_ARGUMENTS,
)
def test_property_prepare_of_any_call_raises_nothing_but_invalid_invocation(
    contract_name: str, call_id: Any, name: Any, arguments: str | bytes
) -> None:
    _admit_or_refuse(CONTRACTS[contract_name], ToolCall(call_id, name, arguments))


@given(contract_name=st.sampled_from(sorted(CONTRACTS)), arguments=_ARGUMENTS)
def test_property_prepare_of_any_arguments_raises_nothing_but_invalid_invocation(
    contract_name: str, arguments: str | bytes
) -> None:
    _admit_or_refuse(CONTRACTS[contract_name], ToolCall("call", contract_name, arguments))


@given(contract_name=st.sampled_from(sorted(CONTRACTS)), document=_NUMBER_DOCUMENTS)
def test_property_any_number_literal_is_admitted_verbatim_or_refused_as_invalid_invocation(
    contract_name: str, document: str
) -> None:
    _admit_or_refuse(CONTRACTS[contract_name], ToolCall("call", contract_name, document))


def _validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    cls = jsonschema.Draft202012Validator
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


_PLAIN_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
_ZONES = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]
)
_VALID_VALUES: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "search": st.fixed_dictionaries(
        {"query": st.text(st.characters(codec="utf-8"), min_size=2, max_size=12)}
    ),
    "big_const": st.fixed_dictionaries({}, optional={"n": st.just(9007199254740993)}),
    "date_time": st.fixed_dictionaries(
        {"when": st.datetimes(timezones=_ZONES).map(lambda moment: moment.isoformat())},
        optional={"other": _PLAIN_TEXT},
    ),
    "nested": st.fixed_dictionaries(
        {
            "user": st.fixed_dictionaries(
                {"name": st.text(st.characters(codec="utf-8"), min_size=1, max_size=10)},
                optional={
                    "tags": st.lists(st.integers(min_value=0, max_value=10**30), max_size=4),
                    "address": st.fixed_dictionaries({"city": _PLAIN_TEXT}),
                },
            )
        }
    ),
}


@given(st.data())
def test_property_admitted_arguments_are_kept_byte_for_byte_and_satisfy_the_schema(
    data: st.DataObject,
) -> None:
    name = data.draw(st.sampled_from(sorted(SCHEMAS)))
    value = data.draw(_VALID_VALUES[name])
    raw = data.draw(serialized(value)).encode("utf-8")

    invocation = CONTRACTS[name].prepare(ToolCall("call", name, raw))

    assert invocation.arguments == raw
    assert list(_validator(SCHEMAS[name]).iter_errors(json.loads(invocation.arguments))) == []


def test_property_schemas_are_valid_and_direct_validation_asserts_formats() -> None:
    for schema in SCHEMAS.values():
        jsonschema.Draft202012Validator.check_schema(schema)
    assert _validator(DATE_TIME_SCHEMA).is_valid({"when": "not a date"}) is False


# --- refusals never quote an argument value (schema, strict JSON, validators, Func) ---------

_MARKER_TEXT = st.text("abcdefghijklmnopqrstuvwxyz", min_size=10, max_size=10).map(
    lambda s: "Qz" + s
)
_MARKER_INT = st.integers(min_value=10**11, max_value=10**12)
_SMALL = st.integers(min_value=0, max_value=5)
_DECLARED = ("a", "b", "c")
_FORMATS = ("date-time", "email", "hostname", "ipv4", "uri", "uuid", "regex", "duration")


def _subschemas() -> st.SearchStrategy[Any]:
    leaf = st.one_of(
        st.builds(lambda t: {"type": t}, st.sampled_from(["integer", "string", "null", "array"])),
        st.builds(lambda n: {"minLength": n + 20}, _SMALL),
        st.builds(lambda n: {"maxLength": n}, _SMALL),
        st.builds(lambda n: {"maximum": n}, _SMALL),
        st.builds(lambda n: {"exclusiveMinimum": n + 10**13}, _SMALL),
        st.builds(lambda n: {"multipleOf": n + 7}, _SMALL),
        st.just({"multipleOf": Decimal("0.5")}),
        st.builds(lambda f: {"format": f}, st.sampled_from(_FORMATS)),
        st.just({"pattern": "^[0-9]+$"}),
        st.just({"enum": [1, "x", None]}),
        st.just({"const": 3}),
        st.just({"uniqueItems": True}),
        st.builds(lambda n: {"maxItems": n}, _SMALL),
        st.just({"contains": {"type": "boolean"}}),
        st.just({"not": {}}),
        st.just(False),
    )
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.builds(lambda s: {"items": s}, inner),
            st.builds(lambda s: {"prefixItems": [s, s]}, inner),
            st.builds(lambda s: {"additionalProperties": s}, inner),
            st.builds(lambda s: {"patternProperties": {"^Qz": s}}, inner),
            st.builds(lambda s: {"propertyNames": s}, inner),
            st.builds(lambda s: {"unevaluatedProperties": s}, inner),
            st.builds(lambda s, t: {"anyOf": [s, t]}, inner, inner),
            st.builds(lambda s, t: {"oneOf": [s, t]}, inner, inner),
            st.builds(lambda s: {"properties": {"a": s}, "required": ["a"]}, inner),
            st.just({"dependentRequired": {"b": ["c"]}}),
            st.builds(lambda n: {"minProperties": n + 10}, _SMALL),
        ),
        max_leaves=6,
    )


def _arguments(text: str, number: int) -> st.SearchStrategy[Any]:
    scalar = st.sampled_from(
        [text, f"{text}\n", f"x{text}y", number, -number, Decimal(f"{number}.5"), f'"{text}"']
    )
    values = st.recursive(
        scalar,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.sampled_from([*_DECLARED, text, f"{text}/~"]), inner, max_size=3),
        ),
        max_leaves=6,
    )
    return st.dictionaries(st.sampled_from([*_DECLARED, text, f"k{text}"]), values, max_size=4)


def _refusal(contract: Contract, raw: str) -> str | None:
    try:
        contract.prepare(call(raw))
    except InvalidInvocationError as exc:
        return str(exc)
    return None


def _leaks(message: str, text: str, number: int) -> list[str]:
    forms = [text, repr(text), json.dumps(text), str(number), repr(Decimal(f"{number}.5"))]
    return [form for form in forms if form in message]


@given(st.data())
def test_property_a_schema_refusal_never_quotes_an_argument_value_or_member_name(
    data: st.DataObject,
) -> None:
    text, number = data.draw(_MARKER_TEXT), data.draw(_MARKER_INT)
    schema = {
        "type": "object",
        "properties": {name: data.draw(_subschemas()) for name in _DECLARED},
        "additionalProperties": data.draw(_subschemas()),
    }
    contract = bind(StubTool(schema=schema)).contract
    raw = _json.canonical(data.draw(_arguments(text, number))).decode()

    message = _refusal(contract, raw)
    event("admitted" if message is None else message.rsplit("(", 1)[-1])
    assert _leaks(message or "", text, number) == []


@given(_MARKER_TEXT, _MARKER_INT, st.integers(min_value=0, max_value=30))
def test_property_a_strict_json_refusal_never_quotes_the_document(
    text: str, number: int, cut: int
) -> None:
    contract = bind(StubTool(schema=OBJECT_SCHEMA)).contract
    documents = [
        f'{{"{text}":1,"{text}":2}}',
        f'{{"a":"{text}\\ud800"}}',
        f'{{"a":"{text}\\ufdd0"}}',
        f'{{"a":{text}}}',
        f'{{"a":"{text}\\q"}}',
        f'{{"a":{number}, "{text}"}}',
        f'{{"a":"{text}"}}'[:cut],
    ]
    for raw in documents:
        assert _leaks(_refusal(contract, raw) or "", text, number) == []


@given(_MARKER_TEXT)
def test_property_an_input_validator_refusal_never_quotes_the_validator_text(text: str) -> None:
    error = ValueError(f"value {text!r} is not allowed")
    contract = bind(ValidatingTool(RecordingValidator(error))).contract

    with pytest.raises(InvalidInvocationError) as info:
        contract.prepare(call(json.dumps({"a": text})))
    assert _leaks(str(info.value), text, 0) == []
    assert info.value.__cause__ is error


def test_schema_refusals_name_the_pointer_and_keyword_in_plain_words() -> None:
    schema = {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"type": "integer"}},
            "amount": {"maximum": 100},
            "a/b": {"type": "string"},
        },
        "additionalProperties": {"type": "string"},
    }
    contract = bind(StubTool(schema=schema)).contract
    cases = {
        '{"items":[1,2,1.5]}': "/items/2: must be an integer (type)",
        '{"amount":1000}': "/amount: must be at most 100 (maximum)",
        '{"a/b":1}': "/a~1b: must be a string (type)",
        '{"secret-name":1}': "/*: must be a string (type)",
    }
    for raw, message in cases.items():
        with pytest.raises(InvalidInvocationError) as info:
            contract.prepare(call(raw))
        assert str(info.value) == INVOCATION + "arguments: " + message

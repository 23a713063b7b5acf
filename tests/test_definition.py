"""ToolDefinition: name, description and input schema rules (seed §2, case 17)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import InvalidDefinitionError, InvalidToolError, ToolDefinition

OBJECT = {"type": "object"}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("read", id="case17_read"),
        pytest.param("mcp__read-1", id="case17_mcp_style"),
        pytest.param("1_lookup", id="case17_leading_digit"),
        pytest.param("a" * 64, id="case17_64_chars"),
        pytest.param("A", id="one_upper_case_char"),
        pytest.param("-", id="one_hyphen"),
        pytest.param("_", id="one_underscore"),
    ],
)
def test_names_of_1_to_64_safe_characters_are_valid(name: str) -> None:
    assert ToolDefinition(name, OBJECT).name == name


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("a" * 65, id="case17_65_chars"),
        pytest.param("bad name", id="case17_space"),
        pytest.param(".bad", id="case17_dot"),
        pytest.param("", id="case17_empty"),
        pytest.param("read\n", id="trailing_newline"),
        pytest.param("café", id="non_ascii_letter"),
        pytest.param("read/1", id="slash"),
        pytest.param("\ud800", id="lone_surrogate"),
    ],
)
def test_names_outside_the_safe_alphabet_or_length_are_refused(name: str) -> None:
    expected = f"tool: invalid tool definition: name {name!r} must be 1-64 characters of "
    with pytest.raises(InvalidDefinitionError, match=re.escape(expected)):
        ToolDefinition(name, OBJECT)


def test_a_name_that_is_not_text_is_refused() -> None:
    bad: Any = 7
    with pytest.raises(InvalidDefinitionError, match="name 7 must be 1-64 characters"):
        ToolDefinition(bad, OBJECT)


@pytest.mark.parametrize(
    "description",
    [
        pytest.param("", id="empty"),
        pytest.param(" \t\n", id="whitespace"),
        pytest.param("x" * 4097, id="case17_4097_chars"),
        pytest.param("emoji 😀 and é", id="non_ascii"),
    ],
)
def test_any_valid_text_is_a_valid_description(description: str) -> None:
    assert ToolDefinition("read", OBJECT, description).description == description


def test_description_with_a_lone_surrogate_is_not_valid_text() -> None:
    with pytest.raises(
        InvalidDefinitionError,
        match=r"^tool: invalid tool definition: description is not valid UTF-8$",
    ):
        ToolDefinition("read", OBJECT, "bad \udcff byte")


def test_description_that_is_not_text_is_refused() -> None:
    bad: Any = b"bytes"
    with pytest.raises(InvalidDefinitionError, match="description must be text"):
        ToolDefinition("read", OBJECT, bad)


MISSING = "missing input schema"
NOT_OBJECT = "input schema must be a JSON object"
NOT_OBJECT_TYPE = 'input schema type must be "object"'

INVALID_SCHEMAS = [
    pytest.param(None, MISSING, id="none"),
    pytest.param("", MISSING, id="empty_text"),
    pytest.param(b"", MISSING, id="empty_bytes"),
    pytest.param("[]", NOT_OBJECT, id="array_text"),
    pytest.param("null", NOT_OBJECT, id="null_text"),
    pytest.param("{", NOT_OBJECT, id="malformed"),
    pytest.param('{"type":"object"} {}', NOT_OBJECT, id="two_documents"),
    pytest.param('{"type":"object","type":"object"}', NOT_OBJECT, id="duplicate_keys"),
    pytest.param(b'{"type":"object","d":"\xff"}', NOT_OBJECT, id="invalid_utf8"),
    pytest.param('{"type":"object","d":"\\ud800"}', NOT_OBJECT, id="escaped_lone_surrogate"),
    pytest.param('{"type":"object","n":NaN}', NOT_OBJECT, id="nan"),
    pytest.param({"type": "object", "n": float("nan")}, NOT_OBJECT, id="mapping_with_nan"),
    pytest.param({"type": "object", 1: "x"}, NOT_OBJECT, id="mapping_with_integer_key"),
    pytest.param('{"type":"object","d":"\ud800"}', "input schema is not valid UTF-8", id="raw_sur"),
    pytest.param("{}", NOT_OBJECT_TYPE, id="empty_object"),
    pytest.param({}, NOT_OBJECT_TYPE, id="empty_mapping"),
    pytest.param('{"type":"array"}', NOT_OBJECT_TYPE, id="array_type"),
    pytest.param('{"type":["object","null"]}', NOT_OBJECT_TYPE, id="type_array"),
    pytest.param('{"type":"Object"}', NOT_OBJECT_TYPE, id="type_case"),
    pytest.param({"properties": {}}, NOT_OBJECT_TYPE, id="type_missing"),
    pytest.param([], "input schema must be a mapping or JSON text", id="python_list"),
    pytest.param(1, "input schema must be a mapping or JSON text", id="python_int"),
]


@pytest.mark.parametrize(("schema", "message"), INVALID_SCHEMAS)
def test_input_schema_must_be_a_json_object_of_type_object(schema: object, message: str) -> None:
    with pytest.raises(
        InvalidDefinitionError, match=re.escape(f"tool: invalid tool definition: {message}")
    ):
        ToolDefinition("read", schema)


def test_rules_are_checked_in_order_name_description_schema() -> None:
    with pytest.raises(InvalidDefinitionError, match="name 'bad name'"):
        ToolDefinition("bad name", "[]", "\ud800")
    with pytest.raises(InvalidDefinitionError, match="description is not valid UTF-8"):
        ToolDefinition("good", "[]", "\ud800")


def test_definition_has_no_size_limit_because_the_limit_belongs_to_bind() -> None:
    raw = b'{"type":"object","description":"' + b"a" * (1 << 20) + b'"}'

    assert ToolDefinition("read", raw).input_schema_json == raw


def test_invalid_definition_error_is_an_invalid_tool_error_with_its_own_code() -> None:
    assert issubclass(InvalidDefinitionError, InvalidToolError)
    assert (InvalidDefinitionError.code, InvalidToolError.code) == (
        "invalid_definition",
        "invalid_tool",
    )


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b' {"type" : "object"}\n', id="bytes"),
        pytest.param(bytearray(b' {"type" : "object"}\n'), id="bytearray"),
        pytest.param(memoryview(b' {"type" : "object"}\n'), id="memoryview"),
        pytest.param(' {"type" : "object"}\n', id="text"),
    ],
)
def test_schema_text_is_kept_byte_for_byte(raw: object) -> None:
    assert ToolDefinition("read", raw).input_schema_json == b' {"type" : "object"}\n'


def test_schema_mapping_is_stored_as_canonical_json() -> None:
    definition = ToolDefinition("read", {"type": "object", "properties": {"b": {}, "a": {}}})

    assert definition.input_schema_json == b'{"properties":{"a":{},"b":{}},"type":"object"}'


def test_a_mutable_input_does_not_leak_into_the_definition() -> None:
    raw = bytearray(b'{"type":"object"}')
    mapping: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    from_bytes = ToolDefinition("read", raw)
    from_mapping = ToolDefinition("read", mapping)

    raw[0:1] = b"["
    mapping["properties"]["a"]["type"] = "integer"

    assert from_bytes.input_schema_json == b'{"type":"object"}'
    assert from_mapping.input_schema == {"type": "object", "properties": {"a": {"type": "string"}}}


def test_input_schema_is_a_fresh_detached_copy_each_time() -> None:
    definition = ToolDefinition("read", {"type": "object", "properties": {}})
    first = definition.input_schema

    first["type"] = "array"
    first["properties"]["x"] = {}

    assert definition.input_schema == {"type": "object", "properties": {}}
    assert definition.input_schema is not definition.input_schema


@pytest.mark.parametrize("attribute", ["name", "description", "input_schema_json", "_name"])
def test_definition_is_immutable(attribute: str) -> None:
    definition = ToolDefinition("read", OBJECT)

    with pytest.raises(AttributeError, match="ToolDefinition is immutable"):
        setattr(definition, attribute, "x")
    with pytest.raises(AttributeError, match="ToolDefinition is immutable"):
        delattr(definition, attribute)
    assert (definition.name, definition.input_schema_json) == ("read", b'{"type":"object"}')


def test_definitions_are_equal_and_hash_alike_when_all_three_parts_match() -> None:
    first = ToolDefinition("read", '{"type":"object"}', "d")
    same = ToolDefinition("read", b'{"type":"object"}', "d")
    other_bytes = ToolDefinition("read", '{ "type":"object"}', "d")
    other_description = ToolDefinition("read", '{"type":"object"}', "e")

    assert first == same
    assert hash(first) == hash(same)
    assert first != other_bytes
    assert first != other_description
    assert first != "read"


def test_repr_names_the_tool_without_the_schema() -> None:
    assert (
        repr(ToolDefinition("read", OBJECT, "d")) == "ToolDefinition(name='read', description='d')"
    )


# -- optional metadata and imported names ---------------------------------------------------


def test_title_annotations_and_output_schema_are_kept_and_decoded_afresh() -> None:
    annotations = {"destructiveHint": True, "readOnlyHint": False}
    definition = ToolDefinition(
        "write_file",
        OBJECT,
        "Write.",
        title="Write a file",
        annotations=annotations,
        output_schema={"type": "object", "properties": {"size": {"type": "integer"}}},
    )
    annotations["destructiveHint"] = False  # the caller's mapping does not leak in

    assert definition.title == "Write a file"
    assert definition.annotations == {"destructiveHint": True, "readOnlyHint": False}
    assert definition.annotations_json == b'{"destructiveHint":true,"readOnlyHint":false}'
    assert definition.output_schema == {
        "type": "object",
        "properties": {"size": {"type": "integer"}},
    }
    copy = definition.annotations
    assert copy is not None
    copy["destructiveHint"] = False
    assert definition.annotations == {"destructiveHint": True, "readOnlyHint": False}


def test_a_definition_without_metadata_has_none_of_it() -> None:
    definition = ToolDefinition("read", OBJECT)

    assert (definition.title, definition.annotations, definition.output_schema) == (
        None,
        None,
        None,
    )
    assert definition.annotations_json is None
    assert definition.output_schema_json is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"title": 3}, "title must be text"),
        ({"title": "\ud800"}, "title is not valid UTF-8"),
        ({"annotations": []}, "annotations must be a JSON object"),
        ({"annotations": "[1]"}, "annotations must be a JSON object"),
        ({"annotations": "{"}, "annotations must be a JSON object"),
        ({"annotations": 5}, "annotations must be a JSON object"),
        ({"annotations": {"x": float("nan")}}, "annotations must be a JSON object"),
        ({"output_schema": "true"}, "output schema must be a JSON object"),
        ({"output_schema": b'{"a":1,"a":2}'}, "output schema must be a JSON object"),
    ],
)
def test_metadata_that_is_not_text_or_a_json_object_is_refused(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidDefinitionError, match=re.escape(message)):
        ToolDefinition("read", OBJECT, **fields)


@pytest.mark.parametrize(
    "fields",
    [
        {"title": "T"},
        {"annotations": {"destructiveHint": True}},
        {"output_schema": {"type": "object"}},
    ],
)
def test_definitions_differ_when_any_metadata_differs(fields: dict[str, Any]) -> None:
    plain = ToolDefinition("read", OBJECT, "d")
    with_metadata = ToolDefinition("read", OBJECT, "d", **fields)

    assert plain != with_metadata
    assert with_metadata == ToolDefinition("read", OBJECT, "d", **fields)
    assert hash(with_metadata) == hash(ToolDefinition("read", OBJECT, "d", **fields))


@pytest.mark.parametrize("name", ["a.b", "fs.read_file", "x" * 128, "v1.2-beta_3", "...", "a" * 65])
def test_imported_names_follow_the_mcp_rule_of_1_to_128_characters_with_dots(name: str) -> None:
    assert ToolDefinition(name, OBJECT, imported=True).name == name
    with pytest.raises(InvalidDefinitionError, match=re.escape("1-64 characters of")):
        ToolDefinition(name, OBJECT)


@pytest.mark.parametrize(
    "name", ["", "x" * 129, "a b", "a/b", "a:b", "ä", "a\n", "a\x00", "a,b", "a@b"]
)
def test_imported_names_outside_the_mcp_rule_are_refused(name: str) -> None:
    with pytest.raises(
        InvalidDefinitionError, match=re.escape("must be 1-128 characters of [A-Za-z0-9_.-]")
    ):
        ToolDefinition(name, OBJECT, imported=True)


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=140))
def test_an_imported_name_is_valid_exactly_when_it_matches_the_mcp_rule(name: str) -> None:
    expected = re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", name) is not None
    try:
        ToolDefinition(name, OBJECT, imported=True)
    except InvalidDefinitionError:
        valid = False
    else:
        valid = True
    assert valid is expected

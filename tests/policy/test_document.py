"""InputDocument: the policy input (tool, arguments, context) and its canonical digest."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import Authorization, ToolDefinition
from gateway.policy import CallerContext, InputDocument, caller_context
from tests.helpers import IJSON_CHARACTERS

SEARCH = ToolDefinition(
    "search",
    {"type": "object", "properties": {"query": {"type": "string"}}},
    "Find documents.",
)
ALICE = CallerContext(subject="alice", tenant="acme")


def document(
    arguments: str = '{"query":"scope","limit":3}',
    *,
    definition: ToolDefinition = SEARCH,
    context: CallerContext = ALICE,
) -> InputDocument:
    return InputDocument(Authorization(definition, arguments.encode()), context)


def test_input_document_json_has_exactly_tool_arguments_facts_and_context() -> None:
    actual = json.loads(document().to_json())

    assert set(actual) == {"tool", "arguments", "facts", "context"}
    assert actual["facts"] == {"version": 1, "arguments": {}}
    assert actual["tool"] == {
        "name": "search",
        "description": "Find documents.",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
    }
    assert actual["arguments"] == {"query": "scope", "limit": 3}
    assert actual["context"] == {"subject": "alice", "tenant": "acme"}


def test_input_document_exposes_what_it_was_built_from() -> None:
    authorization = Authorization(SEARCH, b'{"query":"scope"}')

    actual = InputDocument(authorization, ALICE)

    assert (actual.definition, actual.arguments, actual.context) == (
        SEARCH,
        b'{"query":"scope"}',
        ALICE,
    )


def test_input_document_without_a_context_takes_the_caller_context_in_force() -> None:
    authorization = Authorization(SEARCH, b"{}")

    with caller_context(subject="bob"):
        inside = InputDocument(authorization)
    outside = InputDocument(authorization)

    assert inside.context.as_dict() == {"subject": "bob"}
    assert outside.context.as_dict() == {}


def test_input_document_to_dict_returns_fresh_copies() -> None:
    subject = document()

    first = subject.to_dict()
    first["context"]["subject"] = "root"

    assert subject.to_dict()["context"]["subject"] == "alice"


@pytest.mark.parametrize(
    "literal",
    [
        pytest.param("123456789012345678901234567890", id="big-int"),
        pytest.param("-98765432109876543210987654321", id="big-negative-int"),
        pytest.param("9007199254740993", id="beyond-float64-int"),
        pytest.param("0.1000000000000000000000000000000000001", id="long-decimal"),
        pytest.param("3.14159265358979323846264338327950288419716939937510", id="pi"),
        pytest.param("1.10", id="trailing-zero"),
        pytest.param("-0.0", id="negative-zero"),
    ],
)
def test_input_document_keeps_exact_numbers_byte_for_byte(literal: str) -> None:
    subject = document('{"n": ' + literal + "}")

    raw = subject.to_json()

    assert b'"arguments":{"n":' + literal.encode() + b"}" in raw
    assert subject.to_dict()["arguments"]["n"] == (
        int(literal) if re.fullmatch(r"-?\d+", literal) else Decimal(literal)
    )


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param('{"limit":3,"query":"scope"}', id="sorted"),
        pytest.param('  {"query" : "scope" ,\n\t"limit" : 3 }\r\n', id="whitespace"),
        pytest.param('{"limit":3,\n"query":"scope"}', id="reordered-and-spaced"),
    ],
)
def test_input_document_digest_ignores_argument_member_order_and_whitespace(
    arguments: str,
) -> None:
    assert document(arguments).digest == document().digest


def test_input_document_digest_ignores_nested_member_order() -> None:
    first = document('{"filter":{"a":1,"b":[{"x":1,"y":2}]}}')
    second = document('{ "filter": { "b": [ { "y": 2, "x": 1 } ], "a": 1 } }')

    assert first.digest == second.digest


def test_input_document_digest_is_a_sha256_hex_digest_and_stable() -> None:
    actual = document().digest

    assert re.fullmatch(r"[0-9a-f]{64}", actual)
    assert actual == document().digest


VARIANTS: dict[str, InputDocument] = {
    "base": document(),
    "tool-name": document(
        definition=ToolDefinition("search2", SEARCH.input_schema_json, "Find documents.")
    ),
    "tool-description": document(
        definition=ToolDefinition("search", SEARCH.input_schema_json, "Find.")
    ),
    "tool-schema": document(
        definition=ToolDefinition("search", {"type": "object"}, "Find documents.")
    ),
    "argument-value": document('{"query":"scopf","limit":3}'),
    "argument-number": document('{"query":"scope","limit":4}'),
    "argument-number-literal": document('{"query":"scope","limit":3.0}'),
    "argument-type": document('{"query":"scope","limit":"3"}'),
    "argument-added": document('{"query":"scope","limit":3,"x":null}'),
    "argument-removed": document('{"query":"scope"}'),
    "argument-key": document('{"query":"scope","Limit":3}'),
    "context-field-value": document(context=CallerContext(subject="alice", tenant="acme2")),
    "context-field-added": document(context=CallerContext(subject="alice", tenant="acme", x=0)),
    "context-field-removed": document(context=CallerContext(subject="alice")),
    "context-empty": document(context=CallerContext()),
    "context-value-type": document(context=CallerContext(subject="alice", tenant=["acme"])),
    "argument-moved-into-context": document(
        '{"query":"scope"}', context=CallerContext(subject="alice", tenant="acme", limit=3)
    ),
}


def test_input_document_digest_changes_with_any_change_of_tool_arguments_or_context() -> None:
    digests = {name: variant.digest for name, variant in VARIANTS.items()}

    assert len(set(digests.values())) == len(digests), digests


JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.text(alphabet=IJSON_CHARACTERS)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(alphabet=IJSON_CHARACTERS, max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)
JSON_OBJECTS = st.dictionaries(
    st.text(alphabet=IJSON_CHARACTERS, max_size=5),
    JSON_VALUES,
    max_size=5,
)


def reorder(value: Any, randoms: st.DataObject) -> Any:
    if isinstance(value, dict):
        keys = randoms.draw(st.permutations(list(value)))
        return {key: reorder(value[key], randoms) for key in keys}
    if isinstance(value, list):
        return [reorder(item, randoms) for item in value]
    return value


@given(arguments=JSON_OBJECTS, randoms=st.data(), indent=st.sampled_from([None, 0, 2, "\t"]))
def test_input_document_digest_is_invariant_under_any_member_order_and_layout(
    arguments: dict[str, Any], randoms: st.DataObject, indent: int | str | None
) -> None:
    compact = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    shuffled = json.dumps(reorder(arguments, randoms), ensure_ascii=True, indent=indent)

    assert document(shuffled).digest == document(compact).digest


def test_the_tool_member_shows_title_annotations_and_output_schema_when_present() -> None:
    definition = ToolDefinition(
        "write_file",
        {"type": "object"},
        "Write.",
        title="Write a file",
        annotations={"readOnlyHint": False, "destructiveHint": True},
        output_schema={"type": "object", "required": ["size"]},
    )

    raw = document("{}", definition=definition).to_json()
    tool = json.loads(raw)["tool"]

    assert tool == {
        "name": "write_file",
        "description": "Write.",
        "input_schema": {"type": "object"},
        "title": "Write a file",
        "annotations": {"destructiveHint": True, "readOnlyHint": False},
        "output_schema": {"type": "object", "required": ["size"]},
    }
    # The member is canonical JSON (sorted keys), like the rest of the document.
    member = raw[raw.index(b'"tool":') + len(b'"tool":') :]
    assert member.startswith(
        b'{"annotations":{"destructiveHint":true,"readOnlyHint":false},"description":'
    )


def test_a_tool_without_metadata_shows_only_name_description_and_input_schema() -> None:
    tool = json.loads(document().to_json())["tool"]

    assert set(tool) == {"name", "description", "input_schema"}


def test_the_digest_changes_with_the_tools_annotations() -> None:
    plain = ToolDefinition("w", {"type": "object"})
    hinted = ToolDefinition("w", {"type": "object"}, annotations={"destructiveHint": True})
    other = ToolDefinition("w", {"type": "object"}, annotations={"destructiveHint": False})

    digests = {document("{}", definition=d).digest for d in (plain, hinted, other)}
    assert len(digests) == 3

"""ToolOutput: content items, JSON details and the lossless text projection (seed §2, case 57)."""

from __future__ import annotations

import dataclasses
import re
from decimal import Decimal
from typing import Any

import pytest

from gateway import (
    InvalidToolOutputError,
    MediaContent,
    TextContent,
    ToolOutput,
)

IMAGE = MediaContent("image/png", data=b"\x89PNG")


def test_case57_json_output_projects_to_its_json_text() -> None:
    output = ToolOutput.from_json('{"ok":true}')

    assert (output.content, output.details, output.text()) == ((), b'{"ok":true}', '{"ok":true}')


def test_case57_media_only_output_has_no_text_projection() -> None:
    assert ToolOutput(content=(IMAGE,)).text() is None


def test_case57_text_after_media_still_has_no_text_projection() -> None:
    assert ToolOutput(content=(TextContent("caption"), IMAGE)).text() is None


@pytest.mark.parametrize(
    "item",
    [
        pytest.param({"kind": "tool_call"}, id="case57_tool_call_kind"),
        pytest.param("text", id="plain_string"),
        pytest.param(None, id="none"),
    ],
)
def test_case57_content_items_other_than_text_or_media_are_refused(item: Any) -> None:
    expected = f"tool: invalid tool output: content[1]: {type(item).__name__} is not"
    with pytest.raises(InvalidToolOutputError, match=re.escape(expected)):
        ToolOutput(content=(TextContent("ok"), item))


INVALID_JSON = [
    pytest.param("{", "details: ", id="case57_malformed"),
    pytest.param(None, "details must be JSON text", id="case57_none"),
    pytest.param("", "details are empty", id="case57_empty"),
    pytest.param(b"", "details are empty", id="case57_empty_bytes"),
    pytest.param(" ", "details are empty", id="case57_blank"),
    pytest.param("NaN", "details: non-finite number NaN", id="nan"),
    pytest.param('{"a":1,"a":2}', "details: duplicate member names", id="duplicate_names"),
    pytest.param("{} {}", "details: document is not valid JSON", id="two_documents"),
    pytest.param('"\ud800"', "details: document is not valid UTF-8", id="raw_lone_surrogate"),
    pytest.param('"\\udfff"', "details: string contains a lone surrogate", id="escaped_surrogate"),
    pytest.param(7, "details must be JSON text", id="integer"),
]


@pytest.mark.parametrize(("raw", "message"), INVALID_JSON)
def test_from_json_requires_exactly_one_strict_document(raw: Any, message: str) -> None:
    with pytest.raises(
        InvalidToolOutputError, match=re.escape(f"tool: invalid tool output: {message}")
    ):
        ToolOutput.from_json(raw)


def test_case57_json_null_is_valid_details() -> None:
    output = ToolOutput.from_json("null")

    assert (output.details, output.text(), output.json()) == (b"null", "null", None)


def test_case57_empty_output_is_valid_and_projects_to_empty_text() -> None:
    output = ToolOutput()

    assert (output.content, output.details, output.text()) == ((), None, "")


def test_case57_text_items_concatenate_without_separator() -> None:
    output = ToolOutput(content=(TextContent("first"), TextContent("second")))

    assert output.text() == "firstsecond"


def test_details_are_ignored_by_text_once_content_exists() -> None:
    output = ToolOutput(content=(TextContent("shown"),), details=b'{"hidden":true}')

    assert output.text() == "shown"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", ToolOutput(), id="empty_is_the_empty_output"),
        pytest.param("hi", ToolOutput(content=(TextContent("hi"),)), id="one_item"),
        pytest.param(" ", ToolOutput(content=(TextContent(" "),)), id="whitespace_kept"),
    ],
)
def test_from_text_makes_one_text_item_or_the_empty_output(text: str, expected: ToolOutput) -> None:
    assert ToolOutput.from_text(text) == expected
    assert ToolOutput.from_text(text).text() == text


def test_from_json_keeps_the_bytes_and_does_not_share_a_mutable_buffer() -> None:
    raw = bytearray(b' {"b":1, "a":2} ')
    given: Any = raw
    output = ToolOutput.from_json(given)

    raw[1:2] = b"["

    assert output.details == b' {"b":1, "a":2} '


def test_json_decodes_the_details_with_exact_numbers() -> None:
    output = ToolOutput.from_json('{"n":0.10000000000000000001,"big":9007199254740993}')

    assert output.json() == {"n": Decimal("0.10000000000000000001"), "big": 9007199254740993}
    assert ToolOutput().json() is None


def test_invalid_details_given_directly_are_refused() -> None:
    with pytest.raises(InvalidToolOutputError, match="tool: invalid tool output: details: "):
        ToolOutput(details=b"{")
    bad: Any = '{"a":1}'
    with pytest.raises(InvalidToolOutputError, match="details must be bytes"):
        ToolOutput(details=bad)


def test_text_item_needs_non_empty_text() -> None:
    with pytest.raises(InvalidToolOutputError, match="text item needs text"):
        TextContent("")
    bad: Any = b"bytes"
    with pytest.raises(InvalidToolOutputError, match="text item needs text"):
        TextContent(bad)


def test_citations_belong_to_text_items_and_must_be_text() -> None:
    citations: Any = ["https://a"]
    assert TextContent("t", citations=citations).citations == ("https://a",)
    bad: Any = [1]
    with pytest.raises(InvalidToolOutputError, match="citations must be text"):
        TextContent("t", citations=bad)


@pytest.mark.parametrize(
    ("mime_type", "data", "uri", "message"),
    [
        pytest.param("png", b"x", None, "media needs a MIME type", id="mime_without_slash"),
        pytest.param("image/png", None, None, "exactly one of data or uri", id="neither"),
        pytest.param("image/png", b"x", "https://a", "exactly one of data or uri", id="both"),
    ],
)
def test_media_item_needs_a_mime_type_and_exactly_one_source(
    mime_type: str, data: bytes | None, uri: str | None, message: str
) -> None:
    with pytest.raises(InvalidToolOutputError, match=message):
        MediaContent(mime_type, data=data, uri=uri)


def test_media_data_is_copied_into_immutable_bytes() -> None:
    buffer = bytearray(b"abc")
    item = MediaContent("image/png", data=buffer)  # type: ignore[arg-type]

    buffer[0:1] = b"z"

    assert item.data == b"abc"
    assert type(item.data) is bytes


def test_content_is_an_immutable_snapshot_of_the_given_items() -> None:
    items: list[TextContent | MediaContent] = [TextContent("first")]
    output = ToolOutput.from_items(items)

    items.append(TextContent("second"))

    assert output.content == (TextContent("first"),)
    assert output.text() == "first"


def test_output_and_items_are_frozen() -> None:
    output = ToolOutput.from_text("x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        output.details = b"{}"  # type: ignore[misc]
    item = output.content[0]
    assert isinstance(item, TextContent)
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.text = "y"  # type: ignore[misc]
    assert output.text() == "x"


def test_invalid_tool_output_error_code() -> None:
    assert InvalidToolOutputError.code == "invalid_tool_output"

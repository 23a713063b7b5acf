"""Reading JSON-RPC messages from raw bytes: exact argument bytes, a strict envelope."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import _json
from gateway.mcp._wire import INVALID_REQUEST, PARSE_ERROR, WireError, read_message
from tests.mcp.test_admission_parity import ARGUMENT_DOCUMENTS

HEAD = (
    b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "pay", "arguments": '
)


@given(arguments=ARGUMENT_DOCUMENTS, space=st.sampled_from([b"", b" ", b"\t\r\n "]))
def test_a_tool_calls_arguments_are_kept_byte_for_byte(arguments: bytes, space: bytes) -> None:
    message = read_message(HEAD + space + arguments + space + b"}}")

    assert message.is_tool_call
    assert message.request_id == 3
    assert message.arguments == (None if arguments == b"null" else arguments)
    # The SDK is handed the same message with the arguments replaced by an empty object.
    envelope = _json.parse(message.body)
    assert envelope["params"] == {"name": "pay", "arguments": {}}


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "tools/list"}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "method": "tools/list"}',
        HEAD.replace(b'"name": "pay"', b'"name": "pay", "name": "other"') + b"{}}}",
        HEAD + b'{}, "arguments": {"amount": 5}}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}, "params": {}}',
        b'{"jsonrpc": "2.0", "id": NaN, "method": "ping"}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "\\ud800"}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": {"a": 1, "a": 2}}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "p\xffng"}',
        HEAD + b'{"amount": [}}}',
        HEAD + b'{"amount": 5}} x',
        HEAD + b"}}",
        b"",
        b"   ",
        b"{",
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping"',
        b"\xef\xbb\xbf{}",
    ],
)
def test_an_envelope_that_is_not_strict_json_is_a_parse_error(body: bytes) -> None:
    with pytest.raises(WireError) as refused:
        read_message(body)

    assert refused.value.code == PARSE_ERROR
    assert refused.value.message == "Parse error: the message is not strict JSON"


@pytest.mark.parametrize(
    "body",
    [
        b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]',
        b"7",
        b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}',
        b'{"jsonrpc": "2.0", "id": true, "method": "ping"}',
        b'{"jsonrpc": "2.0", "id": [1], "method": "ping"}',
    ],
)
def test_a_batch_or_an_id_that_is_not_a_string_or_integer_is_an_invalid_request(
    body: bytes,
) -> None:
    with pytest.raises(WireError) as refused:
        read_message(body)

    assert refused.value.code == INVALID_REQUEST


def test_other_messages_are_handed_on_unchanged() -> None:
    body = (
        b'{"jsonrpc": "2.0", "id": "a", "method": "tools/list", "params": {"arguments": {"x": 1}}}'
    )
    notification = b'{"jsonrpc": "2.0", "method": "tools/call", "params": {"arguments": {}}}'

    listed, notified = read_message(body), read_message(notification)

    assert (listed.body, listed.is_tool_call, listed.request_id) == (body, False, "a")
    assert (notified.body, notified.is_tool_call, notified.request_id) == (
        notification,
        False,
        None,
    )


def test_absent_or_null_arguments_mean_no_arguments() -> None:
    absent = read_message(
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}}'
    )
    null = read_message(HEAD + b"null}}")

    assert absent.arguments is None
    assert null.arguments is None
    assert absent.is_tool_call


def test_any_depth_of_arguments_is_located_without_recursion() -> None:
    arguments = b"[" * 200_000 + b"]" * 200_000

    message = read_message(HEAD + arguments + b"}}")

    assert message.arguments == arguments


@settings(max_examples=400)
@given(
    data=st.binary(max_size=200) | st.from_regex(rb'[{}\[\]",:\\ a-z0-9\-.]{0,60}', fullmatch=True)
)
def test_any_bytes_are_read_or_refused_with_a_json_rpc_error_only(data: bytes) -> None:
    for body in (data, HEAD + data + b"}}", HEAD + data):
        try:
            message = read_message(body)
        except WireError as error:
            assert error.code in {PARSE_ERROR, INVALID_REQUEST}  # noqa: PT017 - any of many bodies
        else:
            assert isinstance(_json.parse(message.body), dict)
            if message.arguments is not None:
                assert message.arguments in body


@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
        max_leaves=10,
    )
)
def test_the_arguments_of_any_ordinary_json_value_decode_to_that_value(value: object) -> None:
    arguments = json.dumps(value).encode()

    message = read_message(HEAD + arguments + b"}}")

    assert (
        message.arguments is None
        if value is None
        else _json.parse(message.arguments or b"") == value
    )

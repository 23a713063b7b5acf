"""Reading JSON-RPC messages from raw bytes: exact argument bytes, a strict envelope."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway import _json
from gateway.mcp._wire import INVALID_REQUEST, PARSE_ERROR, Message, WireError, read_message
from tests.helpers import json_text
from tests.mcp import wire_reference
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
        st.none() | st.booleans() | st.integers() | json_text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(json_text(max_size=3), c, max_size=3),
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


def _outcome(read: Callable[[bytes], Message], data: bytes) -> object:
    try:
        return read(data)
    except WireError as error:
        return ("refused", error.code, error.message, error.request_id)


_SPACE = st.sampled_from([b"", b"", b"", b" ", b"\n", b"\t \r\n"])
_TOKENS = st.sampled_from(
    [b'"tools/call"', b'"tools\\/call"', b'"ping"', b"7", b'"7"', b"true", b"null", b"1.5",
     b"NaN", b'"\\ud800"', b'"p\xffng"', b'"\x01"', b"{}", b"[]", b'{"a":1,"a":2}', b"[1,"]
)  # fmt: skip
_ARGUMENT_BYTES = st.one_of(
    ARGUMENT_DOCUMENTS,
    _TOKENS,
    st.binary(max_size=12),
    # Balanced but not JSON: located by the structural scan alone, judged by admission.
    st.sampled_from(
        [
            b'{"x": [1, {"y": "\\""}]}',
            b'{"s": "}\\"{"}',
            b"[[[[[]]]]]",
            b'{"a": tru}',
            b"[1,,2]",
            b'{"a" 1}',
            b'{"k": "\\q"}',
            b'"\\x"',
            b"[x]",
        ]
    ),
)


@st.composite
def _messages(draw: st.DrawFn) -> bytes:
    # JSON-RPC shaped objects over the wire, member by member: usual members and odd ones,
    # repeated names, any order and spacing, arguments as any bytes at all; sometimes one
    # byte more, less or changed anywhere.
    def member(name: bytes, value: bytes) -> bytes:
        return draw(_SPACE) + name + draw(_SPACE) + b":" + draw(_SPACE) + value + draw(_SPACE)

    params = [member(b'"name"', draw(st.sampled_from([b'"echo"', b"3", b'"e\\u0063ho"'])))]
    if draw(st.booleans()):
        params.append(member(b'"arguments"', draw(_ARGUMENT_BYTES)))
    if draw(st.booleans()):
        params.append(member(b'"_meta"', draw(_TOKENS)))
    if draw(st.integers(0, 6)) == 0:
        params.append(member(draw(st.sampled_from([b'"arguments"', b'"name"'])), b"{}"))
    members = [
        member(b'"jsonrpc"', b'"2.0"'),
        member(b'"method"', draw(_TOKENS)),
        member(b'"params"', b"{" + b",".join(draw(st.permutations(params))) + b"}"),
    ]
    if draw(st.booleans()):
        members.append(member(b'"id"', draw(_TOKENS)))
    if draw(st.integers(0, 6)) == 0:
        members.append(
            member(draw(st.sampled_from([b'"id"', b'"method"', b'"p\\u0061rams"'])), b"1")
        )
    data = draw(_SPACE) + b"{" + b",".join(draw(st.permutations(members))) + b"}" + draw(_SPACE)
    edit = draw(st.integers(0, 3))
    if edit and data:
        at = draw(st.integers(0, len(data) - 1))
        byte = bytes([draw(st.sampled_from(b'{}[]",:\\ 0a\xff'))])
        data = {1: data[:at] + byte + data[at:], 2: data[:at] + data[at + 1 :]}.get(
            edit, data[:at] + byte + data[at + 1 :]
        )
    return data


@settings(max_examples=600)
# Each step of the scan at least once: arguments only the structural scan can locate, a
# method spelled with an escape, white space of every kind between the tokens.
@example(HEAD + b'{"a": tru}}}')
@example(b'{"jsonrpc":"2.0","id":1,"method":"tools\\/call","params":{"arguments":{"x":1}}}')
@example(b'\t{ "jsonrpc"\t:\r"2.0" ,\n"id": 1,"method":"ping" }\n')
@given(data=_messages() | st.binary(max_size=80))
def test_property_the_reader_reads_every_message_as_the_earlier_reader_did(data: bytes) -> None:
    # The scan is inlined for speed (it runs on every message a client sends); the earlier
    # step-by-step scan (tests/mcp/wire_reference.py) is the oracle: the same message, the
    # same exact argument bytes, or the same JSON-RPC refusal, for any bytes.
    assert _outcome(read_message, data) == _outcome(wire_reference.read_message, data)

"""The MCP wire reader as it was before its scan was inlined: the oracle of test_wire.

A copy of the earlier ``gateway.mcp._wire`` scan, step by step through small functions.
The differential test holds :func:`gateway.mcp._wire.read_message` to :func:`read_message`
here: the same message, or the same refusal, for every input.
"""

from __future__ import annotations

import json
import re
from typing import Final

from gateway import _json
from gateway.mcp._wire import INVALID_REQUEST, PARSE_ERROR, Message, RequestId, WireError


class _MalformedError(Exception):
    pass


_WS_RUN: Final = re.compile(rb"[ \t\n\r]*")
#: Finds where a bracketed or quoted value ends at C speed; lenient, so only a shortcut.
_LENIENT: Final = json.JSONDecoder(strict=False)
_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STRUCTURAL: Final = re.compile(rb'["\[\]{}]')
_SCALAR_END: Final = re.compile(rb'[\s,\]}\[{":]')
_OPEN: Final = {ord("{"): ord("}"), ord("["): ord("]")}
_PLACEHOLDER: Final = b"{}"
_ENVELOPE_DEPTH: Final = 64


def _skip(data: bytes, index: int) -> int:
    match = _WS_RUN.match(data, index)
    return index if match is None else match.end()


def _string_end(data: bytes, index: int) -> int:
    match = _STRING.match(data, index)
    if match is None:
        raise _MalformedError
    return match.end()


def _value_end(data: bytes, index: int, text: str) -> int:
    """The end of the JSON value starting at ``index``: structure only, tokens unjudged.

    ``text`` is ``data`` decoded as Latin-1 (one character per byte, so the same offsets).
    An object, array or string that the lenient C decoder reads whole ends where it says:
    its closing bracket or quote is the one the structural scan below would find. Anything
    else (a scalar, or a value it refuses) is located by that scan.
    """
    if index >= len(data):
        raise _MalformedError
    first = data[index]
    if first in _OPEN or first == ord('"'):
        try:
            return int(_LENIENT.raw_decode(text, index)[1])
        except (ValueError, RecursionError):
            pass
    return _scan_end(data, index)


def _scan_end(data: bytes, index: int) -> int:
    first = data[index]
    if first == ord('"'):
        return _string_end(data, index)
    if first not in _OPEN:
        match = _SCALAR_END.search(data, index)
        end = len(data) if match is None else match.start()
        if end == index:
            raise _MalformedError
        return end
    # Iterative: any depth is located here; admission bounds it.
    closers = [_OPEN[first]]
    position = index + 1
    while True:
        match = _STRUCTURAL.search(data, position)
        if match is None:
            raise _MalformedError
        byte = data[match.start()]
        if byte == ord('"'):
            position = _string_end(data, match.start())
            continue
        position = match.end()
        if byte in _OPEN:
            closers.append(_OPEN[byte])
        elif closers.pop() != byte:
            raise _MalformedError
        elif not closers:
            return position


def _name(data: bytes, start: int, end: int) -> str:
    """The member name of the string token ``data[start:end]`` (quotes included)."""
    raw = data[start + 1 : end - 1]
    if b"\\" not in raw:
        # No escape: the name is its UTF-8 text. Control characters are judged with the
        # envelope, which keeps every member name (only a tool call's arguments are cut).
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _MalformedError from None
    try:
        name = _json.parse(data[start:end])
    except _json.StrictJSONError:
        raise _MalformedError from None
    assert isinstance(name, str)
    return name


def _members(data: bytes, index: int, text: str) -> tuple[dict[str, tuple[int, int]], int]:
    """The member spans of the object at ``index`` (duplicate names are malformed)."""
    members: dict[str, tuple[int, int]] = {}
    index = _skip(data, index)
    if index >= len(data) or data[index] != ord("{"):
        raise _MalformedError
    index = _skip(data, index + 1)
    if index < len(data) and data[index] == ord("}"):
        return members, index + 1
    while True:
        if index >= len(data) or data[index] != ord('"'):
            raise _MalformedError
        end = _string_end(data, index)
        name = _name(data, index, end)
        if name in members:
            raise _MalformedError
        index = _skip(data, end)
        if index >= len(data) or data[index] != ord(":"):
            raise _MalformedError
        start = _skip(data, index + 1)
        end = _value_end(data, start, text)
        members[name] = (start, end)
        index = _skip(data, end)
        if index >= len(data):
            raise _MalformedError
        if data[index] == ord("}"):
            return members, index + 1
        if data[index] != ord(","):
            raise _MalformedError
        index = _skip(data, index + 1)


def _strict(data: bytes) -> object:
    try:
        return _json.parse(data, max_depth=_ENVELOPE_DEPTH)
    except _json.StrictJSONError:
        raise _MalformedError from None


def _request_id(envelope: dict[str, object]) -> RequestId | None:
    if "id" not in envelope:
        return None
    value = envelope["id"]
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise WireError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    return value


def _read(data: bytes) -> Message:
    start = _skip(data, 0)
    if start < len(data) and data[start] != ord("{"):
        _strict(data)  # a parse error if it is not JSON at all
        raise WireError(INVALID_REQUEST, "Invalid Request: the message must be one JSON object")
    text = data.decode("latin-1")
    members, end = _members(data, start, text)
    if _skip(data, end) != len(data):
        raise _MalformedError
    method_span = members.get("method")
    method = _strict(data[method_span[0] : method_span[1]]) if method_span else None
    body = data
    arguments: bytes | None = None
    is_tool_call = method == "tools/call" and "id" in members
    params_span = members.get("params")
    if is_tool_call and params_span is not None and data[params_span[0]] == ord("{"):
        params, _ = _members(data, params_span[0], text)
        span = params.get("arguments")
        if span is not None:
            first, last = span
            arguments = data[first:last]
            if arguments == b"null":
                arguments = None
            body = data[:first] + _PLACEHOLDER + data[last:]
    envelope = _strict(body)
    assert isinstance(envelope, dict)
    return Message(
        body=body,
        method=method if isinstance(method, str) else None,
        request_id=_request_id(envelope),
        is_tool_call=is_tool_call,
        arguments=arguments,
    )


def read_message(data: bytes) -> Message:
    """The earlier reader: a Message, or WireError as it raised it."""
    try:
        return _read(data)
    except _MalformedError:
        raise WireError(PARSE_ERROR, "Parse error: the message is not strict JSON") from None

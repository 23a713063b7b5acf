"""The MCP wire reader's scan as it was before it was inlined: the oracle of test_wire.

The functions the inlining rewrote (the member scan, the value end, the message read), as
they were, step by step; the helpers it left as they are come from
:mod:`gateway.mcp._wire`. The differential test holds
:func:`gateway.mcp._wire.read_message` to :func:`read_message` here: the same message, or the
same refusal, for every input.
"""

from __future__ import annotations

from gateway.mcp._wire import (
    _LENIENT,
    _OPEN,
    _PLACEHOLDER,
    INVALID_REQUEST,
    PARSE_ERROR,
    Message,
    WireError,
    _MalformedError,
    _name,
    _request_id,
    _scan_end,
    _skip,
    _strict,
    _string_end,
)


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

"""Reading one JSON-RPC message without losing the bytes of a tool call's arguments.

The MCP SDK decodes a message with a lenient JSON parser before any handler runs: duplicate
member names keep the last, long decimals become floats, ``NaN`` is a number. A tool call's
arguments decoded that way are not the bytes the caller sent, so admission could not judge
them as the HTTP API does. :func:`read_message` runs on the raw bytes, before the SDK:

- the ``params.arguments`` member of a ``tools/call`` request is located by a structural
  scan (strings, brackets) and kept as the exact bytes that were sent, whatever they
  contain (duplicates, any number, lone surrogates, invalid UTF-8, any depth); only
  :meth:`~gateway.Contract.prepare` judges them, exactly as for the HTTP API;
- the SDK is handed the message with those bytes replaced by ``{}``;
- the rest of the message (the envelope) must be strict JSON (RFC 7493): duplicate member
  names, non-finite numbers, lone surrogates, invalid UTF-8 or excessive nesting anywhere
  outside the arguments refuse the whole message with a JSON-RPC parse error, so the
  gateway and the SDK can never read two different messages from the same bytes.

An ``arguments`` member that is absent or ``null`` (what the MCP SDKs send for a call
without arguments) means no arguments, ``{}``, as an absent or blank HTTP argument document.

Both MCP transports (stdio and streamable HTTP) read every message with
:func:`read_jsonrpc`: :func:`read_message`, then the JSON-RPC 2.0 shape, judged here, so the
SDK never refuses a message with its own validation text (which quotes what was sent).

What goes back is held to one rule, at the transport boundary (:func:`public_error`,
:func:`public_errors`): a JSON-RPC error with a protocol code (parse error, invalid request,
method not found, invalid params) never quotes anything the caller sent. Its message is one
of the fixed texts in :data:`PUBLIC_TEXTS` or else the code's own fixed text, and it carries
no ``data`` but the gateway's own ``gateway/*`` members. The request ``id`` is echoed, as
JSON-RPC requires, when it is a string or an integer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import mcp_types as types
from pydantic import ValidationError

from gateway import _json

#: The scope key (ASGI scope, or a stdio message's request scope) holding its :class:`Message`.
MESSAGE_SCOPE_KEY: Final = "gateway.mcp.message"
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
#: The fixed message of each protocol error code (JSON-RPC 2.0, section 5.1).
PROTOCOL_ERRORS: Final[Mapping[int, str]] = {
    PARSE_ERROR: "Parse error",
    INVALID_REQUEST: "Invalid Request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
}
#: The texts a protocol error may carry besides its code's own: written by the gateway or
#: the SDK as constants, none with anything of a message in it. Any other text (the SDK's
#: validation dumps, an upstream's message) is replaced by the code's fixed text.
PUBLIC_TEXTS: Final = frozenset(
    {
        # this reader and the stdio framing
        "Parse error: the message is not strict JSON",
        "Invalid Request: the message must be one JSON object",
        "Invalid Request: id must be a string or an integer",
        "Invalid Request: too large",
        # the gateway's handlers (gateway.mcp._front, _bridge, _upstream, _sessions)
        "the request could not be read",
        "Invalid or expired requestState",
        "inputResponses: an answer is not valid",
        "Prompt not found",
        "Resource not found",
        "unknown upstream server",
        "the upstream does not offer this subscription",
        "authentication required",
        "Session not found",
        # the SDK's fixed texts
        "Invalid request parameters",
        "Body must be a single JSON-RPC request or notification object",
        "Bad Request: Missing session ID",
        "Unsupported Media Type: Content-Type must be application/json",
        "this connection serves the handshake protocol era; "
        "requests carrying the 2026-07-28 envelope are not accepted on it",
    }
)
#: The ``data`` members a protocol error may keep: the gateway's own (a refusal's code).
_PUBLIC_DATA_PREFIX: Final = "gateway/"

_WS_RUN: Final = re.compile(rb"[ \t\n\r]*")
#: Finds where a bracketed or quoted value ends at C speed; lenient, so only a shortcut.
_LENIENT: Final = json.JSONDecoder(strict=False)
#: Its scanner, called without ``raw_decode``'s frame (StopIteration: no value there); the
#: attribute is set by ``JSONDecoder.__init__``, which the type stubs do not declare.
_Scan = Callable[[str, int], tuple[object, int]]
_LENIENT_SCAN: Final[_Scan] = _LENIENT.scan_once  # type: ignore[attr-defined]
_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STRUCTURAL: Final = re.compile(rb'["\[\]{}]')
_SCALAR_END: Final = re.compile(rb'[\s,\]}\[{":]')
_OPEN: Final = {ord("{"): ord("}"), ord("["): ord("]")}
_PLACEHOLDER: Final = b"{}"
_LBRACE, _RBRACE, _QUOTE, _COLON, _COMMA = b'{}":,'
_WS: Final = frozenset(b" \t\n\r")
_ENVELOPE_DEPTH: Final = 64

RequestId = int | str


@dataclass(frozen=True, slots=True)
class Message:
    """One JSON-RPC message read from the wire.

    Attributes:
        body: the message to hand to the SDK (a tool call's arguments replaced by ``{}``).
        method: the ``method`` member when it is a string.
        request_id: the ``id`` member (a request or a response), when present.
        is_tool_call: whether this is a ``tools/call`` request.
        arguments: for a tool call, the exact bytes of its ``arguments`` member (``None``
            when absent or ``null``).
    """

    body: bytes
    method: str | None
    request_id: RequestId | None
    is_tool_call: bool = False
    arguments: bytes | None = None


class WireError(Exception):
    """A message refused before the SDK sees it (``message`` is public and quotes nothing)."""

    def __init__(self, code: int, message: str, request_id: RequestId | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


class _MalformedError(Exception):
    pass


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
    if first in _OPEN or first == _QUOTE:
        try:
            return int(_LENIENT_SCAN(text, index)[1])
        except (StopIteration, ValueError, RecursionError):
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
    assert isinstance(name, str)  # noqa: S101 - a string token
    return name


def _members(  # noqa: PLR0912 - inlined on purpose, see below
    data: bytes, index: int, text: str
) -> tuple[dict[str, tuple[int, int]], int]:
    """The member spans of the object at ``index`` (duplicate names are malformed)."""
    # Every step inlined: this runs on every message read from a client, twice for a tool
    # call. White space is skipped (a call) only where there is some:
    # a client's compact JSON has none.
    string = _STRING.match
    size = len(data)
    members: dict[str, tuple[int, int]] = {}
    if index < size and data[index] in _WS:
        index = _skip(data, index)
    if index >= size or data[index] != _LBRACE:
        raise _MalformedError
    index += 1
    if index < size and data[index] in _WS:
        index = _skip(data, index)
    if index < size and data[index] == _RBRACE:
        return members, index + 1
    while True:
        if index >= size or data[index] != _QUOTE:
            raise _MalformedError
        token = string(data, index)
        if token is None:
            raise _MalformedError
        end = token.end()
        name = _name(data, index, end)
        if name in members:
            raise _MalformedError
        index = end
        if index < size and data[index] in _WS:
            index = _skip(data, index)
        if index >= size or data[index] != _COLON:
            raise _MalformedError
        start = index + 1
        if start < size and data[start] in _WS:
            start = _skip(data, start)
        end = _value_end(data, start, text)
        members[name] = (start, end)
        index = end
        if index < size and data[index] in _WS:
            index = _skip(data, index)
        if index >= size:
            raise _MalformedError
        byte = data[index]
        if byte == _RBRACE:
            return members, index + 1
        if byte != _COMMA:
            raise _MalformedError
        index += 1
        if index < size and data[index] in _WS:
            index = _skip(data, index)


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


def read_message(data: bytes) -> Message:
    """Read one JSON-RPC message (a single object; batches are not part of MCP).

    Raises:
        WireError: the envelope is not strict JSON (:data:`PARSE_ERROR`), or not one
            JSON-RPC object with a string or integer id (:data:`INVALID_REQUEST`).
    """
    try:
        return _read(data)
    except _MalformedError:
        raise WireError(PARSE_ERROR, "Parse error: the message is not strict JSON") from None


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
    # A string's text (the envelope's strict parse below judges the token, member and
    # all); anything else is no method.
    method = (
        _name(data, *method_span)
        if method_span is not None and data[method_span[0]] == _QUOTE
        else None
    )
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
    assert isinstance(envelope, dict)  # noqa: S101 - the scan found an object
    return Message(
        body=body,
        method=method if isinstance(method, str) else None,
        request_id=_request_id(envelope),
        is_tool_call=is_tool_call,
        arguments=arguments,
    )


def read_jsonrpc(data: bytes) -> tuple[Message, types.JSONRPCMessage]:
    """Read one message as :func:`read_message` does, and judge its JSON-RPC shape.

    Returns:
        The message, and the SDK's model of it (what the SDK would read from its body).

    Raises:
        WireError: :func:`read_message` refused it, or it is not a JSON-RPC 2.0 request,
            notification, response or error (:data:`INVALID_REQUEST`, a fixed message,
            the id echoed when it is a string or an integer).
    """
    message = read_message(data)
    try:
        parsed = types.jsonrpc_message_adapter.validate_json(message.body, by_name=False)
    except (ValidationError, ValueError):
        # Never the SDK's text: it quotes the values it could not read.
        raise WireError(
            INVALID_REQUEST, PROTOCOL_ERRORS[INVALID_REQUEST], message.request_id
        ) from None
    return message, parsed


def _public_data(data: object) -> dict[str, Any] | None:
    if not isinstance(data, Mapping):
        return None
    kept = {
        key: value
        for key, value in data.items()
        if isinstance(key, str) and key.startswith(_PUBLIC_DATA_PREFIX)
    }
    return kept or None


def public_error(code: int, message: object, data: object = None) -> tuple[str, Any] | None:
    """The message and data a protocol error may carry (``None``: send it unchanged).

    Only the protocol codes (:data:`PROTOCOL_ERRORS`) are judged; any other code is the
    gateway's or an extension's own (a refusal, an unsupported revision) and is left as is.
    """
    fixed = PROTOCOL_ERRORS.get(code) if type(code) is int else None
    if fixed is None:
        return None
    public_message = message if isinstance(message, str) and message in PUBLIC_TEXTS else fixed
    public_data = _public_data(data)
    if public_message == message and public_data == data:
        return None
    return public_message, public_data


def public_error_data(error: types.ErrorData) -> types.ErrorData:
    """``error`` as it may be sent (see :func:`public_error`)."""
    public = public_error(error.code, error.message, error.data)
    if public is None:
        return error
    message, data = public
    if data is None:
        return types.ErrorData(code=error.code, message=message)
    return types.ErrorData(code=error.code, message=message, data=data)


def _public_member(value: object) -> object | None:
    # A JSON-RPC error object made public, or None when it may go as it is.
    if not isinstance(value, dict):
        return None
    error = value.get("error")
    if not isinstance(error, dict):
        return None
    public = public_error(error.get("code"), error.get("message"), error.get("data"))  # type: ignore[arg-type]
    if public is None:
        return None
    message, data = public
    fixed: dict[str, Any] = {"code": error["code"], "message": message}
    if data is not None:
        fixed["data"] = data
    return {**value, "error": fixed}


def public_errors(body: bytes) -> bytes:
    """A JSON-RPC message (or batch) as encoded bytes, its errors made public.

    Bytes that are not JSON, or hold no error that must change, are returned unchanged.
    """
    if b'"error"' not in body:
        return body
    try:
        value = json.loads(body)
    except ValueError:
        return body
    if isinstance(value, list):
        fixed = [_public_member(item) for item in value]
        if all(item is None for item in fixed):
            return body
        value = [item if new is None else new for item, new in zip(value, fixed, strict=True)]
    else:
        new = _public_member(value)
        if new is None:
            return body
        value = new
    return json.dumps(value, separators=(",", ":")).encode()

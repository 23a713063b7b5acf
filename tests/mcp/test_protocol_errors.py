"""No protocol error, over MCP HTTP or stdio, quotes anything the caller sent.

Malformed and unknown JSON-RPC messages carry a random marker in every position a caller
controls: the ``jsonrpc`` version, the method, the params, a tool call's nested arguments,
an id of the wrong type, extra members, a posted response or error, a batch. Each is sent
over MCP streamable HTTP (raw posts in one session) and over the stdio transport (OS pipes),
as a request and as a notification. The marker is in no response body and no log line
(the process logs at ``debug``, as ``gateway mcp --log-level debug`` configures it), while
each error carries the JSON-RPC code the specification names and, when the id was a string
or an integer, echoes that id.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.mcp._wire import PROTOCOL_ERRORS, PUBLIC_TEXTS, public_error, public_errors
from tests.logging_capture import captured_logging
from tests.mcp.surfaces import McpHttp, McpStdio, sse_messages

PROTOCOL_CODES = set(PROTOCOL_ERRORS)
#: The reproducer of the review: a version the SDK refuses, an argument value it echoed.
REPRODUCER = {
    "jsonrpc": "2.1",
    "method": "tools/call",
    "params": {"name": "add", "arguments": {"api_key": "ZqSECRETzq9x"}},
}


@pytest.fixture(scope="module")
def captured() -> Iterator[io.StringIO]:
    """The process's logging as ``gateway mcp --log-level debug`` sets it, into a buffer."""
    with captured_logging() as stream:
        yield stream


@pytest.fixture(scope="module")
def http(captured: io.StringIO) -> Iterator[McpHttp]:
    surface = McpHttp()
    try:
        yield surface
    finally:
        surface.close()


@pytest.fixture(scope="module")
def stdio(captured: io.StringIO) -> Iterator[McpStdio]:
    surface = McpStdio()
    try:
        yield surface
    finally:
        surface.close()


_MARKERS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=6, max_size=14).map(
    lambda text: f"Zq{text}X"
)
_GOOD_METHODS = st.sampled_from(
    ["tools/call", "tools/list", "ping", "resources/read", "prompts/get", "initialize"]
)


@st.composite
def _malformed(draw: st.DrawFn, marker: str) -> tuple[Any, Any]:
    """A malformed or unknown message with ``marker`` somewhere; and its echoable id."""
    nested: Any = draw(
        st.sampled_from(
            [
                marker,
                {"api_key": marker},
                [marker],
                {marker: 1},
                {"deep": {"er": [1, {"key": marker}]}},
            ]
        )
    )
    arguments = {"name": draw(st.sampled_from(["pay", "add", marker])), "arguments": nested}
    message: dict[str, Any] = {
        "jsonrpc": "2.0",
        "method": draw(_GOOD_METHODS),
        "params": arguments,
    }
    request_id: Any = draw(st.sampled_from([None, 7, "r-1"]))
    position = draw(
        st.sampled_from(
            [
                "version",
                "method",
                "params",
                "params_member",
                "meta",
                "id",
                "extra",
                "response",
                "error",
                "no_version",
            ]
        )
    )
    if position == "version":
        message["jsonrpc"] = draw(st.sampled_from([marker, "2.1", "1.0", 2]))
    elif position == "method":
        message["method"] = draw(st.sampled_from([marker, f"tools/{marker}", f"{marker}/call"]))
    elif position == "params":
        message["params"] = draw(st.sampled_from([marker, [marker], 3, True]))
    elif position == "params_member":
        message["method"] = draw(st.sampled_from(["tools/list", "ping", "logging/setLevel"]))
        message["params"] = {"cursor": nested, "level": marker, "_meta": marker}
    elif position == "meta":
        message["params"] = {**arguments, "_meta": {"progressToken": nested}}
        message["jsonrpc"] = "2.1"
    elif position == "id":
        request_id = None
        message["id"] = draw(
            st.sampled_from([[marker], {"x": marker}, 1.5, True, {marker: marker}])
        )
    elif position == "extra":
        message[marker] = nested
        message["jsonrpc"] = draw(st.sampled_from(["2.1", marker]))
    elif position == "response":
        message = {"jsonrpc": "2.0", "result": nested, "method": marker}
    elif position == "error":
        message = {"jsonrpc": "2.0", "error": {"code": -32601, "message": marker, "data": nested}}
    else:
        del message["jsonrpc"]
    if request_id is not None and position != "id":
        message["id"] = request_id
    if draw(st.integers(0, 5)) == 0:
        return [message], None
    return message, request_id


@st.composite
def _cases(draw: st.DrawFn) -> tuple[str, bytes, Any]:
    marker = draw(_MARKERS)
    message, request_id = draw(_malformed(marker))
    return marker, json.dumps(message).encode(), request_id


def _check_errors(messages: list[dict[str, Any]], request_id: Any) -> None:
    for answer in messages:
        error = answer.get("error")
        if not isinstance(error, dict):
            continue
        if error["code"] in PROTOCOL_CODES:
            assert error["message"] in PUBLIC_TEXTS | set(PROTOCOL_ERRORS.values()), answer
            assert "data" not in error or not isinstance(error["data"], str), answer
        if request_id is not None:
            assert answer["id"] == request_id, answer


def _stdio_answers(stdio: McpStdio, line: bytes, fence: int) -> list[bytes]:
    """Every line the server writes for ``line``, up to the answer to a ping ``fence``."""
    stdio.send(line)
    stdio.send(json.dumps({"jsonrpc": "2.0", "id": f"fence-{fence}", "method": "ping"}).encode())
    lines: list[bytes] = []
    while True:
        answer = stdio._reader.readline()
        assert answer, "the stdio server closed its output"
        if json.loads(answer).get("id") == f"fence-{fence}":
            return lines
        lines.append(answer)


_SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_SETTINGS
@example(case=("ZqSECRETzq9x", json.dumps(REPRODUCER).encode(), None))
@example(case=("ZqSECRETzq9x", b'{"jsonrpc":"2.0","id":1,"method":"ZqSECRETzq9x"}', 1))
@given(case=_cases())
def test_property_no_http_error_body_or_log_line_quotes_the_caller(
    case: tuple[str, bytes, Any], http: McpHttp, captured: io.StringIO
) -> None:
    marker, body, request_id = case
    response = http.post(body, session=True)

    assert marker not in response.text
    assert response.status_code < 500
    if response.text.strip():
        _check_errors(sse_messages(response), request_id)
    assert marker not in captured.getvalue()


@_SETTINGS
@example(case=("ZqSECRETzq9x", json.dumps(REPRODUCER).encode(), None))
@example(case=("ZqSECRETzq9x", b'{"jsonrpc":"2.0","id":1,"method":"ZqSECRETzq9x"}', 1))
@given(case=_cases())
def test_property_no_stdio_error_line_or_log_line_quotes_the_caller(
    case: tuple[str, bytes, Any], stdio: McpStdio, captured: io.StringIO
) -> None:
    marker, body, request_id = case
    fence = stdio._next = stdio._next + 1
    lines = _stdio_answers(stdio, body, fence)

    assert not [line for line in lines if marker.encode() in line]
    _check_errors([json.loads(line) for line in lines], request_id)
    assert marker not in captured.getvalue()


def test_the_reproducer_is_an_invalid_request_with_the_fixed_text_on_both_transports(
    http: McpHttp, stdio: McpStdio
) -> None:
    body = json.dumps({**REPRODUCER, "id": 41}).encode()
    over_http = http.post(body, session=True)
    (over_stdio,) = _stdio_answers(stdio, body, 10_000)

    assert over_http.status_code == 400
    expected = {"jsonrpc": "2.0", "id": 41, "error": {"code": -32600, "message": "Invalid Request"}}
    assert over_http.json() == json.loads(over_stdio) == expected


def test_an_unknown_method_is_method_not_found_without_its_name_on_both_transports(
    http: McpHttp, stdio: McpStdio
) -> None:
    body = b'{"jsonrpc":"2.0","id":"u1","method":"ZqSECRETzq9x"}'
    (over_http,) = sse_messages(http.post(body, session=True))
    (over_stdio,) = _stdio_answers(stdio, body, 10_001)

    expected = {
        "jsonrpc": "2.0",
        "id": "u1",
        "error": {"code": -32601, "message": "Method not found"},
    }
    assert over_http == json.loads(over_stdio) == expected


@pytest.mark.parametrize(
    ("error", "public"),
    [
        ({"code": -32601, "message": "Method not found", "data": "x"}, ("Method not found", None)),
        ({"code": -32602, "message": "Validation error: x"}, ("Invalid params", None)),
        (
            {"code": -32600, "message": "Invalid Request", "data": {"a": 1}},
            ("Invalid Request", None),
        ),
        ({"code": -32700, "message": "Parse error: at x"}, ("Parse error", None)),
        ({"code": -32602, "message": "Prompt not found"}, None),
        ({"code": -32602, "message": "x", "data": {"gateway/code": "denied"}}, None),
        ({"code": -32010, "message": "x", "data": "x"}, None),
        ({"code": -32022, "message": "x", "data": {"requested": "x"}}, None),
    ],
)
def test_only_protocol_errors_are_held_to_the_fixed_texts(
    error: dict[str, Any], public: tuple[str, Any] | None
) -> None:
    if error.get("data") == {"gateway/code": "denied"}:
        public = ("Invalid params", {"gateway/code": "denied"})
    assert public_error(error["code"], error["message"], error.get("data")) == public


def test_public_errors_rewrites_a_message_and_a_batch_and_leaves_the_rest_alone() -> None:
    one = (
        b'{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found","data":"s"}}'
    )
    fixed = b'{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}'
    assert public_errors(one) == fixed
    assert json.loads(public_errors(b"[" + one + b"]")) == [json.loads(fixed)]
    result = b'{"jsonrpc":"2.0","id":1,"result":{"error":"s"}}'
    assert public_errors(result) is result
    assert public_errors(b"not json") == b"not json"

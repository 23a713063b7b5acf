"""The same argument bytes get the same admission and decision on every surface.

Each document is sent as the ``arguments`` of a tool call over MCP streamable HTTP and MCP
stdio (byte for byte inside the JSON-RPC message), and over the HTTP API (as JSON text,
which reaches admission verbatim, and inline in the body). The reference is
:meth:`Contract.prepare` on the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import ToolCall, bind
from gateway._errors import InvalidInvocationError
from tests.mcp.surfaces import HttpApi, McpHttp, McpStdio, Outcome, make_gateway

NEST_OK = 63  # arrays under the top object: depth 64, the admission bound
ROWS: list[tuple[str, bytes, str]] = [
    ("a payment", b'{"amount": 5, "to": "bob"}', "ok"),
    ("a payment the policy refuses", b'{"amount": 5, "to": "mallory"}', "denied"),
    (
        "just above the maximum",
        b'{"amount": 100.0000000000000000001, "to": "bob"}',
        "invalid_arguments",
    ),
    ("exactly the maximum, spelled long", b'{"amount": 100.000000000000000000, "to": "bob"}', "ok"),
    ("an exponent", b'{"amount": 1E2, "to": "bob"}', "ok"),
    (
        "a huge integer",
        b'{"amount": 100000000000000000000000000001, "to": "bob"}',
        "invalid_arguments",
    ),
    ("beyond any float", b'{"amount": 1e400, "to": "bob"}', "invalid_arguments"),
    # A double reads it as -0.0, not the number the policy compared: refused (RFC 7493 2.2).
    ("below any float", b'{"amount": -1e-400, "to": "bob"}', "invalid_arguments"),
    (
        "a duplicate payee (last allowed)",
        b'{"amount": 5, "to": "mallory", "to": "bob"}',
        "invalid_arguments",
    ),
    (
        "a duplicate payee (last denied)",
        b'{"amount": 5, "to": "bob", "to": "mallory"}',
        "invalid_arguments",
    ),
    ("a duplicate amount", b'{"amount": 500, "amount": 5, "to": "bob"}', "invalid_arguments"),
    (
        "a duplicate deep inside",
        b'{"amount": 5, "to": "bob", "memo": {"a": 1, "a": 2}}',
        "invalid_arguments",
    ),
    ("NaN", b'{"amount": NaN, "to": "bob"}', "invalid_arguments"),
    ("Infinity", b'{"amount": -Infinity, "to": "bob"}', "invalid_arguments"),
    ("a lone surrogate", b'{"amount": 5, "to": "\\ud800"}', "invalid_arguments"),
    (
        "a lone surrogate in a name",
        b'{"amount": 5, "to": "bob", "memo": {"\\udc00": 1}}',
        "invalid_arguments",
    ),
    ("an escaped payee", b'{"amount": 5, "to": "m\\u0061llory"}', "denied"),
    (
        "nesting at the bound",
        b'{"amount": 5, "memo": ' + b"[" * NEST_OK + b"]" * NEST_OK + b"}",
        "ok",
    ),
    (
        "nesting past the bound",
        b'{"amount": 5, "memo": ' + b"[" * (NEST_OK + 1) + b"]" * (NEST_OK + 1) + b"}",
        "invalid_arguments",
    ),
    (
        "very deep nesting",
        b'{"amount": 5, "memo": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "invalid_arguments",
    ),
    ("an unknown member", b'{"amount": 5, "to": "bob", "extra": 1}', "invalid_arguments"),
    ("no amount", b"{}", "invalid_arguments"),
    ("an array", b"[1, 2]", "invalid_arguments"),
    ("a string of JSON", b'"{\\"amount\\": 5}"', "invalid_arguments"),
    ("a number", b"7", "invalid_arguments"),
    ("white space inside", b'{ "amount" :\t5 ,\r"to":"bob" }', "ok"),
    ("a newline inside (not over stdio)", b'{"amount": 5,\n"to": "bob"}', "ok"),
    ("garbage inside the object", b'{"amount": 5 5, "to": "bob"}', "invalid_arguments"),
    ("a bare word", b'{"amount": five, "to": "bob"}', "invalid_arguments"),
]


def reference(arguments: bytes) -> bool:
    """Whether admission accepts these bytes (the tool's contract, no surface)."""
    _gateway, tool = make_gateway()
    binding = bind(tool)
    try:
        binding.prepare(ToolCall("c1", "pay", arguments))
    except InvalidInvocationError:
        return False
    return True


@pytest.fixture(scope="module")
def http_api() -> Iterator[HttpApi]:
    surface = HttpApi()
    yield surface
    surface.close()


@pytest.fixture(scope="module")
def mcp_http() -> Iterator[McpHttp]:
    surface = McpHttp()
    yield surface
    surface.close()


@pytest.fixture(scope="module")
def mcp_stdio() -> Iterator[McpStdio]:
    surface = McpStdio()
    yield surface
    surface.close()


def _all(
    arguments: bytes, http_api: HttpApi, mcp_http: McpHttp, mcp_stdio: McpStdio
) -> dict[str, Outcome]:
    outcomes = {
        "mcp_http": mcp_http.call(arguments),
        "http_inline": http_api.inline(arguments),
    }
    # A stdio message is one line: it cannot hold a raw newline (white space for JSON).
    outcomes["mcp_stdio"] = (
        outcomes["mcp_http"] if b"\n" in arguments else mcp_stdio.call(arguments)
    )
    try:
        arguments.decode("utf-8")
    except UnicodeDecodeError:
        pass  # JSON text cannot carry bytes that are not UTF-8
    else:
        outcomes["http_text"] = http_api.as_text(arguments)
    return outcomes


def _assert_parity(arguments: bytes, outcomes: dict[str, Outcome]) -> None:
    admitted = reference(arguments)
    mcp = outcomes["mcp_http"]
    assert outcomes["mcp_stdio"] == mcp
    assert mcp.admitted is admitted
    if "http_text" in outcomes:
        assert outcomes["http_text"] == mcp
    if arguments.lstrip().startswith(b'"'):
        return  # inline, a JSON string is the HTTP API's text form: it is the document
    inline = outcomes["http_inline"]
    # Inline in the HTTP body, what admission would refuse may be refused by the body's own
    # strict parse first (as malformed_request): refused either way, never run.
    assert inline.admitted is admitted
    assert inline.ran is mcp.ran
    assert inline.code == mcp.code or (inline.code, mcp.code) == (
        "malformed_request",
        "invalid_arguments",
    )


@pytest.mark.parametrize(
    ("arguments", "expected"), [(a, e) for _, a, e in ROWS], ids=[n for n, _, _ in ROWS]
)
def test_the_same_argument_bytes_get_the_same_admission_and_decision_on_every_surface(
    arguments: bytes, expected: str, http_api: HttpApi, mcp_http: McpHttp, mcp_stdio: McpStdio
) -> None:
    outcomes = _all(arguments, http_api, mcp_http, mcp_stdio)

    assert outcomes["mcp_http"].code == expected
    assert outcomes["mcp_http"].ran is (expected == "ok")
    _assert_parity(arguments, outcomes)


def test_bytes_that_are_not_utf_8_are_refused_by_admission_over_mcp(
    http_api: HttpApi, mcp_http: McpHttp, mcp_stdio: McpStdio
) -> None:
    arguments = b'{"amount": 5, "to": "b\xffb"}'
    outcomes = _all(arguments, http_api, mcp_http, mcp_stdio)

    assert outcomes["mcp_http"] == Outcome(False, "invalid_arguments", False)
    _assert_parity(arguments, outcomes)


# Argument documents as text: structurally balanced (so the JSON-RPC message around them
# stays readable), with any number literal, duplicates, escapes and lone surrogates.
_NUMBERS = st.one_of(
    st.integers().map(str),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(
        [
            "NaN",
            "Infinity",
            "-Infinity",
            "1e400",
            "-1e-400",
            "100.0000000000000000001",
            "100",
            "1E2",
            "-0",
            "0.1e1",
            "01",
            "1.",
            ".5",
            "+1",
        ]
    ),
)
_STRINGS = st.one_of(
    st.text(max_size=8).map(json.dumps),
    st.sampled_from(
        ['"bob"', '"mallory"', '"m\\u0061llory"', '"\\ud800"', '"\\udfff"', '"\\u0000"']
    ),
)
_SCALARS = _NUMBERS | _STRINGS | st.sampled_from(["true", "false", "null"])
_NAMES = st.sampled_from(["amount", "to", "memo", "extra", "\\ud800"]) | st.text(max_size=3).map(
    lambda t: json.dumps(t)[1:-1]
)


def _object(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(st.tuples(_NAMES, children), max_size=4).map(
        lambda members: "{" + ", ".join(f'"{name}": {value}' for name, value in members) + "}"
    )


def _array(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(children, max_size=4).map(lambda items: "[" + ",".join(items) + "]")


_VALUES = st.recursive(
    _SCALARS, lambda children: _object(children) | _array(children), max_leaves=12
)
_PAYMENTS = st.builds(
    lambda amount, to, rest: '{"amount": ' + amount + ', "to": ' + to + rest + "}",
    _NUMBERS,
    _STRINGS,
    st.lists(st.tuples(_NAMES, _VALUES), max_size=2).map(
        lambda members: "".join(f', "{name}": {value}' for name, value in members)
    ),
)
ARGUMENT_DOCUMENTS = (_PAYMENTS | _object(_VALUES) | _VALUES).map(lambda text: text.encode())


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(arguments=ARGUMENT_DOCUMENTS)
def test_any_argument_document_gets_the_same_admission_and_decision_on_every_surface(
    arguments: bytes, http_api: HttpApi, mcp_http: McpHttp, mcp_stdio: McpStdio
) -> None:
    _assert_parity(arguments, _all(arguments, http_api, mcp_http, mcp_stdio))

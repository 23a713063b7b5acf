"""No error body of the HTTP API quotes anything the caller sent.

A caller-supplied string (a member name, a tool name, an argument name or value, a call
id, a method, a path) may be a secret, a token or markup meant for whoever reads the error;
an error says what is wrong and where, in the gateway's own words. The caller's own
``X-Request-ID`` is the one thing handed back, in its own member and header.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Final

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.server import build_service
from gateway.service import parse_config
from tests.server.conftest import ALICE, REPO_ROOT, shipped_service_config

Send = Callable[[httpx.Request], httpx.Response]


@pytest.fixture(scope="module")
def send(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Send]:
    # One service and one event loop for every example: each request is independent.
    folder = tmp_path_factory.mktemp("echo")
    service = build_service(parse_config(shipped_service_config(folder), base=REPO_ROOT))
    starlette = service.app.app
    with asyncio.Runner() as runner:
        lifespan = starlette.router.lifespan_context(starlette)
        runner.run(lifespan.__aenter__())
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=service.app), base_url="http://gateway"
        )
        try:
            yield lambda request: runner.run(client.send(request))
        finally:
            runner.run(client.aclose())
            runner.run(lifespan.__aexit__(None, None, None))


# A caller's string: long enough and odd enough that no fixed text of the gateway holds it.
MARKERS: Final = st.text(alphabet="qxzjkvwQXZJKVW0123456789_", min_size=10, max_size=24).map(
    lambda text: "Zq" + text
)


def _body(shape: str, marker: str) -> bytes:
    documents: dict[str, object] = {
        "unknown member": {"id": "1", "name": "add", "arguments": {}, marker: 1},
        "unknown tool": {"id": "1", "name": marker, "arguments": {}},
        "unknown argument": {"id": "1", "name": "add", "arguments": {"a": 1, "b": 2, marker: 3}},
        "nested argument name": {"id": "1", "name": "add", "arguments": {"a": {marker: 1}}},
        "argument value": {"id": "1", "name": "add", "arguments": {"a": marker, "b": 2}},
        "argument as text": {"id": "1", "name": "add", "arguments": marker},
        "argument text member": {"id": "1", "name": "add", "arguments": f'{{"{marker}": 1}}'},
        "call id": {"id": marker, "name": "add", "arguments": {"a": "x"}},
        "empty id, named": {"id": "", "name": marker, "arguments": {}},
        "id not text": {"id": 1, "name": marker, "arguments": {}},
        "arguments not an object": {"id": marker, "name": marker, "arguments": [marker]},
        "search with a marker": {"id": "1", "name": "search", "arguments": {marker: marker}},
        "read_file path": {"id": "1", "name": "read_file", "arguments": {"path": f"/{marker}"}},
        "fetch_url": {"id": "1", "name": "fetch_url", "arguments": {"url": marker}},
    }
    if shape == "not JSON":
        return b'{"id": "1", "name": "' + marker.encode() + b'", '
    return json.dumps(documents[shape]).encode()


SHAPES: Final = (
    "unknown member",
    "unknown tool",
    "unknown argument",
    "nested argument name",
    "argument value",
    "argument as text",
    "argument text member",
    "call id",
    "empty id, named",
    "id not text",
    "arguments not an object",
    "search with a marker",
    "read_file path",
    "fetch_url",
    "not JSON",
)


def _assert_not_echoed(response: httpx.Response, marker: str) -> None:
    if response.status_code < 400:
        return
    body = response.json()
    body.pop("request_id", None)
    shown = json.dumps(body, ensure_ascii=False) + repr(
        [(k, v) for k, v in response.headers.items() if k.lower() != "x-request-id"]
    )
    assert marker not in shown, (response.status_code, body)
    assert marker.lower() not in shown.lower(), (response.status_code, body)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(shape=st.sampled_from(SHAPES), marker=MARKERS)
def test_no_error_body_of_a_call_quotes_a_string_the_caller_sent(
    send: Send, shape: str, marker: str
) -> None:
    request = httpx.Request(
        "POST",
        "http://gateway/v1/calls",
        content=_body(shape, marker),
        headers={"X-API-Key": ALICE, "Content-Type": "application/json"},
    )
    _assert_not_echoed(send(request), marker)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(marker=MARKERS, where=st.sampled_from(("method", "path", "content type", "session")))
def test_no_error_of_the_http_surface_quotes_a_method_path_or_header_the_caller_sent(
    send: Send, marker: str, where: str
) -> None:
    method, path = "POST", "/v1/calls"
    headers = {"X-API-Key": ALICE, "Content-Type": "application/json"}
    if where == "method":
        method = marker.upper()
    elif where == "path":
        path = f"/v1/{marker}"
    elif where == "content type":
        headers["Content-Type"] = f"text/{marker}"
    else:
        headers["X-Gateway-Session"] = f"{marker} {marker}" * 20  # not a session id
    body = b'{"id": "1", "name": "add", "arguments": {"a": 1, "b": 2}}'
    response = send(httpx.Request(method, f"http://gateway{path}", content=body, headers=headers))
    assert response.status_code >= 400
    _assert_not_echoed(response, marker)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
def test_a_wrong_method_on_a_known_path_is_refused_in_the_gateways_own_words(
    send: Send, method: str
) -> None:
    response = send(httpx.Request(method, "http://gateway/v1/calls", headers={"X-API-Key": ALICE}))

    assert response.status_code == 405
    assert response.json()["message"] == "the path does not take that method"
    assert response.headers["allow"] == "POST"


@pytest.mark.parametrize("declared", [b"\xb2", b"\xd9\xa3", b"1\xb9", b"-1", b"1e3"])
def test_a_content_length_that_is_no_ascii_numeral_is_not_trusted_and_crashes_nothing(
    send: Send, declared: bytes
) -> None:
    # "²" (0xB2 read as Latin-1) passes str.isdigit and breaks int(); "٣" is read as 3.
    body = b'{"id": "1", "name": "add", "arguments": {"a": 1, "b": 2}}'
    request = httpx.Request(
        "POST",
        "http://gateway/v1/calls",
        content=body,
        headers=[
            (b"X-API-Key", ALICE.encode()),
            (b"Content-Type", b"application/json"),
            (b"Content-Length", declared),
        ],
    )

    response = send(request)

    assert response.status_code == 200, response.text
    assert response.json()["output"]["content"][0]["text"] == "3"

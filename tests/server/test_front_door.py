"""HTTP details a new user runs into: a body sent as anything but JSON is 415, an unknown
path 404 and a wrong method 405, each with the one JSON error body and the request id."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.server.conftest import ALICE, RunningGateway, key
from tests.server.test_http import assert_error

BODY = b'{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}'


@pytest.fixture
async def client(gateway: RunningGateway) -> AsyncIterator[httpx.AsyncClient]:
    async with gateway.client() as http:
        yield http


@pytest.mark.parametrize(
    "media",
    [
        "text/plain",
        "application/xml",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "text/json",
        "application/jsonp",
    ],
)
async def test_a_call_sent_as_anything_but_json_is_415_and_never_decided(
    gateway: RunningGateway, client: httpx.AsyncClient, media: str
) -> None:
    response = await client.post(
        "/v1/calls", content=BODY, headers=key(ALICE, **{"Content-Type": media})
    )

    body = assert_error(response, 415, "unsupported_media_type")
    assert "application/json" in body["message"]
    gateway.stop()
    assert gateway.audit_records() == []


@pytest.mark.parametrize(
    "media",
    [None, "application/json", "application/json; charset=utf-8", "Application/JSON",
     "application/vnd.call+json"],
)  # fmt: skip
async def test_a_call_sent_as_json_or_without_a_media_type_runs(
    client: httpx.AsyncClient, media: str | None
) -> None:
    headers = key(ALICE) if media is None else key(ALICE, **{"Content-Type": media})
    request = client.build_request("POST", "/v1/calls", content=BODY, headers=headers)
    assert ("content-type" in request.headers) is (media is not None)
    response = await client.send(request)

    assert response.status_code == 200, response.text
    assert response.json()["output"]["text"] == "5"


async def test_an_unknown_path_is_a_json_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/v2/calls", headers={"X-Request-ID": "req-404"})

    assert response.status_code == 404
    assert response.json() == {
        "code": "not_found",
        "message": "no such path",
        "decision_id": None,
        "request_id": "req-404",
    }
    assert response.headers["x-request-id"] == "req-404"


async def test_a_wrong_method_is_a_json_405_naming_the_methods_taken(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/v1/calls", headers=key(ALICE))

    body = assert_error(response, 405, "method_not_allowed")
    assert body["message"] == "the path does not take that method"
    assert response.headers["allow"] == "POST"

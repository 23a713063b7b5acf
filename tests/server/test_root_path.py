"""Under a root path (a mount, ``uvicorn --root-path``, a proxy's prefix) every route is
authenticated exactly as at the top: a request without a valid credential is 401 before any
policy is asked, and an authenticated one is decided for its own caller.

The request path then carries the prefix, which the router strips before matching: the
authentication middleware must match the path the router matches, not the raw one (it once
matched the raw path, so every call under a prefix reached the policy unauthenticated, for
an empty caller context).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import ASGIApp

from gateway.server import Service, build_service
from gateway.service import CALLER_SCOPE_KEY, parse_config
from tests.server.conftest import ALICE, REPO_ROOT, key, shipped_service_config

CALL: Final = {"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}


@contextlib.asynccontextmanager
async def _client(
    app: ASGIApp, service: Service, root_path: str
) -> AsyncIterator[httpx.AsyncClient]:
    starlette = service.app.app
    async with starlette.router.lifespan_context(starlette):
        transport = httpx.ASGITransport(app=app, root_path=root_path)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            yield client


@contextlib.asynccontextmanager
async def _prefixed(tmp_path: Path, how: str) -> AsyncIterator[tuple[httpx.AsyncClient, Service]]:
    service = build_service(parse_config(shipped_service_config(tmp_path), base=REPO_ROOT))
    if how == "mount":
        # Starlette's Mount sets the root path and keeps the prefix in the request path.
        app: ASGIApp = Starlette(routes=[Mount("/gw", app=service.app)])
        root = ""
    else:
        app, root = service.app, "/gw"  # as uvicorn --root-path /gw serves it
    async with _client(app, service, root) as client:
        yield client, service


@pytest.fixture(params=["mount", "root_path"])
def how(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _decisions(service: Service) -> int:
    path = service.config.audit.path
    assert path is not None
    trail = Path(path)
    if not trail.exists():
        return 0
    return trail.read_text(encoding="utf-8").count('"type":"decision"')


@pytest.mark.parametrize(
    "headers",
    [pytest.param({}, id="no_key"), pytest.param(key("not-a-key"), id="wrong_key")],
)
async def test_a_call_under_a_root_path_without_a_valid_key_is_401_and_never_decided(
    tmp_path: Path, how: str, headers: dict[str, str]
) -> None:
    async with _prefixed(tmp_path, how) as (client, service):
        calls = await client.post("/gw/v1/calls", json=CALL, headers=headers)
        tools = await client.get("/gw/v1/tools", headers=headers)
        decided = _decisions(service)

    assert calls.status_code == 401, calls.text
    assert calls.json()["code"] == "unauthenticated"
    assert tools.status_code == 401, tools.text
    assert decided == 0


async def test_a_call_under_a_root_path_with_a_valid_key_is_decided_for_its_caller(
    tmp_path: Path, how: str
) -> None:
    async with _prefixed(tmp_path, how) as (client, service):
        calls = await client.post("/gw/v1/calls", json=CALL, headers=key(ALICE))
        tools = await client.get("/gw/v1/tools", headers=key(ALICE))
        decided = _decisions(service)

    assert calls.status_code == 200, calls.text
    assert calls.json()["output"]["text"] == "5"
    assert tools.status_code == 200
    assert "add" in {tool["name"] for tool in tools.json()["tools"]}
    assert decided == 1  # and the trail the refusal tests read is this one


async def test_the_call_handler_refuses_a_request_the_middleware_did_not_authenticate(
    tmp_path: Path,
) -> None:
    # Defence in depth: the hot handler, reached with no caller in the scope (as any route
    # would be if the middleware were bypassed), answers 401 rather than deciding for an
    # empty context.
    service = build_service(parse_config(shipped_service_config(tmp_path), base=REPO_ROOT))
    body = httpx.Request("POST", "http://gateway/v1/calls", json=CALL).content
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/calls",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "query_string": b"",
    }
    starlette = service.app.app
    async with starlette.router.lifespan_context(starlette):
        await service.app.call(scope, receive, send)  # type: ignore[arg-type]

    assert CALLER_SCOPE_KEY not in scope
    assert sent[0]["status"] == 401
    assert _decisions(service) == 0

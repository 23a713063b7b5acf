"""No argument value ever reaches a log line, at any level, through any surface.

Calls whose arguments carry a canary string go through the HTTP API and MCP over HTTP (to
a local tool and to a proxied upstream tool), allowed, denied, invalid, malformed, refused
for want of credentials, and refused because the engine is down; the whole process logs at
``debug`` with the access log on, as ``gateway serve --log-level debug`` configures it.
The canary is in no captured line, while the lines an operator needs are there.
"""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.mcp import McpService
from gateway.server import build_service, load_config
from tests.logging_capture import captured_logging
from tests.mcp.conftest import ConfigWriter, serving

CANARY = "CANARY-9d1f4e"
ALLOWED = f"/srv/tenants/acme/{CANARY}.txt"
OTHER_TENANT = f"/srv/tenants/globex/{CANARY}.txt"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The process's logging as ``gateway serve --log-level debug`` sets it, into a buffer."""
    with captured_logging() as stream:
        yield stream


def _with_access_log(path: Path) -> Path:
    extra = '\n[log]\naccess = true\nlevel = "debug"\n\n[authzen]\nenabled = true\n'
    path.write_text(path.read_text() + extra)
    return path


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _mcp_calls(service: McpService, tmp_path: Path) -> list[Any]:
    async with (
        service,
        serving(service.http_server(host="127.0.0.1", port=0, log_level="debug")) as url,
        httpx2.AsyncClient(timeout=30, headers={"x-api-key": "alice-key"}) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), cache=None) as client,
    ):
        return [
            await client.call_tool("read_file", {"path": ALLOWED}),
            await client.call_tool("read_file", {"path": OTHER_TENANT}),
            await client.call_tool("search", {"query": CANARY, "tenant": "acme"}),
            await client.call_tool("add", {"a": CANARY, "b": 1}),
            await client.call_tool(f"no_such_tool_{CANARY}", {"x": CANARY}),
            await client.call_tool("read_file", {"path": ALLOWED, "extra": CANARY}),
        ]


async def _http_calls(config_path: Path) -> list[int]:
    service = build_service(load_config(config_path))
    app_server = uvicorn.Server(
        uvicorn.Config(service.app, log_level="debug", log_config=None, lifespan="on")
    )
    statuses: list[int] = []
    async with serving(app_server) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        key = {"x-api-key": "alice-key"}
        bodies: list[Any] = [
            {"id": "1", "name": "search", "arguments": {"query": CANARY, "tenant": "acme"}},
            {"id": "2", "name": "search", "arguments": {"query": CANARY, "tenant": "globex"}},
            {"id": "3", "name": "add", "arguments": {"a": CANARY, "b": 1}},
            {"id": "4", "name": "add", "arguments": json.dumps({"a": 1, "b": 2, "c": CANARY})},
            {"id": "5", "name": "read_file", "arguments": f'{{"path": "{CANARY}", "path": 1}}'},
            {"id": "6", "name": "search", "arguments": {"query": CANARY}, CANARY: CANARY},
        ]
        for body in bodies:
            statuses.append((await http.post("/v1/calls", json=body, headers=key)).status_code)
        raw = f'{{"id": "7", "name": "add", "arguments": {{"a": "{CANARY}"'.encode()
        statuses.append((await http.post("/v1/calls", content=raw, headers=key)).status_code)
        unauthenticated = await http.post(
            f"/v1/calls?token={CANARY}", json=bodies[0], headers={"x-api-key": CANARY}
        )
        statuses.append(unauthenticated.status_code)
        big = {"id": "8", "name": "search", "arguments": {"query": CANARY * 200_000}}
        statuses.append((await http.post("/v1/calls", json=big, headers=key)).status_code)
        for arguments in ({"query": CANARY, "tenant": "acme"}, {"query": 1, "x": CANARY}):
            evaluation = {
                "subject": {"type": "user", "id": "alice"},
                "action": {"name": "tools/call"},
                "resource": {
                    "type": "tool",
                    "id": "search",
                    "properties": {"arguments": arguments},
                },
            }
            answer = await http.post("/access/v1/evaluation", json=evaluation, headers=key)
            statuses.append(answer.status_code)
    return statuses


async def test_no_argument_value_reaches_any_log_line_through_http_or_mcp(
    write_config: ConfigWriter, tmp_path: Path, captured: io.StringIO
) -> None:
    # MCP: the upstream's read_file and search, and the gateway's own add.
    mcp_config = _with_access_log(
        write_config(stdio_context=None, modules=["examples.example_tools:add"])
    )
    with (tmp_path / "upstream.err").open("w") as errlog:
        answers = await _mcp_calls(McpService(load_config(mcp_config), errlog=errlog), tmp_path)
    http_config = _with_access_log(
        write_config(stdio_context=None, modules=["examples.example_tools:TOOLS"])
    )
    statuses = await _http_calls(http_config)

    down = write_config(
        stdio_context=None,
        modules=["examples.example_tools:TOOLS"],
        opa_url=f"http://127.0.0.1:{_closed_port()}",
    )
    down_statuses = await _http_calls(_with_access_log(down))

    # The calls did what they should (so the lines below are about real outcomes).
    assert [answer.is_error for answer in answers] == [False, True, False, True, True, True]
    assert statuses == [200, 403, 400, 400, 400, 400, 400, 401, 413, 200, 200]
    assert down_statuses[:2] == [503, 503]
    assert down_statuses[-2:] == [503, 200]  # AuthZEN: no decision; refused at admission

    logged = captured.getvalue()
    assert CANARY not in logged
    # ... while the operator's lines are there: start-up, access, engine state, upstream.
    assert "gateway mcp: serving" in logged
    assert "gateway serve: serving" in logged
    assert "POST /mcp 200" in logged
    assert "POST /v1/calls 403" in logged
    assert "is not ready (engine_unavailable)" in logged
    assert "upstream files connected" in logged

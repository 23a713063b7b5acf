"""``examples/mcp.toml`` run exactly as its header and the README say, with real clients.

``.venv/bin/gateway mcp --config examples/mcp.toml`` from the repository (stdio, as the
configured launcher alice) and ``... --transport http`` (the port given with ``--port`` so
the test does not need 8080 free): the reference filesystem server starts on the folders
the example creates, behind the shipped policies (the committed bundle).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.mcp.real.conftest import REPO, Peers, free_port, wait_listening

EXAMPLE = REPO / "examples" / "mcp.toml"
GATEWAY = Path(sys.executable).with_name("gateway")
ACME = Path("/srv/tenants/acme")


def _code(result: Any) -> str:
    code: str = result.meta["gateway/code"]
    return code


async def _session(server: Any, check: Any) -> None:
    async with Client(server, mode="legacy", cache=None) as client:
        await check(client)


@pytest.fixture
def launched(peers: Peers) -> list[str]:
    """The documented command line (the peers must be provisioned: the example runs them)."""
    return [str(GATEWAY), "mcp", "--config", "examples/mcp.toml"]


def test_the_example_over_stdio_serves_the_filesystem_server_behind_the_shipped_policies(
    launched: list[str],
) -> None:
    params = StdioServerParameters(
        command=launched[0], args=launched[1:], cwd=str(REPO), env=dict(os.environ)
    )

    async def check(client: Client) -> None:
        # alice (role reader) is shown what she may call: the shipped policies grant a
        # reader read_file alone of the filesystem server's tools.
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {"read_file"}
        assert tools["read_file"].input_schema["required"] == ["path"]
        read = await client.call_tool("read_file", {"path": "/srv/tenants/acme/hello.txt"})
        assert _code(read) == "ok"
        assert read.content[0].text == "hello from acme\n"  # type: ignore[union-attr]
        shared = await client.call_tool("read_file", {"path": "/srv/shared/readme.txt"})
        assert _code(shared) == "ok"
        other = await client.call_tool("read_file", {"path": "/srv/tenants/globex/hello.txt"})
        assert (_code(other), other.is_error) == ("denied", True)
        name = f"example-{uuid.uuid4().hex}.txt"
        write = await client.call_tool("write_file", {"path": f"{ACME}/{name}", "content": "x"})
        assert (_code(write), write.is_error) == ("denied", True)
        assert not (ACME / name).exists()
        # Not listed is not the refusal: each call is still decided, and denied.
        unlisted = await client.call_tool("list_allowed_directories", {})
        assert _code(unlisted) == "denied"

    anyio.run(_session, params, check)


@pytest.fixture
def http_example(launched: list[str]) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [*launched, "--transport", "http", "--port", str(port)], cwd=REPO, stdin=subprocess.DEVNULL
    )
    try:
        wait_listening(process, port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(30)


async def _http_session(url: str, key: str, check: Any) -> None:
    # The transport does not close a client it was given.
    async with httpx2.AsyncClient(headers={"X-API-Key": key}, timeout=httpx2.Timeout(60)) as http:
        await _session(streamable_http_client(url, http_client=http), check)


def _over_http(url: str, key: str, check: Any) -> None:
    anyio.run(_http_session, url, key, check)


def test_the_example_over_http_decides_per_caller_by_api_key(http_example: str) -> None:
    name = f"example-{uuid.uuid4().hex}.txt"

    async def alice(client: Client) -> None:
        read = await client.call_tool("read_file", {"path": "/srv/tenants/acme/hello.txt"})
        assert _code(read) == "ok"
        write = await client.call_tool("write_file", {"path": f"{ACME}/{name}", "content": "a"})
        assert _code(write) == "denied"

    async def wendy(client: Client) -> None:
        write = await client.call_tool("write_file", {"path": f"{ACME}/{name}", "content": "w"})
        assert _code(write) == "ok"
        other = await client.call_tool(
            "write_file", {"path": f"/srv/tenants/globex/{name}", "content": "w"}
        )
        assert _code(other) == "denied"

    async def bob(client: Client) -> None:
        read = await client.call_tool("read_file", {"path": "/srv/tenants/globex/hello.txt"})
        assert _code(read) == "denied"

    try:
        _over_http(http_example, "demo-key-alice", alice)
        assert not (ACME / name).exists()
        _over_http(http_example, "demo-key-wendy", wendy)
        assert (ACME / name).read_text() == "w"
        assert not Path(f"/srv/tenants/globex/{name}").exists()
        _over_http(http_example, "demo-key-bob", bob)
    finally:
        (ACME / name).unlink(missing_ok=True)


def test_the_example_refuses_http_callers_without_a_key(http_example: str) -> None:
    response = httpx2.post(
        http_example,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert response.status_code == 401

"""``server/discover`` tells every revision the gateway serves, per request and by handshake."""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import pytest

from gateway.mcp import McpFront
from gateway.mcp._bridge import SUPPORTED_REVISIONS
from gateway.mcp._stdio import FdReceiveStream, FdSendStream, nonblocking
from gateway.policy import CallerContext
from gateway.server import Gateway
from gateway.testing import RecordingTool, StaticAuthorizer

MODERN = "2026-07-28"
HANDSHAKE = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _front() -> McpFront:
    return McpFront(
        Gateway([RecordingTool("echo", {"type": "object"})], authorizer=StaticAuthorizer(True)),
        stdio_context=CallerContext({"subject": "alice"}),
    )


async def _exchange(front: McpFront, *messages: dict[str, Any]) -> list[dict[str, Any]]:
    """Each message sent over a stdio transport (real pipes); the answers, in order."""
    to_gateway_r, to_gateway_w = os.pipe()
    from_gateway_r, from_gateway_w = os.pipe()
    answers: list[dict[str, Any]] = []
    try:
        with (
            nonblocking(to_gateway_r),
            nonblocking(from_gateway_w),
            nonblocking(from_gateway_r),
        ):
            async with anyio.create_task_group() as group:
                group.start_soon(
                    lambda: front.serve_streams(
                        FdReceiveStream(to_gateway_r), FdSendStream(from_gateway_w)
                    )
                )
                reader = FdReceiveStream(from_gateway_r)
                buffer = b""
                for message in messages:
                    os.write(to_gateway_w, json.dumps(message).encode() + b"\n")
                    while b"\n" not in buffer:
                        buffer += await reader.receive()
                    line, buffer = buffer.split(b"\n", 1)
                    answers.append(json.loads(line))
                os.close(to_gateway_w)
                to_gateway_w = -1
    finally:
        for fd in (to_gateway_r, to_gateway_w, from_gateway_r, from_gateway_w):
            if fd >= 0:
                os.close(fd)
    return answers


def test_the_supported_revisions_are_the_modern_one_and_every_handshake_one_newest_first() -> None:
    assert (MODERN, *HANDSHAKE) == SUPPORTED_REVISIONS


def test_server_discover_lists_every_revision_the_gateway_negotiates_not_only_the_modern_one() -> (
    None
):
    (answer,) = anyio.run(
        _exchange,
        _front(),
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}},
    )
    result = answer["result"]
    assert result["supportedVersions"] == [MODERN, *HANDSHAKE]
    assert result["capabilities"]["tools"] == {"listChanged": True}
    assert result["resultType"] == "complete"


@pytest.mark.parametrize("version", HANDSHAKE)
def test_each_listed_handshake_revision_is_negotiated_by_initialize(version: str) -> None:
    (answer,) = anyio.run(
        _exchange,
        _front(),
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        },
    )
    assert answer["result"]["protocolVersion"] == version

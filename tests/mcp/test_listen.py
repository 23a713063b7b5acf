"""``subscriptions/listen``: a 2026-07-28 client gets the list changes older clients get."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from gateway.mcp import McpFront
from gateway.mcp._stdio import FdReceiveStream, FdSendStream, nonblocking
from gateway.policy import CallerContext
from gateway.server import Gateway
from gateway.testing import RecordingTool, StaticAuthorizer

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"


def _gateway(*names: str) -> Gateway:
    tools = [RecordingTool(name, {"type": "object"}) for name in names]
    return Gateway(tools, authorizer=StaticAuthorizer(True))


class Wire:
    """A raw stdio client of the front, over real pipes."""

    def __init__(self, send_fd: int, receive: FdReceiveStream) -> None:
        self._send_fd = send_fd
        self._receive = receive
        self._buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        os.write(self._send_fd, json.dumps(message).encode() + b"\n")

    async def next(self) -> dict[str, Any]:
        with anyio.fail_after(30):
            while b"\n" not in self._buffer:
                self._buffer += await self._receive.receive()
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message


@asynccontextmanager
async def _served(front: McpFront) -> AsyncIterator[Wire]:
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        with nonblocking(in_r), nonblocking(out_w), nonblocking(out_r):
            async with anyio.create_task_group() as group:
                group.start_soon(
                    lambda: front.serve_streams(FdReceiveStream(in_r), FdSendStream(out_w))
                )
                yield Wire(in_w, FdReceiveStream(out_r))
                group.cancel_scope.cancel()
    finally:
        for fd in (in_r, in_w, out_r, out_w):
            os.close(fd)


def _front() -> McpFront:
    return McpFront(_gateway("echo"), stdio_context=CallerContext({"subject": "alice"}))


def _listen(request_id: int, **kinds: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "subscriptions/listen",
        "params": {"notifications": kinds, "_meta": META},
    }


async def test_a_2026_07_28_client_is_told_on_its_listen_stream_when_the_tool_list_changes() -> (
    None
):
    front = _front()
    async with _served(front) as wire:
        wire.send(_listen(7, toolsListChanged=True, promptsListChanged=True))
        ack = await wire.next()
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["_meta"][SUBSCRIPTION_ID] == 7
        assert ack["params"]["notifications"] == {
            "toolsListChanged": True,
            "promptsListChanged": True,
        }
        front.gateway = _gateway("echo", "another")
        changed = await wire.next()
        assert changed["method"] == "notifications/tools/list_changed"
        assert changed["params"]["_meta"][SUBSCRIPTION_ID] == 7


async def test_a_listen_stream_is_not_told_of_a_list_it_did_not_ask_for() -> None:
    front = _front()
    async with _served(front) as wire:
        wire.send(_listen(1, promptsListChanged=True))
        await wire.next()  # the acknowledgement
        front.gateway = _gateway("echo", "another")
        # Nothing arrives for the tools; the next frame answers the next request.
        wire.send({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"_meta": META}})
        answer = await wire.next()
        assert answer["id"] == 2


async def test_a_listen_filter_naming_a_resource_no_upstream_serves_is_not_acknowledged() -> None:
    # A subscription to a resource is the policy's decision (mcp.resources.subscribe), of a
    # resource an upstream serves (this front has none).
    async with _served(_front()) as wire:
        wire.send(_listen(3, toolsListChanged=True, resourceSubscriptions=["file:///etc/x"]))
        ack = await wire.next()
        assert ack["params"]["notifications"] == {"toolsListChanged": True}


async def test_a_2026_07_28_client_sees_list_changed_advertised_because_listen_is_served() -> None:
    async with _served(_front()) as wire:
        wire.send(
            {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}}
        )
        capabilities = (await wire.next())["result"]["capabilities"]
        assert capabilities["tools"] == {"listChanged": True}


@pytest.mark.parametrize("version", ["2025-11-25", "2024-11-05"])
async def test_a_handshake_client_still_gets_list_changed_unsolicited(version: str) -> None:
    front = _front()
    async with _served(front) as wire:
        wire.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": version,
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            }
        )
        await wire.next()
        wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        wire.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        await wire.next()
        front.gateway = _gateway("echo", "another")
        changed = await wire.next()
        assert changed["method"] == "notifications/tools/list_changed"

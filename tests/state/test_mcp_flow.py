"""The MCP surface gives the state layer the MCP session: the trifecta holds within it."""

from __future__ import annotations

from mcp import Client

from gateway.mcp import McpFront
from gateway.policy import CallerContext
from gateway.state import MemoryStateStore
from tests.state.helpers import build

AGENT = CallerContext(subject="alice", roles=["agent"], tenant="acme")


async def test_egress_after_a_secret_and_untrusted_content_is_refused_in_an_mcp_session() -> None:
    gateway, _engine, tools = build(MemoryStateStore())
    front = McpFront(gateway, stdio_context=AGENT)
    other = McpFront(gateway, stdio_context=AGENT)  # another client: another session

    async with Client(front.server, cache=None) as client:
        await client.call_tool("read_secret", {})
        await client.call_tool("fetch_page", {})
        refused = await client.call_tool("send_email", {})
    async with Client(other.server, cache=None) as client:
        allowed = await client.call_tool("send_email", {})

    assert refused.is_error
    assert not allowed.is_error
    assert tools["send_email"].count == 1

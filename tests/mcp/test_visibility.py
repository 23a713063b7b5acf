"""MCP ``tools/list`` per caller (the policy's visibility decision) and list_changed on a new
revision; a tool not listed is still decided at call time."""

from __future__ import annotations

from typing import Any, Final

import httpx2
import mcp_types as types
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway import ToolOutput
from gateway.mcp import McpFront
from gateway.policy import (
    DEFAULT_VISIBILITY_PATH,
    CallerContext,
    DecisionCache,
    PolicyAuthorizer,
    ToolVisibility,
)
from gateway.service import Authenticator, Gateway, api_key_digest
from gateway.service._config import ApiKey, AuthConfig
from gateway.testing import FakeClock, RecordingTool, StaticEngine
from tests.mcp.conftest import serving
from tests.mcp.test_bridge import Inbox

ALICE_FIELDS: Final = {"subject": "alice"}
ALICE: Final = CallerContext(ALICE_FIELDS)


def _tool(name: str) -> RecordingTool:
    return RecordingTool(name, {"type": "object"}, output=ToolOutput.from_text("ran"))


def _shown_to_alice(document: dict[str, Any]) -> Any:
    return {
        "allow": document["context"].get("subject") == "alice"
        and document["tool"]["name"] == "public",
        "cache": {"ttl_s": 30},
    }


def _front(engine: StaticEngine, context: CallerContext = ALICE) -> McpFront:
    gateway = Gateway([_tool("public"), _tool("secret")], authorizer=PolicyAuthorizer(engine))
    visibility = ToolVisibility(engine, cache=DecisionCache(clock=FakeClock()))
    return McpFront(gateway, stdio_context=context, visibility=visibility)


async def test_tools_list_shows_the_caller_only_what_the_policy_shows_it() -> None:
    engine = StaticEngine({DEFAULT_VISIBILITY_PATH: _shown_to_alice})
    async with Client(_front(engine).server, cache=None) as client:
        listed = [tool.name for tool in (await client.list_tools()).tools]
    assert listed == ["public"]


async def test_another_caller_sees_nothing_and_an_undecided_listing_is_empty() -> None:
    engine = StaticEngine({DEFAULT_VISIBILITY_PATH: _shown_to_alice})
    async with Client(_front(engine, CallerContext({"subject": "bob"})).server, cache=None) as c:
        assert (await c.list_tools()).tools == []
    async with Client(_front(StaticEngine()).server, cache=None) as client:
        assert (await client.list_tools()).tools == []


async def test_a_tool_not_listed_is_still_decided_at_call_time() -> None:
    engine = StaticEngine(
        {DEFAULT_VISIBILITY_PATH: _shown_to_alice, "gateway/authz/decision": {"allow": True}}
    )
    async with Client(_front(engine).server, cache=None) as client:
        result = await client.call_tool("secret", {})
    assert not result.is_error, "visibility replaced the call-time decision"


async def test_a_new_policy_revision_tells_clients_the_tool_list_changed() -> None:
    engine = StaticEngine({DEFAULT_VISIBILITY_PATH: _shown_to_alice})
    authenticator = Authenticator(
        AuthConfig(api_keys=(ApiKey(sha256=api_key_digest("alice-key"), context=ALICE_FIELDS),))
    )
    gateway = Gateway([_tool("public"), _tool("secret")], authorizer=PolicyAuthorizer(engine))
    front = McpFront(
        gateway,
        authenticator=authenticator,
        visibility=ToolVisibility(engine, cache=DecisionCache(clock=FakeClock())),
    )
    inbox = Inbox()
    server = uvicorn.Server(
        uvicorn.Config(front.http_app(), log_level="warning", ws="none", access_log=False)
    )
    async with (
        serving(server) as url,
        httpx2.AsyncClient(timeout=30, headers={"x-api-key": "alice-key"}) as http,
        Client(
            streamable_http_client(f"{url}/mcp", http_client=http),
            mode="legacy",  # a handshake revision: notifications on the session's stream
            cache=None,
            message_handler=inbox.messages,
        ) as client,
    ):
        assert [tool.name for tool in (await client.list_tools()).tools] == ["public"]
        assert front.check_revision() is False
        engine.set_revision("static-2")
        assert front.check_revision() is True
        got = await inbox.wait_for(1)
        assert front.check_revision() is False
    assert isinstance(got[0], types.ToolListChangedNotification)

"""What the gateway relays besides tool results: progress, log messages, the upstream's
requests to its client, tool list changes, resources and prompts.

End to end: the service's streamable HTTP app under uvicorn, real SDK clients (the handshake
revision, where a server may ask its client), and the test upstream as a stdio subprocess,
once speaking 2026-07-28 (multi round-trip requests) and once only 2025-11-25 ("legacy").
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

from gateway.mcp import McpService
from gateway.server import load_config
from gateway.testing import OpaServer, find_opa_binary
from tests.mcp.conftest import POLICIES, ConfigWriter, audit_records, serving
from tests.mcp.upstream_server import read_record

ERAS = pytest.mark.parametrize("era", ["", "legacy"], ids=["2026-07-28", "2025-11-25"])
#: How long a test waits for a notification it expects (a hang guard, never an assertion).
WAIT_S = 20


def _text(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


@asynccontextmanager
async def running(config: Path) -> AsyncIterator[tuple[McpService, str]]:
    """The service of ``config`` serving streamable HTTP, and its base URL."""
    service = McpService(load_config(config))
    async with (
        service,
        serving(service.http_server(host="127.0.0.1", port=0, log_level="warning")) as url,
    ):
        yield service, url


@asynccontextmanager
async def served(config: Path) -> AsyncIterator[str]:
    """The service of ``config`` serving streamable HTTP; yields its base URL."""
    async with running(config) as (_, url):
        yield url


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


@asynccontextmanager
async def connect(
    url: str, key: str = "alice-key", mode: str = "legacy", **options: Any
) -> AsyncIterator[Client]:
    """An SDK client of the gateway (default: a handshake revision), authenticated with ``key``."""

    async def authenticate(request: httpx2.Request) -> None:
        request.headers["x-api-key"] = key

    async with (
        httpx2.AsyncClient(timeout=30, event_hooks={"request": [authenticate]}) as http,
        Client(
            streamable_http_client(f"{url}/mcp", http_client=http),
            mode=mode,
            cache=None,
            read_timeout_seconds=30,
            **options,
        ) as client,
    ):
        yield client


class Inbox:
    """What one client received, with a way to wait for a number of items."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._changed = anyio.Event()

    def add(self, item: Any) -> None:
        self.items.append(item)
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, count: int) -> list[Any]:
        with anyio.fail_after(WAIT_S):
            while len(self.items) < count:
                await self._changed.wait()
        return self.items

    async def logs(self, params: types.LoggingMessageNotificationParams) -> None:
        self.add((params.level, params.logger, params.data))

    async def messages(self, message: types.ServerNotification | Exception) -> None:
        if not isinstance(message, Exception | types.LoggingMessageNotification):
            self.add(message)


async def _sampling(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(text="hi from the model"), model="test-model"
    )


async def _elicitation(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"ok": True})


async def _roots(context: ClientRequestContext) -> types.ListRootsResult:
    return types.ListRootsResult.model_validate(
        {"roots": [{"uri": "file:///srv/tenants/acme/", "name": "acme"}]}
    )


# -- item 3: progress, log messages, the upstream's requests to its client -----------------


@ERAS
@pytest.mark.parametrize("front", ["legacy", "auto"], ids=["client-2025", "client-2026"])
async def test_upstream_progress_reaches_the_calling_request_under_the_clients_own_token(
    write_config: ConfigWriter, relay: None, allow_all: Path, era: str, front: str
) -> None:
    config = write_config(
        stdio_context=None, era=era, policies=allow_all, decision_path="relay/decision"
    )
    inbox = Inbox()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        inbox.add((progress, total, message))

    async with served(config) as url, connect(url, mode=front) as client:
        result = await client.call_tool("slow", {}, progress_callback=on_progress)
        seen = await inbox.wait_for(3)

    assert _text(result) == "done"
    assert seen == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]


@ERAS
async def test_upstream_log_messages_reach_only_the_client_that_asked_at_its_level(
    write_config: ConfigWriter, relay: None, allow_all: Path, record: Path, era: str
) -> None:
    config = write_config(
        stdio_context=None, era=era, policies=allow_all, decision_path="relay/decision"
    )
    asked, silent = Inbox(), Inbox()
    async with (
        served(config) as url,
        connect(url, logging_callback=asked.logs) as first,
        connect(url, logging_callback=silent.logs) as second,
    ):
        assert first.server_capabilities.logging is not None
        await first.session.send_request(
            types.SetLevelRequest(params=types.SetLevelRequestParams(level="info")),
            types.EmptyResult,
        )
        assert _text(await first.call_tool("chatty", {})) == "logged"
        got = await asked.wait_for(2)
        # The silent client's own call: it asked for no log messages, so it gets none.
        assert _text(await second.call_tool("chatty", {})) == "logged"

    assert got == [
        ("info", "upstream", "info from chatty"),
        ("error", "upstream", "error from chatty"),
    ]
    assert silent.items == []
    levels = [entry["level"] for entry in read_record(record) if entry["event"] == "set_level"]
    # Before 2026-07-28 the level is the upstream connection's (the most verbose any client
    # asked for); since then it travels with each request.
    assert levels == (["info"] if era == "legacy" else [])


@ERAS
async def test_a_2026_client_gets_the_log_messages_its_requests_ask_for(
    write_config: ConfigWriter, relay: None, allow_all: Path, era: str
) -> None:
    config = write_config(
        stdio_context=None, era=era, policies=allow_all, decision_path="relay/decision"
    )
    asked, silent = Inbox(), Inbox()
    async with (
        served(config) as url,
        connect(url, mode="auto", log_level="warning", logging_callback=asked.logs) as first,
        connect(url, mode="auto", logging_callback=silent.logs) as second,
    ):
        assert first.protocol_version == "2026-07-28"
        assert _text(await first.call_tool("chatty", {})) == "logged"
        got = await asked.wait_for(1)
        assert _text(await second.call_tool("chatty", {})) == "logged"

    assert got == [("error", "upstream", "error from chatty")]
    assert silent.items == []


@ERAS
async def test_sampling_elicitation_and_roots_are_asked_of_the_calling_client(
    write_config: ConfigWriter, relay: None, allow_all: Path, era: str
) -> None:
    config = write_config(
        stdio_context=None, era=era, policies=allow_all, decision_path="relay/decision"
    )
    async with (
        served(config) as url,
        connect(
            url,
            sampling_callback=_sampling,
            elicitation_callback=_elicitation,
            list_roots_callback=_roots,
        ) as client,
    ):
        sampled = await client.call_tool("ask_llm", {})
        confirmed = await client.call_tool("confirm", {})
        rooted = await client.call_tool("roots", {})

    assert not sampled.is_error, _text(sampled)
    assert json.loads(_text(sampled).removeprefix("ask_llm answered: "))["content"] == {
        "type": "text",
        "text": "hi from the model",
    }
    assert json.loads(_text(confirmed).removeprefix("confirm answered: ")) == {
        "action": "accept",
        "content": {"ok": True},
    }
    assert json.loads(_text(rooted).removeprefix("roots answered: "))["roots"] == [
        {"uri": "file:///srv/tenants/acme/", "name": "acme"}
    ]


@ERAS
async def test_a_2026_07_28_client_is_asked_an_upstreams_requests_in_rounds_and_the_call_completes(
    write_config: ConfigWriter, relay: None, allow_all: Path, era: str
) -> None:
    # Multi round-trip requests: the upstream's request (a server-to-client request of a
    # 2025-11-25 upstream, an InputRequiredResult of a 2026-07-28 one) becomes the
    # InputRequiredResult the SDK client answers by retrying; the upstream gets its answer.
    config = write_config(
        stdio_context=None, era=era, policies=allow_all, decision_path="relay/decision"
    )
    asked = Inbox()

    async def sampling(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        asked.add(params)
        return await _sampling(context, params)

    async with (
        served(config) as url,
        connect(
            url,
            mode="2026-07-28",
            sampling_callback=sampling,
            elicitation_callback=_elicitation,
            list_roots_callback=_roots,
        ) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        sampled, confirmed, rooted = [
            await client.call_tool(name, {}) for name in ("ask_llm", "confirm", "roots")
        ]

    assert len(asked.items) == 1
    assert not sampled.is_error, _text(sampled)
    assert json.loads(_text(sampled).removeprefix("ask_llm answered: "))["content"] == {
        "type": "text",
        "text": "hi from the model",
    }
    assert json.loads(_text(confirmed).removeprefix("confirm answered: ")) == {
        "action": "accept",
        "content": {"ok": True},
    }
    assert json.loads(_text(rooted).removeprefix("roots answered: "))["roots"] == [
        {"uri": "file:///srv/tenants/acme/", "name": "acme"}
    ]


@ERAS
async def test_a_client_that_did_not_offer_a_capability_is_not_asked_and_the_upstream_is_refused(
    write_config: ConfigWriter, relay: None, allow_all: Path, era: str
) -> None:
    config = write_config(
        stdio_context=None, era=era, policies=allow_all, decision_path="relay/decision"
    )
    async with served(config) as url, connect(url) as client:
        results = [
            await client.call_tool(name, {})
            for name in ("ask_llm", "ask_llm_tools", "confirm", "roots")
        ]

    assert all(result.is_error for result in results)
    if era == "legacy":
        # The upstream's own report of the error it got back (method not found).
        assert [_text(result) for result in results] == [
            "ask_llm refused: -32601",
            "ask_llm_tools refused: -32601",
            "confirm refused: -32601",
            "roots refused: -32601",
        ]
    else:
        # A multi round-trip request the gateway could not answer fails the call upstream.
        assert {_text(result) for result in results} == {
            "the client does not offer this capability"
        }


@ERAS
async def test_sampling_with_tools_is_asked_only_of_a_client_that_offered_sampling_tools(
    write_config: ConfigWriter, relay: None, allow_all: Path, era: str
) -> None:
    config = write_config(
        stdio_context=None, era=era, policies=allow_all, decision_path="relay/decision"
    )
    asked: list[types.CreateMessageRequestParams] = []

    async def sampling(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        asked.append(params)
        return await _sampling(context, params)

    async with served(config) as url, connect(url, sampling_callback=sampling) as client:
        plain = await client.call_tool("ask_llm", {})
        with_tools = await client.call_tool("ask_llm_tools", {})

    assert not plain.is_error, _text(plain)
    assert with_tools.is_error
    assert [params.tools for params in asked] == [None]
    if era == "legacy":
        assert _text(with_tools) == "ask_llm_tools refused: -32601"


# -- item 4: tools/list_changed --------------------------------------------------------


@ERAS
async def test_the_gateway_relists_on_the_upstreams_notice_and_tells_its_clients(
    write_config: ConfigWriter, relay: None, allow_all: Path, era: str
) -> None:
    config = write_config(
        stdio_context=None, era=era, policies=allow_all, decision_path="relay/decision"
    )
    first, second = Inbox(), Inbox()
    async with (
        served(config) as url,
        connect(url, message_handler=first.messages) as client,
        connect(url, message_handler=second.messages) as other,
    ):
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed is True
        before = {tool.name for tool in (await client.list_tools()).tools}
        await other.list_tools()  # the second client has made a request: it is connected
        assert _text(await client.call_tool("change_tools", {})) == "changed"
        got = await first.wait_for(1)
        got_other = await second.wait_for(1)
        after = {tool.name for tool in (await client.list_tools()).tools}

    assert isinstance(got[0], types.ToolListChangedNotification)
    assert isinstance(got_other[0], types.ToolListChangedNotification)
    assert "write_file" not in before
    assert {"write_file", "files.stat_v1.2"} <= after
    assert "search" not in after


async def test_clients_are_told_when_an_upstream_down_at_start_comes_up(
    write_config: ConfigWriter, variant: Path, allow_all: Path
) -> None:
    _write(variant, "dead")
    config = write_config(stdio_context=None, policies=allow_all, decision_path="relay/decision")
    inbox = Inbox()
    async with (
        running(config) as (service, url),
        connect(url, message_handler=inbox.messages) as client,
    ):
        before = (await client.list_tools()).tools
        _write(variant, "")
        await service.refresh()  # what the retry does when its wait is over
        got = await inbox.wait_for(1)
        after = {tool.name for tool in (await client.list_tools()).tools}

    assert before == []
    assert isinstance(got[0], types.ToolListChangedNotification)
    assert after == {"read_file", "search"}


# -- item 5: resources and prompts, decided by the policy --------------------------------

ACME = "file:///srv/tenants/acme/report.txt"
GLOBEX = "file:///srv/tenants/globex/payroll.txt"


def _reads(record: Path) -> list[str]:
    return [entry["uri"] for entry in read_record(record) if entry["event"] == "read"]


@ERAS
async def test_resources_and_prompts_of_the_upstream_are_listed_through_the_gateway(
    write_config: ConfigWriter, era: str
) -> None:
    config = write_config(stdio_context=None, era=era)
    async with served(config) as url, connect(url) as client:
        capabilities = client.server_capabilities
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        prompts = await client.list_prompts()

    assert capabilities.resources is not None
    assert capabilities.prompts is not None
    assert [
        r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in resources.resources
    ] == [
        {
            "uri": ACME,
            "name": "report.txt",
            "mimeType": "text/plain",
            "annotations": {"audience": ["user"]},
        },
        {"uri": GLOBEX, "name": "payroll.txt"},
    ]
    assert [t.uri_template for t in templates.resource_templates] == [
        "file:///srv/tenants/{tenant}/{name}"
    ]
    assert [(p.name, [a.name for a in p.arguments or []]) for p in prompts.prompts] == [
        ("summarize", ["topic"])
    ]


@pytest.fixture(params=["embedded", "opa"])
def engine_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The engine deciding: the embedded one (``None``), or a real OPA server's URL."""
    if request.param == "embedded":
        yield None
        return
    with OpaServer(binary=find_opa_binary(), policy_paths=[POLICIES]) as opa:
        yield opa.url


@ERAS
async def test_a_resource_read_is_decided_by_the_policy_and_a_denied_one_never_reaches_upstream(
    write_config: ConfigWriter, record: Path, audit_path: Path, era: str, engine_url: str | None
) -> None:
    config = write_config(stdio_context=None, era=era, opa_url=engine_url)
    refusals: list[MCPError] = []
    denied_uris = [
        GLOBEX,
        "file:///srv/tenants/acme/../globex/payroll.txt",
        "file:///srv/tenants/acme/%2e%2e/globex/payroll.txt",
        "file:///srv/tenants/acme//etc/passwd",
        "file:///etc/passwd",
    ]
    async with served(config) as url, connect(url) as client, connect(url, "bob-key") as bob:
        allowed = await client.read_resource(ACME)
        for uri in denied_uris:
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri)
            refusals.append(caught.value)
        with pytest.raises(MCPError) as not_permitted:
            await bob.read_resource(ACME)
        with pytest.raises(MCPError) as missing:
            await client.read_resource("file:///srv/tenants/acme/missing.txt")
        # The action is not a tool: calling it by name is an unknown tool, nothing is read.
        as_tool = await client.call_tool(
            "mcp.resources.read",
            {"action": "resources/read", "version": 1, "server": "files", "uri": ACME},
        )
        listed = {tool.name for tool in (await client.list_tools()).tools}

    assert [
        c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in allowed.contents
    ] == [{"uri": ACME, "mimeType": "text/plain", "text": f"contents of {ACME}"}]
    assert {(e.code, e.message) for e in refusals} == {(-32010, "the resource is not allowed")}
    assert all(e.error.data["gateway/code"] == "denied" for e in refusals)
    assert not_permitted.value.code == -32010
    assert not_permitted.value.message == "the caller's roles do not permit this tool"
    # An allowed read the upstream answers with an error: the upstream's code and text.
    assert missing.value.code == -32002
    assert "no such resource" in missing.value.message
    assert as_tool.is_error
    assert (as_tool.meta or {}).get("gateway/code") == "unknown_tool"
    assert not listed & {"mcp.resources.read", "mcp.resources.subscribe", "mcp.prompts.get"}
    # Only the allowed reads reached the upstream.
    assert _reads(record) == [ACME, "file:///srv/tenants/acme/missing.txt"]
    decisions = [
        (r["tool"], r["arguments"]["uri"], r["result"], r["context"]["subject"])
        for r in audit_records(audit_path)
        if r["type"] == "decision"
    ]
    assert decisions == [
        ("mcp.resources.read", ACME, "allow", "alice"),
        *[("mcp.resources.read", uri, "deny", "alice") for uri in denied_uris],
        ("mcp.resources.read", ACME, "deny", "bob"),
        ("mcp.resources.read", "file:///srv/tenants/acme/missing.txt", "allow", "alice"),
    ]
    # Every decision on an action carries its HTTP request's id (never seen by the policy).
    assert all(
        r["context"].get("request_id") for r in audit_records(audit_path) if r["type"] == "decision"
    )


@ERAS
async def test_a_prompt_is_decided_by_the_policy_and_a_denied_one_never_reaches_the_upstream(
    write_config: ConfigWriter, record: Path, era: str
) -> None:
    config = write_config(stdio_context=None, era=era, prefix="fs_")
    async with served(config) as url, connect(url) as client:
        listed = [prompt.name for prompt in (await client.list_prompts()).prompts]
        # The shipped policy lists the served name "summarize": with the prefix it is another.
        with pytest.raises(MCPError) as denied:
            await client.get_prompt("fs_summarize", {"topic": "q3"})

    assert listed == ["fs_summarize"]
    assert denied.value.code == -32010
    assert denied.value.message == "the prompt is not allowed"
    assert [e for e in read_record(record) if e["event"] == "prompt"] == []


@ERAS
async def test_an_allowed_prompt_is_got_from_the_upstream_unchanged(
    write_config: ConfigWriter, record: Path, era: str
) -> None:
    config = write_config(stdio_context=None, era=era)
    async with served(config) as url, connect(url) as client:
        prompt = await client.get_prompt("summarize", {"topic": "q3"})
        with pytest.raises(MCPError) as bad_argument:
            await client.get_prompt("summarize", {"topic": "a\nb"})

    assert [m.model_dump(mode="json", exclude_none=True) for m in prompt.messages] == [
        {"role": "user", "content": {"type": "text", "text": "Summarize q3"}}
    ]
    assert bad_argument.value.message == "the prompt arguments are not allowed"
    got = [(e["name"], e["arguments"]) for e in read_record(record) if e["event"] == "prompt"]
    assert got == [("summarize", {"topic": "q3"})]


async def test_resource_updates_reach_only_the_clients_that_subscribed_through_the_gateway(
    write_config: ConfigWriter, record: Path
) -> None:
    config = write_config(stdio_context=None, era="legacy")
    subscriber, bystander = Inbox(), Inbox()
    async with (
        served(config) as url,
        connect(url, message_handler=subscriber.messages) as client,
        connect(url, message_handler=bystander.messages) as other,
    ):
        await client.session.send_request(
            types.SubscribeRequest(params=types.SubscribeRequestParams(uri=ACME)),
            types.EmptyResult,
        )
        with pytest.raises(MCPError) as denied:
            await client.session.send_request(
                types.SubscribeRequest(params=types.SubscribeRequestParams(uri=GLOBEX)),
                types.EmptyResult,
            )
        await other.list_tools()
        # The upstream announces an update of a subscribed resource when it is read.
        await other.read_resource(ACME)
        got = await subscriber.wait_for(1)
        await client.session.send_request(
            types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=ACME)),
            types.EmptyResult,
        )

    assert denied.value.message == "the resource is not allowed"
    assert [type(item) for item in got] == [types.ResourceUpdatedNotification]
    assert got[0].params.uri == ACME
    assert not any(isinstance(item, types.ResourceUpdatedNotification) for item in bystander.items)
    events = [(e["event"], e["uri"]) for e in read_record(record) if "uri" in e]
    assert events == [("subscribe", ACME), ("read", ACME), ("unsubscribe", ACME)]

"""A real upstream MCP server for the tests, written with the SDK's low-level Server.

Run as ``python upstream_server.py RECORD [VARIANT [ERA]]`` it serves over stdio. Every
start, every tool call, resource read, subscription, prompt and log level it receives and a
clean stop (its stdin closed) are appended to RECORD (JSON Lines), so the tests can assert on
the upstream's own record of what reached it. VARIANT is a file whose words select the tool
list ("v2": ``write_file`` and ``files.stat_v1.2`` added, ``search`` removed; "relay": the
tools of :data:`RELAY_TOOLS` added), read on every ``tools/list``; "dead" makes the server
exit as soon as it starts. ERA "legacy" makes it refuse ``server/discover``, so that a client
falls back to the initialize handshake (2025-11-25); otherwise it speaks 2026-07-28 too.

Resources: :data:`RESOURCES` and the template ``file:///srv/tenants/{tenant}/{name}``; a
read answers "contents of URI" (a URI containing "missing" is the error -32002). Prompt
``summarize(topic)``. ``logging/setLevel`` is recorded.

Tools (names the shipped policies know):

- ``read_file(path)`` (with a title, annotations, an output schema, an icon and
  ``_meta``): "contents of PATH" with structured content ``{"path", "size"}``; a path containing
  "missing" is an error result (``isError``) "no such file: PATH"; a path containing
  "crash" makes the process exit in the middle of the call; a path containing
  "every-content" answers :data:`EVERY_CONTENT` (every kind of content block) and a path
  containing "every-error" the same blocks as an error result;
- ``search(query, tenant)``: "results for QUERY";
- ``write_file(path, content)`` (variant v2, ``destructiveHint``): "wrote N bytes";
- ``files.stat_v1.2`` (variant v2; a dotted name the MCP specification allows): "stat";
- ``bad name`` and ``broken_ref``: tools the gateway cannot import (a name outside the
  MCP rule; a schema with an external reference).
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS


def _record(path: Path, entry: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(json.dumps({"pid": os.getpid(), **entry}) + "\n")


def _variant(variant: Path | None) -> str:
    if variant is None or not variant.exists():
        return ""
    return variant.read_text(encoding="utf-8").strip()


def _write_variant(variant: Path, text: str) -> None:
    variant.write_text(text, encoding="utf-8")


def _words(variant: Path | None) -> set[str]:
    return set(_variant(variant).split())


#: The resources listed (wire names).
RESOURCES: list[dict[str, Any]] = [
    {
        "uri": "file:///srv/tenants/acme/report.txt",
        "name": "report.txt",
        "mimeType": "text/plain",
        "annotations": {"audience": ["user"]},
    },
    {"uri": "file:///srv/tenants/globex/payroll.txt", "name": "payroll.txt"},
]
_EMPTY_OBJECT: dict[str, Any] = {"type": "object"}
#: The tools of the "relay" variant (each exercises one server-to-client path).
RELAY_TOOLS: dict[str, str] = {
    "slow": "Reports progress three times.",
    "chatty": "Logs at debug, info and error.",
    "ask_llm": "Asks the client's model (sampling).",
    "ask_llm_tools": "Asks the client's model, offering it a tool (sampling with tools).",
    "confirm": "Asks the user (elicitation).",
    "roots": "Asks the client for its roots.",
    "change_tools": "Adds the v2 tools and announces the change.",
    "touch": "Announces that a resource was updated.",
}


#: The content blocks of an "every-content" read (as JSON, in the wire's member names).
EVERY_CONTENT: list[dict[str, Any]] = [
    {
        "type": "text",
        "text": "annotated",
        "annotations": {"audience": ["user"], "priority": 0.25},
    },
    {"type": "text", "text": ""},
    {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
    {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav", "_meta": {"k": 1}},
    {
        "type": "resource",
        "resource": {"uri": "file:///srv/a.md", "mimeType": "text/markdown", "text": "# A"},
        "annotations": {"audience": ["assistant"], "priority": 1},
    },
    {
        "type": "resource",
        "resource": {"uri": "file:///srv/b.bin", "mimeType": "application/x-b", "blob": "AAE="},
    },
    {
        "type": "resource_link",
        "uri": "file:///srv/c.txt",
        "name": "c.txt",
        "title": "The C file",
        "description": "A linked file.",
        "mimeType": "text/plain",
        "size": 12,
    },
]
#: The structured content of an "every-content" read.
EVERY_STRUCTURED: dict[str, Any] = {"path": "x", "size": 7, "nested": {"list": [1, 2.5, None]}}
#: read_file's listing members beyond name, description and input schema (wire names).
READ_FILE_METADATA: dict[str, Any] = {
    "title": "Read file",
    "annotations": {"readOnlyHint": True, "openWorldHint": False},
    "outputSchema": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "size": {"type": "integer"}},
        "required": ["path", "size"],
    },
    "icons": [{"src": "https://example.com/read.png", "mimeType": "image/png"}],
    "_meta": {"example/owner": "files"},
}


def _tools(variant: Path | None) -> list[types.Tool]:
    v2 = "v2" in _words(variant)
    tools = [
        types.Tool.model_validate(
            {
                "name": "read_file",
                "description": "Read a file.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                    "additionalProperties": False,
                },
                **READ_FILE_METADATA,
            }
        ),
        types.Tool(
            name="bad name",
            description="A name the gateway refuses.",
            input_schema={"type": "object"},
        ),
        types.Tool(
            name="broken_ref",
            description="A schema the gateway refuses.",
            input_schema={
                "type": "object",
                "properties": {"x": {"$ref": "https://example.com/x.json"}},
            },
        ),
    ]
    if v2:
        tools.append(
            types.Tool(
                name="files.stat_v1.2",
                description="A dotted name.",
                input_schema={"type": "object"},
            )
        )
        tools.append(
            types.Tool(
                name="write_file",
                description="Write a file.",
                annotations=types.ToolAnnotations(destructive_hint=True),
                input_schema={
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"],
                },
            )
        )
    if "relay" in _words(variant):
        tools.extend(
            types.Tool(name=name, description=text, input_schema=_EMPTY_OBJECT)
            for name, text in RELAY_TOOLS.items()
        )
    if not v2:
        tools.append(
            types.Tool(
                name="search",
                description="Search.",
                input_schema={
                    "type": "object",
                    "properties": {"query": {"type": "string"}, "tenant": {"type": "string"}},
                    "required": ["query", "tenant"],
                },
            )
        )
    return tools


def build_server(record: Path, variant: Path | None = None) -> Server[Any]:
    """The upstream server, recording into ``record``."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=_tools(variant))

    async def call_tool(  # noqa: PLR0911 - one answer per tool and case
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        arguments = params.arguments or {}
        _record(record, {"event": "call", "tool": params.name, "arguments": arguments})
        traceparent = (params.meta or {}).get("traceparent")
        if traceparent is not None:  # the W3C trace context a tracing gateway sent
            _record(record, {"event": "trace", "tool": params.name, "traceparent": traceparent})
        if params.name == "read_file":
            path = str(arguments.get("path"))
            if "crash" in path:
                os._exit(3)
            if "every-" in path:
                return types.CallToolResult.model_validate(
                    {
                        "content": EVERY_CONTENT,
                        "structuredContent": EVERY_STRUCTURED,
                        "isError": "every-error" in path,
                    }
                )
            if "missing" in path:
                return types.CallToolResult(
                    content=[types.TextContent(text=f"no such file: {path}")], is_error=True
                )
            return types.CallToolResult(
                content=[types.TextContent(text=f"contents of {path}")],
                structured_content={"path": path, "size": 42},
            )
        if params.name == "search":
            return types.CallToolResult(
                content=[types.TextContent(text=f"results for {arguments.get('query')}")]
            )
        if params.name == "files.stat_v1.2":
            return types.CallToolResult(content=[types.TextContent(text="stat")])
        if params.name in RELAY_TOOLS:
            return await _relay_tool(ctx, params, record, variant)
        if params.name == "write_file":
            content = str(arguments.get("content", ""))
            return types.CallToolResult(
                content=[types.TextContent(text=f"wrote {len(content)} bytes")]
            )
        return types.CallToolResult(
            content=[types.TextContent(text=f"unknown tool {params.name}")], is_error=True
        )

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult.model_validate({"resources": RESOURCES})

    async def list_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        template = {"uriTemplate": "file:///srv/tenants/{tenant}/{name}", "name": "tenant file"}
        return types.ListResourceTemplatesResult.model_validate({"resourceTemplates": [template]})

    subscribed: set[str] = set()

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult | types.InputRequiredResult:
        _record(record, {"event": "read", "uri": params.uri})
        if params.uri.endswith("/asking.txt"):
            # Reading it asks the client for its roots (in rounds since 2026-07-28).
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                responses = params.input_responses or {}
                if "roots" not in responses:
                    return types.InputRequiredResult(
                        input_requests={"roots": types.ListRootsRequest()}
                    )
                answer: Any = responses["roots"]
            else:
                answer = await ctx.session.send_request(
                    types.ListRootsRequest(), types.ListRootsResult, metadata=_related(ctx)
                )
            text = json.dumps(answer.model_dump(mode="json", by_alias=True, exclude_none=True))
            contents = {"uri": params.uri, "mimeType": "application/json", "text": text}
            return types.ReadResourceResult.model_validate({"contents": [contents]})
        if params.uri in subscribed:
            await ctx.session.send_resource_updated(params.uri)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            await _BUS.publish(ResourceUpdated(uri=params.uri))  # to listen streams naming it
        if "missing" in params.uri:
            raise MCPError(code=-32002, message=f"no such resource: {params.uri}")
        contents = {
            "uri": params.uri,
            "mimeType": "text/plain",
            "text": f"contents of {params.uri}",
        }
        return types.ReadResourceResult.model_validate({"contents": [contents]})

    async def subscribe(
        ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        _record(record, {"event": "subscribe", "uri": params.uri})
        subscribed.add(params.uri)
        return types.EmptyResult()

    async def unsubscribe(
        ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        _record(record, {"event": "unsubscribe", "uri": params.uri})
        subscribed.discard(params.uri)
        return types.EmptyResult()

    async def list_prompts(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        prompt = {
            "name": "summarize",
            "description": "Summarize a topic.",
            "arguments": [{"name": "topic", "required": True}],
        }
        return types.ListPromptsResult.model_validate({"prompts": [prompt]})

    async def get_prompt(
        ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        arguments = dict(params.arguments or {})
        _record(record, {"event": "prompt", "name": params.name, "arguments": arguments})
        if params.name != "summarize":
            raise MCPError(code=-32602, message="no such prompt")
        text = f"Summarize {arguments.get('topic', '')}"
        message = {"role": "user", "content": {"type": "text", "text": text}}
        return types.GetPromptResult.model_validate({"messages": [message]})

    async def complete(
        ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        ref = params.ref
        name = ref.name if isinstance(ref, types.PromptReference) else ref.uri
        _record(record, {"event": "complete", "ref": name, "argument": params.argument.name})
        values = [v for v in ("q1", "q2", "q3", "x9") if v.startswith(params.argument.value)]
        return types.CompleteResult(completion=types.Completion(values=values, total=len(values)))

    async def set_level(
        ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        _record(record, {"event": "set_level", "level": params.level})
        return types.EmptyResult()

    server: Server[Any] = Server(
        "test-upstream",
        on_subscriptions_listen=ListenHandler(_BUS),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_completion=complete,
    )
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
    return server


#: The upstream's change events (2026-07-28: delivered on subscriptions/listen streams).
_BUS = InMemorySubscriptionBus()


def _text_result(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)


_ASKS: dict[str, types.InputRequest] = {
    "ask_llm": types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(text="say hi"))],
            max_tokens=10,
        )
    ),
    "ask_llm_tools": types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[
                types.SamplingMessage(role="user", content=types.TextContent(text="use a tool"))
            ],
            max_tokens=10,
            tools=[types.Tool(name="lookup", input_schema={"type": "object"})],
        )
    ),
    "confirm": types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message="Proceed?",
            requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
        )
    ),
    "roots": types.ListRootsRequest(),
}


def _answered(name: str, answer: Any) -> types.CallToolResult:
    if isinstance(answer, types.ErrorData):
        return _text_result(f"{name} refused: {answer.code}", error=True)
    dumped = json.dumps(answer.model_dump(mode="json", by_alias=True, exclude_none=True))
    return _text_result(f"{name} answered: {dumped}")


async def _relay_tool(  # noqa: PLR0911, PLR0912 - one answer per tool
    ctx: ServerRequestContext[Any, Any],
    params: types.CallToolRequestParams,
    record: Path,
    variant: Path | None,
) -> types.CallToolResult | types.InputRequiredResult:
    name = params.name
    modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
    if name == "slow":
        for step in (1, 2, 3):
            await ctx.session.report_progress(step, 3, f"step {step}")
        return _text_result("done")
    if name == "chatty":
        for level in ("debug", "info", "error"):
            await ctx.session.send_log_message(
                level, f"{level} from chatty", logger="upstream", related_request_id=ctx.request_id
            )
        return _text_result("logged")
    if name == "change_tools":
        assert variant is not None
        _write_variant(variant, "v2 relay")
        if modern:
            await _BUS.publish(ToolsListChanged())  # on the client's subscriptions/listen
        else:
            await ctx.session.send_tool_list_changed()
        return _text_result("changed")
    if name == "touch":
        await ctx.session.send_resource_updated(str((params.arguments or {}).get("uri")))
        return _text_result("touched")
    if modern:
        # Multi round-trip requests (2026-07-28): ask in the result, answered on a retry.
        responses = params.input_responses or {}
        if "ask" not in responses:
            return types.InputRequiredResult(input_requests={"ask": _ASKS[name]})
        return _answered(name, responses["ask"])
    request = _ASKS[name]
    try:
        if isinstance(request, types.CreateMessageRequest):
            answer: Any = await ctx.session.send_request(
                request,
                types.CreateMessageResultWithTools
                if request.params.tools
                else types.CreateMessageResult,
                metadata=_related(ctx),
            )
        elif isinstance(request, types.ElicitRequest):
            answer = await ctx.session.send_request(
                request, types.ElicitResult, metadata=_related(ctx)
            )
        else:
            answer = await ctx.session.send_request(
                request, types.ListRootsResult, metadata=_related(ctx)
            )
    except MCPError as exc:
        answer = types.ErrorData(code=exc.code, message=exc.message)
    _record(record, {"event": "asked", "tool": name})
    return _answered(name, answer)


def _related(ctx: ServerRequestContext[Any, Any]) -> ServerMessageMetadata:
    return ServerMessageMetadata(related_request_id=ctx.request_id)


def read_record(record: Path) -> list[dict[str, Any]]:
    """Every entry the upstream recorded, in order."""
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]


async def _main(record: Path, variant: Path | None, era: str) -> None:
    if _variant(variant) == "dead":
        _record(record, {"event": "refused"})
        sys.exit(1)
    _record(record, {"event": "start"})
    server = build_server(record, variant)
    async with stdio_server() as (read_stream, write_stream):
        if era != "legacy":
            await server.run(read_stream, write_stream, server.create_initialization_options())
        else:
            inner_send, inner_receive = anyio.create_memory_object_stream[
                SessionMessage | Exception
            ](100)

            async def without_discover() -> None:
                # A handshake-only server: server/discover is "method not found".
                async with inner_send:
                    async for item in read_stream:
                        message = getattr(item, "message", None)
                        if isinstance(message, types.JSONRPCRequest) and (
                            message.method == "server/discover"
                        ):
                            error = types.ErrorData(code=-32601, message="Method not found")
                            await write_stream.send(
                                SessionMessage(
                                    types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
                                )
                            )
                            continue
                        await inner_send.send(item)

            async with anyio.create_task_group() as group:
                group.start_soon(without_discover)
                await server.run(
                    inner_receive, write_stream, server.create_initialization_options()
                )
                group.cancel_scope.cancel()
    _record(record, {"event": "stop"})  # its stdin closed: a clean shutdown


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # the SDK's deprecation notices for logging and sampling
    anyio.run(
        _main,
        Path(sys.argv[1]),
        Path(sys.argv[2]) if len(sys.argv) > 2 else None,
        sys.argv[3] if len(sys.argv) > 3 else "",
    )

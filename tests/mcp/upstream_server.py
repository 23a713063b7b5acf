"""A real upstream MCP server for the tests, written with the SDK's low-level Server.

Run as ``python upstream_server.py RECORD [VARIANT]`` it serves over stdio. Every start,
every tool call it receives and a clean stop (its stdin closed) are appended to RECORD
(JSON Lines), so the tests can assert on the upstream's own record of what reached it.
VARIANT is a file whose text selects the tool list ("v2": ``write_file`` and
``files.stat_v1.2`` added, ``search`` removed), read on every ``tools/list``;
"dead" makes the server exit as soon as it starts.

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
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


def _record(path: Path, entry: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(json.dumps({"pid": os.getpid(), **entry}) + "\n")


def _variant(variant: Path | None) -> str:
    if variant is None or not variant.exists():
        return ""
    return variant.read_text(encoding="utf-8").strip()


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
    v2 = _variant(variant) == "v2"
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
    else:
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
    ) -> types.CallToolResult:
        arguments = params.arguments or {}
        _record(record, {"event": "call", "tool": params.name, "arguments": arguments})
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
        if params.name == "write_file":
            content = str(arguments.get("content", ""))
            return types.CallToolResult(
                content=[types.TextContent(text=f"wrote {len(content)} bytes")]
            )
        return types.CallToolResult(
            content=[types.TextContent(text=f"unknown tool {params.name}")], is_error=True
        )

    return Server("test-upstream", on_list_tools=list_tools, on_call_tool=call_tool)


def read_record(record: Path) -> list[dict[str, Any]]:
    """Every entry the upstream recorded, in order."""
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]


async def _main(record: Path, variant: Path | None) -> None:
    if _variant(variant) == "dead":
        _record(record, {"event": "refused"})
        sys.exit(1)
    _record(record, {"event": "start"})
    server = build_server(record, variant)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
    _record(record, {"event": "stop"})  # its stdin closed: a clean shutdown


if __name__ == "__main__":
    anyio.run(_main, Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)

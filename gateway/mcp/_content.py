"""Conversions between gateway ToolOutputs and MCP tool results."""

from __future__ import annotations

import base64
import binascii
import importlib.metadata
import json
from typing import Any, Final

import mcp_types as types

from gateway._output import Content, MediaContent, TextContent, ToolOutput

#: How much of an upstream's protocol error message is kept as public text.
MAX_PUBLIC_TEXT: Final = 1000


def gateway_version() -> str:
    """The installed gateway version (what MCP peers are told)."""
    try:
        return importlib.metadata.version("gateway")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def to_blocks(output: ToolOutput) -> list[types.ContentBlock]:
    """The MCP content blocks of an output's content items (details are not included)."""
    blocks: list[types.ContentBlock] = []
    for index, item in enumerate(output.content):
        if isinstance(item, TextContent):
            blocks.append(types.TextContent(text=item.text))
            continue
        if item.uri is not None:
            blocks.append(types.ResourceLink(name=item.uri, uri=item.uri, mime_type=item.mime_type))
            continue
        data = base64.b64encode(item.data or b"").decode("ascii")
        if item.mime_type.startswith("image/"):
            blocks.append(types.ImageContent(data=data, mime_type=item.mime_type))
        elif item.mime_type.startswith("audio/"):
            blocks.append(types.AudioContent(data=data, mime_type=item.mime_type))
        else:
            blocks.append(
                types.EmbeddedResource(
                    resource=types.BlobResourceContents(
                        uri=f"urn:gateway:content:{index}", mime_type=item.mime_type, blob=data
                    )
                )
            )
    return blocks


def structured(output: ToolOutput) -> dict[str, Any] | None:
    """The output's JSON details as MCP structured content, when they are a JSON object.

    Structured content must be an object before protocol 2026-07-28, so other JSON values
    are only sent as text.
    """
    if output.details is None:
        return None
    value = json.loads(output.details)
    return value if isinstance(value, dict) else None


def from_result(result: types.CallToolResult) -> ToolOutput:
    """A ToolOutput holding an upstream result's content and structured content.

    Text becomes text items (empty text is dropped), images, audio and blob resources become
    media with inline bytes, resource links become media with a URI, text resources become
    text. Structured content becomes the JSON details.
    """
    items: list[Content] = []
    for block in result.content:
        item = _item(block)
        if item is not None:
            items.append(item)
    details = None
    if result.structured_content is not None:
        details = json.dumps(
            result.structured_content, ensure_ascii=False, separators=(",", ":")
        ).encode("utf-8")
    return ToolOutput.from_items(items, details)


def _item(block: types.ContentBlock) -> Content | None:
    if isinstance(block, types.TextContent):
        return TextContent(block.text) if block.text else None
    if isinstance(block, types.ImageContent | types.AudioContent):
        return MediaContent(_mime(block.mime_type), data=_decode(block.data))
    if isinstance(block, types.ResourceLink):
        return MediaContent(_mime(block.mime_type), uri=block.uri)
    resource = block.resource
    if isinstance(resource, types.TextResourceContents):
        return TextContent(resource.text) if resource.text else None
    return MediaContent(_mime(resource.mime_type), data=_decode(resource.blob))


def _mime(mime_type: str | None) -> str:
    return mime_type if mime_type and "/" in mime_type else "application/octet-stream"


def _decode(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return data.encode("utf-8")


def public_text(text: str) -> str:
    """An upstream's message, bounded in length."""
    return text if len(text) <= MAX_PUBLIC_TEXT else text[: MAX_PUBLIC_TEXT - 1] + "…"

"""Conversions between gateway ToolOutputs and MCP tool results."""

from __future__ import annotations

import base64
import binascii
import importlib.metadata
import json
from dataclasses import dataclass
from typing import Any, Final

import mcp_types as types
from pydantic import TypeAdapter

from gateway import _json
from gateway._errors import InvalidToolOutputError
from gateway._output import Content, MediaContent, TextContent, ToolOutput

_BLOCK: Final = TypeAdapter(types.ContentBlock)
#: How much of an upstream's protocol error message is kept as public text.
MAX_PUBLIC_TEXT: Final = 1000


def gateway_version() -> str:
    """The installed gateway version (what MCP peers are told)."""
    try:
        return importlib.metadata.version("gateway")
    except importlib.metadata.PackageNotFoundError:
        return "0"


@dataclass(frozen=True, slots=True)
class UpstreamOutput(ToolOutput):
    """An upstream MCP result: its content blocks exactly as received, and their projection.

    ``content`` and ``details`` are the gateway's view of the result (what the HTTP API and
    the audit trail see); ``blocks`` is the upstream's ``content`` array as JSON, which the
    MCP front answers unchanged (every field of every block: annotations, resource URIs
    and MIME types, resource link names, empty text). ``structured`` is the upstream's
    ``structuredContent`` as JSON when it sent one.
    """

    blocks: bytes = b"[]"
    structured: bytes | None = None

    def __post_init__(self) -> None:
        ToolOutput.__post_init__(self)
        for raw, shape in ((self.blocks, list), (self.structured, dict)):
            if raw is None:
                continue
            try:
                value = _json.parse(bytes(raw), max_depth=10_000)
            except _json.StrictJSONError:
                value = None
            if not isinstance(value, shape):
                raise InvalidToolOutputError("tool: invalid tool output: upstream content")
        object.__setattr__(self, "blocks", bytes(self.blocks))
        if self.structured is not None:
            object.__setattr__(self, "structured", bytes(self.structured))

    def content_blocks(self) -> list[types.ContentBlock]:
        """Fresh SDK models of the upstream's blocks (as received)."""
        return [_BLOCK.validate_python(block) for block in json.loads(self.blocks)]

    def structured_content(self) -> dict[str, Any] | None:
        """A fresh copy of the upstream's structured content, or ``None``."""
        if self.structured is None:
            return None
        value: dict[str, Any] = json.loads(self.structured)
        return value


@dataclass(frozen=True, slots=True)
class ActionOutput(ToolOutput):
    """The outcome of a forwarded resource or prompt request (see ``gateway.mcp._catalog``).

    ``result`` is the upstream's result as JSON (answered to the client as it came);
    ``rpc_code`` is the JSON-RPC error code of an upstream's error answer, whose public
    text is the output's text.
    """

    result: bytes | None = None
    rpc_code: int | None = None


def _encoded(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode(
        "utf-8"
    )


def to_blocks(output: ToolOutput) -> list[types.ContentBlock]:
    """The MCP content blocks of an output (details are not included).

    An upstream's output gives back the upstream's own blocks, unchanged.
    """
    if isinstance(output, UpstreamOutput):
        return output.content_blocks()
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
    if isinstance(output, UpstreamOutput):
        return output.structured_content()
    if output.details is None:
        return None
    value = json.loads(output.details)
    return value if isinstance(value, dict) else None


def from_result(result: types.CallToolResult) -> UpstreamOutput:
    """An :class:`UpstreamOutput`: the upstream's blocks as received, and their projection.

    The projection (the gateway's ``content`` and ``details``): text becomes text items
    (empty text has no item), images, audio and blob resources become media with inline
    bytes, resource links become media with a URI, text resources become text; structured
    content becomes the JSON details. The MCP front answers ``blocks`` and ``structured``,
    not the projection.

    Raises:
        InvalidToolOutputError: the result cannot be encoded as JSON.
    """
    items: list[Content] = []
    for block in result.content:
        item = _item(block)
        if item is not None:
            items.append(item)
    try:
        blocks = _encoded(
            [
                block.model_dump(mode="json", by_alias=True, exclude_unset=True)
                for block in result.content
            ]
        )
        structured_json = (
            None if result.structured_content is None else _encoded(result.structured_content)
        )
    except (ValueError, TypeError, RecursionError):
        raise InvalidToolOutputError("tool: invalid tool output: upstream content") from None
    return UpstreamOutput(
        content=tuple(items), details=structured_json, blocks=blocks, structured=structured_json
    )


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

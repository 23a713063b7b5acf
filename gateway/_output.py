"""ToolOutput: the public result of a tool call, as content items plus optional JSON details."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway import _json
from gateway._errors import InvalidToolOutputError


@dataclass(frozen=True, slots=True)
class TextContent:
    """A non-empty text item, optionally with citations (opaque strings such as URLs)."""

    text: str
    citations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text:
            raise InvalidToolOutputError.because("text item needs text")
        object.__setattr__(self, "citations", tuple(self.citations))
        if not all(isinstance(c, str) for c in self.citations):
            raise InvalidToolOutputError.because("citations must be text")


@dataclass(frozen=True, slots=True)
class MediaContent:
    """A media item: a MIME type plus inline bytes or a URI (exactly one of them)."""

    mime_type: str
    data: bytes | None = None
    uri: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.mime_type, str) or "/" not in self.mime_type:
            raise InvalidToolOutputError.because("media needs a MIME type")
        if (self.data is None) == (self.uri is None):
            raise InvalidToolOutputError.because("media needs exactly one of data or uri")
        if self.data is not None:
            object.__setattr__(self, "data", bytes(self.data))


Content = TextContent | MediaContent


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """An immutable tool result: ordered content items and optional JSON details.

    Construct with :meth:`from_text` or :meth:`from_json`, or directly from content items.
    ``details`` is the raw JSON document (one strict RFC 7493 value) or ``None``.

    Raises:
        InvalidToolOutputError: an item is not a TextContent/MediaContent, or the details are
            not exactly one strict JSON document.
    """

    content: tuple[Content, ...] = ()
    details: bytes | None = field(default=None)

    def __post_init__(self) -> None:
        items = tuple(self.content)
        for index, item in enumerate(items):
            if not isinstance(item, TextContent | MediaContent):
                raise InvalidToolOutputError.because(
                    f"content[{index}]: {type(item).__name__} is not a text or media item"
                )
        object.__setattr__(self, "content", items)
        if self.details is not None:
            if not isinstance(self.details, bytes | bytearray | memoryview):
                raise InvalidToolOutputError.because("details must be bytes")
            raw = bytes(self.details)
            try:
                _json.parse(raw, max_depth=10_000)
            except _json.StrictJSONError as exc:
                raise InvalidToolOutputError.because(f"details: {exc}") from None
            object.__setattr__(self, "details", raw)

    @classmethod
    def from_text(cls, text: str) -> ToolOutput:
        """One text item; empty text gives the empty output."""
        if not text:
            return cls()
        return cls(content=(TextContent(text),))

    @classmethod
    def from_json(cls, raw: str | bytes) -> ToolOutput:
        """JSON details only; ``raw`` must be exactly one strict JSON document.

        Raises:
            InvalidToolOutputError: ``raw`` is missing, empty, blank or not strict JSON.
        """
        if isinstance(raw, str):
            data = raw.encode("utf-8", "surrogatepass")
        elif isinstance(raw, bytes | bytearray | memoryview):
            data = bytes(raw)
        else:
            raise InvalidToolOutputError.because("details must be JSON text")
        if not data.strip():
            raise InvalidToolOutputError.because("details are empty")
        return cls(details=data)

    @classmethod
    def from_items(cls, items: Iterable[Content], details: bytes | None = None) -> ToolOutput:
        """Build from any iterable of content items."""
        return cls(content=tuple(items), details=details)

    def text(self) -> str | None:
        """The lossless text projection, or ``None`` where any item is not text.

        With no items, the details text (or ``""``). Otherwise the text items concatenated
        without separator; details are then ignored. Media is never dropped silently.
        """
        if not self.content:
            return "" if self.details is None else self.details.decode("utf-8")
        parts: list[str] = []
        for item in self.content:
            if not isinstance(item, TextContent):
                return None
            parts.append(item.text)
        return "".join(parts)

    def json(self) -> Any:
        """The decoded details (exact numbers), or ``None`` when there are none."""
        return None if self.details is None else _json.parse(self.details, max_depth=10_000)

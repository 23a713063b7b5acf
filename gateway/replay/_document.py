"""An input document read back from its recorded JSON, for engines that take documents."""

from __future__ import annotations

import hashlib
from typing import Any

from gateway import ToolDefinition, _json
from gateway.policy import CallerContext, InputDocument


class RecordedDocument(InputDocument):
    """A recorded input document (``{"arguments", "context", "facts", "tool"}``) as it was.

    :meth:`to_json` hands back the recorded bytes unchanged, so an engine sees exactly the
    input the recorded decision saw; the other views are decoded from them on first use.
    """

    __slots__ = ("_members", "_raw")

    def __init__(self, raw: bytes) -> None:  # the base's state is derived, never set
        self._raw = bytes(raw)
        self._members: dict[str, Any] | None = None

    def _member(self, name: str) -> Any:
        if self._members is None:
            value = _json.parse_trusted(self._raw)
            self._members = value if isinstance(value, dict) else {}
        return self._members.get(name, {})

    @property
    def definition(self) -> ToolDefinition:
        """The recorded tool's name, description and input schema."""
        tool = self._member("tool")
        return ToolDefinition(
            str(tool.get("name", "")),
            _json.canonical(tool.get("input_schema", {})),
            str(tool.get("description", "")),
        )

    @property
    def arguments(self) -> bytes:
        """The recorded arguments as canonical JSON."""
        return _json.canonical(self._member("arguments"))

    @property
    def canonical_arguments(self) -> bytes:
        """The recorded arguments as canonical JSON."""
        return self.arguments

    @property
    def context(self) -> CallerContext:
        """The recorded caller context."""
        return CallerContext(self._member("context"))

    @property
    def facts_json(self) -> bytes:
        """The recorded facts as canonical JSON."""
        return _json.canonical(self._member("facts"))

    @property
    def tool_json(self) -> bytes:
        """The recorded tool member as canonical JSON."""
        return _json.canonical(self._member("tool"))

    @property
    def digest(self) -> str:
        """SHA-256 over the recorded tool, arguments, facts and context, as the original's."""
        hasher = hashlib.sha256(hashlib.sha256(self.tool_json).digest())
        for part in (self.arguments, self.facts_json, _json.canonical(self._member("context"))):
            hasher.update(b"\0")
            hasher.update(part)
        return hasher.hexdigest()

    def to_json(self) -> bytes:
        """The recorded bytes."""
        return self._raw

    def to_dict(self) -> dict[str, Any]:
        """A fresh decoded copy (exact numbers as ``Decimal``)."""
        value = _json.parse_trusted(self._raw)
        return value if isinstance(value, dict) else {}

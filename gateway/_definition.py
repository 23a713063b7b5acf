"""ToolDefinition: the model-visible contract of one tool (name, description, input schema)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from gateway import _json
from gateway._errors import InvalidDefinitionError

_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _schema_bytes(input_schema: object) -> bytes:
    if isinstance(input_schema, bytes | bytearray | memoryview):
        return bytes(input_schema)
    if isinstance(input_schema, str):
        try:
            return input_schema.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidDefinitionError(
                "tool: invalid tool definition: input schema is not valid UTF-8"
            ) from None
    if isinstance(input_schema, Mapping):
        try:
            return _json.canonical(dict(input_schema))
        except (_json.StrictJSONError, RecursionError):
            raise InvalidDefinitionError(
                "tool: invalid tool definition: input schema must be a JSON object"
            ) from None
    if input_schema is None:
        return b""
    raise InvalidDefinitionError(
        "tool: invalid tool definition: input schema must be a mapping or JSON text"
    )


class ToolDefinition:
    """An immutable, validated tool definition, safe to show to a model.

    Args:
        name: 1 to 64 characters of ``[A-Za-z0-9_-]``.
        input_schema: a JSON object whose ``type`` is exactly ``"object"``, as a mapping or
            as JSON text/bytes (kept byte for byte).
        description: any valid text; may be empty.

    Raises:
        InvalidDefinitionError: any rule above is broken. The checks run in the order name,
            description, schema presence, schema shape, schema type.
    """

    __slots__ = ("_description", "_name", "_schema")

    _name: str
    _description: str
    _schema: bytes

    def __init__(self, name: str, input_schema: object, description: str = "") -> None:
        if not isinstance(name, str) or _NAME.fullmatch(name) is None:
            raise InvalidDefinitionError(
                f"tool: invalid tool definition: name {name!r} must be 1-64 characters of "
                "[A-Za-z0-9_-]"
            )
        if not isinstance(description, str):
            raise InvalidDefinitionError("tool: invalid tool definition: description must be text")
        try:
            description.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidDefinitionError(
                "tool: invalid tool definition: description is not valid UTF-8"
            ) from None
        schema = _schema_bytes(input_schema)
        if not schema:
            raise InvalidDefinitionError("tool: invalid tool definition: missing input schema")
        try:
            document = _json.parse(schema, max_depth=10_000)
        except _json.StrictJSONError:
            document = None
        if not isinstance(document, dict):
            raise InvalidDefinitionError(
                "tool: invalid tool definition: input schema must be a JSON object"
            )
        kind = document.get("type")
        if not isinstance(kind, str) or kind != "object":
            raise InvalidDefinitionError(
                'tool: invalid tool definition: input schema type must be "object"'
            )
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_description", description)
        object.__setattr__(self, "_schema", schema)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ToolDefinition is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"ToolDefinition is immutable: cannot delete {name!r}")

    @property
    def name(self) -> str:
        """The tool name the model calls."""
        return self._name

    @property
    def description(self) -> str:
        """The model-visible description."""
        return self._description

    @property
    def input_schema_json(self) -> bytes:
        """The input schema document exactly as given (bytes are immutable)."""
        return self._schema

    @property
    def input_schema(self) -> dict[str, Any]:
        """A fresh, detached decoded copy of the input schema; mutating it changes nothing."""
        value: dict[str, Any] = json.loads(self._schema)
        return value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolDefinition):
            return NotImplemented
        return (self._name, self._description, self._schema) == (
            other._name,
            other._description,
            other._schema,
        )

    def __hash__(self) -> int:
        return hash((self._name, self._description, self._schema))

    def __repr__(self) -> str:
        return f"ToolDefinition(name={self._name!r}, description={self._description!r})"

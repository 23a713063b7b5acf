"""ToolDefinition: the model-visible contract of one tool (name, description, input schema).

Optional, keyword-only metadata travels with it: a display ``title``, behaviour
``annotations`` (MCP tool annotations such as ``destructiveHint``) and an ``output_schema``.
The policy sees them in ``input.tool`` when they are present.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from gateway import _json
from gateway._errors import InvalidDefinitionError

_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: The MCP specification's tool-name rule, accepted for imported (upstream) tools.
_IMPORTED_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def _schema_bytes(input_schema: object) -> bytes:
    if isinstance(input_schema, bytes | bytearray | memoryview):
        return bytes(input_schema)
    if isinstance(input_schema, str):
        try:
            return input_schema.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidDefinitionError.because("input schema is not valid UTF-8") from None
    if isinstance(input_schema, Mapping):
        try:
            return _json.canonical(dict(input_schema))
        except (_json.StrictJSONError, RecursionError):
            raise InvalidDefinitionError.because("input schema must be a JSON object") from None
    if input_schema is None:
        return b""
    raise InvalidDefinitionError.because("input schema must be a mapping or JSON text")


def _object_bytes(value: object, what: str) -> bytes | None:
    # An optional JSON object (a mapping or JSON text), kept canonically; None when absent.
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview | str):
        raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
        try:
            document = _json.parse(raw, max_depth=10_000)
        except (_json.StrictJSONError, RecursionError):
            document = None
    elif isinstance(value, Mapping):
        document = dict(value)
    else:
        document = None
    if not isinstance(document, dict):
        raise InvalidDefinitionError.because(f"{what} must be a JSON object")
    try:
        return _json.canonical(document)
    except (_json.StrictJSONError, RecursionError, UnicodeError):
        raise InvalidDefinitionError.because(f"{what} must be a JSON object") from None


class ToolDefinition:
    """An immutable, validated tool definition, safe to show to a model.

    Args:
        name: 1 to 64 characters of ``[A-Za-z0-9_-]``.
        input_schema: a JSON object whose ``type`` is exactly ``"object"``, as a mapping or
            as JSON text/bytes (kept byte for byte).
        description: any valid text; may be empty.
        title: an optional display name (text).
        annotations: optional behaviour hints (a JSON object, e.g. MCP's
            ``{"destructiveHint": true}``), shown to the policy as ``input.tool.annotations``.
        output_schema: an optional JSON object describing the structured result, shown to
            the policy as ``input.tool.output_schema``.
        imported: the tool comes from another system (an upstream MCP server): its name
            follows the MCP rule, 1 to 128 characters of ``[A-Za-z0-9_.-]``. The gateway's
            own tools keep the strict rule.

    Raises:
        InvalidDefinitionError: any rule above is broken. The checks run in the order name,
            description, schema presence, schema shape, schema type, then the metadata.
    """

    __slots__ = (
        "_annotations",
        "_description",
        "_hash",
        "_key",
        "_name",
        "_output_schema",
        "_schema",
        "_title",
    )

    _name: str
    _description: str
    _schema: bytes
    _title: str | None
    _annotations: bytes | None
    _output_schema: bytes | None
    _key: tuple[object, ...]
    # The key's hash, computed once: a definition keys the digest memos on every call, and a
    # tuple does not keep its hash.
    _hash: int

    def __init__(
        self,
        name: str,
        input_schema: object,
        description: str = "",
        *,
        title: str | None = None,
        annotations: object = None,
        output_schema: object = None,
        imported: bool = False,
    ) -> None:
        rule = _IMPORTED_NAME if imported else _NAME
        if not isinstance(name, str) or rule.fullmatch(name) is None:
            limits = (
                "1-128 characters of [A-Za-z0-9_.-]"
                if imported
                else ("1-64 characters of [A-Za-z0-9_-]")
            )
            raise InvalidDefinitionError.because(f"name {name!r} must be {limits}")
        if not isinstance(description, str):
            raise InvalidDefinitionError.because("description must be text")
        try:
            description.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidDefinitionError.because("description is not valid UTF-8") from None
        schema = _schema_bytes(input_schema)
        if not schema:
            raise InvalidDefinitionError.because("missing input schema")
        try:
            document = _json.parse(schema, max_depth=10_000)
        except _json.StrictJSONError:
            document = None
        if not isinstance(document, dict):
            raise InvalidDefinitionError.because("input schema must be a JSON object")
        kind = document.get("type")
        if not isinstance(kind, str) or kind != "object":
            raise InvalidDefinitionError.because('input schema type must be "object"')
        if title is not None:
            if not isinstance(title, str):
                raise InvalidDefinitionError.because("title must be text")
            try:
                title.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidDefinitionError.because("title is not valid UTF-8") from None
        annotations_json = _object_bytes(annotations, "annotations")
        output_json = _object_bytes(output_schema, "output schema")
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_description", description)
        object.__setattr__(self, "_schema", schema)
        object.__setattr__(self, "_title", title)
        object.__setattr__(self, "_annotations", annotations_json)
        object.__setattr__(self, "_output_schema", output_json)
        key = (name, description, schema, title, annotations_json, output_json)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash(key))

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

    @property
    def title(self) -> str | None:
        """The display title, or ``None``."""
        return self._title

    @property
    def annotations_json(self) -> bytes | None:
        """The annotations as canonical JSON, or ``None`` when there are none."""
        return self._annotations

    @property
    def annotations(self) -> dict[str, Any] | None:
        """A fresh decoded copy of the annotations, or ``None``."""
        return None if self._annotations is None else _decoded(self._annotations)

    @property
    def output_schema_json(self) -> bytes | None:
        """The output schema as canonical JSON, or ``None`` when there is none."""
        return self._output_schema

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """A fresh decoded copy of the output schema, or ``None``."""
        return None if self._output_schema is None else _decoded(self._output_schema)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolDefinition):
            return NotImplemented
        return self._key == other._key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"ToolDefinition(name={self._name!r}, description={self._description!r})"


def _decoded(raw: bytes) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(raw)
    return value

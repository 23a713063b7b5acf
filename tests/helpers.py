"""Small fakes shared by the core tests: counting, stub, wrapping and validating tools."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

from gateway import (
    InputValidator,
    Invocation,
    Tool,
    ToolCall,
    ToolDefinition,
    ToolOutput,
)

#: The seed's `S`: a search tool whose query is a string of at least two characters.
SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 2}},
    "required": ["query"],
    "additionalProperties": False,
}

OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}


def is_noncharacter(char: str) -> bool:
    """Whether ``char`` is a Unicode noncharacter, which RFC 7493 forbids in strings."""
    code = ord(char)
    return 0xFDD0 <= code <= 0xFDEF or code & 0xFFFE == 0xFFFE


def is_ijson_character(char: str) -> bool:
    """Whether an I-JSON (RFC 7493) string may hold ``char``: no surrogate, no noncharacter."""
    return not (0xD800 <= ord(char) <= 0xDFFF or is_noncharacter(char))


#: Characters I-JSON strings may hold. The alphabet is exactly ``is_ijson_character``, which a
#: test holds to the strict parser over every code point: ``st.characters()`` alone draws
#: surrogates and noncharacters (``st.text()``'s default alphabet draws noncharacters).
IJSON_CHARACTERS: st.SearchStrategy[str] = st.characters().filter(is_ijson_character)


def definition(
    name: str = "search", schema: object = None, description: str = ""
) -> ToolDefinition:
    """A definition with `SEARCH_SCHEMA` unless another schema is given."""
    return ToolDefinition(name, SEARCH_SCHEMA if schema is None else schema, description)


def call(arguments: str | bytes = "", *, name: str = "search", call_id: str = "call") -> ToolCall:
    """A ToolCall with a fixed id, for tests that only care about the arguments."""
    return ToolCall(call_id, name, arguments)


def dumps(value: object) -> str:
    """Compact JSON text."""
    return json.dumps(value, separators=(",", ":"))


class CountingTool:
    """Echoes its arguments as text and counts definition() and call() calls."""

    def __init__(self, definition: ToolDefinition) -> None:
        self._definition = definition
        self.definition_calls = 0
        self.calls = 0

    def definition(self) -> ToolDefinition:
        self.definition_calls += 1
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        self.calls += 1
        return ToolOutput.from_text(invocation.arguments.decode("utf-8"))


class StubTool:
    """Builds its definition lazily on every definition() call, so invalid ones raise there.

    `name` may be changed after bind to show that the contract froze the first answer.
    """

    def __init__(self, name: str = "search", schema: object = None, description: str = "") -> None:
        self.name = name
        self.schema: object = SEARCH_SCHEMA if schema is None else schema
        self.description = description
        self.result = ToolOutput.from_text("stub result")
        self.calls = 0

    def definition(self) -> ToolDefinition:
        return ToolDefinition(self.name, self.schema, self.description)

    async def call(self, invocation: Invocation) -> ToolOutput:
        self.calls += 1
        return self.result


class RaisingTool:
    """A tool whose call raises the given exception object."""

    def __init__(self, error: BaseException, name: str = "search") -> None:
        self.error = error
        self._definition = definition(name, OBJECT_SCHEMA)

    def definition(self) -> ToolDefinition:
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        raise self.error


class WrapperTool:
    """A decorator that delegates everything to `inner` and unwraps to it."""

    def __init__(self, inner: Tool | None) -> None:
        self.inner = inner

    def definition(self) -> ToolDefinition:
        assert self.inner is not None
        return self.inner.definition()

    async def call(self, invocation: Invocation) -> ToolOutput:
        assert self.inner is not None
        return await self.inner.call(invocation)

    def unwrap(self) -> Tool | None:
        return self.inner


class ValidatingTool:
    """Declares `validator` (counted) and otherwise behaves as a CountingTool."""

    def __init__(
        self,
        validator: InputValidator | None,
        *,
        schema: object = None,
        declaration_error: Exception | None = None,
    ) -> None:
        self._validator = validator
        self._definition = definition("search", OBJECT_SCHEMA if schema is None else schema)
        self._declaration_error = declaration_error
        self.declarations = 0
        self.calls = 0

    def definition(self) -> ToolDefinition:
        return self._definition

    def input_validator(self) -> InputValidator | None:
        self.declarations += 1
        if self._declaration_error is not None:
            raise self._declaration_error
        return self._validator

    async def call(self, invocation: Invocation) -> ToolOutput:
        self.calls += 1
        return ToolOutput.from_text("validated")


class ValidatingWrapper(WrapperTool):
    """A wrapper that declares its own validator (possibly None) over `inner`."""

    def __init__(self, inner: Tool, validator: InputValidator | None) -> None:
        super().__init__(inner)
        self._validator = validator

    def input_validator(self) -> InputValidator | None:
        return self._validator


class RecordingValidator:
    """An input validator that records the bytes it saw and raises `error` if set."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.seen: list[bytes] = []

    def __call__(self, raw: bytes) -> None:
        self.seen.append(raw)
        if self.error is not None:
            raise self.error


def chain(depth: int, base: Tool) -> Tool:
    """`depth` WrapperTools stacked above `base` (depth 0 is `base` itself)."""
    tool: Tool = base
    for _ in range(depth):
        tool = WrapperTool(tool)
    return tool


_SPACE = st.text(alphabet=" \t\r\n", max_size=3)


def json_text(max_size: int | None = None) -> st.SearchStrategy[str]:
    """Texts strict JSON accepts (every code point but the noncharacters and surrogates)."""
    return st.text(IJSON_CHARACTERS, max_size=max_size)


#: Scalars a strict decoding yields (numbers other than integers are Decimals).
JSON_SCALARS: st.SearchStrategy[object] = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | json_text()
)


#: JSON scalars as admission takes them: a number with a fraction or an exponent is one a
#: double holds as written (its shortest form), as every tool reads numbers as doubles.
ADMISSIBLE_SCALARS: st.SearchStrategy[object] = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False).map(lambda number: Decimal(repr(number)))
    | json_text()
)


def json_values(leaves: st.SearchStrategy[object] = JSON_SCALARS) -> st.SearchStrategy[object]:
    """Nested JSON values (small lists and objects) over ``leaves``."""
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(json_text(), inner, max_size=3),
        max_leaves=12,
    )


@st.composite
def serialized(draw: st.DrawFn, value: object) -> str:
    """Serialize `value` as JSON with random member order, white space and escaping."""
    space = draw(_SPACE)
    if isinstance(value, dict):
        keys = draw(st.permutations(list(value)))
        members = [
            draw(serialized(key)) + draw(_SPACE) + ":" + draw(serialized(value[key]))
            for key in keys
        ]
        return space + "{" + ",".join(members) + draw(_SPACE) + "}" + draw(_SPACE)
    if isinstance(value, list):
        items = [draw(serialized(item)) for item in value]
        return space + "[" + ",".join(items) + draw(_SPACE) + "]" + draw(_SPACE)
    if isinstance(value, str):
        return space + json.dumps(value, ensure_ascii=draw(st.booleans())) + draw(_SPACE)
    if isinstance(value, Decimal):
        return space + str(value) + draw(_SPACE)
    return space + json.dumps(value) + draw(_SPACE)

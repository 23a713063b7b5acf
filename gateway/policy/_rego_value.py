"""Rego values as OPA's WebAssembly runtime prints them, ordered and printed as OPA does.

``opa_value_dump`` writes a value in Rego syntax: JSON, plus sets (``{1, 2}``, ``set()``) and
objects whose keys need not be strings. This module reads that text exactly (numbers keep
their text), orders values with OPA's ``ast.Compare`` and prints them as Go's
``ast.Value.String()`` does. It never evaluates anything.
"""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from gateway import _json

#: Deeper values are refused: the text comes from the engine, but its shape from the caller.
MAX_DEPTH: Final = 10_000


class RegoValueError(ValueError):
    """Text that is not one Rego value as OPA's runtime prints it, or a value with no JSON form."""


@dataclass(frozen=True, slots=True)
class Number:
    """A Rego number, kept as its text (``1.50`` and ``1.5`` print differently in OPA)."""

    text: str

    def exact(self) -> Decimal:
        """The exact value."""
        return _decimal(self.text)


@dataclass(frozen=True, slots=True)
class RegoObject:
    """An object, its members in the printed order (keys may be any value)."""

    items: tuple[tuple[Any, Any], ...]


@dataclass(frozen=True, slots=True)
class RegoSet:
    """A set, its members in the printed order."""

    items: tuple[Any, ...]


RegoValue = Any
"""None, bool, :class:`Number`, str, list, :class:`RegoObject` or :class:`RegoSet`."""


@functools.lru_cache(maxsize=4096)
def _decimal(text: str) -> Decimal:
    try:
        return Decimal(text)
    except InvalidOperation:
        raise RegoValueError("invalid number") from None


# -- reading --------------------------------------------------------------------------------

_WS: Final = " \t\n\r"
_NUMBER_CHARS: Final = frozenset("0123456789+-.eE")
_ESCAPES: Final = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r"}
_ESCAPES["t"] = "\t"


class _Reader:
    __slots__ = ("pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def skip(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos] in _WS:
            pos += 1
        self.pos = pos

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise RegoValueError(f"expected {char!r} at offset {self.pos}")
        self.pos += 1

    def value(self, depth: int) -> RegoValue:
        if depth > MAX_DEPTH:
            raise RegoValueError("value nests too deeply")
        char = self.peek()
        if char == "[":
            return self.array(depth)
        if char == "{":
            return self.braces(depth)
        if char == '"':
            return self.string()
        for word, result in (("null", None), ("true", True), ("false", False)):
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return result
        if self.text.startswith("set()", self.pos):
            self.pos += len("set()")
            return RegoSet(())
        return self.number()

    def array(self, depth: int) -> list[RegoValue]:
        self.expect("[")
        items: list[RegoValue] = []
        if self.peek() == "]":
            self.pos += 1
            return items
        while True:
            items.append(self.value(depth + 1))
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("]")
            return items

    def braces(self, depth: int) -> RegoObject | RegoSet:
        self.expect("{")
        if self.peek() == "}":
            self.pos += 1
            return RegoObject(())
        first = self.value(depth + 1)
        if self.peek() == ":":
            self.pos += 1
            members = [(first, self.value(depth + 1))]
            while self.peek() == ",":
                self.pos += 1
                key = self.value(depth + 1)
                self.expect(":")
                members.append((key, self.value(depth + 1)))
            self.expect("}")
            return RegoObject(tuple(members))
        elements = [first]
        while self.peek() == ",":
            self.pos += 1
            elements.append(self.value(depth + 1))
        self.expect("}")
        return RegoSet(tuple(elements))

    def string(self) -> str:
        text = self.text
        pos = self.pos + 1
        out: list[str] = []
        while True:
            end = pos
            while end < len(text) and text[end] not in '"\\':
                end += 1
            if end >= len(text):
                raise RegoValueError("unterminated string")
            out.append(text[pos:end])
            if text[end] == '"':
                self.pos = end + 1
                return "".join(out)
            escape = text[end + 1 : end + 2]
            if escape == "u":
                code = self._hex(end + 2)
                pos = end + 6
                if 0xD800 <= code < 0xDC00 and text[pos : pos + 2] == "\\u":
                    low = self._hex(pos + 2)
                    if 0xDC00 <= low < 0xE000:
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        pos += 6
                if 0xD800 <= code < 0xE000:
                    raise RegoValueError("lone surrogate in string")
                out.append(chr(code))
            elif escape in _ESCAPES:
                out.append(_ESCAPES[escape])
                pos = end + 2
            else:
                raise RegoValueError("invalid escape in string")

    def _hex(self, start: int) -> int:
        digits = self.text[start : start + 4]
        if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise RegoValueError("invalid \\u escape")
        return int(digits, 16)

    def number(self) -> Number:
        text, start = self.text, self.pos
        end = start
        while end < len(text) and text[end] in _NUMBER_CHARS:
            end += 1
        if end == start:
            raise RegoValueError(f"unexpected text at offset {start}")
        self.pos = end
        number = Number(text[start:end])
        number.exact()
        return number


def parse(text: str) -> RegoValue:
    """Read one value printed by ``opa_value_dump``.

    Raises:
        RegoValueError: the text is not exactly one such value.
    """
    reader = _Reader(text)
    value = reader.value(0)
    reader.skip()
    if reader.pos != len(text):
        raise RegoValueError("text after the value")
    return value


# -- ordering (OPA's ast.Compare) -----------------------------------------------------------


def _rank(value: RegoValue) -> int:  # noqa: PLR0911 - one return per Rego kind
    if value is None:
        return 0
    if isinstance(value, bool):
        return 1
    if isinstance(value, Number):
        return 2
    if isinstance(value, str):
        return 3
    if isinstance(value, list):
        return 6
    if isinstance(value, RegoObject):
        return 7
    if isinstance(value, RegoSet):
        return 8
    raise RegoValueError("not a Rego value")


def _sequence_compare(left: list[Any] | tuple[Any, ...], right: list[Any] | tuple[Any, ...]) -> int:
    for a, b in zip(left, right, strict=False):
        result = compare(a, b)
        if result:
            return result
    return (len(left) > len(right)) - (len(left) < len(right))


def compare(left: RegoValue, right: RegoValue) -> int:  # noqa: PLR0911 - one return per Rego kind
    """-1, 0 or 1 as OPA orders the two values (null < booleans < numbers < strings < ...)."""
    rank_left, rank_right = _rank(left), _rank(right)
    if rank_left != rank_right:
        return -1 if rank_left < rank_right else 1
    if left is None:
        return 0
    if isinstance(left, bool | str):
        return int(left > right) - int(left < right)
    if isinstance(left, Number):
        a, b = left.exact(), right.exact()
        return int(a > b) - int(a < b)
    if isinstance(left, list):
        return _sequence_compare(left, right)
    if isinstance(left, RegoSet):
        return _sequence_compare(sorted_items(left.items), sorted_items(right.items))
    a_members, b_members = sorted_members(left), sorted_members(right)
    for (a_key, a_value), (b_key, b_value) in zip(a_members, b_members, strict=False):
        result = compare(a_key, b_key) or compare(a_value, b_value)
        if result:
            return result
    return (len(a_members) > len(b_members)) - (len(a_members) < len(b_members))


_KEY: Final = functools.cmp_to_key(compare)


def sorted_items(items: tuple[Any, ...] | list[Any]) -> list[Any]:
    """Set members in OPA's order."""
    return sorted(items, key=_KEY)


def sorted_members(value: RegoObject) -> list[tuple[Any, Any]]:
    """Object members in OPA's key order."""
    return sorted(value.items, key=lambda member: _KEY(member[0]))


# -- printing (Go's ast.Value.String()) -----------------------------------------------------

_GO_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def _go_printable(char: str) -> bool:
    # Go's unicode.IsPrint: letters, marks, numbers, punctuation, symbols and U+0020, which
    # is exactly Python's isprintable(). The two disagree only where their Unicode versions
    # do, on code points one of them leaves unassigned: those are refused, never guessed.
    if char.isprintable():
        return True
    if unicodedata.category(char) == "Cn":
        raise RegoValueError("string holds a code point this Unicode version leaves unassigned")
    return False


def go_quote(text: str) -> str:
    """``strconv.Quote``: double-quoted, Go escapes, printable Unicode kept as is."""
    out = ['"']
    for char in text:
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif " " <= char < "\x7f" or (char > "\x7f" and _go_printable(char)):
            out.append(char)
        else:
            code = ord(char)
            if code < 0x80:
                out.append(f"\\x{code:02x}")
            elif code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def go_string(value: RegoValue) -> str:  # noqa: PLR0911 - one return per Rego kind
    """What Go's ``ast.Value.String()`` prints for the value (keys and sets sorted)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, Number):
        return value.text
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, list):
        return "[" + ", ".join(go_string(item) for item in value) + "]"
    if isinstance(value, RegoSet):
        if not value.items:
            return "set()"
        return "{" + ", ".join(go_string(item) for item in sorted_items(value.items)) + "}"
    if isinstance(value, RegoObject):
        members = sorted_members(value)
        return "{" + ", ".join(f"{go_string(k)}: {go_string(v)}" for k, v in members) + "}"
    raise RegoValueError("not a Rego value")


# -- JSON (what a decision becomes) ---------------------------------------------------------


def to_json(value: RegoValue) -> Any:
    """The JSON form OPA's REST API gives: sets become arrays in OPA's order.

    Numbers become ``int`` (no fraction or exponent) or exact ``Decimal``, as the project's
    strict JSON reader gives them.

    Raises:
        RegoValueError: an object key is not a string (JSON has no form for it).
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, Number):
        text = value.text
        if any(c in text for c in ".eE"):
            return value.exact()
        return int(text)
    if isinstance(value, list):
        return [to_json(item) for item in value]
    if isinstance(value, RegoSet):
        return [to_json(item) for item in sorted_items(value.items)]
    if isinstance(value, RegoObject):
        out: dict[str, Any] = {}
        for key, item in value.items:
            if not isinstance(key, str):
                raise RegoValueError("object key is not a string")
            if key in out:
                raise RegoValueError("duplicate object key")
            out[key] = to_json(item)
        return out
    raise RegoValueError("not a Rego value")


def dump_to_json(text: str) -> Any:
    """Read an ``opa_value_dump`` text into its JSON form (see :func:`to_json`).

    Text without sets or non-string keys is JSON, read by the strict reader; anything else
    (a set, a non-string key) is not valid JSON and takes the full reader.
    """
    try:
        return _json.parse_trusted(text)
    except _json.StrictJSONError:
        pass
    return to_json(parse(text))

"""Strict JSON (RFC 7493, I-JSON) reading and canonical writing for untrusted input.

Python's ``json`` module is lenient where the gateway must not be: it accepts ``NaN`` and
``Infinity``, keeps the last of duplicate member names, decodes escaped lone surrogates and
noncharacters and rounds long decimals to floats. Everything here closes those gaps, bounds
the work done on hostile input, and never raises anything but :class:`StrictJSONError` for
bad input. No error message ever quotes the input: it names what is wrong and where (a
character offset), never a member name, string or number.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final

#: Default upper bound on the size of one tool call's argument document, in bytes.
DEFAULT_MAX_ARGUMENT_BYTES: Final = 1 << 20
#: Default upper bound on container nesting (objects and arrays) in an argument document.
DEFAULT_MAX_DEPTH: Final = 64

# Go's unicode.IsSpace set (the White_Space property), which the seed trims before deciding
# that arguments are blank. Python's str.strip() would also strip U+001C..U+001F.
_GO_SPACE: Final = (
    "\t\n\v\f\r \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)

JSONValue = Any
"""A decoded JSON value: dict, list, str, int, Decimal, bool or None."""


# RFC 7493 section 2.1: strings must not contain surrogates or noncharacters (U+FDD0..U+FDEF
# and the last two code points of every plane), raw or escaped. An escaped surrogate pair
# decodes to its code point first, so "\\udbff\\udfff" is U+10FFFF and refused here.
#
# Found with three patterns rather than one class, and not at all in ASCII text (every
# forbidden code point is above U+D7FF): Python's re tests a character class that mixes
# BMP and astral members one member at a time, which cost about 75 ns per character here
# (170 us for 2 KB of arguments, on every strict parse); a class of BMP ranges alone, or
# of one range, is tested in constant time.
_FORBIDDEN_BMP: Final = re.compile("[\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff]")
_ASTRAL: Final = re.compile("[\U00010000-\U0010ffff]")
_FORBIDDEN_ASTRAL: Final = re.compile(
    "["
    + "".join(f"{chr(plane << 16 | 0xFFFE)}{chr(plane << 16 | 0xFFFF)}" for plane in range(1, 17))
    + "]"
)
# In raw text, besides the forbidden code points themselves: any \u escape that could
# decode to one (D800..DFFF, FDD0..FDEF, FFFE, FFFF). Text with neither has no forbidden
# string.
_SUSPECT_ESCAPE: Final = re.compile(r"\\u(?:[dD][89a-fA-F]|[fF][dD][d-eD-E]|[fF]{3}[eEfF])")


def _first_forbidden(text: str) -> str | None:
    # The forbidden code point that comes first in ``text``, if any.
    if text.isascii():  # constant time: CPython knows it of every string
        return None
    found = _FORBIDDEN_BMP.search(text)
    end = len(text) if found is None else found.start()
    # Astral text is rare: only then is the slower class of astral noncharacters searched,
    # and only before the first forbidden BMP code point.
    if _ASTRAL.search(text, 0, end) is not None:
        astral = _FORBIDDEN_ASTRAL.search(text, 0, end)
        if astral is not None:
            return astral.group()
    return None if found is None else found.group()


def _suspect(text: str) -> bool:
    # Whether raw JSON text may hold a forbidden string: a forbidden code point, or an
    # escape that could decode to one.
    if "\\u" in text and _SUSPECT_ESCAPE.search(text) is not None:
        return True
    return _first_forbidden(text) is not None


class StrictJSONError(ValueError):
    """Bytes that are not exactly one valid RFC 7493 JSON document within the limits."""


#: Told of every strict parse (``"parse"``), trusted parse (``"parse_trusted"``) and canonical
#: encoding (``"canonical"``) while set: how tests count the work one call does
#: (``gateway.testing.JsonWork``). ``None`` (the default) costs one comparison per call.
Observer = Callable[[str], None]
_observer: Observer | None = None


def observe(observer: Observer | None) -> Observer | None:
    """Set the observer of parses and encodings (``None``: none); return the previous one."""
    global _observer  # one process-wide hook, set only by tests
    previous, _observer = _observer, observer
    return previous


class Parsed:
    """A strictly decoded JSON value and its canonical encoding, made by :func:`encode_parsed`.

    What a surface that decoded a document strictly hands to admission, so that the same
    value is not decoded again from its own canonical bytes: ``canonical`` is exactly
    ``canonical(value)`` and decodes to a value equal to ``value``. ``value`` must not be
    changed once given here (nothing in the gateway changes it).
    """

    __slots__ = ("canonical", "value")

    def __init__(self, token: object, value: JSONValue, encoded: bytes) -> None:
        if token is not _PARSED:
            raise TypeError("Parsed values are made by encode_parsed()")
        self.value = value
        self.canonical = encoded


_PARSED: Final = object()


def encode_parsed(value: JSONValue) -> Parsed:
    """Encode a value decoded by :func:`parse` canonically, keeping the value beside it.

    Raises:
        StrictJSONError: the value is not JSON (see :func:`canonical`).
    """
    return Parsed(_PARSED, value, canonical(value))


class Decoded:
    """The strict decoding of one exact argument document, made once by admission.

    What admission hands on with what it admitted, so that the policy input, the decision
    cache and the audit trail read the arguments without decoding them again: ``source`` is
    the very bytes object admitted, ``value`` is ``parse(source)`` and :meth:`canonical` is
    ``canonical(value)``, encoded on first use and kept. Made only by :func:`decoded`.
    ``value`` must not be changed (nothing in the gateway changes it).
    """

    __slots__ = ("_canonical", "source", "value")

    def __init__(
        self, token: object, source: bytes, value: JSONValue, encoded: bytes | None
    ) -> None:
        if token is not _PARSED:
            raise TypeError("Decoded values are made by decoded()")
        self.source = source
        self.value = value
        self._canonical = encoded

    def canonical(self) -> bytes:
        """``canonical(value)``, encoded once (two threads asking at once may both encode)."""
        encoded = self._canonical
        if encoded is None:
            encoded = self._canonical = canonical(self.value)
        return encoded


def decoded(source: bytes, value: JSONValue, *, is_canonical: bool = False) -> Decoded:
    """Pair admitted bytes with their strict decoding (``value`` must be ``parse(source)``).

    ``is_canonical``: ``source`` is already ``canonical(value)`` (a surface's
    :class:`Parsed`), so it is never encoded again.
    """
    return Decoded(_PARSED, source, value, source if is_canonical else None)


def check_depth(value: JSONValue, max_depth: int) -> None:
    """Check that a value decoded by :func:`parse` nests no deeper than ``max_depth``.

    Raises:
        StrictJSONError: it nests deeper.
    """
    _check_tree(value, max_depth, texts=False)


#: Why a number is refused that no double holds as written.
BEYOND_DOUBLE: Final = (
    "a number has more precision or magnitude than an IEEE 754 double holds (RFC 7493 2.2)"
)


def is_double_exact(number: Decimal) -> bool:
    """Whether ``number`` is, as a number, the double nearest to it in its shortest form.

    ``0.1``, ``1.0``, ``1e2`` and ``-0.0`` are; ``1e400`` (no finite double), ``1e-400``
    (read as 0), ``99.99999999999999999999`` (read as 100) and
    ``0.1000000000000000055511151231257827`` (the double ``0.1`` exactly, written longer
    than its shortest form) are not.
    """
    nearest = float(number)
    return math.isfinite(nearest) and Decimal(repr(nearest)) == number


def check_doubles(value: JSONValue, raw: bytes) -> None:
    """Refuse a decoded document holding a number no double holds as written.

    Every tool reads numbers as doubles (a function tool's ``float``, ``Decimal`` and
    ``Any`` parameters through pydantic, an upstream MCP server through its JSON parser),
    while the policy compares the exact value: a number the double changes (``1e-400``
    read as 0, ``99.99999999999999999999`` as 100, ``1e400`` as no number at all) would
    let a call past a bound it does not meet. Integers are exact in Python and are
    forwarded as written; only numbers with a fraction or an exponent (decoded as
    ``Decimal``) are checked. ``raw`` is the document's bytes: without ``.``, ``e`` or
    ``E`` it holds no such number, and nothing is walked.

    Raises:
        StrictJSONError: such a number is there (never quoted).
    """
    if b"." not in raw and b"e" not in raw and b"E" not in raw:
        return
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, Decimal):
            if not is_double_exact(node):
                raise StrictJSONError(BEYOND_DOUBLE)
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _reject_constant(name: str) -> Any:
    raise StrictJSONError(f"non-finite number {name} is not JSON")


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members = dict(pairs)
    if len(members) != len(pairs):
        # The name itself is caller data and is never quoted.
        raise StrictJSONError("duplicate member names in one object")
    return members


#: The strict decoders, made once: ``json.loads`` with hooks builds a decoder and its
#: scanner anew on every call, which cost more than decoding a small document. A decoder
#: keeps no state between documents, so one is shared by every thread (as ``json.loads``
#: shares its default one).
_EXACT_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_unique_members, parse_float=Decimal, parse_constant=_reject_constant
)
_FLOAT_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_unique_members, parse_float=float, parse_constant=_reject_constant
)


def _load(decoder: json.JSONDecoder, raw: bytes | str) -> Any:
    # ``json.loads(raw, ...)`` with a decoder made once: the same text for bytes (the
    # encoding detected as there) and the same refusal of a leading byte order mark.
    if isinstance(raw, str):
        if raw.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", raw, 0)
        text = raw
    else:
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
    return decoder.decode(text)


def _decode_error(exc: ValueError) -> StrictJSONError:
    # json's own messages are fixed templates plus a position; int()'s digit-limit message
    # names only counts. Neither quotes the input, but only the template and the offset are
    # kept, so that no future wording can.
    if isinstance(exc, json.JSONDecodeError):
        return StrictJSONError(f"document is not valid JSON: {exc.msg} at offset {exc.pos}")
    return StrictJSONError("document is not valid JSON: a number has too many digits")


def parse_trusted(raw: bytes | str, *, exact: bool = True) -> JSONValue:
    """Decode one JSON document from a trusted peer (OPA's answers, our own audit lines).

    Duplicate member names and non-finite numbers are refused, as in :func:`parse`, but the
    depth and lone-surrogate walk meant for untrusted tool arguments is skipped: this runs
    on every decision. ``exact`` keeps non-integer numbers as ``Decimal``.

    Raises:
        StrictJSONError: not exactly one such document.
    """
    if _observer is not None:
        _observer("parse_trusted")
    try:
        return _load(_EXACT_DECODER if exact else _FLOAT_DECODER, raw)
    except StrictJSONError:
        raise
    except RecursionError:
        raise StrictJSONError("document is not valid JSON: it nests too deeply") from None
    except ValueError as exc:
        raise _decode_error(exc) from None


def is_blank(raw: bytes) -> bool:
    """Report whether ``raw`` is empty after trimming Unicode white space at both ends."""
    if not raw.strip(b" \t\n\r\v\f"):
        return True
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not text.strip(_GO_SPACE)


def _check_tree(value: JSONValue, max_depth: int, *, texts: bool) -> None:
    # Iterative walk: depth is bounded here, never by the interpreter's recursion limit.
    # ``texts`` is False when the raw document cannot hold a forbidden code point.
    stack: list[tuple[JSONValue, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            if texts:
                _check_text(node)
        elif isinstance(node, dict):
            if depth > max_depth:
                raise StrictJSONError(f"nesting exceeds {max_depth} levels")
            for key, item in node.items():
                if texts:
                    _check_text(key)
                stack.append((item, depth + 1))
        elif isinstance(node, list):
            if depth > max_depth:
                raise StrictJSONError(f"nesting exceeds {max_depth} levels")
            stack.extend((item, depth + 1) for item in node)


def _check_text(text: str) -> None:
    found = _first_forbidden(text)
    if found is None:
        return
    if "\ud800" <= found <= "\udfff":
        # An escaped lone surrogate ("\ud800") decodes to an unencodable code point.
        raise StrictJSONError("string contains a lone surrogate")
    raise StrictJSONError("string contains a noncharacter")


def parse(raw: bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> JSONValue:
    """Decode exactly one strict JSON document from UTF-8 bytes.

    Numbers stay exact: integers are ``int`` and every other number is a ``Decimal``.

    Raises:
        StrictJSONError: the bytes are not valid UTF-8, not exactly one JSON value, contain
            duplicate member names, non-finite numbers, lone surrogates or noncharacters
            (raw or escaped) at any depth, or nest deeper than ``max_depth``.
    """
    if _observer is not None:
        _observer("parse")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise StrictJSONError("document is not valid UTF-8") from None
    try:
        value = _load(_EXACT_DECODER, text)
    except StrictJSONError:
        raise
    except RecursionError:
        raise StrictJSONError(f"nesting exceeds {max_depth} levels") from None
    except ValueError as exc:  # JSONDecodeError, and int() past the digit limit
        raise _decode_error(exc) from None
    except ArithmeticError:  # Decimal() of an exponent beyond the decimal module's range
        raise StrictJSONError("number exponent is out of range") from None
    _check_tree(value, max_depth, texts=_suspect(text))
    return value


# A string's JSON form as ``json.dumps(text, ensure_ascii=False)`` writes it, called directly:
# ``dumps`` with a non-default option builds a new encoder for every string (measured here:
# 1.4 us against 0.1 us a string, and an argument document has a string for every key).
_encode_string: Final[Callable[[str], str]] = json.encoder.encode_basestring


_SCALARS: Final = {None: "null", True: "true", False: "false"}


def _encode_into(value: JSONValue, out: list[str]) -> None:
    if value is None or value is True or value is False:
        out.append(_SCALARS[value])
    elif isinstance(value, str):
        out.append(_encode_string(value))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, Decimal):
        # Decimal.is_finite, not math.isfinite: 1e400 is finite, though no float holds it.
        if not value.is_finite():
            raise StrictJSONError("non-finite number is not JSON")
        out.append(str(value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise StrictJSONError("non-finite number is not JSON")
        out.append(repr(value))
    elif isinstance(value, dict):
        _encode_object(value, out)
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _encode_into(item, out)
        out.append("]")
    else:
        raise StrictJSONError(f"{type(value).__name__} is not a JSON value")


def _encode_object(value: dict[Any, Any], out: list[str]) -> None:
    if not all(isinstance(key, str) for key in value):
        raise StrictJSONError("object member names must be strings")
    out.append("{")
    for index, key in enumerate(sorted(value)):
        if index:
            out.append(",")
        out.append(_encode_string(key))
        out.append(":")
        _encode_into(value[key], out)
    out.append("}")


def canonical(value: JSONValue) -> bytes:
    """Encode a decoded JSON value compactly with sorted member names, numbers kept exact.

    Two documents that differ only in member order or insignificant white space encode to
    the same bytes. Number literals are kept as decoded (``1.0`` and ``1`` stay distinct).
    """
    if _observer is not None:
        _observer("canonical")
    out: list[str] = []
    _encode_into(value, out)
    return "".join(out).encode("utf-8")


def digest(value: JSONValue) -> str:
    """Return the SHA-256 hex digest of ``canonical(value)``."""
    return hashlib.sha256(canonical(value)).hexdigest()


def to_plain(value: JSONValue) -> Any:
    """Convert exact numbers to plain Python numbers for display-only views.

    Decimals become floats; use only where exactness does not matter (documentation, UI).
    """
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [to_plain(item) for item in value]
    return value

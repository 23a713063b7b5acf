r"""ECMA-262 patterns (``u`` flag) matched in linear time, by RE2.

A JSON Schema ``pattern`` is an ECMA-262 regular expression, and a backtracking engine
takes time exponential (``(a+)+$``) or quadratic (``[a-z]+@[a-z]+`` on a long run of
letters) in the length of the text for some of them: a caller who controls the text, up
to the 1 MiB an argument may hold, could hold a worker for hours with one call. So the
gateway matches every pattern with RE2, whose time is linear in the text, after
translating it into RE2's syntax with ECMA-262's meaning spelled out where the two
dialects differ (``.``, ``\\s`` and ``\\S``, property names). What has no linear-time
meaning (lookaround, backreferences) cannot be translated; :func:`translate` raises, and a
schema using such a pattern is refused when it is compiled, before any call.

The translation is a reader of the pattern's own grammar, not a rewrite by regular
expressions: anything it does not know is refused rather than passed through.
"""

from __future__ import annotations

import functools
from typing import Final

import re2

from gateway._numerals import ascii_digits

#: ECMA-262's WhiteSpace and LineTerminator code points: what ``\\s`` means there (RE2's
#: ``\\s`` is ASCII only).
_SPACE: Final = (
    r"\t\n\x{0B}\f\r\x{20}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}"
    r"\x{3000}\x{FEFF}"
)
#: ``.`` matches anything but a line terminator.
_DOT: Final = r"[^\n\r\x{2028}\x{2029}]"
#: RE2 refuses repeat counts above this.
_MAX_REPEAT: Final = 1000
_SYNTAX: Final = frozenset("^$\\.*+?()[]{}|/")
_CONTROL: Final = {"t": r"\t", "n": r"\n", "r": r"\r", "f": r"\f", "v": r"\x{0B}"}
#: ECMA-262's long General_Category names, in RE2's short form.
_CATEGORIES: Final = {
    "Letter": "L", "Cased_Letter": "LC", "digit": "Nd", "punct": "P",
    "Uppercase_Letter": "Lu", "Lowercase_Letter": "Ll",
    "Titlecase_Letter": "Lt", "Modifier_Letter": "Lm", "Other_Letter": "Lo", "Mark": "M",
    "Nonspacing_Mark": "Mn", "Spacing_Mark": "Mc", "Enclosing_Mark": "Me", "Number": "N",
    "Decimal_Number": "Nd", "Letter_Number": "Nl", "Other_Number": "No", "Punctuation": "P",
    "Connector_Punctuation": "Pc", "Dash_Punctuation": "Pd", "Open_Punctuation": "Ps",
    "Close_Punctuation": "Pe", "Initial_Punctuation": "Pi", "Final_Punctuation": "Pf",
    "Other_Punctuation": "Po", "Symbol": "S", "Math_Symbol": "Sm", "Currency_Symbol": "Sc",
    "Modifier_Symbol": "Sk", "Other_Symbol": "So", "Separator": "Z", "Space_Separator": "Zs",
    "Line_Separator": "Zl", "Paragraph_Separator": "Zp", "Other": "C", "Control": "Cc",
    "Format": "Cf", "Surrogate": "Cs", "Private_Use": "Co", "Unassigned": "Cn",
}  # fmt: skip
_SHORT_CATEGORIES: Final = frozenset(_CATEGORIES.values()) - {"LC"}
#: Unicode's White_Space property (``\p{White_Space}``, ``\p{space}``).
_WHITE_SPACE: Final = (
    r"\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}"
    r"\x{205F}\x{3000}"
)
#: Binary properties spelled out as classes.
_SETS: Final = {
    "ASCII": r"\x{0}-\x{7F}",
    "Any": r"\x{0}-\x{10FFFF}",
    "White_Space": _WHITE_SPACE,
    "space": _WHITE_SPACE,
}


class UntranslatableError(ValueError):
    """The pattern has no linear-time meaning (lookaround, backreference) or is unknown."""


def _hex(code: int) -> str:
    return f"\\x{{{code:X}}}"


class _Reader:
    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.at = 0

    def peek(self, ahead: int = 0) -> str:
        index = self.at + ahead
        return self.text[index] if index < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        if not char:
            raise UntranslatableError("unexpected end of pattern")
        self.at += 1
        return char

    def done(self) -> bool:
        return self.at >= len(self.text)


def _hex_digits(reader: _Reader, count: int) -> int:
    digits = "".join(reader.take() for _ in range(count))
    try:
        return int(digits, 16)
    except ValueError:
        raise UntranslatableError("malformed hexadecimal escape") from None


def _code_point_escape(reader: _Reader) -> int:
    # After "\u": XXXX (a surrogate pair written as two escapes is one code point) or {X+}.
    if reader.peek() == "{":
        reader.take()
        digits = ""
        while reader.peek() != "}":
            digits += reader.take()
        reader.take()
        if not digits or len(digits) > 6:
            raise UntranslatableError("malformed code point escape")
        code = int(digits, 16) if all(c in "0123456789abcdefABCDEF" for c in digits) else -1
    else:
        code = _hex_digits(reader, 4)
        if 0xD800 <= code <= 0xDBFF and reader.peek() == "\\" and reader.peek(1) == "u":
            saved = reader.at
            reader.take()
            reader.take()
            low = _hex_digits(reader, 4) if reader.peek() != "{" else -1
            if 0xDC00 <= low <= 0xDFFF:
                return 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
            reader.at = saved
    if not 0 <= code <= 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise UntranslatableError("a lone surrogate or an out-of-range code point")
    return code


def _property(reader: _Reader, negated: bool, in_class: bool) -> str:
    if reader.take() != "{":
        raise UntranslatableError("malformed property escape")
    name = ""
    while reader.peek() != "}":
        name += reader.take()
    reader.take()
    key, _, value = name.partition("=")
    if value:
        if key in {"General_Category", "gc"}:
            name = value
        elif key in {"Script", "sc"}:
            name = value
            if not (name.isalpha() and name[0].isupper() and len(name) > 4):
                raise UntranslatableError("script names are accepted in their long form")
            return ("\\P" if negated else "\\p") + "{" + name + "}"
        else:
            raise UntranslatableError("unsupported property")
    short = _CATEGORIES.get(name, name)
    members = _SETS.get(name) if not value else None
    if short == "LC":
        members = "\\p{Lu}\\p{Ll}\\p{Lt}"
    if members is not None:
        if in_class:
            if negated:
                raise UntranslatableError("a negated property set inside a class")
            return members
        return f"[^{members}]" if negated else f"[{members}]"
    if short not in _SHORT_CATEGORIES:
        raise UntranslatableError("unsupported property")
    return ("\\P" if negated else "\\p") + "{" + short + "}"


def _escape(  # noqa: PLR0911, PLR0912 - one branch per escape of the grammar
    reader: _Reader, in_class: bool
) -> tuple[str, int | None]:
    """An escape after a backslash: its RE2 text, and its code point when it is one."""
    char = reader.take()
    if char in "dDwW":
        return "\\" + char, None
    if char == "s":
        return (_SPACE if in_class else f"[{_SPACE}]"), None
    if char == "S":
        if in_class:
            raise UntranslatableError("\\S inside a class")
        return f"[^{_SPACE}]", None
    if char in "bB":
        if in_class:
            return (_hex(8), 8) if char == "b" else _fail("\\B inside a class")
        return "\\" + char, None
    if char in _CONTROL:
        code = {"t": 9, "n": 10, "r": 13, "f": 12, "v": 11}[char]
        return _hex(code), code
    if char == "0" and not ascii_digits(reader.peek()):
        return _hex(0), 0
    if char == "x":
        code = _hex_digits(reader, 2)
        return _hex(code), code
    if char == "u":
        code = _code_point_escape(reader)
        return _hex(code), code
    if char == "c":
        letter = reader.take()
        if not letter.isascii() or not letter.isalpha():
            raise UntranslatableError("malformed control escape")
        code = ord(letter) % 32
        return _hex(code), code
    if char in "pP":
        return _property(reader, char == "P", in_class), None
    if char in _SYNTAX or (in_class and char == "-"):
        return _hex(ord(char)), ord(char)
    raise UntranslatableError(f"escape \\{char} (a backreference or an unknown escape)")


def _fail(message: str) -> tuple[str, int | None]:
    raise UntranslatableError(message)


def _class(reader: _Reader) -> str:
    # After "[": ECMA-262's ClassRanges in the u mode.
    negated = reader.peek() == "^"
    if negated:
        reader.take()
    if reader.peek() == "]":
        raise UntranslatableError("an empty class")
    parts: list[str] = []
    while True:
        char = reader.take()
        if char == "]":
            break
        if char == "\\":
            text, low = _escape(reader, in_class=True)
        else:
            text, low = _hex(ord(char)), ord(char)
        if reader.peek() == "-" and reader.peek(1) not in {"]", ""}:
            reader.take()
            end = reader.take()
            if end == "\\":
                end_text, high = _escape(reader, in_class=True)
            else:
                end_text, high = _hex(ord(end)), ord(end)
            if low is None or high is None:
                raise UntranslatableError("a range of a class escape")
            if low > high:
                raise UntranslatableError("a range out of order")
            parts.append(f"{text}-{end_text}")
            continue
        parts.append(text)
    return ("[^" if negated else "[") + "".join(parts) + "]"


def _quantifier(reader: _Reader) -> str | None:
    char = reader.peek()
    if char in {"*", "+", "?"}:
        reader.take()
        text = char
    elif char == "{":
        saved = reader.at
        reader.take()
        body = ""
        while reader.peek() and reader.peek() != "}":
            body += reader.take()
        if reader.peek() != "}":
            reader.at = saved
            raise UntranslatableError("a lone {")
        reader.take()
        low, comma, high = body.partition(",")
        if not ascii_digits(low) or (high and not ascii_digits(high)):
            raise UntranslatableError("a malformed repeat")
        if int(low) > _MAX_REPEAT or (high and int(high) > _MAX_REPEAT):
            raise UntranslatableError("a repeat count over 1000")
        if high and int(low) > int(high):
            raise UntranslatableError("a repeat out of order")
        text = "{" + body + "}"
        del comma
    else:
        return None
    if reader.peek() == "?":
        reader.take()
        text += "?"
    return text


def _sequence(  # noqa: PLR0912, PLR0915 - one branch per atom of the grammar
    reader: _Reader, depth: int
) -> str:
    out: list[str] = []
    quantifiable = False
    while not reader.done():
        char = reader.peek()
        if char == ")":
            if depth == 0:
                raise UntranslatableError("an unbalanced )")
            return "".join(out)
        reader.take()
        if char == "|":
            out.append("|")
            quantifiable = False
            continue
        if char in {"^", "$"}:
            out.append(char)
            quantifiable = False
        elif char == "(":
            if reader.peek() == "?":
                reader.take()
                kind = reader.take()
                if kind == ":":
                    pass
                elif kind == "<" and reader.peek() not in {"=", "!"}:
                    while reader.take() != ">":
                        pass
                else:
                    raise UntranslatableError("lookaround")
            out.append("(?:" + _sequence(reader, depth + 1) + ")")
            if reader.take() != ")":
                raise UntranslatableError("an unclosed (")
            quantifiable = True
        elif char == "[":
            out.append(_class(reader))
            quantifiable = True
        elif char == ".":
            out.append(_DOT)
            quantifiable = True
        elif char == "\\":
            text, _ = _escape(reader, in_class=False)
            out.append(text)
            quantifiable = text not in {"\\b", "\\B"}
        elif char in {"*", "+", "?", "{", "}", "]"}:
            raise UntranslatableError(f"a lone {char}")
        else:
            out.append(_hex(ord(char)))
            quantifiable = True
        quantifier = _quantifier(reader)
        if quantifier is not None:
            if not quantifiable:
                raise UntranslatableError("a quantifier with nothing to repeat")
            out.append(quantifier)
            if reader.peek() in {"*", "+", "?"} or reader.peek() == "{":
                raise UntranslatableError("a repeated quantifier")
    if depth:
        raise UntranslatableError("an unclosed (")
    return "".join(out)


def translate(pattern: str) -> str:
    """The RE2 pattern that matches exactly what ``pattern`` (ECMA-262, ``u``) matches.

    Raises:
        UntranslatableError: lookaround, backreferences, or anything not understood.
    """
    reader = _Reader(pattern)
    return _sequence(reader, 0)


@functools.lru_cache(maxsize=1024)
def compile_linear(pattern: str) -> re2._Regexp:
    """The RE2 program of an ECMA-262 pattern (cached).

    Raises:
        UntranslatableError: the pattern cannot be matched in linear time.
    """
    options = re2.Options()
    options.max_mem = 64 << 20
    try:
        return re2.compile(translate(pattern), options)
    except re2.error:
        raise UntranslatableError("RE2 cannot compile the translated pattern") from None

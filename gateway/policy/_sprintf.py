"""Rego's ``sprintf`` for the WebAssembly engine, printing exactly what OPA prints.

OPA's ``sprintf`` hands its operands to Go's ``fmt.Sprintf`` after converting them: a number
whose text has a fraction or exponent becomes a ``float64`` (its text if it overflows), any
other number an ``int64`` (a ``*big.Int`` beyond), a string stays a string, and everything
else becomes its Rego text (``ast.Value.String()``). This module re-creates that for the
verbs ``%s``, ``%v``, ``%d``, ``%q`` and ``%%`` without flags, width or precision, including
Go's own error notations (``%!d(string=x)``, ``%!s(MISSING)``, ``%!(EXTRA ...)``). Any other
format is refused with :class:`UnsupportedFormatError`, so the evaluation fails closed rather
than print something OPA would not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from gateway.policy._rego_value import Number, RegoValue, go_quote, go_string

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_MAX_RUNE: Final = 0x10FFFF
_SUPPORTED_VERBS: Final = frozenset("sdvq")


class UnsupportedFormatError(ValueError):
    """A format the host does not print exactly as OPA would (a verb, flag or width)."""


@dataclass(frozen=True, slots=True)
class GoArg:
    """One operand as Go's ``fmt`` sees it: its dynamic type and value."""

    type_name: str  # "string", "int64", "float64" or "*big.Int"
    value: str | int | float


def go_arg(value: RegoValue) -> GoArg:
    """Convert one Rego operand the way OPA's ``sprintf`` does before calling ``fmt``."""
    if isinstance(value, str):
        return GoArg("string", value)
    if isinstance(value, Number):
        text = value.text
        if any(c in text for c in ".eE"):
            as_float = float(value.exact())
            if math.isinf(as_float):
                return GoArg("string", text)
            return GoArg("float64", as_float)
        number = int(text)
        if _INT64_MIN <= number <= _INT64_MAX:
            return GoArg("int64", number)
        return GoArg("*big.Int", number)
    return GoArg("string", go_string(value))


def format_float(value: float) -> str:
    """Go's ``%v`` for a float64: ``strconv.FormatFloat(v, 'g', -1, 64)``."""
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign = "-" if value < 0 else ""
    digits_tuple = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(str(d) for d in digits_tuple.digits)
    exponent = int(digits_tuple.exponent) + len(digits) - 1
    # Shortest 'g' switches to the exponent form outside [1e-4, 1e6), whatever the digits.
    if exponent < -4 or exponent >= 6:
        return sign + _e_form(digits, exponent)
    if exponent < 0:
        return sign + "0." + "0" * (-exponent - 1) + digits
    whole = digits[: exponent + 1].ljust(exponent + 1, "0")
    fraction = digits[exponent + 1 :]
    return sign + whole + ("." + fraction if fraction else "")


def _e_form(digits: str, exponent: int) -> str:
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"


def _plain(arg: GoArg) -> str:
    # %v of the operand.
    if arg.type_name == "float64":
        return format_float(float(arg.value))
    return str(arg.value)


def _quote_rune(code: int) -> str:
    if code < 0 or code > _MAX_RUNE or 0xD800 <= code < 0xE000:
        code = 0xFFFD
    char = chr(code)
    if char in "'\\":
        return "'\\" + char + "'"
    quoted = go_quote(char)[1:-1]
    return "'" + ('"' if char == '"' else quoted) + "'"


def _bad_verb(verb: str, arg: GoArg) -> str:
    return f"%!{verb}({arg.type_name}={_plain(arg)})"


def _print(verb: str, arg: GoArg) -> str:  # noqa: PLR0911 - one return per Go type and verb
    kind = arg.type_name
    if kind == "string":
        text = str(arg.value)
        if verb in "sv":
            return text
        if verb == "q":
            return go_quote(text)
        return _bad_verb(verb, arg)
    if kind == "int64":
        if verb in "dv":
            return str(arg.value)
        if verb == "q":
            return _quote_rune(int(arg.value))
        return _bad_verb(verb, arg)
    if kind == "float64":
        return format_float(float(arg.value)) if verb == "v" else _bad_verb(verb, arg)
    # *big.Int formats itself: decimal for d, s and v; its own notation otherwise.
    if verb in "dsv":
        return str(arg.value)
    return f"%!{verb}(big.Int={arg.value})"


def sprintf(template: str, operands: Sequence[RegoValue]) -> str:
    """Format as OPA's ``sprintf(template, operands)`` does.

    Raises:
        UnsupportedFormatError: the template uses a verb other than ``s``, ``v``, ``d``,
            ``q`` and ``%``, or any flag, width, precision or argument index.
    """
    args = [go_arg(operand) for operand in operands]
    out: list[str] = []
    used = 0
    position = 0
    length = len(template)
    while position < length:
        percent = template.find("%", position)
        if percent < 0:
            out.append(template[position:])
            break
        out.append(template[position:percent])
        verb = template[percent + 1 : percent + 2]
        position = percent + 2
        if verb == "%":
            out.append("%")
        elif verb in _SUPPORTED_VERBS and verb:
            if used >= len(args):
                out.append(f"%!{verb}(MISSING)")
            else:
                out.append(_print(verb, args[used]))
                used += 1
        else:
            raise UnsupportedFormatError("sprintf format not supported by the embedded engine")
    if used < len(args):
        extra = ", ".join(f"{arg.type_name}={_plain(arg)}" for arg in args[used:])
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)

"""ASCII numerals in untrusted text.

``str.isdigit`` is true for superscripts, circled digits and every script's digits: ``int``
rejects some of them (``"²"``) and silently reads others (``"٣"`` is 3). Every place that reads a
count, a length or an index out of caller text asks these two functions instead, so a numeral
means what it means to a JSON pointer, an HTTP header or an ECMA-262 quantifier: ASCII 0-9 only.
"""

from __future__ import annotations

_DIGITS = frozenset("0123456789")


def ascii_digits(text: str) -> bool:
    """True when text is one or more of the ASCII digits 0-9 and nothing else."""
    return bool(text) and all(char in _DIGITS for char in text)


def array_index(token: str) -> int | None:
    """The array index a JSON pointer token names (RFC 6901: ``0`` or no leading zero), or None."""
    if not ascii_digits(token) or (len(token) > 1 and token[0] == "0"):
        return None
    return int(token)

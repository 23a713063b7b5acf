"""Strict checkers for every JSON Schema 2020-12 format the gateway asserts.

Each checker takes a string and answers by the grammar the format's RFC gives, matched
whole (a trailing newline is never accepted), with ASCII digits only where the grammar says
DIGIT. ``regex`` and ``pattern`` use the ECMA-262 dialect (the ``regress`` engine, with the
``u`` flag), as JSON Schema specifies. :data:`INSTANCE_CHECKERS` adds the formats of the
OpenAPI Format Registry (``int32``, ``int64``, ``float``, ``double``, ``byte``, ``binary``,
``password``), asserted exactly. A format in neither table cannot be asserted, and a schema
that uses it is refused when it is compiled.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final

import idna
import idna.core
import regress

# --- ECMA-262 regular expressions ---------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def ecma_regex(pattern: str) -> regress.Regex:
    """Compile an ECMA-262 pattern with the ``u`` flag (cached; patterns come from schemas).

    Raises:
        ValueError: the pattern is not a valid ECMA-262 regular expression.
    """
    try:
        return regress.Regex(pattern, "u")
    except regress.RegressError:
        raise ValueError("not a valid ECMA-262 regular expression") from None


#: The longest text ``format: "regex"`` accepts. Compiling costs up to ~4 µs per character
#: (``[\\p{L}\\p{L}...]``): a 1 MiB argument would hold a core for seconds at admission,
#: 4,096 characters hold it for at most ~20 ms. A schema's own patterns are held to it too.
MAX_REGEX_CHARS: Final = 4096


def _is_regex(text: str) -> bool:
    # The text is an argument's (or a schema's, checked once): compiled and dropped, never
    # kept in ecma_regex's cache, whose entries a caller would choose (a compiled 1 MiB
    # pattern holds about 20 MB; a thousand distinct ones, the process).
    if len(text) > MAX_REGEX_CHARS:
        return False
    try:
        regress.Regex(text, "u")
    except regress.RegressError:
        return False
    return True


# --- RFC 3339 dates and times -------------------------------------------------------------

_DATE: Final = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_TIME: Final = re.compile(
    r"([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?(?:([zZ])|([+-])([0-9]{2}):([0-9]{2}))"
)
_DAYS: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _valid_date(match: re.Match[str]) -> bool:
    year, month, day = (int(part) for part in match.groups())
    if not 1 <= month <= 12 or day < 1 or day > _DAYS[month - 1]:
        return False
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return not (month == 2 and day == 29 and not leap)


def _valid_time(match: re.Match[str]) -> bool:
    hour, minute, second = int(match[1]), int(match[2]), int(match[3])
    offset = 0
    if match[4] is None:
        off_hour, off_minute = int(match[6]), int(match[7])
        if off_hour > 23 or off_minute > 59:
            return False
        offset = (off_hour * 60 + off_minute) * (1 if match[5] == "+" else -1)
    if hour > 23 or minute > 59 or second > 60:
        return False
    # A leap second is only ever the last second of a UTC day (23:59:60Z).
    return second < 60 or (hour * 60 + minute - offset) % 1440 == 23 * 60 + 59


def _is_date(text: str) -> bool:
    match = _DATE.fullmatch(text)
    return match is not None and _valid_date(match)


def _is_time(text: str) -> bool:
    match = _TIME.fullmatch(text)
    return match is not None and _valid_time(match)


def _is_date_time(text: str) -> bool:
    date, separator, time = text[:10], text[10:11], text[11:]
    return separator in ("T", "t") and _is_date(date) and _is_time(time)


# RFC 3339 appendix A (ISO 8601 durations): integers only, no sign, weeks stand alone.
_DUR_TIME: Final = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DURATION: Final = re.compile(
    rf"P(?:(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:{_DUR_TIME})?"
    rf"|{_DUR_TIME}|[0-9]+W)"
)

# --- RFC 3986 URIs and RFC 3987 IRIs ------------------------------------------------------

_DEC_OCTET: Final = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
_IPV4: Final = rf"(?:{_DEC_OCTET}\.){{3}}{_DEC_OCTET}"
_H16: Final = r"[0-9A-Fa-f]{1,4}"
_LS32: Final = rf"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6: Final = (
    "(?:"
    + "|".join(
        (
            rf"(?:{_H16}:){{6}}{_LS32}",
            rf"::(?:{_H16}:){{5}}{_LS32}",
            rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
            rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
            rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
            rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
            rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
            rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
            rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
        )
    )
    + ")"
)
_UCSCHAR: Final = (
    "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef"
    + "".join(
        f"{chr(plane << 16)}-{chr(plane << 16 | 0xFFFD)}" for plane in range(1, 15) if plane != 14
    )
    + "\U000e1000-\U000efffd"
)
_IPRIVATE: Final = "\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd"


@functools.cache
def _uri_grammar(*, iri: bool) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The RFC 3986 (or, with ``iri``, RFC 3987) absolute and reference grammars.

    Compiled on first use: the IRI grammar's character classes take ~30-80 ms to compile,
    which every process start (a stdio MCP server is started per client) would pay.
    """
    unreserved = r"A-Za-z0-9\-._~" + (_UCSCHAR if iri else "")
    pct = r"%[0-9A-Fa-f]{2}"
    sub = r"!$&'()*+,;="
    pchar = rf"(?:[{unreserved}{sub}:@]|{pct})"
    scheme = r"[A-Za-z][A-Za-z0-9+\-.]*"
    userinfo = rf"(?:[{unreserved}{sub}:]|{pct})*"
    future = rf"[vV][0-9A-Fa-f]+\.[{unreserved}{sub}:]+"
    host = rf"(?:\[(?:{_IPV6}|{future})\]|{_IPV4}|(?:[{unreserved}{sub}]|{pct})*)"
    authority = rf"(?:{userinfo}@)?{host}(?::[0-9]*)?"
    segment = rf"{pchar}*"
    nz = rf"{pchar}+"
    nz_nc = rf"(?:[{unreserved}{sub}@]|{pct})+"
    abempty = rf"(?:/{segment})*"
    absolute = rf"/(?:{nz}(?:/{segment})*)?"
    query = rf"(?:{pchar}|[/?{_IPRIVATE if iri else ''}])*"
    fragment = rf"(?:{pchar}|[/?])*"
    tail = rf"(?:\?{query})?(?:#{fragment})?"
    hier = rf"(?://{authority}{abempty}|{absolute}|{nz}(?:/{segment})*|)"
    relative = rf"(?://{authority}{abempty}|{absolute}|{nz_nc}(?:/{segment})*|)"
    absolute_uri = rf"{scheme}:{hier}{tail}"
    return (
        re.compile(absolute_uri),
        re.compile(rf"(?:{absolute_uri}|{relative}{tail})"),
    )


# RFC 6570 URI templates, levels 1 to 4 (with erratum 6937: "'" is a literal).
_VARCHAR: Final = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})"
_VARSPEC: Final = rf"{_VARCHAR}(?:\.?{_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
_URI_TEMPLATE: Final = re.compile(
    rf"(?:[!#$&-;=?-\[\]_a-z~{_UCSCHAR}{_IPRIVATE}]|%[0-9A-Fa-f]{{2}}"
    rf"|\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\}})*"
)

# --- RFC 6901 JSON pointers ---------------------------------------------------------------

_POINTER: Final = r"(?:/(?:[^~/]|~[01])*)*"
_JSON_POINTER: Final = re.compile(_POINTER)
_RELATIVE_POINTER: Final = re.compile(rf"(?:0|[1-9][0-9]*)(?:#|{_POINTER})")

# --- Host names (RFC 1123, RFC 5890/5891 A-labels) and e-mail (RFC 5321, RFC 6531) --------

_LDH_LABEL: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_IDN_DOTS: Final = re.compile("[\u3002\uff0e\uff61]")


def _ascii_label(label: str) -> bool:
    if _LDH_LABEL.fullmatch(label) is None:
        return False
    if label[2:4] != "--":
        return True
    if label[:2].lower() != "xn":
        return False  # "--" in the third and fourth positions is reserved for A-labels
    try:
        return idna.encode(idna.decode(label)) == label.lower().encode("ascii")
    except (idna.IDNAError, UnicodeError, ValueError):
        return False


def _is_hostname(text: str) -> bool:
    if not text or len(text) > 253:
        return False
    return all(_ascii_label(label) for label in text.split("."))


def _is_idn_hostname(text: str) -> bool:
    labels = _IDN_DOTS.sub(".", text).split(".")
    encoded: list[bytes] = []
    try:
        for label in labels:
            if label.isascii():
                if not _ascii_label(label):
                    return False
                encoded.append(label.encode("ascii"))
            else:
                encoded.append(idna.alabel(label))
        # RFC 5893: once any label is right-to-left, every label obeys the bidi rule.
        unicode_labels = [idna.decode(label) for label in encoded]
        if any(_has_rtl(label) for label in unicode_labels):
            for label in unicode_labels:
                idna.core.check_bidi(label, check_ltr=True)
    except (idna.IDNAError, UnicodeError, ValueError):
        return False
    return sum(len(label) + 1 for label in encoded) - 1 <= 253


def _has_rtl(label: str) -> bool:
    return any(unicodedata.bidirectional(char) in ("R", "AL", "AN") for char in label)


_ATEXT: Final = r"A-Za-z0-9!#$%&'*+\-/=?^_`{|}~"
_QUOTED: Final = r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e{extra}]|\\[\x20-\x7e])*"'
_ADDRESS_LITERAL: Final = re.compile(
    rf"\[(?:{_IPV4}|IPv6:{_IPV6}|[A-Za-z0-9-]*[A-Za-z0-9]:[\x21-\x5a\x5e-\x7e]+)\]"
)


def _mailbox(*, international: bool) -> Callable[[str], bool]:
    extra = "\u0080-\U0010ffff" if international else ""
    local = re.compile(
        rf"[{_ATEXT}{extra}]+(?:\.[{_ATEXT}{extra}]+)*|{_QUOTED.format(extra=extra)}"
    )
    domain_ok = _is_idn_hostname if international else _is_hostname

    def check(text: str) -> bool:
        at = text.rfind("@")
        if at < 1:
            return False
        name, domain = text[:at], text[at + 1 :]
        if local.fullmatch(name) is None:
            return False
        if _ADDRESS_LITERAL.fullmatch(domain) is not None:
            return True
        # RFC 6532 section 3.1: a non-NFC domain is a valid one, normalized before use.
        return domain_ok(unicodedata.normalize("NFC", domain) if international else domain)

    return check


def _matcher(pattern: re.Pattern[str]) -> Callable[[str], bool]:
    return lambda text: pattern.fullmatch(text) is not None


def _uri_matcher(*, iri: bool, reference: bool) -> Callable[[str], bool]:
    # The grammar is compiled by the first check (a race compiles it twice, harmlessly).
    fullmatch: Callable[[str], re.Match[str] | None] | None = None

    def check(text: str) -> bool:
        nonlocal fullmatch
        if fullmatch is None:
            fullmatch = _uri_grammar(iri=iri)[reference].fullmatch
        return fullmatch(text) is not None

    return check


_UUID: Final = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")

#: Every format the gateway asserts, by name: each takes a string and answers validity.
CHECKERS: Final[dict[str, Callable[[str], bool]]] = {
    "date-time": _is_date_time,
    "date": _is_date,
    "time": _is_time,
    "duration": _matcher(_DURATION),
    "email": _mailbox(international=False),
    "idn-email": _mailbox(international=True),
    "hostname": _is_hostname,
    "idn-hostname": _is_idn_hostname,
    "ipv4": _matcher(re.compile(_IPV4)),
    "ipv6": _matcher(re.compile(_IPV6)),
    "uri": _uri_matcher(iri=False, reference=False),
    "uri-reference": _uri_matcher(iri=False, reference=True),
    "iri": _uri_matcher(iri=True, reference=False),
    "iri-reference": _uri_matcher(iri=True, reference=True),
    "uuid": _matcher(_UUID),
    "uri-template": _matcher(_URI_TEMPLATE),
    "json-pointer": _matcher(_JSON_POINTER),
    "relative-json-pointer": _matcher(_RELATIVE_POINTER),
    "regex": _is_regex,
}


# --- the OpenAPI Format Registry ------------------------------------------------------------
# Formats that OpenAPI documents (and MCP servers generated from them) use widely. Each is
# asserted exactly, so a tool using one binds instead of being refused for an unknown format.

_INT32: Final = (-(2**31), 2**31 - 1)
_INT64: Final = (-(2**63), 2**63 - 1)
_FLOAT_MAX: Final = Decimal("340282346638528859811704183484516925440")  # binary32's largest
_DOUBLE_MAX: Final = Decimal(sys.float_info.max)
_BASE64: Final = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def _number(value: Any) -> Decimal | None:
    # Exact admitted numbers are int or Decimal (bool is not a number in JSON).
    if isinstance(value, bool) or not isinstance(value, int | Decimal | float):
        return None
    return Decimal(value)


def _integer_in(bounds: tuple[int, int]) -> Callable[[Any], bool]:
    low, high = bounds

    def check(value: Any) -> bool:
        number = _number(value)
        return number is None or (number == number.to_integral_value() and low <= number <= high)

    return check


def _magnitude_at_most(limit: Decimal) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        number = _number(value)
        return number is None or abs(number) <= limit

    return check


def _string_check(check: Callable[[str], bool]) -> Callable[[Any], bool]:
    return lambda value: not isinstance(value, str) or check(value)


#: Formats that apply to other instance types than strings (or to any string), by name:
#: each takes any instance and answers validity; other types pass, as for every format.
INSTANCE_CHECKERS: Final[dict[str, Callable[[Any], bool]]] = {
    "int32": _integer_in(_INT32),
    "int64": _integer_in(_INT64),
    "float": _magnitude_at_most(_FLOAT_MAX),
    "double": _magnitude_at_most(_DOUBLE_MAX),
    "byte": _string_check(_matcher(_BASE64)),
    # Annotations of a string's role, with no grammar to assert: any string is valid.
    "binary": _string_check(lambda _text: True),
    "password": _string_check(lambda _text: True),
}

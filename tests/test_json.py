"""Strict JSON (RFC 7493) reading and canonical writing: gateway._json."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gateway import _json
from gateway._json import StrictJSONError, canonical, digest, is_blank, parse
from tests.helpers import is_ijson_character, json_text, json_values, serialized

VALID_DOCUMENTS = [
    pytest.param(b"{}", {}, id="empty_object"),
    pytest.param(b'  {"a":1}\n', {"a": 1}, id="surrounding_whitespace"),
    pytest.param(b"[1,2]", [1, 2], id="array"),
    pytest.param(b'"text"', "text", id="string"),
    pytest.param(b"null", None, id="null"),
    pytest.param(b"true", True, id="true"),
    pytest.param(b"-0", 0, id="negative_zero_integer"),
    pytest.param(b'{"a":{"b":[{"c":null}]}}', {"a": {"b": [{"c": None}]}}, id="nested"),
    pytest.param(b'{"a":1,"b":1}', {"a": 1, "b": 1}, id="distinct_names_same_value"),
    pytest.param(b'{"\\u00e9":"\\ud83d\\ude00"}', {"é": "\U0001f600"}, id="escaped_pair"),
    pytest.param('{"é":"😀"}'.encode(), {"é": "\U0001f600"}, id="raw_utf8"),
]


@pytest.mark.parametrize(("raw", "expected"), VALID_DOCUMENTS)
def test_parse_accepts_one_strict_document(raw: bytes, expected: object) -> None:
    assert parse(raw) == expected


INVALID_DOCUMENTS = [
    pytest.param(b"", "not valid JSON", id="empty"),
    pytest.param(b"   ", "not valid JSON", id="blank"),
    pytest.param(b"{", "not valid JSON", id="truncated"),
    pytest.param(b"{} {}", "not valid JSON", id="two_documents"),
    pytest.param(b"{} x", "not valid JSON", id="trailing_garbage"),
    pytest.param(b'{"a":1,"a":2}', "duplicate member names", id="duplicate_top"),
    pytest.param(b'{"n":{"v":1,"v":2}}', "duplicate member names", id="duplicate_nested"),
    pytest.param(b'[{"v":1},{"w":1,"w":1}]', "duplicate member names", id="duplicate_in_array"),
    pytest.param(b'{"a":NaN}', "non-finite number NaN", id="nan"),
    pytest.param(b'{"a":Infinity}', "non-finite number Infinity", id="infinity"),
    pytest.param(b'{"a":-Infinity}', "non-finite number -Infinity", id="negative_infinity"),
    pytest.param(b'{"a":01}', "not valid JSON", id="leading_zero"),
    pytest.param(b'{"a":+1}', "not valid JSON", id="plus_sign"),
    pytest.param(b'{"a":1,}', "not valid JSON", id="trailing_comma"),
    pytest.param(b"{'a':1}", "not valid JSON", id="single_quotes"),
    pytest.param(b'{"a":1 /* c */}', "not valid JSON", id="comment"),
    pytest.param(b"\xef\xbb\xbf{}", "not valid JSON", id="utf8_bom"),
    pytest.param("{}".encode("utf-16"), "not valid UTF-8", id="utf16"),
    pytest.param(b'{"a":"\xff"}', "not valid UTF-8", id="byte_ff"),
    pytest.param(b'{"a":"\xed\xa0\x80"}', "not valid UTF-8", id="raw_encoded_surrogate"),
    pytest.param(b'{"a":"\\ud800"}', "lone surrogate", id="escaped_lone_high_surrogate"),
    pytest.param(b'{"a":"\\udc00x"}', "lone surrogate", id="escaped_lone_low_surrogate"),
    pytest.param(b'{"\\ud800":1}', "lone surrogate", id="escaped_lone_surrogate_in_name"),
    pytest.param(b'[["\\ud800"]]', "lone surrogate", id="escaped_lone_surrogate_deep"),
    pytest.param(b'{"a":1e99999999999999999999}', "exponent is out of range", id="huge_exponent"),
    pytest.param(b"9" * 5000, "not valid JSON", id="integer_past_digit_limit"),
]

# RFC 7493 section 2.1: no noncharacter, raw or escaped, in any string or member name.
NONCHARACTERS = [
    0xFDD0,
    0xFDE7,
    0xFDEF,
    *(plane << 16 | low for plane in range(17) for low in (0xFFFE, 0xFFFF)),
]


def _escaped(code_point: int) -> str:
    if code_point < 0x10000:
        return f"\\u{code_point:04x}"
    offset = code_point - 0x10000
    return f"\\u{0xD800 + (offset >> 10):04X}\\u{0xDC00 + (offset & 0x3FF):04x}"


@pytest.mark.parametrize("code_point", NONCHARACTERS, ids=lambda c: f"U+{c:04X}")
@pytest.mark.parametrize("form", ["raw", "escaped"])
@pytest.mark.parametrize("place", ["value", "name", "deep"])
def test_parse_refuses_a_noncharacter_raw_or_escaped_anywhere(
    code_point: int, form: str, place: str
) -> None:
    text = chr(code_point) if form == "raw" else _escaped(code_point)
    document = {
        "value": f'{{"a":"x{text}y"}}',
        "name": f'{{"{text}":1}}',
        "deep": f'[{{"a":[["{text}"]]}}]',
    }[place]

    with pytest.raises(StrictJSONError, match="string contains a noncharacter"):
        parse(document.encode("utf-8"))


@pytest.mark.parametrize("code_point", [0xFDCF, 0xFDF0, 0xFFFD, 0x1FFFD, 0x10FFFD, 0xE000, 0xF0000])
def test_parse_accepts_the_code_points_next_to_the_noncharacters(code_point: int) -> None:
    for text in (chr(code_point), _escaped(code_point)):
        assert parse(f'["{text}"]'.encode()) == [chr(code_point)]


def test_the_tests_text_alphabet_is_exactly_what_strict_json_accepts_in_a_string() -> None:
    # Every JSON-text strategy of the tests draws from IJSON_CHARACTERS. A code point it
    # draws that the parser refuses fails some unrelated property test only on the day it
    # is drawn (CI once drew U+FFFE, once U+DFFF), so the alphabet is held to the parser
    # over every code point here.
    everything = [chr(code) for code in range(0x110000)]
    accepted = [char for char in everything if is_ijson_character(char)]
    refused = [ord(char) for char in everything if not is_ijson_character(char)]

    assert parse(json.dumps(accepted, ensure_ascii=False).encode()) == accepted
    assert parse(json.dumps(accepted).encode()) == accepted  # each one escaped
    assert len(refused) == 2048 + 32 + 2 * 17  # surrogates, U+FDD0..U+FDEF, two per plane
    for code in refused:
        for text in (chr(code).encode("utf-8", "surrogatepass"), _escaped(code).encode()):
            with pytest.raises(StrictJSONError):
                parse(b'["' + text + b'"]')


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b'{"secret-name":1,"secret-name":2}', id="duplicate_name"),
        pytest.param(b'{"a":"secret-text', id="unterminated_string"),
        pytest.param(b'{"a":secret}', id="bare_word"),
        pytest.param(b'{"a":"secret\\q"}', id="bad_escape"),
        pytest.param(b'{"a":"secret\\ud800"}', id="lone_surrogate"),
        pytest.param(b'{"a":"secret\\ufdd0"}', id="noncharacter"),
        pytest.param(b'{"secret":' + b"7" * 5000 + b"}", id="digit_limit"),
    ],
)
def test_parse_errors_never_quote_the_document(raw: bytes) -> None:
    with pytest.raises(StrictJSONError) as caught:
        parse(raw)

    assert "secret" not in str(caught.value)
    assert "7777" not in str(caught.value)


@pytest.mark.parametrize(("raw", "message"), INVALID_DOCUMENTS)
def test_parse_refuses_anything_but_one_strict_document(raw: bytes, message: str) -> None:
    with pytest.raises(StrictJSONError, match=re.escape(message)):
        parse(raw)


def test_strict_json_error_is_a_value_error() -> None:
    assert issubclass(StrictJSONError, ValueError)


def test_parse_keeps_numbers_exact() -> None:
    value = parse(b'{"big":9007199254740993,"dec":0.10000000000000000001,"huge":1e999,"one":1.0}')

    assert value == {
        "big": 9007199254740993,
        "dec": Decimal("0.10000000000000000001"),
        "huge": Decimal("1e999"),
        "one": Decimal("1.0"),
    }
    assert type(value["big"]) is int
    assert type(value["one"]) is Decimal


@pytest.mark.parametrize(
    ("depth", "accepted"),
    [pytest.param(64, True, id="at_limit"), pytest.param(65, False, id="past_limit")],
)
def test_parse_bounds_nesting_depth(depth: int, accepted: bool) -> None:
    raw = ("[" * depth + "]" * depth).encode()

    if accepted:
        assert parse(raw, max_depth=64) == _nested_list(depth)
    else:
        with pytest.raises(StrictJSONError, match="nesting exceeds 64 levels"):
            parse(raw, max_depth=64)


def test_parse_counts_objects_and_arrays_towards_depth() -> None:
    with pytest.raises(StrictJSONError, match="nesting exceeds 2 levels"):
        parse(b'{"a":[{}]}', max_depth=2)


def test_parse_refuses_nesting_far_past_the_recursion_limit_without_recursion_error() -> None:
    raw = b"[" * 200_000 + b"]" * 200_000

    with pytest.raises(StrictJSONError, match="nesting exceeds 64 levels"):
        parse(raw)


def test_default_limits_are_one_mebibyte_and_depth_64() -> None:
    assert (_json.DEFAULT_MAX_ARGUMENT_BYTES, _json.DEFAULT_MAX_DEPTH) == (1 << 20, 64)


BLANK_CASES = [
    pytest.param(b"", True, id="empty"),
    pytest.param(b" \t\r\n\v\f", True, id="ascii_space"),
    pytest.param("\u0085\u00a0".encode(), True, id="nel_nbsp"),
    pytest.param(
        "\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000".encode(), True, id="z_category"
    ),
    pytest.param(b"\x1c", False, id="file_separator_not_go_space"),
    pytest.param(b"\x1f", False, id="unit_separator_not_go_space"),
    pytest.param("\u200b".encode(), False, id="zero_width_space_not_space"),
    pytest.param(b" {} ", False, id="object"),
    pytest.param(b"\xff", False, id="invalid_utf8"),
]


@pytest.mark.parametrize(("raw", "expected"), BLANK_CASES)
def test_is_blank_trims_exactly_the_go_space_set(raw: bytes, expected: bool) -> None:
    assert is_blank(raw) == expected


CANONICAL_CASES = [
    pytest.param({"b": 1, "a": [True, None]}, b'{"a":[true,null],"b":1}', id="sorted_compact"),
    pytest.param({"z": {"y": 1, "x": 2}}, b'{"z":{"x":2,"y":1}}', id="sorted_nested"),
    pytest.param({"é": "ü"}, '{"é":"ü"}'.encode(), id="non_ascii_kept"),
    pytest.param({"a": "\n\u0001"}, b'{"a":"\\n\\u0001"}', id="control_escaped"),
    pytest.param([Decimal("1.0"), 1], b"[1.0,1]", id="number_literals_kept"),
    pytest.param([9007199254740993], b"[9007199254740993]", id="big_integer_exact"),
    pytest.param([Decimal("0.10000000000000000001")], b"[0.10000000000000000001]", id="decimal"),
    pytest.param([1.5], b"[1.5]", id="float"),
    pytest.param([Decimal("1e400")], b"[1E+400]", id="finite_decimal_beyond_float_range"),
    pytest.param(("a", 1), b'["a",1]', id="tuple_as_array"),
]


@pytest.mark.parametrize(("value", "expected"), CANONICAL_CASES)
def test_canonical_is_compact_sorted_and_exact(value: object, expected: bytes) -> None:
    assert canonical(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param([float("nan")], "non-finite number", id="nan"),
        pytest.param([float("inf")], "non-finite number", id="infinity"),
        pytest.param([Decimal("NaN")], "non-finite number", id="decimal_nan"),
        pytest.param({1: "a"}, "member names must be strings", id="integer_key"),
        pytest.param([b"bytes"], "bytes is not a JSON value", id="bytes"),
        pytest.param({"s": {1}}, "set is not a JSON value", id="set"),
    ],
)
def test_canonical_refuses_values_that_are_not_json(value: object, message: str) -> None:
    with pytest.raises(StrictJSONError, match=re.escape(message)):
        canonical(value)


def test_digest_is_the_sha256_of_the_canonical_form_and_ignores_member_order() -> None:
    first = digest(parse(b'{"a": 1, "b": [1, 2]}'))
    second = digest(parse(b'{"b":[1,2],"a":1}'))

    assert first == second
    assert first == hashlib.sha256(b'{"a":1,"b":[1,2]}').hexdigest()


def test_to_plain_turns_decimals_into_floats_for_display() -> None:
    value = parse(b'{"a":[1.5,{"b":2}],"c":"x"}')

    assert _json.to_plain(value) == {"a": [1.5, {"b": 2}], "c": "x"}
    assert type(_json.to_plain(value)["a"][0]) is float


def _nested_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


# Every code point, lone surrogates included (which no UTF-8 document holds, but a Python
# caller's value may).
_ANY_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()))


@given(text=_ANY_TEXT)
@example(text='"\\/\b\f\n\r\t\x00\x1f\x7f\u2028\u2029\ud800\udfff\U0010ffff')
def test_property_a_string_encodes_as_json_dumps_writes_it(text: str) -> None:
    assert _json._encode_string(text) == json.dumps(text, ensure_ascii=False)


def _reference_canonical(value: Any) -> str:
    # canonical() as first written: json.dumps for every string, Python for the rest.
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int | Decimal):
        return str(value)
    if isinstance(value, list):
        return "[" + ",".join(_reference_canonical(item) for item in value) + "]"
    members = (
        f"{json.dumps(key, ensure_ascii=False)}:{_reference_canonical(value[key])}"
        for key in sorted(value)
    )
    return "{" + ",".join(members) + "}"


@given(value=json_values())
def test_property_canonical_is_the_reference_encoding(value: Any) -> None:
    assert canonical(value) == _reference_canonical(value).encode("utf-8")


# --- property: canonical JSON is invariant under member order and white space -------------

_TEXT = json_text(max_size=8)
_NUMBERS = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.decimals(allow_nan=False, allow_infinity=False, places=None),
)
_JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), _NUMBERS, _TEXT),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(_TEXT, children, max_size=4)
    ),
    max_leaves=20,
)


@given(st.data())
def test_property_canonical_is_invariant_under_member_order_and_whitespace(
    data: st.DataObject,
) -> None:
    value = data.draw(_JSON_VALUES)
    first = data.draw(serialized(value)).encode()
    second = data.draw(serialized(value)).encode()

    assert canonical(parse(first)) == canonical(parse(second))


@given(st.data())
def test_property_canonical_round_trips_through_parse(data: st.DataObject) -> None:
    raw = data.draw(_JSON_VALUES.flatmap(serialized)).encode()
    value = parse(raw)

    assert parse(canonical(value)) == value
    assert canonical(parse(canonical(value))) == canonical(value)


# The forbidden-text checks as they were first written, one character class each: the fast
# ones in gateway._json must find exactly what these find.
_ONE_CLASS_FORBIDDEN = re.compile(
    "[\ud800-\udfff\ufdd0-\ufdef"
    + "".join(f"{chr(plane << 16 | 0xFFFE)}{chr(plane << 16 | 0xFFFF)}" for plane in range(17))
    + "]"
)
_ONE_CLASS_SUSPECT = re.compile(
    _ONE_CLASS_FORBIDDEN.pattern[:-1] + "]|\\\\u(?:[dD][89a-fA-F]|[fF][dD][d-eD-E]|[fF]{3}[eEfF])"
)
# Code points on both sides of every boundary the checks draw, and ordinary text of each
# width CPython stores (ASCII, Latin-1, BMP, astral), with the pieces of \u escapes.
_EDGES = st.sampled_from(
    [
        *'aZ09 "\\u{}',
        *(chr(c) for c in (0x7F, 0x80, 0xE9, 0xFF, 0x100, 0x4E2D, 0xD7FF, 0xD800, 0xDBFF)),
        *(chr(c) for c in (0xDC00, 0xDFFF, 0xE000, 0xFDCF, 0xFDD0, 0xFDEF, 0xFDF0, 0xFFFD)),
        *(chr(c) for c in (0xFFFE, 0xFFFF, 0x10000, 0x1F600, 0x10FFFD, 0x10FFFF)),
        *(chr(plane << 16 | low) for plane in range(1, 17) for low in (0xFFFD, 0xFFFE, 0xFFFF)),
        "\\ud8",
        "\\uDB",
        "\\uFDD",
        "\\ufde",
        "\\uFFF",
        "\\ufffe",
        "\\uFFFF",
        "\\u00",
    ]
)
_EDGE_TEXT = st.one_of(
    st.lists(_EDGES, max_size=40).map("".join),
    st.text(max_size=40),
    st.tuples(st.text(max_size=30), _EDGES, st.text(max_size=30)).map("".join),
)


@given(_EDGE_TEXT)
def test_property_the_fast_forbidden_text_checks_find_what_one_class_finds(text: str) -> None:
    first = _ONE_CLASS_FORBIDDEN.search(text)

    assert _json._first_forbidden(text) == (None if first is None else first.group())
    assert _json._suspect(text) is (_ONE_CLASS_SUSPECT.search(text) is not None)


@pytest.mark.parametrize(
    ("text", "first"),
    [
        pytest.param("plain ascii \\u00e9", None, id="ascii"),
        pytest.param("gr\u00fc\u00dfe \u4e2d\U0001f600", None, id="allowed_widths"),
        pytest.param("x\U0001fffey\ufdd0", "\U0001fffe", id="astral_before_bmp"),
        pytest.param("x\ufdd0y\U0001fffe", "\ufdd0", id="bmp_before_astral"),
        pytest.param("\U0010ffff", "\U0010ffff", id="last_code_point"),
        pytest.param("a\ud800", "\ud800", id="lone_surrogate"),
    ],
)
def test_the_first_forbidden_code_point_is_the_earliest(text: str, first: str | None) -> None:
    assert _json._first_forbidden(text) == first


def test_a_long_ascii_document_is_not_suspect_unless_an_escape_could_decode_badly() -> None:
    clean = '{"q":"' + "select * from t where a = 1 " * 400 + '"}'

    assert _json._suspect(clean) is False
    assert _json._suspect(clean[:-2] + '\\ud83d"}') is True
    assert _json._suspect(clean[:-2] + '\\u00e9"}') is False


def _outcome(read: Any, raw: bytes | str) -> tuple[str, object]:
    try:
        return "value", read(raw)
    except StrictJSONError as exc:
        return "refused", str(exc)


# Bytes made mostly of JSON's own characters, so that both documents and near misses
# (duplicate names, a trailing token, a byte order mark, NaN, deep nesting) come up.
_JSONISH_BYTES = st.lists(
    st.sampled_from(
        [
            b"{",
            b"}",
            b"[",
            b"]",
            b",",
            b":",
            b'"a"',
            b'"b"',
            b"1",
            b"1.5",
            b"-0",
            b"1e400",
            b"NaN",
            b"true",
            b"null",
            b" ",
            b"\n",
            b"\xef\xbb\xbf",
            b"\xff",
            b'"\\ud800"',
            b"\x00",
        ]
    ),
    max_size=12,
).map(b"".join)


@example(b"\xef\xbb\xbf{}")  # the bytes' BOM is dropped by the detected encoding
@example("\ufeff{}")  # a text's BOM is refused
@example(b"\x00{\x00}")  # the encoding detected is UTF-16, as json.loads detects it
@given(
    st.one_of(
        _JSONISH_BYTES,
        _JSONISH_BYTES.map(lambda raw: raw.decode("latin-1")),
        json_values().flatmap(serialized).map(str.encode),
    )
)
def test_property_trusted_parsing_reads_exactly_as_json_loads_with_the_same_hooks(
    raw: bytes | str,
) -> None:
    # parse_trusted shares decoders made once; it must read every text (and refuse every
    # one) exactly as json.loads called with the strict hooks each time.
    def reference(exact: bool) -> Any:
        def read(document: bytes | str) -> object:
            try:
                return json.loads(
                    document,
                    object_pairs_hook=_json._unique_members,
                    parse_float=Decimal if exact else float,
                    parse_constant=_json._reject_constant,
                )
            except StrictJSONError:
                raise
            except RecursionError:
                raise StrictJSONError("document is not valid JSON: it nests too deeply") from None
            except ValueError as exc:
                raise _json._decode_error(exc) from None

        return read

    for exact in (True, False):
        ours = functools.partial(_json.parse_trusted, exact=exact)
        assert _outcome(ours, raw) == _outcome(reference(exact), raw)

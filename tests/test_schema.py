"""Input schema compilation and validation: gateway._schema."""

from __future__ import annotations

import re
import socket
from decimal import Decimal
from typing import Any

import pytest

from gateway import _json
from gateway._schema import MAX_SCHEMA_BYTES, SchemaError, compile_schema
from tests.helpers import dumps


def _compiled(schema: dict[str, Any]) -> Any:
    return compile_schema(dumps(schema).encode())


def _padded(size: int) -> bytes:
    """An object schema of exactly `size` bytes (padding in a description)."""
    head, tail = b'{"type":"object","description":"', b'"}'
    return head + b"a" * (size - len(head) - len(tail)) + tail


def test_max_schema_bytes_is_one_mebibyte() -> None:
    assert MAX_SCHEMA_BYTES == 1_048_576


def test_compile_accepts_a_document_of_exactly_one_mebibyte() -> None:
    raw = _padded(MAX_SCHEMA_BYTES)

    assert len(raw) == MAX_SCHEMA_BYTES
    compile_schema(raw).validate({})


def test_compile_refuses_a_document_one_byte_over_one_mebibyte() -> None:
    with pytest.raises(SchemaError, match=r"^document exceeds 1048576 bytes$"):
        compile_schema(_padded(MAX_SCHEMA_BYTES + 1))


def test_compile_refuses_a_document_whose_normalized_form_exceeds_one_mebibyte() -> None:
    # "1e4" normalizes to "1E+4": one byte longer per number.
    count = 250_000
    raw = b'{"type":"object","enum":[' + b",".join([b"1e4"] * count) + b"]}"
    assert len(raw) <= MAX_SCHEMA_BYTES
    assert len(_json.canonical(_json.parse(raw))) > MAX_SCHEMA_BYTES

    with pytest.raises(SchemaError, match=r"^normalized document exceeds 1048576 bytes$"):
        compile_schema(raw)


REFUSED = [
    pytest.param(b"", "document is empty", id="empty"),
    pytest.param(b"{", "document is not valid RFC 7493 JSON", id="malformed"),
    pytest.param(b'{"type":"object","type":"object"}', "not valid RFC 7493 JSON", id="duplicate"),
    pytest.param(b'{"type":"object"} {}', "not valid RFC 7493 JSON", id="two_documents"),
    pytest.param(b'{"type":"object","x":"\xff"}', "not valid RFC 7493 JSON", id="invalid_utf8"),
    pytest.param(b"[]", "document is not a JSON object", id="array"),
    pytest.param(b'{"$schema":1}', "$schema must be a string", id="schema_not_string"),
    pytest.param(
        b'{"$schema":"https://example.com/dialect","type":"object"}',
        "unsupported $schema dialect 'https://example.com/dialect'",
        id="unknown_dialect",
    ),
    pytest.param(
        b'{"type":"object","properties":{"query":{"type":"invalid"}}}',
        "schema violates its metaschema",
        id="unknown_type_name",
    ),
    pytest.param(
        b'{"type":"object","minLength":-1}',
        "schema violates its metaschema: /minLength: must be at least 0 (minimum)",
        id="negative_min_length",
    ),
    pytest.param(
        b'{"type":"object","properties":{"q":{"type":"string","pattern":"["}}}',
        'schema violates its metaschema: /properties/q/pattern: must be a valid "regex" (format)',
        id="invalid_pattern",
    ),
    pytest.param(
        b'{"type":"object","properties":{"q":{"$ref":"https://example.com/s.json"}}}',
        "reference 'https://example.com/s.json' is external or does not resolve",
        id="external_https_ref",
    ),
    pytest.param(
        b'{"type":"object","properties":{"q":{"$ref":"file:///etc/passwd"}}}',
        "reference 'file:///etc/passwd' is external or does not resolve",
        id="external_file_ref",
    ),
    pytest.param(
        b'{"type":"object","properties":{"q":{"$ref":"other.json"}}}',
        "reference 'other.json' is external or does not resolve",
        id="relative_ref",
    ),
    pytest.param(
        b'{"type":"object","properties":{"q":{"$ref":"#/$defs/missing"}}}',
        "reference '#/$defs/missing' is external or does not resolve",
        id="dangling_internal_ref",
    ),
    pytest.param(
        b'{"type":"object","x":' + b'{"a":' * 900 + b"1" + b"}" * 900 + b"}",
        "document nests too deeply",
        id="deep_nesting",
    ),
]


@pytest.mark.parametrize(("raw", "message"), REFUSED)
def test_compile_refuses_unusable_schemas(raw: bytes, message: str) -> None:
    with pytest.raises(SchemaError, match=re.escape(message)):
        compile_schema(raw)


def test_compile_never_opens_a_connection_for_an_external_ref(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attempts: list[object] = []

    def refuse(self: socket.socket, address: object) -> None:
        attempts.append(address)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)

    with pytest.raises(SchemaError, match="is external or does not resolve"):
        compile_schema(b'{"type":"object","$ref":"https://json-schema.org/unknown.json"}')
    assert attempts == []


def test_internal_refs_and_standard_metaschemas_resolve() -> None:
    schema = _compiled(
        {
            "type": "object",
            "$defs": {"word": {"type": "string", "pattern": "^[a-z]+$"}},
            "properties": {
                "w": {"$ref": "#/$defs/word"},
                "s": {"$ref": "https://json-schema.org/draft/2020-12/schema"},
            },
        }
    )

    schema.validate({"w": "abc", "s": {"type": "string"}})
    with pytest.raises(ValueError, match=re.escape("/w: must match the pattern")):
        schema.validate({"w": "ABC"})
    with pytest.raises(
        ValueError, match=re.escape("/s/type: must match at least one schema in anyOf (anyOf)")
    ):
        schema.validate({"s": {"type": "nope"}})


def test_default_dialect_is_draft_2020_12() -> None:
    # prefixItems is a 2020-12 keyword; an earlier draft would ignore it.
    schema = _compiled(
        {"type": "object", "properties": {"t": {"prefixItems": [{"type": "string"}]}}}
    )

    with pytest.raises(ValueError, match=re.escape("/t/0: must be a string (type)")):
        schema.validate({"t": [1]})


def test_dollar_schema_selects_an_earlier_draft() -> None:
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {"n": {"type": "number", "maximum": 5, "exclusiveMaximum": True}},
    }
    schema = _compiled(draft4)

    schema.validate({"n": 4})
    with pytest.raises(ValueError, match="/n: must be at most 5"):
        schema.validate({"n": 5})
    with pytest.raises(SchemaError, match="schema violates its metaschema"):
        _compiled({k: v for k, v in draft4.items() if k != "$schema"})


def test_format_assertion_is_on() -> None:
    schema = _compiled(
        {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}}}
    )

    schema.validate({"when": "2024-01-02T03:04:05Z"})
    with pytest.raises(ValueError, match=re.escape('/when: must be a valid "date-time" (format)')):
        schema.validate({"when": "yesterday"})


@pytest.mark.parametrize(
    ("instance", "accepted"),
    [
        pytest.param(9007199254740993, True, id="exact_value"),
        pytest.param(9007199254740992, False, id="float64_neighbour"),
        pytest.param(Decimal("9007199254740993.0"), True, id="same_value_as_decimal"),
    ],
)
def test_validation_compares_big_numbers_exactly(instance: object, accepted: bool) -> None:
    schema = _compiled({"type": "object", "properties": {"n": {"const": 9007199254740993}}})

    if accepted:
        schema.validate({"n": instance})
    else:
        with pytest.raises(
            ValueError, match=re.escape("/n: must equal the value the schema gives (const)")
        ):
            schema.validate({"n": instance})


@pytest.mark.parametrize(
    ("instance", "accepted"),
    [
        pytest.param(1, True, id="integer"),
        pytest.param(Decimal("1.0"), True, id="integral_decimal"),
        pytest.param(Decimal("1e2"), True, id="integral_exponent"),
        pytest.param(Decimal("1.5"), False, id="fraction"),
        pytest.param(True, False, id="boolean"),
        pytest.param("1", False, id="string"),
    ],
)
def test_integer_type_accepts_integral_exact_numbers_but_not_booleans(
    instance: object, accepted: bool
) -> None:
    schema = _compiled({"type": "object", "properties": {"n": {"type": "integer"}}})

    if accepted:
        schema.validate({"n": instance})
    else:
        with pytest.raises(ValueError, match=re.escape("must be an integer (type)")):
            schema.validate({"n": instance})


def test_decimal_multiple_of_is_exact() -> None:
    schema = compile_schema(b'{"type":"object","properties":{"n":{"multipleOf":0.1}}}')

    schema.validate({"n": Decimal("0.3")})
    with pytest.raises(ValueError, match=re.escape("/n: must be a multiple of 0.1 (multipleOf)")):
        schema.validate({"n": Decimal("0.35")})


def test_pattern_is_ecma_262_so_a_python_only_anchor_is_refused_at_compile() -> None:
    # \Z is a Python-only anchor; ECMA-262 has no such escape under the u flag.
    with pytest.raises(SchemaError, match=re.escape('must be a valid "regex" (format)')):
        _compiled(
            {"type": "object", "properties": {"w": {"type": "string", "pattern": r"^[a-z]+\Z"}}}
        )


@pytest.mark.parametrize(
    ("instance", "message"),
    [
        pytest.param(None, "(root): must be an object (type)", id="null"),
        pytest.param([], "(root): must be an object (type)", id="array"),
        pytest.param("text", "(root): must be an object (type)", id="string"),
    ],
)
def test_validate_names_the_failing_location(instance: object, message: str) -> None:
    schema = _compiled({"type": "object"})

    with pytest.raises(ValueError, match=re.escape(message)):
        schema.validate(instance)


def test_schema_error_is_a_value_error() -> None:
    assert issubclass(SchemaError, ValueError)


# --- references follow the specification's base-URI rules --------------------------------


def _admits(schema: dict[str, Any], value: Any) -> bool:
    compiled = compile_schema(_json.canonical(schema))
    try:
        compiled.validate(_json.parse(_json.canonical(value)))
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param(
            {
                "$defs": {
                    "inner": {
                        "$id": "https://example.com/inner.json",
                        "$defs": {"n": {"type": "integer"}},
                        "$ref": "#/$defs/n",
                    }
                },
                "$ref": "https://example.com/inner.json",
            },
            id="nested_id_with_local_defs",
        ),
        pytest.param(
            {
                "$id": "https://example.com/root.json",
                "$defs": {
                    "a": {"$id": "folder/", "$defs": {"n": {"$ref": "num.json"}}},
                    "num": {"$id": "folder/num.json", "type": "integer"},
                },
                "$ref": "folder/#/$defs/n",
            },
            id="relative_id_against_nested_base",
        ),
        pytest.param(
            {"$defs": {"n": {"$anchor": "num", "type": "integer"}}, "$ref": "#num"},
            id="anchor",
        ),
        pytest.param(
            {
                "$id": "https://example.com/r.json",
                "$dynamicAnchor": "node",
                "$defs": {"n": {"$dynamicAnchor": "node", "type": "integer"}},
                "$dynamicRef": "#node",
                "type": "integer",
            },
            id="dynamic_anchor",
        ),
        pytest.param(
            {"type": "integer", "enum": [{"$ref": "https://nowhere.invalid/x"}, 1, 2]},
            id="enum_data_that_looks_like_a_reference",
        ),
        pytest.param(
            {"type": "integer", "not": {"const": {"$dynamicRef": "#missing"}}},
            id="const_data_that_looks_like_a_reference",
        ),
    ],
)
def test_references_resolve_by_base_uri_and_data_is_never_taken_for_a_reference(
    schema: dict[str, Any],
) -> None:
    assert _admits(schema, 1) is True
    assert _admits(schema, "text") is False


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"$ref": "https://example.com/other.json"}, id="absolute"),
        pytest.param({"$id": "https://example.com/a/", "$ref": "b.json"}, id="relative_to_id"),
        pytest.param(
            {"$defs": {"x": {"$id": "https://example.com/x/", "$ref": "y.json"}}},
            id="relative_to_nested_id_never_used",
        ),
        pytest.param({"$ref": "#/$defs/missing"}, id="missing_pointer"),
        pytest.param({"$ref": "#nowhere"}, id="missing_anchor"),
        pytest.param({"$dynamicRef": "https://example.com/d.json#node"}, id="dynamic_external"),
        pytest.param(
            {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "file:///etc/passwd"}}},
            id="reached_only_through_another_reference",
        ),
    ],
)
def test_external_or_unresolvable_references_are_refused_at_compile(
    schema: dict[str, Any],
) -> None:
    with pytest.raises(SchemaError, match="is external or does not resolve"):
        compile_schema(_json.canonical(schema))


# --- integer-valued decimals are integers; numbers compare exactly at any size -------------


@pytest.mark.parametrize(
    "keyword", ["maxProperties", "minProperties", "maxItems", "minItems", "maxLength", "minLength"]
)
def test_integer_valued_decimals_in_a_schema_are_integers(keyword: str) -> None:
    compile_schema(b'{"%s":2.0}' % keyword.encode())
    compile_schema(b'{"%s":2.000e0}' % keyword.encode())
    with pytest.raises(SchemaError, match=re.escape(f"/{keyword}: must be an integer (type)")):
        compile_schema(b'{"%s":2.5}' % keyword.encode())


@pytest.mark.parametrize(
    ("divisor", "value", "multiple"),
    [
        ("0.5", "1e308", True),
        ("0.5", "123456789012345678901234567890", True),
        ("0.5", "123456789012345678901234567890.5", True),
        ("0.5", "123456789012345678901234567890.25", False),
        ("0.0001", "1e308", True),
        ("3", "1e308", False),
        ("1e-300", "1", True),
        ("0.3", "1e999999", False),
        ("2.5", "1e999999", True),
        ("7", "7" + "0" * 4000, True),
        ("1e400", "2e400", True),
        ("1e400", "1e399", False),
    ],
)
def test_multiple_of_is_exact_at_any_size(divisor: str, value: str, multiple: bool) -> None:
    schema = compile_schema(f'{{"multipleOf":{divisor}}}'.encode())
    admitted = _admits_raw(schema, value)

    assert admitted is multiple


def _admits_raw(schema: Any, raw: str) -> bool:
    try:
        schema.validate(_json.parse(raw.encode()))
    except ValueError:
        return False
    return True


# --- ECMA-262 patterns --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("^[a-z]+$", "abc", True),
        ("^[a-z]+$", "abc\n", False),
        ("^\\d+$", "123", True),
        ("^\\d+$", "\u0661\u0662", False),
        ("^\\w+$", "abc_1", True),
        ("^\\w+$", "\u00e9t\u00e9", False),
        ("^\\p{Letter}+$", "\u00e9t\u00e9", True),
        ("^\\p{Letter}+$", "123", False),
        ("^\\s$", "\u00a0", True),
        ("a", "xax", True),
        ("^.$", "\U0001f600", True),
    ],
)
def test_pattern_and_pattern_properties_use_ecma_262_with_the_u_flag(
    pattern: str, text: str, matches: bool
) -> None:
    by_value = {"properties": {"w": {"type": "string", "pattern": pattern}}}
    by_name = {"patternProperties": {pattern: {"type": "integer"}}, "additionalProperties": True}
    closed = {"patternProperties": {pattern: True}, "additionalProperties": False}
    unevaluated = {"patternProperties": {pattern: True}, "unevaluatedProperties": False}
    # A subschema that names its own $schema keeps the gateway's rules.
    nested = {
        "$defs": {
            "w": {
                "$id": "urn:w",
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "pattern": pattern,
            }
        },
        "properties": {"w": {"$ref": "urn:w"}},
    }

    assert _admits(by_value, {"w": text}) is matches
    assert _admits(by_name, {text: "not an integer"}) is not matches
    assert _admits(closed, {text: 1}) is matches
    assert _admits(unevaluated, {text: 1}) is matches
    assert _admits(nested, {"w": text}) is matches


@pytest.mark.parametrize("pattern", ["(?P<n>a)", "\\Z", "(?i)a", "\\a", "[", "a{2,1}"])
def test_a_pattern_that_is_not_ecma_262_is_refused_at_compile(pattern: str) -> None:
    for schema in ({"pattern": pattern}, {"patternProperties": {pattern: True}}):
        with pytest.raises(SchemaError, match=re.escape('must be a valid "regex"')):
            compile_schema(_json.canonical(schema))


# --- formats: every asserted format has a strict checker ------------------------------------

VALID_FORMATS = {
    "date-time": ["1998-12-31T23:59:60Z", "1998-12-31T15:59:60.123-08:00", "2024-02-29t01:02:03z"],
    "date": ["2024-02-29"],
    "time": ["23:59:60Z", "00:29:60-23:30", "08:30:06.283185+01:00"],
    "duration": ["P1Y2M3DT4H5M6S", "P4W", "PT36H", "P1D"],
    "email": ['"quoted space"@example.com', "joe@[IPv6:::1]", "a.b@example.com"],
    "idn-email": ["\uc2e4\ub840@\uc2e4\ub840.\ud14c\uc2a4\ud2b8"],
    "hostname": ["example.com", "xn--4gbwdl.xn--wgbh1c", "a-1"],
    "idn-hostname": ["\uc2e4\ub840.\ud14c\uc2a4\ud2b8"],
    "ipv4": ["192.168.0.1"],
    "ipv6": ["::1", "::ffff:192.168.0.1"],
    "uri": ["http://example.com/a?b#c", "urn:isbn:0451450523"],
    "uri-reference": ["/a/b", "#frag", ""],
    "iri": ["http://\u0192\u00f8\u00f8.\u00df\u00e5r/?\u2202\u00e9\u0153=\u03c0\u00eex#\u03c0"],
    "iri-reference": ["//\u0192\u00f8\u00f8.\u00df\u00e5r/"],
    "uuid": ["2eb8aa08-aa98-11ea-b4aa-73b441d16380"],
    "uri-template": ["http://example.com/{+path}{?q,lang}", "{v:1000}", "{%41}"],
    "json-pointer": ["/a/~0~1", ""],
    "relative-json-pointer": ["0#", "100/a"],
    "regex": ["(?<n>a)\\k<n>", "\\p{Letter}"],
}
INVALID_FORMATS = {
    "date-time": ["1998-12-31T22:59:60Z", "1985-04-12T23:20:50", "1985-04-12T23:20:5\u0661Z"],
    "date": ["2023-02-29", "2024-1-01"],
    "time": ["22:59:60Z", "12:00:00"],
    "duration": ["PT0.5S", "P1Y2D", "-P1D", "P1WT1H", "P"],
    "email": [".a@example.com", "a..b@example.com", "a@", "@a", "a b@example.com"],
    "idn-email": ["no-at-sign"],
    "hostname": ["example.", "-a.com", "a_b.com", "xn--X", "\u212aelvin.example"],
    "idn-hostname": ["example.", "0a.\u05d0", "example\u3002"],
    "ipv4": ["192.168.0.01", "256.0.0.1", "\u0661.1.1.1"],
    "ipv6": ["::1%eth0", "1:2:3", "::ffff:192.168.0.01"],
    "uri": ["/relative", "http://[::ffff:01.2.3.4]", "http://a b"],
    "uri-reference": ["\\\\windows\\path", "#a#b"],
    "iri": ["/abc", "http://2001:0db8::1"],
    "iri-reference": ["#\u0192r\u00e4g\\m\u00eant"],
    "uuid": ["2eb8aa08-aa98-11ea-b4aa-73b441d16380-", "2eb8aa08aa9811eab4aa73b441d16380"],
    "uri-template": ["{a..b}", "{v:01}", "a b", "{a,}", "{var=def}"],
    "json-pointer": ["a", "/~2"],
    "relative-json-pointer": ["01", "-1", "\u0661/a"],
    "regex": ["(?P<n>a)", "\\a"],
}


# Pointer tokens and regular expressions may hold any character, a newline included.
TEXT_IN_GRAMMAR = ("json-pointer", "relative-json-pointer", "regex")


def test_every_format_the_gateway_asserts_is_covered_here() -> None:
    from gateway._formats import CHECKERS

    assert set(VALID_FORMATS) == set(INVALID_FORMATS) == set(CHECKERS)


@pytest.mark.parametrize("name", sorted(VALID_FORMATS))
def test_each_format_admits_its_grammar_and_refuses_variants_and_trailing_newlines(
    name: str,
) -> None:
    schema = {"format": name}
    for text in VALID_FORMATS[name]:
        assert _admits(schema, text) is True, text
        if name not in TEXT_IN_GRAMMAR:
            assert _admits(schema, text + "\n") is False, text
            assert _admits(schema, " " + text) is False, text
    for text in INVALID_FORMATS[name]:
        assert _admits(schema, text) is False, text
    assert _admits(schema, 12) is True  # a format constrains strings only


def test_a_regex_argument_is_checked_and_never_kept_by_the_pattern_cache() -> None:
    # The schema patterns' cache holds what schemas say; an argument's text is the caller's
    # choice, and a thousand distinct 1 MiB patterns compiled and kept would fill the process.
    from gateway._formats import ecma_regex

    schema = compile_schema(dumps({"type": "string", "format": "regex"}).encode())
    before = ecma_regex.cache_info()
    for n in range(50):
        assert _admits_raw(schema, dumps(f"(?:a|b){{{n}}}c"))
        assert not _admits_raw(schema, dumps(f"(?P<n{n}>a)"))
    after = ecma_regex.cache_info()

    assert (after.currsize, after.hits, after.misses) == (
        before.currsize,
        before.hits,
        before.misses,
    )


#: (format, admitted instances, refused instances) of the OpenAPI Format Registry.
OPENAPI_FORMATS: dict[str, tuple[list[Any], list[Any]]] = {
    "int32": ([0, -(2**31), 2**31 - 1, Decimal("7.0"), "text"], [2**31, -(2**31) - 1, 1.5]),
    "int64": ([2**63 - 1, -(2**63), 0], [2**63, -(2**63) - 1, Decimal("0.5")]),
    "float": ([1.5, Decimal("3.4E38"), -1], [Decimal("3.5E38"), Decimal("-1E39")]),
    "double": ([Decimal("1.7976931348623157E308"), 0], [Decimal("1.8E308"), Decimal("-1E400")]),
    "byte": (["", "YQ==", "YWI=", "YWJj", 7], ["YQ", "Y===", "YWJj\n", "YW Jj", "-_8="]),
    "binary": (["anything at all", ""], []),
    "password": (["hunter2", ""], []),
}


@pytest.mark.parametrize("name", sorted(OPENAPI_FORMATS))
def test_openapi_registry_formats_are_asserted_exactly(name: str) -> None:
    admitted, refused = OPENAPI_FORMATS[name]
    for value in admitted:
        assert _admits({"format": name}, value) is True, value
    for value in refused:
        assert _admits({"format": name}, value) is False, value
    assert _admits({"format": name}, None) is True  # other types pass, as for every format


@pytest.mark.parametrize("name", ["unknown", "int16", "uint64", "color", "Int32"])
def test_a_format_without_a_checker_is_refused_at_compile(name: str) -> None:
    with pytest.raises(SchemaError, match=re.escape(f"format {name!r} has no checker")):
        compile_schema(_json.canonical({"properties": {"x": {"format": name}}}))


def test_a_regex_is_at_most_4096_characters_as_an_argument_and_as_a_schema_pattern() -> None:
    # Compiling costs up to ~4 us a character ([\p{L}\p{L}...]): a 1 MiB argument would hold
    # a core for seconds at admission. The bound is the same for a schema's own patterns.
    from gateway._formats import MAX_REGEX_CHARS

    unit = "[\\p{L}]"  # 7 characters
    longest = unit * (MAX_REGEX_CHARS // 7) + "a" * (MAX_REGEX_CHARS % 7)
    assert len(longest) == MAX_REGEX_CHARS
    schema = compile_schema(dumps({"type": "string", "format": "regex"}).encode())

    assert _admits_raw(schema, dumps(longest))
    for too_long in (longest + "a", unit * 150_000):
        with pytest.raises(
            ValueError, match="must be a regex of at most 4096 characters"
        ) as refused:
            schema.validate(_json.parse(dumps(too_long).encode()))
        assert "p{L}" not in str(refused.value)  # the text is never quoted

    def pattern_schema(pattern: str) -> bytes:
        properties = {"q": {"type": "string", "pattern": pattern}}
        return dumps({"type": "object", "properties": properties}).encode()

    compile_schema(pattern_schema(longest))
    with pytest.raises(SchemaError, match="/properties/q/pattern: must be a regex of at most 4096"):
        compile_schema(pattern_schema(longest + "a"))

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

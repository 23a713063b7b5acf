"""Hostile inputs for the fuzz tests: call ids, names and argument text, and how to check them.

The argument strategies produce bytes or text, never a decoded value, so that every kind of
hostile input can be expressed: invalid UTF-8, lone surrogates (raw and escaped),
duplicate member names at any depth, numbers no double holds, nesting at and past the
limit, strings at and past the size limit, trailing data and plain noise.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Final

import jsonschema
from hypothesis import strategies as st

from gateway import AdmissionLimits

LIMITS: Final = AdmissionLimits()
MAX_BYTES: Final = LIMITS.max_argument_bytes
MAX_DEPTH: Final = LIMITS.max_depth

#: A schema with a bit of everything: bounds, formats, arrays, no extra members.
STRICT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 1000},
        "s": {"type": "string", "maxLength": 64},
        "n": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "when": {"type": "string", "format": "date-time"},
        "mail": {"type": "string", "format": "email"},
        "inner": {
            "type": "object",
            "properties": {"deep": {"type": "array"}},
            "additionalProperties": {"type": "integer"},
        },
    },
    "required": ["a"],
    "additionalProperties": False,
}
#: Any object at all.
OPEN_SCHEMA: Final[dict[str, Any]] = {"type": "object"}

LONE_SURROGATES: Final = ("\ud800", "\udbff", "\udc00", "\udfff")

#: Text that may hold lone surrogates, controls, non-characters and astral characters.
hostile_text = st.lists(
    st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(LONE_SURROGATES),
        st.sampled_from(["\x00", "\u2028", "\ufeff", "\uffff", "\U0010ffff", "\U0001f600"]),
    ),
    max_size=24,
).map("".join)

call_ids = st.one_of(
    st.just("call-1"),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=40),
    st.just(""),
    hostile_text,
    st.text(min_size=1, max_size=40),
    st.sampled_from(["call-1", " ", "\t", "x" * 10_000]),
)


def names(valid: str) -> st.SearchStrategy[str]:
    """The right name, near misses, and noise."""
    return st.one_of(
        st.just(valid),
        st.just(valid),
        st.just(valid),
        st.sampled_from(["", valid.upper(), valid + " ", " " + valid, valid + "\x00", "x" * 65]),
        hostile_text,
    )


# -- JSON values, encoded by hand so that numbers and strings can be anything ---------------

json_numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.decimals(allow_nan=False, allow_infinity=False, places=None).map(str),
    st.sampled_from(
        [
            "1e400",
            "-1e400",
            "1E-400",
            "9007199254740993",
            "1.0",
            "-0",
            "0.1000000000000000055511151231257827",
            "1" * 4300,
            "1" * 4301,
            "1e999999999",
            "123456789012345678901234567890.5",
        ]
    ),
)


def _string(text: str) -> str:
    # ensure_ascii: lone surrogates come out as \uXXXX escapes, which strict JSON refuses.
    return json.dumps(text, ensure_ascii=True)


json_scalars = st.one_of(
    st.sampled_from(["null", "true", "false"]),
    json_numbers,
    hostile_text.map(_string),
    st.text(max_size=30).map(lambda s: json.dumps(s, ensure_ascii=False)),
)


def _object(members: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f"{_string(k)}:{v}" for k, v in members) + "}"


json_texts = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4).map(lambda items: "[" + ",".join(items) + "]"),
        st.lists(
            st.tuples(
                st.sampled_from(["a", "s", "n", "x", "password"]) | st.text(max_size=6), children
            ),
            max_size=4,
        ).map(_object),
        # A duplicate member name at this depth.
        st.tuples(st.text(max_size=4), children, children).map(
            lambda t: _object([(t[0], t[1]), (t[0], t[2])])
        ),
    ),
    max_leaves=12,
)

#: Object documents: what arguments usually look like (top level is an object).
json_objects = st.lists(
    st.tuples(st.sampled_from(["a", "s", "n", "tags", "when", "mail", "inner", "zz"]), json_texts),
    max_size=5,
).map(_object)

#: Arguments that fit STRICT_SCHEMA, so that admission is reached often.
plausible_objects = st.fixed_dictionaries(
    {"a": st.integers(min_value=-5, max_value=1005)},
    optional={
        "s": st.text(max_size=70),
        "n": st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False)),
        "tags": st.lists(st.text(max_size=5), max_size=6),
        "when": st.sampled_from(["2024-01-01T00:00:00Z", "2024-13-01T00:00:00Z", "yesterday"]),
        "mail": st.sampled_from(["a@example.com", "not an address", ""]),
        "inner": st.dictionaries(
            st.sampled_from(["deep", "k", "l"]), st.integers() | st.lists(st.integers(), max_size=2)
        ),
    },
).map(json.dumps)


def nested(depth: int, *, inner: str = "") -> str:
    """An object whose deepest container sits at ``depth`` (the top object is level 1)."""
    if depth <= 1:
        return "{" + inner + "}"
    return '{"x":' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def sized(total: int) -> str:
    """An object exactly ``total`` bytes long holding one long string."""
    frame = '{"s":""}'
    return '{"s":"' + "x" * (total - len(frame)) + '"}'


deep_documents = st.sampled_from([MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 200, 5000]).map(nested)
big_documents = st.sampled_from([MAX_BYTES - 1, MAX_BYTES, MAX_BYTES + 1, MAX_BYTES * 2]).map(sized)

invalid_utf8 = st.sampled_from(
    [
        b'{"s": "\xff"}',
        b'{"s": "\xed\xa0\x80"}',  # an encoded surrogate (CESU-8)
        b'{"s": "\xc0\xaf"}',  # overlong
        b'{"s": "\xe2\x82"}',  # truncated sequence
        b"\xef\xbb\xbf{}",  # byte order mark
        b'{"\xf5": 1}',
    ]
)

#: Everything, as raw argument bytes or text.
arguments = st.one_of(
    json_objects,
    plausible_objects,
    plausible_objects,
    plausible_objects,
    json_texts,
    deep_documents,
    big_documents,
    st.binary(max_size=64),
    invalid_utf8,
    hostile_text.map(lambda s: '{"s": "' + s + '"}'),  # raw lone surrogates in text
    st.sampled_from(["", "   ", "\u3000", "{} {}", "{}x", "NaN", '{"n": NaN}', '{"n": Infinity}']),
    json_objects.map(lambda s: s + " trailing"),
)


def as_bytes(raw: str | bytes) -> bytes | None:
    """The UTF-8 bytes of an argument document, or ``None`` when text cannot be encoded."""
    if isinstance(raw, bytes):
        return raw
    try:
        return raw.encode("utf-8")
    except UnicodeEncodeError:
        return None


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate member admitted: {keys}"
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise AssertionError(f"{name} admitted")


def _walk_strings(value: Any) -> list[str]:
    found: list[str] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            found.append(node)
        elif isinstance(node, dict):
            found.extend(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _depth(value: Any) -> int:
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            stack.extend(
                (item, level + 1) for item in (node.values() if isinstance(node, dict) else node)
            )
    return deepest


def check_admitted(raw: bytes, schema: dict[str, Any]) -> None:
    """Independently of the gateway: strict JSON within the limits, valid against the schema."""
    assert len(raw) <= MAX_BYTES
    text = raw.decode("utf-8")  # valid UTF-8, or this raises
    value = json.loads(
        text, object_pairs_hook=_unique, parse_constant=_no_constant, parse_float=Decimal
    )
    for string in _walk_strings(value):
        string.encode("utf-8")  # no lone surrogate survived (escaped or raw)
    assert _depth(value) <= MAX_DEPTH
    plain = json.loads(text)  # floats, as a generic validator expects
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = [error.message for error in validator.iter_errors(plain)]
    assert not errors, f"admitted arguments do not validate: {errors}"

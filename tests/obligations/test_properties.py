"""Invariants of the obligations: redaction never leaks, a rewrite is admitted or denies,
and the obligation reader never fails any other way than as a malformed decision."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import AuthorizationError, Guard, MalformedDecisionError, ToolCall, ToolOutput, bind
from gateway.obligations import OutputWithheldError, read_obligations, redact_output
from gateway.obligations._model import compiled
from gateway.policy import read_decision
from gateway.testing import RecordingTool, StaticAuthorizer

SECRET = st.from_regex(r"\A[0-9]{3}-[0-9]{2}-[0-9]{4}\Z")
FILLER = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)
PATTERN = r"[0-9]{3}-[0-9]{2}-[0-9]{4}"


@st.composite
def texts_with_secrets(draw: st.DrawFn) -> tuple[str, list[str]]:
    secrets = draw(st.lists(SECRET, min_size=1, max_size=4))
    parts: list[str] = []
    for secret in secrets:
        parts += [draw(FILLER), secret]
    parts.append(draw(FILLER))
    return "".join(parts), secrets


@given(texts_with_secrets())
def test_a_pattern_redaction_leaves_no_match_of_the_pattern(case: tuple[str, list[str]]) -> None:
    text, _ = case
    [obligation] = read_obligations([{"type": "redact_output", "patterns": [PATTERN]}])
    try:
        out = redact_output(ToolOutput.from_text(text), (obligation,))  # type: ignore[arg-type]
    except OutputWithheldError:
        return  # withheld: nothing leaks either
    assert compiled(PATTERN).search(out.text() or "") is None


JSON_SCALARS = st.none() | st.booleans() | st.integers() | FILLER
ROW = st.fixed_dictionaries({"name": FILLER, "ssn": SECRET}, optional={"x": JSON_SCALARS})


@given(st.lists(ROW, max_size=6), st.booleans())
def test_a_column_redaction_never_returns_a_value_of_the_column(
    rows: list[dict[str, Any]], as_text: bool
) -> None:
    [obligation] = read_obligations([{"type": "redact_output", "pointers": ["/rows/*/ssn"]}])
    document = json.dumps({"rows": rows})
    output = ToolOutput.from_text(document) if as_text else ToolOutput.from_json(document)
    out = redact_output(output, (obligation,))  # type: ignore[arg-type]
    shown = (out.text() or "") + (out.details or b"").decode()
    for row in rows:
        assert row["ssn"] not in shown


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        "name": {"type": "string", "maxLength": 5},
    },
    "required": ["limit"],
    "additionalProperties": False,
}
NUMBER = (
    st.integers(-1000, 1000)
    | st.floats(-1e3, 1e3, allow_nan=False)
    | st.decimals(-1000, 1000, allow_nan=False, places=2)
)
PATHS = st.sampled_from(["/limit", "/name", "/x", "/a/b"])
OPERATION = st.one_of(
    st.fixed_dictionaries(
        {"op": st.just("clamp"), "path": PATHS}, optional={"min": NUMBER, "max": NUMBER}
    ),
    st.fixed_dictionaries({"op": st.just("set"), "path": PATHS, "value": JSON_SCALARS}),
    st.fixed_dictionaries({"op": st.just("remove"), "path": PATHS}),
)


@settings(max_examples=60)
@given(st.lists(OPERATION, min_size=1, max_size=4), st.integers(1, 50))
def test_a_rewrite_either_reaches_the_tool_within_the_schema_or_denies(
    operations: list[dict[str, Any]], limit: int
) -> None:
    try:
        decision = read_decision(
            {
                "allow": True,
                "obligations": [{"type": "rewrite_arguments", "operations": operations}],
            }
        )
    except MalformedDecisionError:
        return
    tool = RecordingTool("t", SCHEMA)
    binding = bind(Guard(tool=tool, authorizer=StaticAuthorizer(decision)))
    invocation = binding.prepare(ToolCall("c", "t", json.dumps({"limit": limit})))
    code = None
    try:
        asyncio.run(binding.call(invocation))
    except AuthorizationError as error:
        code = error.code
    if code is not None:
        assert code == "obligation_unfulfilled"
        assert tool.count == 0
        return
    [seen] = tool.calls
    bind(RecordingTool("t", SCHEMA)).prepare(ToolCall("c", "t", seen))  # admitted again


JSON = st.recursive(
    JSON_SCALARS | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(FILLER, inner, max_size=4),
    max_leaves=20,
)
MEMBERS = [
    "operations",
    "pointers",
    "patterns",
    "replacement",
    "role",
    "message",
    "ttl_s",
    "fields",
]
TYPES = st.sampled_from(["rewrite_arguments", "redact_output", "require_approval", "audit", "x"])


@given(
    st.one_of(
        JSON,
        st.lists(st.dictionaries(FILLER, JSON, max_size=4).map(lambda d: d) | JSON, max_size=4),
        st.lists(
            st.builds(lambda t, rest: {**rest, "type": t}, TYPES, st.dictionaries(
                st.sampled_from(MEMBERS),
                JSON,
                max_size=3,
            )),
            max_size=3,
        ),
    )
)  # fmt: skip
def test_the_obligation_reader_reads_or_refuses_as_malformed_and_nothing_else(value: Any) -> None:
    with contextlib.suppress(MalformedDecisionError):
        read_obligations(value)

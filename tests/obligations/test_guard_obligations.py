"""Obligations through the Guard: rewrite, redaction, must-understand refusal, sealing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gateway import (
    AuthorizationError,
    Decision,
    Failure,
    FailureKind,
    Guard,
    MalformedDecisionError,
    ToolCall,
    ToolOutput,
    bind,
)
from gateway._output import MediaContent, TextContent
from gateway.obligations import OutputWithheldError, read_obligations
from gateway.policy import read_decision
from gateway.testing import RecordingTool, StaticAuthorizer

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
        "note": {"type": "string"},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def decided(obligations: list[Any], *, allow: bool = True) -> Decision:
    return read_decision({"allow": allow, "obligations": obligations})


def run(tool: RecordingTool, decision: Decision, arguments: str) -> ToolOutput:
    guard = Guard(tool=tool, authorizer=StaticAuthorizer(decision))
    binding = bind(guard)
    return asyncio.run(
        binding.call(binding.prepare(ToolCall("c1", tool.definition().name, arguments)))
    )


def refusal_code(tool: RecordingTool, decision: Decision, arguments: str) -> str:
    with pytest.raises(AuthorizationError) as info:
        run(tool, decision, arguments)
    assert info.value.__cause__ is None
    assert info.value.__context__ is None
    return info.value.code


CLAMP = {"type": "rewrite_arguments", "operations": [{"op": "clamp", "path": "/limit", "max": 100}]}


def test_a_clamped_argument_is_what_the_tool_sees_and_nothing_else() -> None:
    tool = RecordingTool("search", SCHEMA)
    run(tool, decided([CLAMP]), '{"query": "x", "limit": 500}')
    assert tool.calls == [b'{"limit":100,"query":"x"}']


def test_a_value_inside_the_bound_is_left_as_it_is() -> None:
    tool = RecordingTool("search", SCHEMA)
    run(tool, decided([CLAMP]), '{"query": "x", "limit": 7}')
    assert json.loads(tool.calls[0]) == {"query": "x", "limit": 7}


def test_set_and_remove_rewrite_the_arguments() -> None:
    tool = RecordingTool("search", SCHEMA)
    ops = [{"op": "set", "path": "/limit", "value": 10}, {"op": "remove", "path": "/note"}]
    run(
        tool,
        decided([{"type": "rewrite_arguments", "operations": ops}]),
        '{"query":"x","note":"n"}',
    )
    assert json.loads(tool.calls[0]) == {"query": "x", "limit": 10}


@pytest.mark.parametrize(
    "operation",
    [
        {"op": "set", "path": "/limit", "value": "lots"},  # schema: not an integer
        {"op": "set", "path": "/limit", "value": 5000},  # schema: above maximum
        {"op": "set", "path": "/unknown", "value": 1},  # schema: additionalProperties
        {"op": "remove", "path": "/query"},  # schema: required
        {"op": "clamp", "path": "/limit", "max": 0.5},  # schema: not an integer
    ],
)
def test_a_rewrite_the_schema_refuses_denies_and_the_tool_never_runs(operation: Any) -> None:
    tool = RecordingTool("search", SCHEMA)
    decision = decided([{"type": "rewrite_arguments", "operations": [operation]}])
    assert refusal_code(tool, decision, '{"query": "x", "limit": 500}') == "obligation_unfulfilled"
    assert tool.count == 0


@pytest.mark.parametrize(
    ("operation", "arguments"),
    [
        ({"op": "clamp", "path": "/limit", "max": 100}, '{"query": "x"}'),  # missing
        ({"op": "clamp", "path": "/query", "max": 100}, '{"query": "x"}'),  # not a number
        ({"op": "set", "path": "/a/b", "value": 1}, '{"query": "x"}'),  # no parent
    ],
)
def test_a_rewrite_that_cannot_be_carried_out_denies(operation: Any, arguments: str) -> None:
    tool = RecordingTool("search", SCHEMA)
    decision = decided([{"type": "rewrite_arguments", "operations": [operation]}])
    assert refusal_code(tool, decision, arguments) == "obligation_unfulfilled"
    assert tool.count == 0


@pytest.mark.parametrize(
    "obligation",
    [
        {"type": "notify_security_team"},
        {"type": "require_approval", "role": "treasurer"},
        {"type": "audit", "fields": {"ticket": "T-1"}},
    ],
    ids=["unknown-type", "approval-without-approvals", "audit-without-trail"],
)
def test_an_obligation_the_guard_cannot_fulfil_denies(obligation: Any) -> None:
    tool = RecordingTool("search", SCHEMA)
    assert refusal_code(tool, decided([obligation]), '{"query": "x"}') == "obligation_unfulfilled"
    assert tool.count == 0


def test_an_unknown_obligation_beside_known_ones_still_denies() -> None:
    tool = RecordingTool("search", SCHEMA)
    decision = decided([CLAMP, {"type": "x-future"}])
    assert refusal_code(tool, decision, '{"query": "x", "limit": 5}') == "obligation_unfulfilled"
    assert tool.count == 0


def test_obligations_of_a_denial_change_nothing_the_call_is_refused() -> None:
    tool = RecordingTool("search", SCHEMA)
    with pytest.raises(Failure) as info:
        run(tool, decided([{"type": "x-future"}], allow=False), '{"query": "x"}')
    assert info.value.kind is FailureKind.REJECTED
    assert tool.count == 0


ROWS = {
    "database": "acme",
    "rows": [{"name": "a", "ssn": "123-45-6789"}, {"name": "b", "ssn": "987-65-4321"}],
}
REDACT_SSN = {"type": "redact_output", "pointers": ["/rows/*/ssn"]}


def test_a_pointer_redacts_a_column_of_structured_output() -> None:
    tool = RecordingTool("search", SCHEMA, output=ToolOutput.from_json(json.dumps(ROWS)))
    out = run(tool, decided([REDACT_SSN]), '{"query": "x"}')
    assert out.json()["rows"] == [
        {"name": "a", "ssn": "[redacted]"},
        {"name": "b", "ssn": "[redacted]"},
    ]
    assert b"123-45" not in (out.details or b"")


def test_structured_output_repeated_as_text_is_redacted_in_the_text_too() -> None:
    raw = json.dumps(ROWS)
    tool = RecordingTool("search", SCHEMA, output=ToolOutput((TextContent(raw),), raw.encode()))
    out = run(tool, decided([REDACT_SSN]), '{"query": "x"}')
    assert "123-45" not in (out.text() or "")
    assert b"123-45" not in (out.details or b"")


def test_text_that_a_pointer_cannot_address_is_withheld() -> None:
    tool = RecordingTool("search", SCHEMA, output=ToolOutput.from_text("ssn 123-45-6789"))
    with pytest.raises(OutputWithheldError):
        run(tool, decided([REDACT_SSN]), '{"query": "x"}')
    assert tool.count == 1


def test_a_pattern_redacts_text_and_every_string_of_structured_output() -> None:
    pattern = {
        "type": "redact_output",
        "patterns": ["\\b\\d{4}(?: ?\\d{4}){3}\\b"],
        "replacement": "[card]",
    }
    tool = RecordingTool(
        "search", SCHEMA, output=ToolOutput.from_text("card 4111 1111 1111 1111 ok")
    )
    assert run(tool, decided([pattern]), '{"query": "x"}').text() == "card [card] ok"
    tool = RecordingTool(
        "search", SCHEMA, output=ToolOutput.from_json('{"a": ["x 4111111111111111"], "b": 4}')
    )
    assert run(tool, decided([pattern]), '{"query": "x"}').json() == {"a": ["x [card]"], "b": 4}


def test_patterns_use_ecma_semantics_on_non_ascii_text() -> None:
    pattern = {"type": "redact_output", "patterns": ["\\p{Lu}+"], "replacement": "_"}
    tool = RecordingTool("search", SCHEMA, output=ToolOutput.from_text("é😀ÀÉ x"))
    assert run(tool, decided([pattern]), '{"query": "x"}').text() == "é😀_ x"


def test_media_output_cannot_be_redacted_and_is_withheld() -> None:
    output = ToolOutput((MediaContent("image/png", data=b"png"),))
    tool = RecordingTool("search", SCHEMA, output=output)
    with pytest.raises(OutputWithheldError):
        run(tool, decided([{"type": "redact_output", "patterns": ["x"]}]), '{"query": "x"}')


def test_a_member_name_matching_a_pattern_withholds_the_output() -> None:
    tool = RecordingTool("search", SCHEMA, output=ToolOutput.from_json('{"secret-1": 1}'))
    with pytest.raises(OutputWithheldError) as info:
        run(tool, decided([{"type": "redact_output", "patterns": ["secret"]}]), '{"query": "x"}')
    assert "secret" not in str(info.value)


class FailingTool(RecordingTool):
    async def call(self, invocation: Any) -> ToolOutput:
        raise Failure(FailureKind.REJECTED, "no such account 4111111111111111")


def test_a_failures_public_output_is_redacted_as_well() -> None:
    tool = FailingTool("search", SCHEMA)
    pattern = {"type": "redact_output", "patterns": ["\\d{16}"]}
    with pytest.raises(Failure) as info:
        run(tool, decided([pattern]), '{"query": "x"}')
    assert info.value.output.text() == "no such account [redacted]"


@pytest.mark.parametrize(
    "obligations",
    [
        "nope",
        [1],
        [{"type": ""}],
        [{"type": "rewrite_arguments", "operations": []}],
        [{"type": "rewrite_arguments", "operations": [{"op": "set", "path": "/a"}]}],
        [{"type": "rewrite_arguments", "operations": [{"op": "clamp", "path": "/a"}]}],
        [
            {
                "type": "rewrite_arguments",
                "operations": [{"op": "clamp", "path": "/a", "min": 2, "max": 1}],
            }
        ],
        [{"type": "rewrite_arguments", "operations": [{"op": "move", "path": "/a"}]}],
        [{"type": "rewrite_arguments", "operations": [{"op": "remove", "path": ""}]}],
        [{"type": "rewrite_arguments", "operations": [{"op": "remove", "path": "/a~2"}]}],
        [{"type": "rewrite_arguments", "operations": [{"op": "clamp", "path": "/a", "max": True}]}],
        [{"type": "redact_output"}],
        [{"type": "redact_output", "patterns": ["("]}],
        [{"type": "redact_output", "patterns": ["a*"]}],
        [{"type": "redact_output", "patterns": ["x"], "replacement": "xx"}],
        [{"type": "redact_output", "pointers": ["rows"]}],
        [{"type": "redact_output", "patterns": ["x"], "extra": 1}],
        [{"type": "require_approval"}],
        [{"type": "require_approval", "role": "t", "ttl_s": 0}],
        [{"type": "require_approval", "role": "t"}, {"type": "require_approval", "role": "u"}],
        [{"type": "audit", "fields": {}}],
        [{"type": "audit", "fields": "x"}],
        [{"type": "x"}] * 33,
    ],
)
def test_a_malformed_obligation_is_a_malformed_decision(obligations: Any) -> None:
    with pytest.raises(MalformedDecisionError):
        read_decision({"allow": True, "obligations": obligations})


def test_a_malformed_obligation_message_quotes_no_value() -> None:
    with pytest.raises(MalformedDecisionError) as info:
        read_obligations(
            [
                {
                    "type": "rewrite_arguments",
                    "operations": [{"op": "clamp", "path": "/a", "max": "s3cr3t"}],
                }
            ]
        )
    assert "s3cr3t" not in str(info.value)


def test_a_decision_keeps_its_obligations_in_order() -> None:
    decision = decided([CLAMP, REDACT_SSN, {"type": "x-later", "anything": [1]}])
    assert [o.type for o in decision.obligations] == [
        "rewrite_arguments",
        "redact_output",
        "x-later",
    ]
    assert decision.well_formed()


def test_a_pattern_that_backtracks_badly_still_redacts_a_large_output() -> None:
    # (a+)+$ takes exponential time in a backtracking engine on "aaa...b"; RE2 is linear.
    text = "a" * (1 << 20) + "b"
    tool = RecordingTool("search", SCHEMA, output=ToolOutput.from_text(text))
    pattern = {"type": "redact_output", "patterns": ["(a+)+b"], "replacement": "-"}
    assert run(tool, decided([pattern]), '{"query": "x"}').text() == "-"


@pytest.mark.parametrize("pattern", ["(?=a)a", "(a)\\1", "(?<=a)b"])
def test_a_pattern_re2_cannot_match_in_linear_time_is_malformed(pattern: str) -> None:
    with pytest.raises(MalformedDecisionError):
        read_obligations([{"type": "redact_output", "patterns": [pattern]}])

"""No argument or output value appears in what an obligation failure says or logs."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from gateway import Decision, ToolCall, ToolOutput
from gateway.audit import AuditTrail, MemorySink
from gateway.policy import read_decision
from gateway.service import Gateway
from gateway.testing import RecordingTool, StaticAuthorizer

CANARY = "canary-7f3a9c"
LONG = "x" * 30
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"note": {"type": "string", "maxLength": 20}, "n": {"type": "string"}},
    "additionalProperties": False,
}
OBLIGATIONS = [
    [{"type": "rewrite_arguments", "operations": [{"op": "clamp", "path": "/note", "max": 1}]}],
    [{"type": "rewrite_arguments", "operations": [{"op": "set", "path": "/note", "value": LONG}]}],
    [{"type": "rewrite_arguments", "operations": [{"op": "set", "path": "/note/a", "value": 1}]}],
    [{"type": "redact_output", "patterns": [CANARY[:6]]}],
    [{"type": "redact_output", "pointers": ["/rows"]}],
]  # fmt: skip


@pytest.mark.parametrize("obligations", OBLIGATIONS)
async def test_an_obligation_failure_quotes_no_value(
    obligations: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    decision: Decision = read_decision({"allow": True, "obligations": obligations})
    sink = MemorySink()
    output = ToolOutput.from_json(json.dumps({CANARY: CANARY}))
    if obligations[0].get("pointers"):
        output = ToolOutput.from_text(f"plain {CANARY}")
    tool = RecordingTool("t", SCHEMA, output=output)
    gateway = Gateway([tool], authorizer=StaticAuthorizer(decision), audit=AuditTrail(sink))
    with caplog.at_level(logging.DEBUG):
        result = await gateway.call(ToolCall("c", "t", json.dumps({"note": CANARY, "n": CANARY})))
    assert result.code in ("obligation_unfulfilled", "output_withheld")
    assert result.output is None
    assert CANARY not in (result.message or "")
    assert CANARY not in caplog.text
    outcome = sink.records[-1]
    assert outcome["type"] == "outcome"
    assert CANARY not in json.dumps(outcome)

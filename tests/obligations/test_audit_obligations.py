"""The audit trail records a decision's obligations, its audit fields and both digests."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

from gateway import Decision, ToolCall, ToolOutput, bind
from gateway.audit import AuditTrail, MemorySink
from gateway.policy import read_decision
from gateway.testing import RecordingTool, StaticAuthorizer

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "q": {"type": "string"},
        "limit": {"type": "integer"},
        "password": {"type": "string"},
    },
}


def run_audited(decision: Decision, arguments: str) -> tuple[RecordingTool, list[dict[str, Any]]]:
    sink = MemorySink()
    trail = AuditTrail(sink)
    tool = RecordingTool("search", SCHEMA, output=ToolOutput.from_text("ok"))
    binding = bind(trail.guard(tool, StaticAuthorizer(decision)))
    asyncio.run(binding.call(binding.prepare(ToolCall("c1", "search", arguments))))
    return tool, sink.records


def test_a_rewrite_records_the_digest_of_the_arguments_and_of_what_the_tool_saw() -> None:
    decision = read_decision(
        {
            "allow": True,
            "obligations": [
                {
                    "type": "rewrite_arguments",
                    "operations": [{"op": "clamp", "path": "/limit", "max": 10}],
                }
            ],
        }
    )
    tool, records = run_audited(decision, '{"q": "x", "limit": 99}')
    record = records[0]
    assert record["arguments_digest"] == hashlib.sha256(b'{"limit":99,"q":"x"}').hexdigest()
    assert record["rewritten_arguments_digest"] == hashlib.sha256(tool.calls[0]).hexdigest()
    assert record["obligations"] == [
        {
            "type": "rewrite_arguments",
            "operations": [{"op": "clamp", "path": "/limit", "max": 10.0}],
        }
    ]


def test_audit_fields_are_recorded_masked_and_count_as_fulfilled() -> None:
    decision = read_decision(
        {
            "allow": True,
            "obligations": [{"type": "audit", "fields": {"ticket": "T-9", "password": "pw"}}],
        }
    )
    tool, records = run_audited(decision, '{"q": "x"}')
    assert tool.count == 1
    assert records[0]["fields"]["ticket"] == "T-9"
    assert "pw" not in json.dumps(records[0])
    assert records[1]["outcome"] == "executed"


def test_a_record_without_obligations_has_no_obligation_members() -> None:
    _, records = run_audited(Decision(allowed=True), '{"q": "x"}')
    assert "obligations" not in records[0]
    assert "rewritten_arguments_digest" not in records[0]

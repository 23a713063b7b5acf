"""Approvals and redaction as an MCP client sees them (in-memory MCP session)."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from gateway import Authorization, Decision, ToolOutput
from gateway.approvals import ApprovalDesk, ApprovalGate, MemoryApprovalStore
from gateway.audit import AuditTrail, MemorySink
from gateway.mcp import McpFront, to_call_result
from gateway.mcp._content import UpstreamOutput, from_result
from gateway.obligations import OutputWithheldError, read_obligations, redact_output
from gateway.policy import CallerContext, current_caller
from gateway.service import CallResult, Gateway, ResultCode
from gateway.testing import FakeClock, RecordingAuthorizer, RecordingTool

CLERK = CallerContext(subject="carl", roles=["clerk"])
TREASURER = CallerContext(subject="tina", roles=["treasurer"])
ROWS = {"rows": [{"name": "ann", "ssn": "123-45-6789"}]}


def policy(authorization: Authorization) -> Decision:
    arguments = json.loads(authorization.arguments)
    if arguments.get("mode") == "redact":
        return Decision(
            allowed=True,
            obligations=read_obligations([{"type": "redact_output", "pointers": ["/rows/*/ssn"]}]),
        )
    if current_caller().get("approval") is None:
        return Decision(
            allowed=True,
            obligations=read_obligations([{"type": "require_approval", "role": "treasurer"}]),
        )
    return Decision(allowed=True)


def front() -> tuple[McpFront, ApprovalDesk, RecordingTool]:
    clock = FakeClock(1_700_000_000.0)
    store = MemoryApprovalStore()
    tool = RecordingTool(
        "ledger",
        {"type": "object", "properties": {"mode": {"type": "string"}}},
        output=ToolOutput.from_json(json.dumps(ROWS)),
    )
    gateway = Gateway(
        [tool],
        authorizer=RecordingAuthorizer(policy),
        audit=AuditTrail(MemorySink()),
        approvals=ApprovalGate(store, clock=clock),
    )
    return McpFront(gateway, stdio_context=CLERK), ApprovalDesk(store, clock=clock), tool


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content)


async def test_an_mcp_call_awaiting_approval_tells_the_model_and_runs_once_approved() -> None:
    mcp_front, desk, tool = front()
    async with Client(mcp_front.server, cache=None) as client:
        pending = await client.call_tool("ledger", {"mode": "pay"})
        assert pending.is_error is True
        assert pending.meta is not None
        approval_id = pending.meta["gateway/approval_id"]
        assert pending.meta["gateway/code"] == "approval_pending"
        assert approval_id in _text(pending)
        assert "call the tool again with exactly the same arguments" in _text(pending)
        assert tool.count == 0
        await desk.decide(approval_id, TREASURER, approve=True)
        ran = await client.call_tool("ledger", {"mode": "pay"})
        assert ran.is_error is False
        assert tool.count == 1


async def test_an_mcp_result_has_its_structured_content_and_text_redacted() -> None:
    mcp_front, _, _ = front()
    async with Client(mcp_front.server, cache=None) as client:
        result = await client.call_tool("ledger", {"mode": "redact"})
    assert result.is_error is False
    assert result.structured_content == {"rows": [{"name": "ann", "ssn": "[redacted]"}]}
    assert "123-45" not in _text(result)


def _upstream(*extra: types.ContentBlock) -> UpstreamOutput:
    blocks: list[types.ContentBlock] = [types.TextContent(text=json.dumps(ROWS)), *extra]
    return from_result(types.CallToolResult(content=blocks, structured_content=ROWS))


def test_an_upstream_result_is_answered_redacted_never_as_the_upstream_sent_it() -> None:
    [obligation] = read_obligations([{"type": "redact_output", "pointers": ["/rows/*/ssn"]}])
    redacted = redact_output(_upstream(), (obligation,))  # type: ignore[arg-type]
    assert not isinstance(redacted, UpstreamOutput)
    answered = to_call_result(CallResult.of(ResultCode.OK, None, redacted))
    assert answered.structured_content == {"rows": [{"name": "ann", "ssn": "[redacted]"}]}
    assert "123-45" not in answered.model_dump_json()


def test_an_upstream_result_with_a_block_redaction_cannot_read_is_withheld() -> None:
    [obligation] = read_obligations([{"type": "redact_output", "pointers": ["/rows/*/ssn"]}])
    link = types.ResourceLink(name="r", uri="file:///x/123-45-6789")
    with pytest.raises(OutputWithheldError):
        redact_output(_upstream(link), (obligation,))  # type: ignore[arg-type]

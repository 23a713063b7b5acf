"""One table of result codes: the pipeline, MCP, audit, CLI, OpenAPI and README read it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from gateway import Decision, Failure, FailureKind, Invocation, ToolCall, ToolDefinition, ToolOutput
from gateway.audit import AuditTrail, MemorySink
from gateway.mcp import to_call_result
from gateway.policy import (
    EngineError,
    EngineTimeoutError,
    EngineUnavailableError,
    MalformedDecisionError,
    UndefinedDecisionError,
)
from gateway.server._openapi import openapi_document
from gateway.service import CallResult, Gateway, ResultCode, result_code
from gateway.testing import StaticAuthorizer

README = Path(__file__).resolve().parents[2] / "README.md"
SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": True}


class _Tool:
    def __init__(self, answer: BaseException | None = None) -> None:
        self._answer = answer

    def definition(self) -> ToolDefinition:
        return ToolDefinition("tool", SCHEMA)

    async def call(self, invocation: Invocation) -> ToolOutput:
        if self._answer is not None:
            raise self._answer
        return ToolOutput.from_text("done")


class _FailingSink(MemorySink):
    def submit(self, record: Mapping[str, Any]) -> Future[dict[str, Any]]:
        if record["type"] == "decision":
            raise OSError("disk full")
        return super().submit(record)


def _failure(kind: FailureKind) -> Failure:
    if kind is FailureKind.FAILED:
        return Failure(kind, ToolOutput.from_text("broke"), RuntimeError("x"))
    return Failure(kind, ToolOutput.from_text("no"))


CASES = [
    pytest.param(_Tool(), True, "tool", "{}", "ok", id="ok"),
    pytest.param(
        _Tool(_failure(FailureKind.FAILED)), True, "tool", "{}", "tool_failed", id="failed"
    ),
    pytest.param(
        _Tool(_failure(FailureKind.REJECTED)), True, "tool", "{}", "tool_rejected", id="rejected"
    ),
    pytest.param(_Tool(RuntimeError("x")), True, "tool", "{}", "tool_error", id="error"),
    pytest.param(_Tool(), Decision(allowed=False), "tool", "{}", "denied", id="denied"),
    pytest.param(_Tool(), True, "nope", "{}", "unknown_tool", id="unknown"),
    pytest.param(_Tool(), True, "tool", "[]", "invalid_arguments", id="invalid"),
    pytest.param(
        _Tool(), EngineUnavailableError("x"), "tool", "{}", "engine_unavailable", id="down"
    ),
    pytest.param(_Tool(), EngineTimeoutError("x"), "tool", "{}", "engine_timeout", id="timeout"),
    pytest.param(
        _Tool(), UndefinedDecisionError("x"), "tool", "{}", "undefined_decision", id="undef"
    ),
    pytest.param(
        _Tool(), MalformedDecisionError("x"), "tool", "{}", "malformed_decision", id="bad"
    ),
    pytest.param(_Tool(), EngineError("x"), "tool", "{}", "engine_error", id="engine"),
    pytest.param(_Tool(), RuntimeError("x"), "tool", "{}", "no_decision", id="none"),
]


async def _result(
    tool: _Tool, answer: Any, name: str, arguments: str
) -> tuple[CallResult, list[Any]]:
    sink = MemorySink()
    authorizer = (
        StaticAuthorizer(error=answer)
        if isinstance(answer, Exception)
        else StaticAuthorizer(answer)
    )
    gateway = Gateway([tool], authorizer=authorizer, audit=AuditTrail(sink))
    return await gateway.call(ToolCall("c-1", name, arguments)), sink.records


@pytest.mark.parametrize(("tool", "answer", "name", "arguments", "code"), CASES)
async def test_every_pipeline_result_has_the_tables_status_and_audit_outcome(
    tool: _Tool, answer: Any, name: str, arguments: str, code: str
) -> None:
    result, records = await _result(tool, answer, name, arguments)

    entry = result_code(code)
    assert (result.code, result.status) == (entry.value, entry.status)
    outcome = records[-1]
    assert (outcome["type"], outcome["outcome"]) == ("outcome", entry.outcome)
    assert outcome["code"] == (None if entry is ResultCode.OK else entry.value)


async def test_an_audit_failure_has_the_tables_status() -> None:
    gateway = Gateway(
        [_Tool()], authorizer=StaticAuthorizer(True), audit=AuditTrail(_FailingSink())
    )

    result = await gateway.call(ToolCall("c-1", "tool", "{}"))

    assert (result.code, result.status) == ("audit_failed", ResultCode.AUDIT_FAILED.status)


@pytest.mark.parametrize(("tool", "answer", "name", "arguments", "code"), CASES)
async def test_every_mcp_result_carries_the_tables_code_and_is_an_error_unless_ok(
    tool: _Tool, answer: Any, name: str, arguments: str, code: str
) -> None:
    result, _ = await _result(tool, answer, name, arguments)

    mcp = to_call_result(result)

    assert mcp.meta is not None
    assert result_code(mcp.meta["gateway/code"]) is result_code(code)
    assert mcp.is_error is (code != "ok")


def test_the_openapi_document_lists_exactly_the_tables_codes_and_statuses() -> None:
    document = openapi_document()
    schemas = document["components"]["schemas"]
    responses = document["paths"]["/v1/calls"]["post"]["responses"]

    errors = set(schemas["Error"]["properties"]["code"]["enum"])
    results = set(schemas["Result"]["properties"]["status"]["enum"])

    assert errors | results == {code.value for code in ResultCode}
    assert results == {code.value for code in ResultCode if code.status == 200}
    assert set(responses) == {str(code.status) for code in ResultCode}


def test_the_readme_code_table_is_the_table() -> None:
    text = README.read_text(encoding="utf-8")
    start = text.index("| status | `code` | when |")
    rows = text[start:].split("\n\n", 1)[0].splitlines()[2:]
    documented: set[tuple[int, str]] = set()
    for row in rows:
        status, codes, _when = (cell.strip() for cell in row.strip("|").split("|"))
        documented.update((int(status), code) for code in re.findall(r"`([a-z_]+)`", codes))

    assert documented == {(code.status, code.value) for code in ResultCode}


def test_check_exits_0_on_allow_1_on_deny_and_2_on_anything_else() -> None:
    exits = {code.value: code.exit_status for code in ResultCode if not code.ran}

    assert exits.pop("denied") == 1
    assert set(exits.values()) == {2}
    assert ResultCode.OK.exit_status == 0


def test_an_unknown_code_reads_as_no_decision() -> None:
    assert result_code("something_new") is ResultCode.NO_DECISION
    assert result_code("denied") is ResultCode.DENIED

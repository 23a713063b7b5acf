"""The call pipeline (``Gateway.call``) with the fakes from gateway.testing: one code each."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway import (
    Authorization,
    Decision,
    Failure,
    FailureKind,
    Invocation,
    Registry,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    function_tool,
)
from gateway.audit import AuditTrail, MemorySink
from gateway.policy import (
    DEFAULT_DECISION_PATH,
    CallerContext,
    DecisionCache,
    EngineTimeoutError,
    EngineUnavailableError,
    MalformedDecisionError,
    PolicyAuthorizer,
    UndefinedDecisionError,
    caller_context,
)
from gateway.server import BoundTool, CallResult, Gateway, GatewayMetrics, expand, output_json
from gateway.service import CallScope, _pipeline
from gateway.testing import RecordingAuthorizer, RecordingTool, StaticAuthorizer, StaticEngine

NO_DECISION = "no policy decision could be made; the call was not run"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}


class FailingTool:
    """Raises the given Failure (or exception) from call()."""

    def __init__(self, error: BaseException, name: str = "tool") -> None:
        self._error = error
        self._definition = ToolDefinition(name, {"type": "object"})
        self.calls = 0

    def definition(self) -> ToolDefinition:
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        self.calls += 1
        raise self._error


def call(arguments: str = '{"n": 1}', name: str = "tool", call_id: str = "c-1") -> ToolCall:
    return ToolCall(call_id, name, arguments)


def tool(**options: Any) -> RecordingTool:
    return RecordingTool("tool", SCHEMA, **options)


async def test_an_allowed_call_runs_and_returns_its_output() -> None:
    recording = tool()
    gateway = Gateway([recording], authorizer=StaticAuthorizer(True))
    result = await gateway.call(call('{"n": 7}'))
    assert result == CallResult(200, "ok", None, ToolOutput.from_text('{"n": 7}'), None)
    assert result.ok
    assert not result.is_tool_failure
    assert recording.calls == [b'{"n": 7}']


async def test_the_decision_id_is_reported() -> None:
    decision = Decision(allowed=True, decision_id="d-42")
    result = await Gateway([tool()], authorizer=StaticAuthorizer(decision)).call(call())
    assert (result.code, result.decision_id) == ("ok", "d-42")


async def test_a_denial_is_403_with_the_public_message_only() -> None:
    recording = tool()
    decision = Decision(
        allowed=False,
        message="not for you",
        reasons=("rbac: role clerk lacks tool", "secret detail"),
        decision_id="d-1",
    )
    result = await Gateway([recording], authorizer=StaticAuthorizer(decision)).call(call())
    assert result == CallResult(403, "denied", "not for you", None, "d-1")
    assert recording.count == 0


async def test_a_plain_false_is_a_denial_with_a_generic_message() -> None:
    result = await Gateway([tool()], authorizer=StaticAuthorizer(False)).call(call())
    assert (result.status, result.code) == (403, "denied")
    assert result.message
    assert "tool" in result.message


async def test_unknown_tools_are_404_without_asking_the_policy() -> None:
    authorizer = RecordingAuthorizer(True)
    gateway = Gateway([tool()], authorizer=authorizer)
    for name in ("nope", "", "TOOL"):
        result = await gateway.call(call(name=name))
        assert (result.status, result.code) == (404, "unknown_tool")
        assert result.message == "no tool of that name is served"  # the name is not quoted
    assert authorizer.count == 0


async def test_invalid_arguments_are_400_without_asking_the_policy() -> None:
    authorizer = RecordingAuthorizer(True)
    recording = tool()
    gateway = Gateway([recording], authorizer=authorizer)
    for arguments in ('{"n": "1"}', '{"n": 1, "m": 2}', "{}", "not json", "[1]", ""):
        result = await gateway.call(call(arguments))
        assert (result.status, result.code) == (400, "invalid_arguments"), arguments
        assert result.message
    assert authorizer.count == 0
    assert recording.count == 0


async def test_a_tool_failure_is_200_with_its_public_output() -> None:
    failure = Failure(FailureKind.FAILED, "public text", cause=ValueError("private"))
    result = await Gateway([FailingTool(failure)], authorizer=StaticAuthorizer(True)).call(
        call("{}")
    )
    assert (result.status, result.code, result.message) == (200, "tool_failed", "public text")
    assert result.output == ToolOutput.from_text("public text")
    assert result.is_tool_failure
    assert not result.ok
    assert "private" not in repr(result)


async def test_a_tool_rejecting_itself_is_tool_rejected_not_denied() -> None:
    failure = Failure(FailureKind.REJECTED, "I will not")
    decision = Decision(allowed=True, decision_id="d-7")
    result = await Gateway([FailingTool(failure)], authorizer=StaticAuthorizer(decision)).call(
        call("{}")
    )
    assert (result.status, result.code, result.message) == (200, "tool_rejected", "I will not")
    assert result.decision_id == "d-7"
    assert result.is_tool_failure


async def test_a_tool_crash_is_500_without_its_text() -> None:
    broken = FailingTool(RuntimeError("secret internals"))
    result = await Gateway([broken], authorizer=StaticAuthorizer(True)).call(call("{}"))
    assert result == CallResult(500, "tool_error", "the tool failed", None, None)
    assert broken.calls == 1


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (UndefinedDecisionError("undefined", detail="engine internals"), "undefined_decision"),
        (EngineUnavailableError("down", detail="connection refused"), "engine_unavailable"),
        (EngineTimeoutError("slow"), "engine_timeout"),
        (MalformedDecisionError("bad"), "malformed_decision"),
        (RuntimeError("an authorizer bug"), "no_decision"),
    ],
)
async def test_no_decision_is_503_and_nothing_runs(error: Exception, code: str) -> None:
    recording = tool()
    result = await Gateway([recording], authorizer=StaticAuthorizer(error=error)).call(call())
    assert result == CallResult(503, code, NO_DECISION, None, None)
    assert recording.count == 0


async def test_a_malformed_answer_is_503() -> None:
    class Answers:
        async def authorize(self, authorization: Authorization) -> Any:
            return "yes"

    recording = tool()
    result = await Gateway([recording], authorizer=Answers()).call(call())
    assert (result.status, result.code) == (503, "malformed_decision")
    assert recording.count == 0


async def test_an_audit_failure_is_503_audit_failed_and_nothing_runs() -> None:
    sink = MemorySink()
    recording = tool()
    gateway = Gateway([recording], authorizer=StaticAuthorizer(True), audit=AuditTrail(sink))
    assert (await gateway.call(call())).code == "ok"
    sink.failing = True
    for authorizer_answer in (True, False):
        gateway = Gateway(
            [recording], authorizer=StaticAuthorizer(authorizer_answer), audit=AuditTrail(sink)
        )
        result = await gateway.call(call())
        assert result == CallResult(
            503, "audit_failed", "the call could not be audited; it was not run"
        )
    assert recording.count == 1


async def test_the_audit_trail_records_decisions_outcomes_and_refusals() -> None:
    sink = MemorySink()
    gateway = Gateway(
        [tool(), FailingTool(RuntimeError("x"), "broken")],
        authorizer=StaticAuthorizer(Decision(allowed=True, decision_id="d-1")),
        audit=AuditTrail(sink),
    )
    with caller_context(subject="alice"):
        assert (await gateway.call(call(call_id="ok"), request_id="r-1")).code == "ok"
        assert (
            await gateway.call(call("{}", name="broken", call_id="crash"), request_id="r-1")
        ).code == "tool_error"
        assert (
            await gateway.call(call("[]", call_id="bad"), request_id="r-1")
        ).code == "invalid_arguments"
        assert (
            await gateway.call(call(name="nope", call_id="unknown"), request_id="r-1")
        ).code == "unknown_tool"
    shape = [(r["call_id"], r["type"], r.get("result") or r.get("outcome")) for r in sink.records]
    assert shape == [
        ("ok", "decision", "allow"),
        ("ok", "outcome", "executed"),
        ("crash", "decision", "allow"),
        ("crash", "outcome", "failed"),
        ("bad", "outcome", "invalid"),
        ("unknown", "outcome", "invalid"),
    ]
    assert sink.records[0]["context"] == {"subject": "alice", "request_id": "r-1"}
    assert sink.records[4]["context"] == {"subject": "alice", "request_id": "r-1"}
    assert sink.records[4]["code"] == "invalid_arguments"
    assert sink.records[5]["code"] == "unknown_tool"


async def test_a_failing_refusal_record_does_not_change_the_answer() -> None:
    sink = MemorySink()
    sink.failing = True
    gateway = Gateway([tool()], authorizer=StaticAuthorizer(True), audit=AuditTrail(sink))
    assert (await gateway.call(call(name="nope"))).code == "unknown_tool"
    assert (await gateway.call(call("[]"))).code == "invalid_arguments"


async def test_the_policy_sees_the_caller_context_without_the_request_id() -> None:
    authorizer = RecordingAuthorizer(True)
    sink = MemorySink()
    gateway = Gateway([tool()], authorizer=authorizer, audit=AuditTrail(sink))
    alice = CallerContext(subject="alice", roles=["reader"])
    assert (await gateway.call(call(), caller=alice, request_id="r-1")).code == "ok"
    with caller_context(subject="bob"):
        assert (await gateway.call(call(), request_id="r-2")).code == "ok"
    contexts = [context for _, context in authorizer.calls]
    assert contexts == [alice, CallerContext(subject="bob")]
    # The very context the caller gave: nothing was added to it and nothing re-encoded.
    assert contexts[0] is alice
    decisions = [r for r in sink.records if r["type"] == "decision"]
    assert [d["context"]["request_id"] for d in decisions] == ["r-1", "r-2"]


async def test_the_request_id_is_not_part_of_the_decision_cache_key() -> None:
    engine = StaticEngine({DEFAULT_DECISION_PATH: {"allow": True, "cache": {"ttl_s": 30}}})
    authorizer = PolicyAuthorizer(engine, cache=DecisionCache())
    gateway = Gateway([tool()], authorizer=authorizer, audit=AuditTrail(MemorySink()))
    alice = CallerContext(subject="alice")
    for request_id in ("r-1", "r-2", "r-3"):
        assert (await gateway.call(call(), caller=alice, request_id=request_id)).code == "ok"
    assert [document["context"] for _, document in engine.calls] == [{"subject": "alice"}]


async def test_the_call_scope_is_the_pipelines_own_and_gone_after_the_call() -> None:
    seen: list[object] = []

    class Probe:
        async def authorize(self, authorization: Authorization) -> Decision:
            seen.append(_pipeline._SCOPE.get())
            return Decision(allowed=True, decision_id="d-9")

    gateway = Gateway([tool()], authorizer=Probe())
    result = await gateway.call(call(call_id="c-1"), request_id="r-1")
    scope = seen[0]
    assert isinstance(scope, CallScope)
    assert (scope.call_id, scope.request_id, scope.decision_id) == ("c-1", "r-1", "d-9")
    assert result.decision_id == "d-9"
    assert _pipeline._SCOPE.get() is None


async def test_registries_are_served_through_their_own_admission() -> None:
    @function_tool
    def double(n: int) -> str:
        """Double a number."""
        return str(2 * n)

    authorizer = RecordingAuthorizer(True)
    registry = Registry(double)
    flat = expand([registry, tool()])
    assert [type(t) for t in flat] == [BoundTool, RecordingTool]
    gateway = Gateway([registry], authorizer=authorizer)
    assert [d.name for d in gateway.definitions()] == ["double"]
    result = await gateway.call(call('{"n": 21}', name="double"))
    assert result.code == "ok"
    assert result.output is not None
    assert result.output.text() == "42"
    # The inner contract refuses before the policy is asked.
    for arguments in ('{"n": 1.5}', '{"n": "1"}', '{"m": 1}'):
        assert (await gateway.call(call(arguments, name="double"))).code == "invalid_arguments"
    assert authorizer.count == 1


async def test_metrics_count_every_outcome() -> None:
    metrics = GatewayMetrics()
    gateway = Gateway([tool()], authorizer=StaticAuthorizer(True), metrics=metrics)
    await gateway.call(call())
    await gateway.call(call())
    await gateway.call(call(name="nope"))
    text = metrics.render().decode()
    assert 'gateway_calls_total{code="ok"} 2.0' in text
    assert 'gateway_calls_total{code="unknown_tool"} 1.0' in text
    assert 'gateway_call_seconds_count{code="ok"} 2.0' in text
    assert "gateway_decision_cache" not in text


async def test_cancellation_propagates_and_the_call_is_recorded() -> None:
    gate = asyncio.Event()
    recording = tool(gate=gate)
    sink = MemorySink()
    gateway = Gateway([recording], authorizer=StaticAuthorizer(True), audit=AuditTrail(sink))
    task = asyncio.create_task(gateway.call(call()))
    for _ in range(100):
        if recording.count:
            break
        await asyncio.sleep(0.001)
    assert recording.count == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sink.records[-1]["outcome"] == "cancelled"


def test_output_json_is_the_wire_form() -> None:
    assert output_json(ToolOutput.from_text("hi")) == {
        "content": [{"type": "text", "text": "hi"}],
        "details": None,
        "text": "hi",
    }


async def test_a_call_whose_id_is_not_text_is_400_and_its_refusal_is_recorded() -> None:
    authorizer = RecordingAuthorizer(True)
    sink = MemorySink()
    gateway = Gateway([tool()], authorizer=authorizer, audit=AuditTrail(sink))

    result = await gateway.call(call(call_id="c-\ud800"))

    assert (result.status, result.code) == (400, "invalid_arguments")
    assert authorizer.count == 0
    (record,) = sink.records
    assert (record["outcome"], record["call_id"]) == ("invalid", "c-\\ud800")


async def test_a_tool_error_is_logged_without_its_message(caplog: pytest.LogCaptureFixture) -> None:
    failing = FailingTool(ValueError("password=hunter2hunter2 rejected"))
    gateway = Gateway([failing], authorizer=StaticAuthorizer(True))

    with caplog.at_level("ERROR", logger="gateway.server"):
        result = await gateway.call(call())

    assert (result.status, result.code) == (500, "tool_error")
    assert "ValueError" in caplog.text
    assert "hunter2" not in caplog.text

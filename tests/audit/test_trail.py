"""AuditTrail: decision records before the tool runs, outcome records after, audit-or-deny."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import os
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway import (
    Authorization,
    AuthorizationError,
    Authorizer,
    Decision,
    Failure,
    FailureKind,
    InvalidInvocationError,
    Invocation,
    Tool,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    bind,
    function_tool,
)
from gateway.audit import (
    AuditTrail,
    AuditWriteError,
    JsonlFileSink,
    Masker,
    MemorySink,
    head_path,
    trail_files,
    verify,
)
from gateway.audit._trail import _recordable
from gateway.cli import main
from gateway.policy import (
    EngineError,
    EngineTimeoutError,
    UndefinedDecisionError,
    caller_context,
    current_caller,
)
from gateway.testing import FakeClock, RecordingTool, StaticAuthorizer

WALL = 1_700_000_000.0
WALL_TEXT = "2023-11-14T22:13:20.000000+00:00"
MASK_KEY = b"mask key"
CHAIN = ("seq", "prev", "hash")


def new_ids() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"id-{next(counter)}"


def make_trail(sink: MemorySink | JsonlFileSink, masker: Masker | None = None) -> AuditTrail:
    """A trail with fixed clocks and predictable generated ids."""
    return AuditTrail(
        sink,
        masker=masker or Masker(key=MASK_KEY),
        wall_clock=FakeClock(WALL),
        timer=FakeClock(),
        new_id=new_ids(),
    )


def unchained(record: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in record.items() if name not in CHAIN}


def read(path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for file in trail_files(path) for line in file.read_bytes().splitlines()
    ]


def every_byte(directory: Path) -> bytes:
    """Everything written in a directory: trail, rotated segments, head, temporaries."""
    return b"".join(file.read_bytes() for file in sorted(directory.iterdir()))


def fill_disk(sink: JsonlFileSink) -> None:
    """Point the sink's descriptor at /dev/full: every later write fails with ENOSPC."""
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, sink._fd)
    finally:
        os.close(full)


async def call(
    tool: Tool, arguments: str = '{"query":"scope"}', call_id: str = "call-1"
) -> str | None:
    """Admit a call through the tool's own contract and run it, as every caller does."""
    binding = bind(tool)
    output = await binding.call(
        binding.prepare(ToolCall(call_id, binding.definition.name, arguments))
    )
    return output.text()


class GatedTool:
    """Signals when a call has started, then holds it until released."""

    def __init__(self, name: str = "search") -> None:
        self._definition = ToolDefinition(name, {"type": "object"})
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.on_enter: Callable[[], object] = lambda: None
        self.seen: object = None
        self.count = 0

    def definition(self) -> ToolDefinition:
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        self.count += 1
        self.seen = self.on_enter()
        self.entered.set()
        await self.release.wait()
        return ToolOutput.from_text("done")


class RaisingTool:
    """A tool that counts its calls and raises the given exception."""

    def __init__(self, error: BaseException, name: str = "search") -> None:
        self._definition = ToolDefinition(name, {"type": "object"})
        self.error = error
        self.count = 0

    def definition(self) -> ToolDefinition:
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        self.count += 1
        raise self.error


class BlockingAuthorizer:
    """Holds every authorization open until released."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def authorize(self, authorization: Authorization) -> bool | Decision:
        self.entered.set()
        await self.release.wait()
        return True


class AnswerAuthorizer:
    """Answers with any object at all, well-formed or not."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def authorize(self, authorization: Authorization) -> bool | Decision:
        answer: bool | Decision = self.answer
        return answer


# --- decision and outcome records -----------------------------------------------------------


@pytest.mark.parametrize(
    ("cached", "decision_id", "cached_from"),
    [(False, "engine-7", None), (True, "id-1", "engine-7")],
    ids=["evaluated", "reused-from-cache-gets-its-own-id"],
)
async def test_a_decision_record_describes_the_call_the_caller_and_the_decision(
    cached: bool, decision_id: str, cached_from: str | None
) -> None:
    sink = MemorySink()
    decision = Decision(
        True,
        message="ok",
        reasons=("rbac: reader",),
        decision_id="engine-7",
        revision="rev-1",
        engine="test-engine",
        cached=cached,
    )
    tool = make_trail(sink).guard(RecordingTool("search"), StaticAuthorizer(decision))

    with caller_context(subject="alice", roles=["reader"], tenant="acme"):
        await call(tool, '{"query": "scope", "limit": 2.50}')

    assert unchained(sink.records[0]) == {
        "type": "decision",
        "time": WALL_TEXT,
        "decision_id": decision_id,
        "call_id": "call-1",
        "tool": "search",
        "arguments_digest": hashlib.sha256(b'{"limit":2.50,"query":"scope"}').hexdigest(),
        "arguments": {"query": "scope", "limit": 2.5},
        "context": {"subject": "alice", "roles": ["reader"], "tenant": "acme"},
        "result": "allow",
        "code": None,
        "message": "ok",
        "reasons": ["rbac: reader"],
        "detail": None,
        "revision": "rev-1",
        "engine": "test-engine",
        "cached": cached,
        "cached_from": cached_from,
        "latency_us": 0,
    }


async def test_an_outcome_record_follows_and_is_linked_to_its_decision() -> None:
    sink = MemorySink()
    tool = make_trail(sink).guard(RecordingTool("search"), StaticAuthorizer(True))

    await call(tool, call_id="call-42")

    assert [unchained(record) for record in sink.records][1] == {
        "type": "outcome",
        "time": WALL_TEXT,
        "decision_id": "id-1",
        "call_id": "call-42",
        "tool": "search",
        "outcome": "executed",
        "code": None,
        "message": None,
        "latency_us": 0,
    }
    assert sink.records[0]["decision_id"] == "id-1"


async def test_the_arguments_digest_does_not_depend_on_member_order_or_spacing() -> None:
    sink = MemorySink()
    tool = make_trail(sink).guard(RecordingTool("search"), StaticAuthorizer(True))

    await call(tool, '{"query":"scope","n":1}')
    await call(tool, '{ "n" : 1, "query" : "scope" }')

    assert sink.records[0]["arguments_digest"] == sink.records[2]["arguments_digest"]


async def test_latency_is_measured_on_the_trail_timer() -> None:
    timer = FakeClock()

    class SlowAuthorizer:
        async def authorize(self, authorization: Authorization) -> bool | Decision:
            timer.advance(0.0025)
            return True

    sink = MemorySink()
    trail = AuditTrail(sink, timer=timer)
    await call(trail.guard(RecordingTool("search"), SlowAuthorizer()))

    assert [record["latency_us"] for record in sink.records] == [2500, 2500]


async def test_the_decision_record_is_durable_before_the_tool_runs(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlFileSink(path)
    tool = GatedTool()
    tool.on_enter = lambda: read(path)
    guarded = make_trail(sink).guard(tool, StaticAuthorizer(True))

    task = asyncio.create_task(call(guarded))
    await tool.entered.wait()
    tool.release.set()
    await task
    sink.close()

    seen = tool.seen
    assert isinstance(seen, list)
    assert [(r["type"], r["result"], r["call_id"]) for r in seen] == [
        ("decision", "allow", "call-1")
    ]
    assert [r["type"] for r in read(path)] == ["decision", "outcome"]


async def test_a_denied_call_is_recorded_with_result_deny_code_denied_and_the_public_message() -> (
    None
):
    sink = MemorySink()
    tool = RecordingTool("search")
    denial = Decision(False, message="readers may not search", reasons=("rbac: no role",))
    guarded = make_trail(sink).guard(tool, StaticAuthorizer(denial))

    with pytest.raises(Failure) as caught:
        await call(guarded)

    decision, outcome = sink.records
    assert (caught.value.kind, caught.value.output.text()) == (
        FailureKind.REJECTED,
        "readers may not search",
    )
    assert tool.count == 0
    assert (decision["result"], decision["code"], decision["message"], decision["reasons"]) == (
        "deny",
        "denied",
        "readers may not search",
        ["rbac: no role"],
    )
    assert (outcome["outcome"], outcome["code"], outcome["message"]) == (
        "rejected",
        "denied",
        "readers may not search",
    )
    assert outcome["decision_id"] == decision["decision_id"]


async def test_a_plain_false_is_recorded_as_a_deny_without_a_policy_message() -> None:
    sink = MemorySink()
    guarded = make_trail(sink).guard(RecordingTool("search"), StaticAuthorizer(False))

    with pytest.raises(Failure):
        await call(guarded)

    decision, outcome = sink.records
    assert (decision["result"], decision["code"], decision["message"]) == ("deny", "denied", None)
    assert outcome["message"] == 'error: tool "search" is not authorized'


@pytest.mark.parametrize(
    ("error", "code"),
    [
        pytest.param(
            EngineTimeoutError("engine timed out", detail="opa at 10.0.0.7:8181 hung"),
            "engine_timeout",
            id="engine-timeout",
        ),
        pytest.param(
            UndefinedDecisionError("undefined", detail="opa at 10.0.0.7:8181 hung"),
            "undefined_decision",
            id="undefined",
        ),
        pytest.param(RuntimeError("opa at 10.0.0.7:8181 hung"), "no_decision", id="any-exception"),
    ],
)
async def test_an_authorizer_error_is_recorded_with_its_code_and_detail_that_the_caller_never_sees(
    error: Exception, code: str
) -> None:
    sink = MemorySink()
    tool = RecordingTool("search")
    guarded = make_trail(sink).guard(tool, StaticAuthorizer(error=error))

    with pytest.raises(AuthorizationError) as caught:
        await call(guarded)

    decision, outcome = sink.records
    assert (decision["result"], decision["code"], decision["message"]) == ("error", code, None)
    assert "opa at 10.0.0.7:8181 hung" in str(decision["detail"])
    assert (outcome["outcome"], outcome["code"]) == ("rejected", code)
    assert caught.value.code == code
    seen_by_caller = (str(caught.value), repr(caught.value), caught.value.args)
    assert "10.0.0.7" not in repr(seen_by_caller)
    assert (caught.value.__cause__, caught.value.__context__) == (None, None)
    assert tool.count == 0


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param("yes", id="text"),
        pytest.param(1, id="one"),
        pytest.param(None, id="none"),
        pytest.param(Decision(allowed=1), id="decision-with-int"),  # type: ignore[arg-type]
    ],
)
async def test_a_malformed_answer_is_recorded_as_an_error_and_denies(answer: object) -> None:
    sink = MemorySink()
    tool = RecordingTool("search")
    guarded = make_trail(sink).guard(tool, AnswerAuthorizer(answer))

    with pytest.raises(AuthorizationError) as caught:
        await call(guarded)

    assert [(r["type"], r["code"]) for r in sink.records] == [
        ("decision", "malformed_decision"),
        ("outcome", "malformed_decision"),
    ]
    assert (sink.records[0]["result"], caught.value.code, tool.count) == (
        "error",
        "malformed_decision",
        0,
    )


@pytest.mark.parametrize(
    ("error", "outcome", "code", "message"),
    [
        pytest.param(None, "executed", None, None, id="returns"),
        pytest.param(
            Failure(FailureKind.FAILED, "disk on fire", cause=OSError("eio")),
            "failed",
            "tool_failed",
            "disk on fire",
            id="failure-failed",
        ),
        pytest.param(
            Failure(FailureKind.REJECTED, "not on sundays"),
            "rejected",
            "tool_rejected",
            "not on sundays",
            id="failure-rejected",
        ),
        pytest.param(ValueError("bug"), "failed", "tool_error", None, id="exception"),
    ],
)
async def test_the_outcome_record_says_what_the_tool_did(
    error: Exception | None, outcome: str, code: str | None, message: str | None
) -> None:
    sink = MemorySink()
    tool: Tool = RecordingTool("search") if error is None else RaisingTool(error)
    guarded = make_trail(sink).guard(tool, StaticAuthorizer(True))

    if error is None:
        await call(guarded)
    else:
        with pytest.raises(type(error)) as caught:
            await call(guarded)
        assert caught.value is error

    record = sink.records[1]
    assert (record["type"], record["outcome"], record["code"], record["message"]) == (
        "outcome",
        outcome,
        code,
        message,
    )


# --- audit-or-deny --------------------------------------------------------------------------

ANSWERS = [
    pytest.param(StaticAuthorizer(True), id="allow"),
    pytest.param(StaticAuthorizer(Decision(True, message="ok")), id="allow-decision"),
    pytest.param(StaticAuthorizer(False), id="deny"),
    pytest.param(StaticAuthorizer(error=EngineTimeoutError("slow")), id="error"),
]


@pytest.mark.parametrize("authorizer", ANSWERS)
async def test_a_failing_sink_denies_the_call_whatever_the_decision(
    authorizer: Authorizer,
) -> None:
    sink = MemorySink()
    sink.failing = True
    tool = RecordingTool("search")
    guarded = make_trail(sink).guard(tool, authorizer)

    with pytest.raises(AuthorizationError) as caught:
        await call(guarded)

    assert isinstance(caught.value.cause, AuditWriteError)
    assert (tool.count, sink.records) == (0, [])


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
async def test_a_file_sink_that_cannot_write_denies_the_call(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlFileSink(path)
    fill_disk(sink)
    tool = RecordingTool("search")
    guarded = make_trail(sink).guard(tool, StaticAuthorizer(True))

    with pytest.raises(AuthorizationError) as caught:
        await call(guarded)
    sink.close()

    assert isinstance(caught.value.cause, AuditWriteError)
    assert (tool.count, path.read_bytes()) == (0, b"")


async def test_an_audit_write_failure_denies_with_its_own_code_audit_failed() -> None:
    # Pending in gateway/_authorization.py: a cause's code is kept only for the policy layer.
    sink = MemorySink()
    sink.failing = True
    guarded = make_trail(sink).guard(RecordingTool("search"), StaticAuthorizer(True))

    with pytest.raises(AuthorizationError) as caught:
        await call(guarded)

    assert caught.value.code == "audit_failed"


# --- cancellation ---------------------------------------------------------------------------


async def test_a_call_cancelled_while_the_tool_runs_still_gets_its_outcome_record(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlFileSink(path)
    tool = GatedTool()
    guarded = make_trail(sink).guard(tool, StaticAuthorizer(True))

    task = asyncio.create_task(call(guarded))
    await tool.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    sink.close()

    decision, outcome = read(path)
    assert (decision["result"], outcome["outcome"], outcome["code"]) == (
        "allow",
        "cancelled",
        "cancelled",
    )
    assert (outcome["decision_id"], outcome["call_id"]) == (
        decision["decision_id"],
        decision["call_id"],
    )
    assert verify(trail_files(path), head=head_path(path)).ok is True


async def test_a_call_cancelled_while_the_policy_decides_gets_only_an_outcome_record() -> None:
    sink = MemorySink()
    tool = RecordingTool("search")
    authorizer = BlockingAuthorizer()
    guarded = make_trail(sink).guard(tool, authorizer)

    task = asyncio.create_task(call(guarded))
    await authorizer.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert [(r["type"], r["outcome"], r["call_id"]) for r in sink.records] == [
        ("outcome", "cancelled", "call-1")
    ]
    assert tool.count == 0


# --- masking end to end ---------------------------------------------------------------------

SECRETS = {
    "password": "pw-Zq81-secret",
    "api_key": "ak-Lm02-secret",
    "apiKey": "ak-Camel-secret",
    "Authorization": "Bearer tok-Xy77-secret",
    "nested": "pw-nested-secret",
    "listed": "tok-listed-secret",
    "pointer": "4111-1111-1111-1111",
    "context-token": "ctx-tok-secret",
    "context-pointer": "sess-9911-secret",
}
ARGUMENTS = {
    "password": SECRETS["password"],
    "api_key": SECRETS["api_key"],
    "apiKey": SECRETS["apiKey"],
    "Authorization": SECRETS["Authorization"],
    "profile": {"credentials": {"password": SECRETS["nested"]}},
    "headers": [{"accept": "text/plain"}, {"authorization": SECRETS["listed"]}],
    "card": {"number": SECRETS["pointer"], "holder": "alice"},
    "query": "visible query",
}
CONTEXT = {
    "subject": "alice",
    "tenant": "acme",
    "token": SECRETS["context-token"],
    "session": {"id": SECRETS["context-pointer"]},
}
ECHO = "echo: " + " | ".join(SECRETS.values())


def masker() -> Masker:
    return Masker(pointers=["/card/number", "/session/id"], key=MASK_KEY)


@pytest.mark.parametrize(
    ("authorizer", "error", "outcome"),
    [
        pytest.param(StaticAuthorizer(True), None, "executed", id="allowed"),
        pytest.param(
            StaticAuthorizer(Decision(False, message=ECHO)), None, "rejected", id="deny-message"
        ),
        pytest.param(
            StaticAuthorizer(Decision(False, message="no", reasons=(ECHO,))),
            None,
            "rejected",
            id="deny-reason",
        ),
        pytest.param(
            StaticAuthorizer(Decision(True, message=ECHO, reasons=(ECHO,))),
            None,
            "executed",
            id="allow-message-and-reason",
        ),
        pytest.param(
            StaticAuthorizer(error=EngineError(ECHO, detail=ECHO)),
            None,
            "rejected",
            id="error-message-and-detail",
        ),
        pytest.param(
            StaticAuthorizer(True),
            Failure(FailureKind.FAILED, ECHO, cause=ValueError(ECHO)),
            "failed",
            id="tool-failure-output",
        ),
        pytest.param(
            StaticAuthorizer(True),
            Failure(FailureKind.REJECTED, ECHO),
            "rejected",
            id="tool-rejection-output",
        ),
    ],
)
async def test_masked_values_never_appear_anywhere_in_the_trail(
    tmp_path: Path, authorizer: Authorizer, error: Exception | None, outcome: str
) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlFileSink(path)
    tool: Tool = RecordingTool("search") if error is None else RaisingTool(error)
    guarded = make_trail(sink, masker()).guard(tool, authorizer)

    with caller_context(CONTEXT), contextlib.suppress(Failure, AuthorizationError):
        await call(guarded, json.dumps(ARGUMENTS))
    sink.close()

    everything = every_byte(tmp_path)
    decision, recorded = read(path)
    assert recorded["outcome"] == outcome
    assert [name for name, secret in SECRETS.items() if secret.encode() in everything] == []
    assert (decision["arguments"]["password"], decision["context"]["token"]) == (
        masker().digest(SECRETS["password"]),
        masker().digest(SECRETS["context-token"]),
    )
    assert (decision["arguments"]["query"], decision["context"]["subject"]) == (
        "visible query",
        "alice",
    )


async def test_a_repeated_argument_document_is_masked_and_scrubbed_like_the_first(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlFileSink(path)
    trail = make_trail(sink, masker())
    tool = RaisingTool(Failure(FailureKind.FAILED, ECHO, cause=ValueError(ECHO)))
    guarded = trail.guard(tool, StaticAuthorizer(True))
    for call_id in ("call-1", "call-2", "call-3"):
        with caller_context(CONTEXT), contextlib.suppress(Failure):
            await call(guarded, json.dumps(ARGUMENTS), call_id=call_id)
    sink.close()

    records = read(path)
    decisions = [record for record in records if record["type"] == "decision"]
    outcomes = [record for record in records if record["type"] == "outcome"]
    assert [
        name for name, secret in SECRETS.items() if secret.encode() in every_byte(tmp_path)
    ] == []
    assert len({json.dumps(record["arguments"]) for record in decisions}) == 1
    assert len({record["arguments_digest"] for record in decisions}) == 1
    assert len({record["message"] for record in outcomes}) == 1
    assert "[masked]" in outcomes[-1]["message"]


async def test_each_record_has_its_own_copy_of_repeated_masked_arguments() -> None:
    sink = MemorySink()
    guarded = make_trail(sink, masker()).guard(RecordingTool("search"), StaticAuthorizer(True))
    await call(guarded, json.dumps(ARGUMENTS))
    first = next(record for record in sink.records if record["type"] == "decision")
    first["arguments"]["query"] = "changed after the fact"
    await call(guarded, json.dumps(ARGUMENTS), call_id="call-2")

    second = [record for record in sink.records if record["type"] == "decision"][-1]
    assert second["arguments"]["query"] == "visible query"


async def test_equal_secrets_give_equal_digests_within_a_trail_and_different_ones_across_keys() -> (
    None
):
    one, other = MemorySink(), MemorySink()
    first = AuditTrail(one, masker=Masker(key=b"key one"))
    second = AuditTrail(other, masker=Masker(key=b"key two"))
    for trail in (first, first, second):
        await call(
            trail.guard(RecordingTool("login"), StaticAuthorizer(True)), '{"password":"same-pw"}'
        )

    digests = [
        r["arguments"]["password"] for r in [*one.records, *other.records] if "arguments" in r
    ]
    assert digests[0] == digests[1]
    assert digests[0] != digests[2]


# --- refusals -------------------------------------------------------------------------------


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_a_call_refused_at_admission_is_recorded_as_invalid_without_its_arguments() -> None:
    sink = MemorySink()
    trail = make_trail(sink)
    binding = bind(trail.guard(function_tool(add), StaticAuthorizer(True)))
    refused = ToolCall("call-9", "add", '{"a": 1}')
    with pytest.raises(InvalidInvocationError) as caught:
        binding.prepare(refused)

    with caller_context({"subject": "alice", "password": "ctx-pw-secret"}):
        record = await trail.refusal(refused, code=caught.value.code, message=str(caught.value))

    assert record == sink.records[0]
    assert unchained(record) == {
        "type": "outcome",
        "time": WALL_TEXT,
        "decision_id": "id-1",
        "call_id": "call-9",
        "tool": "add",
        "arguments_digest": hashlib.sha256(b'{"a": 1}').hexdigest(),
        "context": {"subject": "alice", "password": Masker(key=MASK_KEY).digest("ctx-pw-secret")},
        "outcome": "invalid",
        "code": "invalid_invocation",
        "message": str(caught.value),
        "latency_us": 0,
    }


async def test_a_refused_unknown_tool_is_recorded_without_its_raw_arguments() -> None:
    sink = MemorySink()
    raw = b'\xff{"not": "json-raw-argument-text"'

    await make_trail(sink).refusal(
        ToolCall("call-3", "nope", raw), code="unknown_tool", message="unknown tool"
    )

    (line,) = sink.lines()
    record = sink.records[0]
    assert (record["tool"], record["outcome"], record["code"]) == (
        "nope",
        "invalid",
        "unknown_tool",
    )
    assert record["arguments_digest"] == hashlib.sha256(raw).hexdigest()
    assert b"json-raw-argument-text" not in line


async def test_a_refusal_message_that_echoes_a_masked_argument_does_not_leak_it() -> None:
    sink = MemorySink()
    refused = ToolCall("call-4", "login", '{"password": "pw-echo-secret-1"}')

    await make_trail(sink).refusal(
        refused, code="invalid_invocation", message="'pw-echo-secret-1' is too short"
    )

    (line,) = sink.lines()
    assert sink.records[0]["message"] == "'[masked]' is too short"
    assert b"pw-echo-secret-1" not in line


async def test_a_refusal_that_cannot_be_written_raises_audit_write_error() -> None:
    sink = MemorySink()
    sink.failing = True

    with pytest.raises(AuditWriteError):
        await make_trail(sink).refusal(ToolCall("c", "t", "{}"), code="x", message="y")


# --- load -----------------------------------------------------------------------------------

CALLS = 10_000


async def test_ten_thousand_concurrent_calls_leave_ten_thousand_linked_pairs_in_a_valid_chain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.jsonl"
    key = tmp_path / "audit.key"
    key.write_bytes(b"k" * 32)
    sink = JsonlFileSink(path, fsync="batch", key=b"k" * 32)
    binding = bind(AuditTrail(sink).guard(function_tool(add), StaticAuthorizer(True)))
    invocations = [
        binding.prepare(ToolCall(f"call-{n}", "add", f'{{"a":{n},"b":1}}')) for n in range(CALLS)
    ]

    started = time.perf_counter()
    outputs = await asyncio.gather(*(binding.call(invocation) for invocation in invocations))
    sink.close()
    elapsed = time.perf_counter() - started

    records = read(path)
    decisions = {r["decision_id"]: r for r in records if r["type"] == "decision"}
    outcomes = {r["decision_id"]: r for r in records if r["type"] == "outcome"}
    pairs = {
        (
            decision["call_id"],
            outcomes[key]["call_id"],
            decision["result"],
            outcomes[key]["outcome"],
        )
        for key, decision in decisions.items()
        if key in outcomes and decision["seq"] < outcomes[key]["seq"]
    }
    assert [output.text() for output in outputs] == [str(n + 1) for n in range(CALLS)]
    assert (len(records), len(decisions), len(outcomes)) == (2 * CALLS, CALLS, CALLS)
    assert pairs == {(f"call-{n}", f"call-{n}", "allow", "executed") for n in range(CALLS)}
    assert verify(trail_files(path), key=b"k" * 32, head=head_path(path)).ok is True
    assert main(["audit", "verify", "--key-file", str(key), str(path)]) == 0
    assert f"ok: {path}: {2 * CALLS} records" in capsys.readouterr().out
    print(f"{CALLS} guarded calls through the audit trail: {elapsed:.2f} s")


# -- the masked caller context, remembered per context -------------------------------------

_CONTEXT_NAMES = st.sampled_from(
    ["subject", "roles", "password", "api_key", "request_id", "note", "Card-Number"]
)
_CONTEXT_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([Decimal("1.5"), Decimal("1e400"), Decimal("-0.0")])
    | st.sampled_from(["reader", "password: hunter2", "Bearer abcdefgh12345", "sk-" + "a" * 24])
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_CONTEXT_NAMES, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=120, deadline=None)
@given(
    context=st.dictionaries(_CONTEXT_NAMES, _CONTEXT_VALUES, max_size=5),
    request_ids=st.lists(
        st.none() | st.sampled_from(["r-1", "token=abcdef", "sk-" + "b" * 24]),
        min_size=2,
        max_size=4,
    ),
)
def test_a_remembered_masked_context_is_the_one_masked_afresh(
    context: dict[str, Any], request_ids: list[str | None]
) -> None:
    # Every record of a repeated context is served from the memo after the first: each must
    # equal masking the context and its request id afresh, secrets (and their order) too.
    masker = Masker(key=MASK_KEY)
    trail = make_trail(MemorySink(), masker)
    definition = bind(function_tool(add)).definition
    with caller_context(context):
        caller = current_caller()
        for request_id in request_ids:
            secrets: list[str] = []
            _, record = trail.decision_record(
                Authorization(definition, b'{"a": 1, "b": 2}'),
                call_id="c",
                decision=Decision(allowed=True),
                error=None,
                latency=0.0,
                secrets=secrets,
                request_id=request_id,
            )
            fresh = caller.as_dict()
            if request_id is not None:
                fresh["request_id"] = request_id
            expected_secrets: list[str] = []
            # As the record holds it: masked, then scrubbed of every raw masked value.
            expected = masker.scrub(_recordable(masker.mask(fresh, expected_secrets)), secrets)
            assert record["context"] == expected
            assert json.dumps(record["context"]) == json.dumps(expected)  # order and types
            assert secrets == expected_secrets


# Whole seconds, and the fractions where rounding to microseconds carries or ties.
_EDGE_FRACTIONS: Final = (0.0, 0.5e-6, 1.5e-6, 0.4999995, 0.9999995, 0.9999999, -0.5e-6)


@given(
    now=st.one_of(
        st.floats(min_value=-2e9, max_value=4e9, allow_nan=False),
        st.integers(min_value=-2_000_000_000, max_value=4_000_000_000).map(float),
        st.builds(
            lambda whole, fraction: whole + fraction,
            st.integers(min_value=-2_000_000_000, max_value=4_000_000_000),
            st.sampled_from(_EDGE_FRACTIONS),
        ),
    ),
    later=st.floats(min_value=0, max_value=2.5),
)
@example(now=1_700_000_000.9999995, later=0.0)
@example(now=-0.5e-6, later=0.0)
def test_record_times_are_iso_8601_with_microseconds_always(now: float, later: float) -> None:
    import datetime

    from gateway.audit._trail import _utc

    # The second is remembered from one call to the next: a time in the same second, in
    # the next ones, and the first again must each read as datetime writes them.
    for moment in (now, now + later, now):
        expected = datetime.datetime.fromtimestamp(moment, datetime.UTC).isoformat(
            timespec="microseconds"
        )
        assert _utc(moment) == expected

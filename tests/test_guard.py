"""Guard: the seed's Guard table (cases 38-47), the sealing matrix and cancellation."""

from __future__ import annotations

import asyncio
import gc
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, runtime_checkable

import pytest

from gateway import (
    Authorization,
    AuthorizationError,
    Authorizer,
    AuthorizerFunc,
    Binding,
    Decision,
    Failure,
    FailureKind,
    Func,
    Guard,
    InputValidatingTool,
    InvalidInvocationError,
    InvalidToolError,
    Invocation,
    MalformedDecisionError,
    Registry,
    Tool,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    WrappingTool,
    bind,
    capability,
    run_blocking,
)
from gateway.policy import caller_context, current_caller
from gateway.testing import RecordingAuthorizer, RecordingTool, StaticAuthorizer

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 2}},
    "required": ["query"],
    "additionalProperties": False,
}
REFUSAL = 'error: tool "search" is not authorized'


def search_tool() -> RecordingTool:
    return RecordingTool("search", SEARCH_SCHEMA)


def invoke(guard: Tool, arguments: str = '{"query":"scope"}') -> Invocation:
    """Admit a call through the guard's own contract, as every caller does."""
    return bind(guard).prepare(ToolCall("call-1", "search", arguments))


class IdentityTool:
    """A search tool that records the exact invocation objects it is called with."""

    def __init__(self) -> None:
        self.invocations: list[Invocation] = []

    def definition(self) -> ToolDefinition:
        return ToolDefinition("search", SEARCH_SCHEMA, "find things")

    async def call(self, invocation: Invocation) -> ToolOutput:
        self.invocations.append(invocation)
        return ToolOutput.from_text("found")


class MutableSchemaTool:
    """A tool whose definition can change after a guard took its snapshot."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.calls = 0

    def definition(self) -> ToolDefinition:
        return ToolDefinition("search", self.schema)

    async def call(self, invocation: Invocation) -> ToolOutput:
        self.calls += 1
        return ToolOutput.from_text("ran")


class GateTool:
    """A search tool that signals when it starts and then waits forever (until cancelled)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.seen: list[BaseException] = []
        self.calls = 0

    def definition(self) -> ToolDefinition:
        return ToolDefinition("search", SEARCH_SCHEMA)

    async def call(self, invocation: Invocation) -> ToolOutput:
        self.calls += 1
        self.entered.set()
        try:
            await asyncio.Event().wait()
        except BaseException as exc:
            self.seen.append(exc)
            raise
        return ToolOutput.from_text("unreachable")


class BlockingAuthorizer:
    """Signals when asked, then waits for an event that never comes (until cancelled).

    ``on_cancel`` decides what it does with the cancellation: re-raise it (default), or
    swallow it and return or raise something else.
    """

    def __init__(self, on_cancel: Callable[[], object] | None = None) -> None:
        self.entered = asyncio.Event()
        self.seen: list[BaseException] = []
        self.count = 0
        self._on_cancel = on_cancel

    async def authorize(self, authorization: Authorization) -> bool | Decision:
        self.count += 1
        self.entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError as exc:
            self.seen.append(exc)
            if self._on_cancel is None:
                raise
            answer = self._on_cancel()
            if isinstance(answer, BaseException):
                raise answer from None
            return answer  # type: ignore[return-value]
        return True


class SelfCancellingAuthorizer:
    """Cancels the task it runs in, then answers or raises without awaiting (seed case 46)."""

    def __init__(self, answer: object) -> None:
        self._answer = answer
        self.count = 0

    async def authorize(self, authorization: Authorization) -> bool | Decision:
        self.count += 1
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        if isinstance(self._answer, BaseException):
            raise self._answer
        return self._answer  # type: ignore[return-value]


async def call_in_task(guard: Guard, invocation: Invocation) -> ToolOutput:
    """Run one guarded call in its own task, so cancelling it does not cancel the test."""
    return await asyncio.create_task(guard.call(invocation))


# --- construction (cases 38-40) ------------------------------------------------------------


def test_guard_requires_both_collaborators() -> None:
    with pytest.raises(TypeError):
        Guard()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Guard(tool=search_tool())  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Guard(authorizer=StaticAuthorizer(True))  # type: ignore[call-arg]


def test_guard_collaborators_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        Guard(search_tool(), StaticAuthorizer(True))  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "authorizer",
    [
        pytest.param(None, id="none"),
        pytest.param(object(), id="object"),
        pytest.param("allow", id="str"),
        pytest.param(True, id="bool"),
        pytest.param(lambda _authorization: True, id="plain-function"),
    ],
)
def test_guard_refuses_what_is_not_an_authorizer(authorizer: object) -> None:
    tool = search_tool()

    with pytest.raises(InvalidToolError, match="authorizer"):
        Guard(tool=tool, authorizer=authorizer)  # type: ignore[arg-type]

    assert tool.definition_calls == 0


def test_guard_checks_the_authorizer_before_the_tool() -> None:
    with pytest.raises(InvalidToolError) as caught:
        Guard(tool=None, authorizer=None)  # type: ignore[arg-type]

    assert str(caught.value) == "tool: invalid tool: authorizer is nil"


def test_guard_refuses_a_nil_authorizer_func_as_typed_nil() -> None:
    with pytest.raises(InvalidToolError, match="authorizer is nil"):
        Guard(tool=search_tool(), authorizer=AuthorizerFunc(None))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "tool",
    [pytest.param(None, id="none"), pytest.param(object(), id="object")],
)
def test_guard_refuses_a_missing_tool(tool: object) -> None:
    with pytest.raises(InvalidToolError) as caught:
        Guard(tool=tool, authorizer=StaticAuthorizer(True))  # type: ignore[arg-type]

    assert str(caught.value) == "tool: invalid tool: authorization guard tool is nil"


def test_guard_refuses_a_tool_whose_definition_fails() -> None:
    class Broken:
        def definition(self) -> ToolDefinition:
            return ToolDefinition("bad name", {"type": "object"})

        async def call(self, invocation: Invocation) -> ToolOutput:
            raise AssertionError("never called")

    with pytest.raises(InvalidToolError, match="authorization guard definition"):
        Guard(tool=Broken(), authorizer=StaticAuthorizer(True))


def test_guard_refuses_a_definition_that_is_not_a_tool_definition() -> None:
    class Wrong:
        def definition(self) -> object:
            return {"name": "search"}

        async def call(self, invocation: Invocation) -> ToolOutput:
            raise AssertionError("never called")

    with pytest.raises(InvalidToolError, match="authorization guard definition"):
        Guard(tool=Wrong(), authorizer=StaticAuthorizer(True))  # type: ignore[arg-type]


def test_guard_calls_the_inner_definition_exactly_once_and_bind_does_not_call_it_again() -> None:
    tool = search_tool()

    guard = Guard(tool=tool, authorizer=StaticAuthorizer(True))
    after_construction = tool.definition_calls
    bind(guard)
    guard.definition()
    guard.definition()

    assert (after_construction, tool.definition_calls) == (1, 1)


def test_guard_over_an_uncompilable_schema_constructs_but_does_not_bind() -> None:
    tool = MutableSchemaTool({"type": "object", "properties": {"query": {"type": "invalid"}}})
    authorizer = RecordingAuthorizer(True)
    guard = Guard(tool=tool, authorizer=authorizer)
    tool.schema = {"type": "object"}  # fixing the inner tool afterwards does not help

    with pytest.raises(InvalidToolError):
        bind(guard)

    assert (authorizer.count, tool.calls) == (0, 0)


def test_guard_definition_is_the_snapshot_taken_at_construction() -> None:
    tool = MutableSchemaTool({"type": "object", "description": "first"})
    guard = Guard(tool=tool, authorizer=StaticAuthorizer(True))

    tool.schema = {"type": "object", "description": "second"}

    assert guard.definition().input_schema == {"type": "object", "description": "first"}


# --- allow (case 41) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param('{"query":"scope"}', id="compact"),
        pytest.param('  {"query":"scope"}\n', id="surrounding-whitespace"),
        pytest.param('{\n  "query" :   "scope"\n}', id="inner-whitespace"),
        pytest.param('{"query":"sc\\u006fpe"}', id="escape-kept"),
    ],
)
async def test_guard_allow_shows_the_policy_the_name_and_the_verbatim_argument_bytes(
    arguments: str,
) -> None:
    tool = search_tool()
    authorizer = RecordingAuthorizer(True)
    guard = Guard(tool=tool, authorizer=authorizer)

    output = await guard.call(invoke(guard, arguments))

    authorization, _context = authorizer.calls[0]
    assert authorization.definition.name == "search"
    assert authorization.arguments == arguments.encode()
    assert tool.calls == [arguments.encode()]
    assert output.text() == arguments


async def test_guard_allow_keeps_the_argument_member_order() -> None:
    tool = RecordingTool("search", {"type": "object"})
    authorizer = RecordingAuthorizer(True)
    guard = Guard(tool=tool, authorizer=authorizer)

    await guard.call(invoke(guard, '{"b":1, "a":2}'))

    assert authorizer.calls[0][0].arguments == b'{"b":1, "a":2}'


async def test_guard_shows_blank_arguments_to_the_policy_as_an_empty_object() -> None:
    tool = RecordingTool("search", {"type": "object"})
    authorizer = RecordingAuthorizer(True)
    guard = Guard(tool=tool, authorizer=authorizer)

    await guard.call(invoke(guard, "   "))

    assert authorizer.calls[0][0].arguments == b"{}"


async def test_guard_allow_runs_the_tool_once_with_the_same_invocation() -> None:
    tool = IdentityTool()
    guard = Guard(tool=tool, authorizer=StaticAuthorizer(True))
    invocation = invoke(guard)

    output = await guard.call(invocation)

    assert output.text() == "found"
    assert len(tool.invocations) == 1
    assert tool.invocations[0] is invocation


async def test_guard_allow_through_a_well_formed_decision_runs_the_tool() -> None:
    tool = search_tool()
    guard = Guard(
        tool=tool, authorizer=StaticAuthorizer(Decision(True, message="ignored on allow"))
    )

    output = await guard.call(invoke(guard))

    assert (output.text(), tool.count) == ('{"query":"scope"}', 1)


async def test_mutating_what_the_policy_saw_changes_neither_the_guard_nor_later_calls() -> None:
    def vandalize(authorization: Authorization) -> bool:
        authorization.definition.input_schema["type"] = "array"
        return True

    authorizer = RecordingAuthorizer(vandalize)
    guard = Guard(tool=search_tool(), authorizer=authorizer)
    invocation = invoke(guard)

    await guard.call(invocation)
    await guard.call(invocation)

    assert guard.definition().input_schema == SEARCH_SCHEMA
    assert [call[0].arguments for call in authorizer.calls] == [b'{"query":"scope"}'] * 2
    assert authorizer.calls[1][0].definition.input_schema == SEARCH_SCHEMA


async def test_guard_gives_the_policy_a_fresh_authorization_per_call() -> None:
    authorizer = RecordingAuthorizer(True)
    guard = Guard(tool=search_tool(), authorizer=authorizer)
    invocation = invoke(guard)

    await guard.call(invocation)
    await guard.call(invocation)

    assert authorizer.calls[0][0] is not authorizer.calls[1][0]


async def test_guard_passes_the_tools_own_exception_through_unchanged() -> None:
    raised = ValueError("tool broke")

    class Failing(IdentityTool):
        async def call(self, invocation: Invocation) -> ToolOutput:
            raise raised

    guard = Guard(tool=Failing(), authorizer=StaticAuthorizer(True))

    with pytest.raises(ValueError, match="tool broke") as caught:
        await guard.call(invoke(guard))

    assert caught.value is raised


# --- refusal (case 42) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected_text"),
    [
        pytest.param(False, REFUSAL, id="false"),
        pytest.param(Decision(False), REFUSAL, id="decision-without-message"),
        pytest.param(Decision(False, message=""), REFUSAL, id="decision-empty-message"),
        pytest.param(Decision(False, message="public text"), "public text", id="public-message"),
        pytest.param(
            Decision(False, message="public", reasons=("private audit reason",)),
            "public",
            id="reasons-stay-private",
        ),
    ],
)
async def test_guard_refusal_raises_a_rejected_failure_and_does_not_run_the_tool(
    answer: bool | Decision, expected_text: str
) -> None:
    tool = search_tool()
    guard = Guard(tool=tool, authorizer=StaticAuthorizer(answer))

    with pytest.raises(Failure) as caught:
        await guard.call(invoke(guard))

    failure = caught.value
    assert (failure.kind, failure.cause, str(failure)) == (
        FailureKind.REJECTED,
        None,
        "tool: rejected",
    )
    assert failure.output.text() == expected_text
    assert (failure.__cause__, failure.__context__) == (None, None)
    assert "private" not in repr(failure)
    assert tool.count == 0


async def test_guard_refusal_through_a_binding_is_the_same_failure() -> None:
    tool = search_tool()
    guard = Guard(tool=tool, authorizer=StaticAuthorizer(False))
    binding = bind(guard)

    with pytest.raises(Failure) as caught:
        await binding.call(binding.prepare(ToolCall("call-1", "search", '{"query":"scope"}')))

    assert (caught.value.kind, caught.value.output.text(), tool.count) == (
        FailureKind.REJECTED,
        REFUSAL,
        0,
    )


# --- sealing matrix (cases 44-45) ----------------------------------------------------------


def private_failure() -> Failure:
    return Failure(
        FailureKind.REJECTED,
        "private dependency output",
        cause=ValueError("private policy detail"),
    )


def wrapped_failure() -> Exception:
    wrapper = RuntimeError("dependency: private policy detail")
    wrapper.__cause__ = private_failure()
    return wrapper


SEALING_CAUSES: list[Any] = [
    pytest.param(lambda: ValueError("private policy detail"), id="plain"),
    pytest.param(private_failure, id="failure"),
    pytest.param(wrapped_failure, id="wrapped-failure"),
    pytest.param(lambda: TimeoutError("private deadline"), id="timeout"),
    pytest.param(
        lambda: ExceptionGroup("private group", [TimeoutError(), private_failure()]),
        id="group-of-timeout-and-failure",
    ),
]


@pytest.mark.parametrize("make_cause", SEALING_CAUSES)
async def test_guard_seals_every_policy_exception_in_an_authorization_error(
    make_cause: Callable[[], Exception],
) -> None:
    cause = make_cause()
    tool = search_tool()
    guard = Guard(tool=tool, authorizer=StaticAuthorizer(error=cause))
    invocation = invoke(guard)

    with pytest.raises(AuthorizationError) as caught:
        await guard.call(invocation)

    error = caught.value
    assert error.cause is cause
    assert error.__cause__ is None
    assert error.__context__ is None
    assert str(error) == 'tool: authorization for "search" failed'
    assert "private" not in str(error)
    assert "private" not in repr(error)
    assert not isinstance(error, TimeoutError | Failure | ExceptionGroup)
    assert error.code == "no_decision"
    assert tool.count == 0


@pytest.mark.parametrize("make_cause", SEALING_CAUSES)
async def test_guard_policy_exception_after_cancellation_is_a_cancellation(
    make_cause: Callable[[], Exception],
) -> None:
    authorizer = SelfCancellingAuthorizer(make_cause())
    tool = search_tool()
    guard = Guard(tool=tool, authorizer=authorizer)

    with pytest.raises(asyncio.CancelledError):
        await call_in_task(guard, invoke(guard))

    assert (authorizer.count, tool.count) == (1, 0)


# --- malformed answers ---------------------------------------------------------------------


class AllowedAttribute:
    allowed = True


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(None, id="none"),
        pytest.param(1, id="int-1"),
        pytest.param(0, id="int-0"),
        pytest.param("true", id="str-true"),
        pytest.param("yes", id="str-yes"),
        pytest.param([True], id="list-true"),
        pytest.param(Decision(allowed=1), id="decision-allowed-1"),  # type: ignore[arg-type]
        pytest.param(Decision(allowed="true"), id="decision-allowed-str"),  # type: ignore[arg-type]
        pytest.param(Decision(True, message=5), id="decision-message-int"),  # type: ignore[arg-type]
        pytest.param(Decision(True, reasons=["x"]), id="decision-reasons-list"),  # type: ignore[arg-type]
        pytest.param(Decision(True, cache_ttl=-1), id="decision-negative-ttl"),
        pytest.param(AllowedAttribute(), id="object-with-allowed-attribute"),
    ],
)
async def test_guard_malformed_answer_is_no_decision_and_never_runs_the_tool(
    answer: object,
) -> None:
    tool = search_tool()
    guard = Guard(tool=tool, authorizer=StaticAuthorizer(answer))  # type: ignore[arg-type]

    with pytest.raises(AuthorizationError) as caught:
        await guard.call(invoke(guard))

    error = caught.value
    assert (error.code, str(error)) == (
        "malformed_decision",
        'tool: authorization for "search" failed',
    )
    assert isinstance(error.cause, MalformedDecisionError)
    assert (error.__cause__, error.__context__) == (None, None)
    assert tool.count == 0


# --- cancellation (cases 43, 46) -----------------------------------------------------------


async def test_guard_in_an_already_cancelled_task_asks_no_policy_and_runs_nothing() -> None:
    authorizer = RecordingAuthorizer(True)
    tool = search_tool()
    guard = Guard(tool=tool, authorizer=authorizer)
    invocation = invoke(guard)

    async def cancelled_then_call() -> ToolOutput:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        return await guard.call(invocation)

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(cancelled_then_call())

    assert (authorizer.count, tool.count) == (0, 0)


async def test_guard_cancellation_during_authorization_propagates_unchanged() -> None:
    authorizer = BlockingAuthorizer()
    tool = search_tool()
    guard = Guard(tool=tool, authorizer=authorizer)
    invocation = invoke(guard)
    escaped: list[BaseException] = []

    async def call() -> ToolOutput:
        try:
            return await guard.call(invocation)
        except BaseException as exc:
            escaped.append(exc)
            raise

    task = asyncio.create_task(call())
    await authorizer.entered.wait()
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(escaped) == 1
    assert escaped[0] is authorizer.seen[0]
    assert type(escaped[0]) is asyncio.CancelledError
    assert tool.count == 0


@pytest.mark.parametrize(
    "on_cancel",
    [
        pytest.param(lambda: True, id="returns-true"),
        pytest.param(lambda: Decision(True), id="returns-allow-decision"),
        pytest.param(lambda: False, id="returns-false"),
        pytest.param(lambda: "malformed", id="returns-malformed"),
        pytest.param(lambda: ValueError("private policy detail"), id="raises-value-error"),
        pytest.param(lambda: TimeoutError("private"), id="raises-timeout"),
    ],
)
async def test_guard_authorizer_that_swallows_the_cancellation_still_ends_cancelled(
    on_cancel: Callable[[], object],
) -> None:
    authorizer = BlockingAuthorizer(on_cancel)
    tool = search_tool()
    guard = Guard(tool=tool, authorizer=authorizer)

    task = asyncio.create_task(guard.call(invoke(guard)))
    await authorizer.entered.wait()
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(authorizer.seen) == 1
    assert tool.count == 0


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(True, id="true"),
        pytest.param(Decision(True), id="allow-decision"),
        pytest.param(False, id="false"),
        pytest.param(Decision(False, message="public"), id="deny-decision"),
        pytest.param("malformed", id="malformed"),
    ],
)
async def test_guard_policy_that_cancels_its_own_task_ends_cancelled_and_runs_nothing(
    answer: object,
) -> None:
    authorizer = SelfCancellingAuthorizer(answer)
    tool = search_tool()
    guard = Guard(tool=tool, authorizer=authorizer)

    with pytest.raises(asyncio.CancelledError):
        await call_in_task(guard, invoke(guard))

    assert (authorizer.count, tool.count) == (1, 0)


async def test_guard_cancellation_while_the_tool_runs_propagates_from_the_tool() -> None:
    tool = GateTool()
    guard = Guard(tool=tool, authorizer=StaticAuthorizer(True))
    invocation = invoke(guard)
    escaped: list[BaseException] = []

    async def call() -> ToolOutput:
        try:
            return await guard.call(invocation)
        except BaseException as exc:
            escaped.append(exc)
            raise

    task = asyncio.create_task(call())
    await tool.entered.wait()
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert tool.calls == 1
    assert escaped[0] is tool.seen[0]


async def test_guard_outer_timeout_during_authorization_is_a_timeout_not_a_sealed_error() -> None:
    authorizer = BlockingAuthorizer()
    tool = search_tool()
    guard = Guard(tool=tool, authorizer=authorizer)
    invocation = invoke(guard)

    with pytest.raises(TimeoutError) as caught:
        # The deadline fires at the first suspension, which is inside the authorizer.
        async with asyncio.timeout(0):
            await guard.call(invocation)

    assert not isinstance(caught.value, AuthorizationError)
    assert (authorizer.count, tool.count) == (1, 0)


# --- wrapping and capabilities -------------------------------------------------------------


def test_guard_is_a_wrapping_tool_that_unwraps_to_the_inner_tool() -> None:
    tool = search_tool()
    guard = Guard(tool=tool, authorizer=StaticAuthorizer(True))

    assert isinstance(guard, WrappingTool)
    assert isinstance(guard, Tool)
    assert guard.unwrap() is tool


def test_guard_does_not_declare_an_input_validator_of_its_own() -> None:
    guard = Guard(tool=search_tool(), authorizer=StaticAuthorizer(True))

    assert not isinstance(guard, InputValidatingTool)


def test_guard_exposes_its_authorizer() -> None:
    authorizer = StaticAuthorizer(True)

    guard = Guard(tool=search_tool(), authorizer=authorizer)

    assert guard.authorizer is authorizer


def add(a: int) -> int:
    """Return a."""
    return a


def test_binding_a_guarded_func_uses_the_funcs_input_validator_at_prepare() -> None:
    authorizer = RecordingAuthorizer(True)
    binding = bind(Guard(tool=Func(add), authorizer=authorizer))

    with pytest.raises(InvalidInvocationError, match="valid integer"):
        binding.prepare(ToolCall("call-1", "add", '{"a":1.0}'))

    assert authorizer.count == 0


def test_the_same_schema_without_the_funcs_validator_admits_a_float_for_an_int() -> None:
    # The contrast that shows the refusal above comes from the Func's validator.
    schema = Func(add).definition().input_schema
    binding = bind(Guard(tool=RecordingTool("add", schema), authorizer=StaticAuthorizer(True)))

    invocation = binding.prepare(ToolCall("call-1", "add", '{"a":1.0}'))

    assert invocation.arguments == b'{"a":1.0}'


async def test_guarded_func_runs_after_an_allow() -> None:
    binding = bind(Guard(tool=Func(add), authorizer=StaticAuthorizer(True)))

    output = await binding.call(binding.prepare(ToolCall("call-1", "add", '{"a":7}')))

    assert output.json() == 7


def test_capability_lookup_through_a_guard_finds_the_validator_and_an_inner_marker() -> None:
    @runtime_checkable
    class Audited(Protocol):
        def audit_label(self) -> str: ...

    class Marked(IdentityTool):
        def audit_label(self) -> str:
            return "sensitive"

    inner = Marked()
    func = Func(add)
    marked_guard = Guard(tool=inner, authorizer=StaticAuthorizer(True))
    func_guard = Guard(tool=func, authorizer=StaticAuthorizer(True))

    assert capability(marked_guard, Audited) is inner  # type: ignore[type-abstract]
    assert capability(func_guard, InputValidatingTool) is func  # type: ignore[type-abstract]
    assert capability(func_guard, Audited) is None  # type: ignore[type-abstract]


async def test_guard_in_a_registry_authorizes_each_resolved_call() -> None:
    authorizer = RecordingAuthorizer(False)
    tool = search_tool()
    registry = Registry(Guard(tool=tool, authorizer=authorizer))
    binding = registry.resolve("search")
    assert isinstance(binding, Binding)

    with pytest.raises(Failure):
        await binding.call(binding.prepare(ToolCall("call-1", "search", '{"query":"scope"}')))

    assert (authorizer.count, tool.count) == (1, 0)


async def test_nested_guards_each_ask_their_own_policy() -> None:
    outer_policy = RecordingAuthorizer(True)
    inner_policy = RecordingAuthorizer(False)
    tool = search_tool()
    guard = Guard(tool=Guard(tool=tool, authorizer=inner_policy), authorizer=outer_policy)

    with pytest.raises(Failure):
        await guard.call(invoke(guard))

    assert (outer_policy.count, inner_policy.count, tool.count) == (1, 1, 0)


async def test_guard_concurrent_calls_each_authorize_and_run_once() -> None:
    authorizer = RecordingAuthorizer(True)
    tool = search_tool()
    guard = Guard(tool=tool, authorizer=authorizer)
    invocation = invoke(guard)

    outputs = await asyncio.gather(*(guard.call(invocation) for _ in range(32)))

    assert [output.text() for output in outputs] == ['{"query":"scope"}'] * 32
    assert (authorizer.count, tool.count) == (32, 32)


def test_guard_repr_names_the_tool_and_not_the_arguments() -> None:
    guard = Guard(tool=search_tool(), authorizer=StaticAuthorizer(True))

    assert repr(guard).startswith("Guard(tool='search'")


# --- run_blocking --------------------------------------------------------------------------


def test_run_blocking_runs_a_guarded_call_with_the_caller_context() -> None:
    authorizer = RecordingAuthorizer(True)
    guard = Guard(tool=search_tool(), authorizer=authorizer)
    invocation = invoke(guard)

    with caller_context(subject="alice", tenant="acme"):
        output = run_blocking(guard.call(invocation))

    assert output.text() == '{"query":"scope"}'
    assert authorizer.calls[0][1].as_dict() == {"subject": "alice", "tenant": "acme"}
    assert current_caller().as_dict() == {}


@pytest.mark.parametrize(
    ("authorizer", "expected"),
    [
        pytest.param(StaticAuthorizer(False), Failure, id="refusal"),
        pytest.param(StaticAuthorizer(error=ValueError("private")), AuthorizationError, id="error"),
    ],
)
def test_run_blocking_raises_what_the_async_call_raises(
    authorizer: Authorizer, expected: type[Exception]
) -> None:
    tool = search_tool()
    guard = Guard(tool=tool, authorizer=authorizer)

    with pytest.raises(expected):
        run_blocking(guard.call(invoke(guard)))

    assert tool.count == 0


async def test_run_blocking_inside_a_running_loop_refuses_and_closes_the_coroutine() -> None:
    authorizer = RecordingAuthorizer(True)
    guard = Guard(tool=search_tool(), authorizer=authorizer)
    coroutine: Coroutine[Any, Any, ToolOutput] = guard.call(invoke(guard))

    with pytest.raises(RuntimeError, match="running event loop"):
        run_blocking(coroutine)

    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED
    del coroutine
    gc.collect()  # an unclosed coroutine would warn "never awaited" here (warnings are errors)
    assert authorizer.count == 0

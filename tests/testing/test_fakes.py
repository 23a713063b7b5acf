"""gateway.testing fakes: FakeClock, StaticAuthorizer, RecordingAuthorizer, RecordingTool."""

from __future__ import annotations

import asyncio

import pytest

from gateway import (
    Authorization,
    Authorizer,
    Decision,
    Failure,
    Guard,
    InputValidatingTool,
    Tool,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    bind,
)
from gateway.policy import caller_context
from gateway.testing import FakeClock, RecordingAuthorizer, RecordingTool, StaticAuthorizer

SEARCH = ToolDefinition("search", {"type": "object"})


def authorization(arguments: bytes = b'{"q":"x"}') -> Authorization:
    return Authorization(SEARCH, arguments)


# --- FakeClock -----------------------------------------------------------------------------


def test_fake_clock_starts_at_1000_by_default_and_at_the_given_time_otherwise() -> None:
    assert (FakeClock()(), FakeClock(5.0)()) == (1000.0, 5.0)


def test_fake_clock_moves_only_when_advanced() -> None:
    clock = FakeClock(0.0)

    before = (clock(), clock())
    clock.advance(2.5)
    clock.advance(0)

    assert (before, clock()) == ((0.0, 0.0), 2.5)


def test_fake_clock_never_goes_back() -> None:
    clock = FakeClock(10.0)

    with pytest.raises(ValueError, match="never goes back"):
        clock.advance(-1)

    assert clock() == 10.0


# --- StaticAuthorizer ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("authorizer", "expected"),
    [
        pytest.param(StaticAuthorizer(), False, id="default-denies"),
        pytest.param(StaticAuthorizer(True), True, id="true"),
        pytest.param(
            StaticAuthorizer(Decision(False, message="no")), Decision(False, "no"), id="decision"
        ),
    ],
)
async def test_static_authorizer_answers_every_call_the_same(
    authorizer: StaticAuthorizer, expected: bool | Decision
) -> None:
    first = await authorizer.authorize(authorization(b"{}"))
    second = await authorizer.authorize(authorization(b'{"other":1}'))

    assert (first, second) == (expected, expected)


async def test_static_authorizer_raises_the_identical_error_each_time() -> None:
    error = TimeoutError("engine down")
    authorizer = StaticAuthorizer(True, error=error)

    for _ in range(2):
        with pytest.raises(TimeoutError) as caught:
            await authorizer.authorize(authorization())
        assert caught.value is error


def test_static_and_recording_authorizers_satisfy_the_authorizer_protocol() -> None:
    assert isinstance(StaticAuthorizer(), Authorizer)
    assert isinstance(RecordingAuthorizer(), Authorizer)


# --- RecordingAuthorizer -------------------------------------------------------------------


async def test_recording_authorizer_allows_by_default_and_records_in_arrival_order() -> None:
    authorizer = RecordingAuthorizer()
    first, second = authorization(b'{"n":1}'), authorization(b'{"n":2}')

    answers = [await authorizer.authorize(first), await authorizer.authorize(second)]

    assert answers == [True, True]
    assert [call[0] for call in authorizer.calls] == [first, second]
    assert authorizer.count == 2


async def test_recording_authorizer_records_the_caller_context_in_force() -> None:
    authorizer = RecordingAuthorizer(False)

    with caller_context(subject="alice"):
        answer = await authorizer.authorize(authorization())
    await authorizer.authorize(authorization())

    assert answer is False
    assert [call[1].as_dict() for call in authorizer.calls] == [{"subject": "alice"}, {}]


async def test_recording_authorizer_delegates_to_a_decide_function() -> None:
    def only_short(given: Authorization) -> Decision:
        return Decision(len(given.arguments) < 5, message="too long")

    authorizer = RecordingAuthorizer(only_short)

    answers = [
        await authorizer.authorize(authorization(b"{}")),
        await authorizer.authorize(authorization(b'{"long":true}')),
    ]

    assert answers == [Decision(True, "too long"), Decision(False, "too long")]
    assert authorizer.count == 2


async def test_recording_authorizer_records_even_when_the_decide_function_raises() -> None:
    def fail(_given: Authorization) -> bool:
        raise ValueError("policy broke")

    authorizer = RecordingAuthorizer(fail)

    with pytest.raises(ValueError, match="policy broke"):
        await authorizer.authorize(authorization())

    assert authorizer.count == 1


# --- RecordingTool -------------------------------------------------------------------------


def test_recording_tool_defaults_to_an_any_object_tool_named_recording() -> None:
    tool = RecordingTool()

    assert (tool.definition().name, tool.definition().input_schema) == (
        "recording",
        {"type": "object"},
    )
    assert isinstance(tool, Tool)
    assert not isinstance(tool, InputValidatingTool)


def test_recording_tool_counts_definition_requests() -> None:
    tool = RecordingTool("search", {"type": "object", "required": ["q"]})

    bind(tool)
    tool.definition()

    assert tool.definition_calls == 2


async def test_recording_tool_records_arguments_and_answers_with_them_as_text() -> None:
    tool = RecordingTool("search")
    binding = bind(tool)

    output = await binding.call(binding.prepare(ToolCall("c", "search", ' {"q": 1} ')))

    assert output.text() == ' {"q": 1} '
    assert (tool.calls, tool.count) == ([b' {"q": 1} '], 1)


async def test_recording_tool_answers_with_the_fixed_output_when_given() -> None:
    fixed = ToolOutput.from_text("fixed")
    tool = RecordingTool("search", output=fixed)
    binding = bind(tool)

    output = await binding.call(binding.prepare(ToolCall("c", "search", "{}")))

    assert output is fixed


async def test_recording_tool_gate_holds_each_call_open_until_set() -> None:
    gate = asyncio.Event()
    tool = RecordingTool("search", gate=gate)
    binding = bind(tool)
    task = asyncio.create_task(binding.call(binding.prepare(ToolCall("c", "search", "{}"))))
    for _ in range(100):  # yields, not timed sleeps
        await asyncio.sleep(0)

    held = (tool.count, task.done())
    gate.set()
    output = await task

    assert held == (1, False)
    assert output.text() == "{}"


async def test_fakes_compose_with_a_guard() -> None:
    tool = RecordingTool("search")
    authorizer = RecordingAuthorizer(False)
    binding = bind(Guard(tool=tool, authorizer=authorizer))

    with pytest.raises(Failure):
        await binding.call(binding.prepare(ToolCall("c", "search", "{}")))

    assert (authorizer.count, tool.count) == (1, 0)

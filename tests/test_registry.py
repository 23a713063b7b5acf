"""Registry: atomic batches, duplicates, ordering and detached definitions (seed §9, 54-56)."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest

from gateway import (
    DuplicateToolError,
    Func,
    InvalidDefinitionError,
    InvalidToolError,
    Registry,
    ToolCall,
    ToolOutput,
    function_tool,
)
from tests.helpers import OBJECT_SCHEMA, CountingTool, StubTool, definition


def named(name: str, result: str = "") -> StubTool:
    tool = StubTool(name, OBJECT_SCHEMA)
    tool.result = ToolOutput.from_text(result or f"{name} result")
    return tool


async def test_case54_resolve_prepare_and_call_a_registered_tool() -> None:
    registry = Registry(named("zeta"), named("alpha"))

    binding = registry.resolve("alpha")
    assert binding is not None
    output = await binding.call(binding.contract.prepare(ToolCall("call", "alpha", "{}")))

    assert output.text() == "alpha result"
    assert registry.resolve("missing") is None
    assert [d.name for d in registry.definitions()] == ["alpha", "zeta"]


def test_case54_definitions_are_detached_from_the_registry() -> None:
    registry = Registry(named("alpha"))

    listed = registry.definitions()
    listed[0].input_schema["type"] = "array"
    listed.clear()

    assert registry.definitions()[0].input_schema == {"type": "object"}
    assert registry.definitions()[0].input_schema_json == b'{"type":"object"}'


def test_case55_a_batch_colliding_with_an_existing_name_adds_nothing() -> None:
    registry = Registry(named("existing"))

    with pytest.raises(
        DuplicateToolError,
        match=r"^tool: duplicate tool: 'existing' is already registered$",
    ):
        registry.register(named("new"), named("existing"))

    assert registry.resolve("new") is None
    assert len(registry) == 1


def test_case55_a_name_repeated_within_a_batch_adds_nothing() -> None:
    registry = Registry()

    with pytest.raises(
        DuplicateToolError,
        match=r"^tool: duplicate tool: 'same' appears more than once in batch$",
    ):
        registry.register(named("other"), named("same"), named("same"))

    assert len(registry) == 0
    assert "other" not in registry


@pytest.mark.parametrize(
    ("tools", "error", "message"),
    [
        pytest.param(
            lambda: [named("a"), named("a"), None],
            DuplicateToolError,
            "tool: duplicate tool: 'a' appears more than once in batch",
            id="duplicate_before_bad_tool",
        ),
        pytest.param(
            lambda: [None, named("a"), named("a")],
            InvalidToolError,
            "tools[0]: tool: invalid tool: tool is nil",
            id="bad_tool_before_duplicate",
        ),
        pytest.param(
            lambda: [named("a"), StubTool("b", "[]")],
            InvalidToolError,
            "tools[1]: tool: invalid tool: definition: tool: invalid tool definition: input "
            "schema must be a JSON object",
            id="index_of_the_bad_tool",
        ),
    ],
)
def test_the_first_error_in_index_order_wins_and_nothing_is_added(
    tools: Any, error: type[Exception], message: str
) -> None:
    registry = Registry()

    with pytest.raises(error, match=f"^{re.escape(message)}"):
        registry.register(*tools())
    assert len(registry) == 0


@pytest.mark.parametrize(
    ("tool", "message"),
    [
        pytest.param(None, "tools[0]: tool: invalid tool: tool is nil", id="case56_none"),
        pytest.param(object(), "tools[0]: tool: invalid tool: tool is nil", id="case56_not_a_tool"),
        pytest.param(
            StubTool("bad", "[]"),
            "tools[0]: tool: invalid tool: definition: ",
            id="case56_array_schema",
        ),
        pytest.param(
            StubTool("bad", '{"type":"object","minLength":-1}'),
            "tools[0]: tool: invalid tool: input schema: ",
            id="uncompilable_schema",
        ),
    ],
)
def test_case56_tools_that_cannot_be_bound_are_refused_with_their_index(
    tool: Any, message: str
) -> None:
    with pytest.raises(InvalidToolError, match=f"^{re.escape(message)}") as info:
        Registry(tool)
    assert isinstance(info.value.__cause__, InvalidToolError)


def test_the_bind_error_stays_reachable_as_the_cause() -> None:
    with pytest.raises(InvalidToolError) as info:
        Registry(named("ok"), StubTool("bad name"))

    assert str(info.value).startswith("tools[1]: tool: invalid tool: definition: ")
    assert isinstance(info.value.__cause__, InvalidToolError)
    assert isinstance(info.value.__cause__.__cause__, InvalidDefinitionError)


def test_case56_a_fresh_registry_registers_and_resolves() -> None:
    registry = Registry()
    registry.register()
    assert len(registry) == 0

    registry.register(named("first"))
    registry.register(named("second"))

    assert [d.name for d in registry.definitions()] == ["first", "second"]
    assert registry.resolve("first") is not None


def test_definitions_are_in_byte_wise_name_order() -> None:
    names = ["zeta", "alpha", "_private", "-dash", "9lives", "Zulu", "Alpha", "a-b", "a_b", "a1"]
    registry = Registry(*(named(name) for name in names))

    assert [d.name for d in registry.definitions()] == [
        "-dash",
        "9lives",
        "Alpha",
        "Zulu",
        "_private",
        "a-b",
        "a1",
        "a_b",
        "alpha",
        "zeta",
    ]


def test_resolve_is_exact_and_case_sensitive() -> None:
    registry = Registry(named("search"))

    assert registry.resolve("search") is not None
    assert [registry.resolve(name) for name in ("Search", "search ", "")] == [None, None, None]
    assert ("search" in registry, "Search" in registry) == (True, False)


async def test_resolve_returns_the_same_binding_so_invocations_are_shared() -> None:
    registry = Registry(named("search"))
    first, second = registry.resolve("search"), registry.resolve("search")
    assert first is not None
    assert second is not None

    invocation = first.contract.prepare(ToolCall("call", "search", "{}"))

    assert first.contract is second.contract
    assert (await second.call(invocation)).text() == "search result"


def test_registry_binds_each_tool_once_at_registration() -> None:
    tool = CountingTool(definition("counted", OBJECT_SCHEMA))
    registry = Registry(tool)

    registry.definitions()
    registry.resolve("counted")

    assert tool.definition_calls == 1


def test_repr_lists_the_names_in_order() -> None:
    assert repr(Registry(named("b"), named("a"))) == "Registry(['a', 'b'])"


def test_concurrent_registration_of_one_name_admits_exactly_one() -> None:
    registry = Registry()
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def register() -> None:
        tool = named("contested")
        barrier.wait()
        try:
            registry.register(tool)
            outcome = "registered"
        except DuplicateToolError:
            outcome = "duplicate"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=register) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["duplicate"] * 7 + ["registered"]
    assert len(registry) == 1


def test_concurrent_registration_of_distinct_names_keeps_all() -> None:
    registry = Registry()
    barrier = threading.Barrier(8)

    def register(index: int) -> None:
        tools = [named(f"tool-{index}-{n}") for n in range(10)]
        barrier.wait()
        registry.register(*tools)

    threads = [threading.Thread(target=register, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(registry) == 80


async def test_case58_add_through_a_registry_prints_its_name_then_the_sum() -> None:
    @function_tool(description="add two integers")
    def add(a: int, b: int) -> str:
        return str(a + b)

    registry = Registry(add)
    printed = [definition.name for definition in registry.definitions()]
    binding = registry.resolve("add")
    assert binding is not None
    invocation = binding.contract.prepare(ToolCall("call-1", "add", '{"a":2,"b":3}'))
    output = await binding.call(invocation)
    printed.append(output.text() or "")

    assert isinstance(add, Func)
    assert printed == ["add", "5"]

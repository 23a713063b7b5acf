"""Caller context: frozen, propagating through await, tasks and to_thread, never from arguments."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import Decision, GatewayError, Guard, ToolCall, bind
from gateway.policy import (
    EMPTY_CONTEXT,
    CachingAuthorizer,
    CallerContext,
    InputDocument,
    InvalidContextError,
    caller_context,
    current_caller,
)
from gateway.testing import RecordingAuthorizer, RecordingTool


def nested(depth: int) -> dict[str, Any]:
    """A context whose nesting is ``depth`` objects deep (the context itself is level 1)."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def sized(total_bytes: int) -> dict[str, Any]:
    """A context whose canonical encoding is exactly ``total_bytes`` long."""
    return {"k": "x" * (total_bytes - len(b'{"k":""}'))}


# --- values --------------------------------------------------------------------------------


def test_no_caller_context_is_the_empty_object() -> None:
    actual = current_caller()

    assert actual is EMPTY_CONTEXT
    assert (actual.as_dict(), actual.json) == ({}, b"{}")


def test_caller_context_json_is_canonical_and_digest_is_its_sha256() -> None:
    context = CallerContext({"tenant": "acme", "subject": "alice", "roles": ["b", "a"]})

    assert context.json == b'{"roles":["b","a"],"subject":"alice","tenant":"acme"}'
    assert context.digest == hashlib.sha256(context.json).hexdigest()


def test_caller_context_fields_override_the_mapping() -> None:
    context = CallerContext({"subject": "alice", "tenant": "acme"}, subject="bob")

    assert context.as_dict() == {"subject": "bob", "tenant": "acme"}


def test_caller_contexts_with_the_same_members_in_another_order_are_equal() -> None:
    first = CallerContext({"subject": "alice", "tenant": "acme"})
    second = CallerContext({"tenant": "acme", "subject": "alice"})

    assert first == second
    assert hash(first) == hash(second)
    assert first != CallerContext({"subject": "alice"})


def test_caller_context_get_returns_a_field_or_the_default() -> None:
    context = CallerContext(subject="alice")

    assert (context.get("subject"), context.get("tenant"), context.get("tenant", "none")) == (
        "alice",
        None,
        "none",
    )


def test_caller_context_is_frozen() -> None:
    context = CallerContext(subject="alice")

    with pytest.raises(AttributeError):
        context._json = b'{"subject":"root"}'
    with pytest.raises(AttributeError):
        context.extra = 1
    with pytest.raises(AttributeError):
        del context._json

    assert context.as_dict() == {"subject": "alice"}


def test_caller_context_as_dict_returns_detached_copies() -> None:
    context = CallerContext(subject="alice", roles=["analyst"])

    copy = context.as_dict()
    copy["subject"] = "root"
    copy["roles"].append("admin")
    field = context.get("roles")
    field.append("admin")

    assert context.as_dict() == {"subject": "alice", "roles": ["analyst"]}


def test_caller_context_does_not_follow_later_changes_to_the_given_mapping() -> None:
    values: dict[str, Any] = {"subject": "alice", "roles": ["analyst"]}
    context = CallerContext(values)

    values["subject"] = "root"
    values["roles"].append("admin")

    assert context.as_dict() == {"subject": "alice", "roles": ["analyst"]}


def test_caller_context_repr_shows_the_fields() -> None:
    assert repr(CallerContext(subject="alice")) == "CallerContext({'subject': 'alice'})"


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({1: "x"}, id="non-str-key"),
        pytest.param({"n": float("nan")}, id="nan"),
        pytest.param({"n": float("inf")}, id="infinity"),
        pytest.param({"roles": {"a", "b"}}, id="set"),
        pytest.param({"b": b"bytes"}, id="bytes"),
        pytest.param({"o": object()}, id="object"),
        pytest.param({"s": "\ud800"}, id="lone-surrogate"),
        pytest.param({"\udfff": 1}, id="lone-surrogate-key"),
        pytest.param(sized(64 * 1024 + 1), id="over-64-kib"),
        pytest.param(nested(65), id="deeper-than-64"),
        pytest.param(["subject"], id="list-not-object"),
        pytest.param("subject", id="str-not-object"),
        pytest.param(42, id="int-not-object"),
    ],
)
def test_invalid_caller_context_is_refused_with_invalid_context_error(values: Any) -> None:
    with pytest.raises(InvalidContextError) as caught:
        CallerContext(values)

    assert isinstance(caught.value, GatewayError)
    assert caught.value.code == "invalid_context"
    assert caught.value.__cause__ is None


def test_invalid_caller_context_field_is_refused() -> None:
    with pytest.raises(InvalidContextError):
        CallerContext(subject=float("nan"))


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(sized(64 * 1024), id="exactly-64-kib"),
        pytest.param(nested(64), id="exactly-64-deep"),
        pytest.param({"n": 12345678901234567890123456789}, id="big-int"),
        pytest.param({"x": None, "b": True, "f": 1.5, "l": [], "o": {}}, id="json-types"),
    ],
)
def test_caller_context_at_the_limits_is_accepted(values: dict[str, Any]) -> None:
    context = CallerContext(values)

    assert context.as_dict() == values


def test_invalid_context_in_a_block_leaves_the_current_context_unchanged() -> None:
    with caller_context(subject="alice"):
        with pytest.raises(InvalidContextError), caller_context(subject={"a", "b"}):
            pass  # pragma: no cover - never entered
        actual = current_caller().as_dict()

    assert actual == {"subject": "alice"}


# --- scope and propagation -----------------------------------------------------------------


def test_caller_context_block_sets_and_yields_the_context() -> None:
    with caller_context(subject="alice", roles=["analyst"], tenant="acme") as context:
        inside = current_caller()

    assert inside is context
    assert inside.as_dict() == {"subject": "alice", "roles": ["analyst"], "tenant": "acme"}


def test_caller_context_block_accepts_a_caller_context_as_is() -> None:
    given = CallerContext(subject="alice")

    with caller_context(given) as context:
        inside = current_caller()

    assert (context is given, inside is given) == (True, True)


def test_caller_context_block_adds_fields_to_a_given_caller_context() -> None:
    with caller_context(CallerContext(subject="alice"), tenant="acme"):
        actual = current_caller().as_dict()

    assert actual == {"subject": "alice", "tenant": "acme"}


def test_caller_context_does_not_leak_out_of_the_block() -> None:
    with caller_context(subject="alice"):
        pass

    assert current_caller() is EMPTY_CONTEXT


def test_caller_context_is_restored_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError), caller_context(subject="alice"):
        raise RuntimeError("boom")

    assert current_caller() is EMPTY_CONTEXT


def test_nested_caller_context_replaces_rather_than_merges() -> None:
    with caller_context(subject="alice", tenant="acme"):
        with caller_context(tenant="other"):
            inner = current_caller().as_dict()
        outer = current_caller().as_dict()

    assert inner == {"tenant": "other"}
    assert outer == {"subject": "alice", "tenant": "acme"}


async def test_caller_context_propagates_across_await() -> None:
    handoff = asyncio.Event()

    async def read_after_suspending() -> dict[str, Any]:
        waiter = asyncio.create_task(handoff.wait())
        handoff.set()
        await waiter
        return current_caller().as_dict()

    with caller_context(subject="alice"):
        actual = await read_after_suspending()

    assert actual == {"subject": "alice"}


async def test_task_created_inside_the_block_keeps_the_context_after_the_block_ends() -> None:
    start = asyncio.Event()

    async def read_later() -> dict[str, Any]:
        await start.wait()
        return current_caller().as_dict()

    with caller_context(subject="alice"):
        task = asyncio.create_task(read_later())
    start.set()
    actual = await task

    assert actual == {"subject": "alice"}
    assert current_caller() is EMPTY_CONTEXT


async def test_caller_context_propagates_into_task_groups() -> None:
    async def read() -> dict[str, Any]:
        return current_caller().as_dict()

    with caller_context(tenant="acme"):
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(read()) for _ in range(3)]

    assert [task.result() for task in tasks] == [{"tenant": "acme"}] * 3


async def test_caller_context_propagates_into_to_thread() -> None:
    with caller_context(subject="alice"):
        actual = await asyncio.to_thread(lambda: current_caller().as_dict())

    assert actual == {"subject": "alice"}


async def test_concurrent_tasks_each_see_only_their_own_context() -> None:
    both_set = asyncio.Barrier(2)

    async def as_caller(subject: str) -> dict[str, Any]:
        with caller_context(subject=subject):
            await both_set.wait()
            return current_caller().as_dict()

    actual = await asyncio.gather(as_caller("alice"), as_caller("bob"))

    assert list(actual) == [{"subject": "alice"}, {"subject": "bob"}]


# --- arguments can never set context -------------------------------------------------------

SMUGGLING_ARGUMENTS = '{"context": {"subject": "root"}, "subject": "root"}'


@pytest.mark.parametrize(
    ("caller", "expected"),
    [
        pytest.param({"subject": "alice"}, {"subject": "alice"}, id="with-caller-context"),
        pytest.param(None, {}, id="without-caller-context"),
    ],
)
async def test_tool_arguments_never_set_the_context_the_policy_receives(
    caller: dict[str, Any] | None, expected: dict[str, Any]
) -> None:
    authorizer = RecordingAuthorizer(True)
    guard = Guard(tool=RecordingTool("search"), authorizer=authorizer)
    binding = bind(guard)
    invocation = binding.prepare(ToolCall("call-1", "search", SMUGGLING_ARGUMENTS))

    if caller is None:
        await binding.call(invocation)
    else:
        with caller_context(caller):
            await binding.call(invocation)

    authorization, context = authorizer.calls[0]
    assert context.as_dict() == expected
    assert authorization.arguments == SMUGGLING_ARGUMENTS.encode()


async def test_policy_input_document_takes_context_from_the_caller_not_the_arguments() -> None:
    documents: list[InputDocument] = []

    async def decide(document: InputDocument) -> Decision:
        documents.append(document)
        return Decision(True)

    guard = Guard(
        tool=RecordingTool("search"),
        authorizer=CachingAuthorizer(decide, engine="test", path="gateway/authz/decision"),
    )
    binding = bind(guard)
    invocation = binding.prepare(ToolCall("call-1", "search", SMUGGLING_ARGUMENTS))

    with caller_context(subject="alice"):
        await binding.call(invocation)

    document = documents[0].to_dict()
    assert document["context"] == {"subject": "alice"}
    assert document["arguments"] == {"context": {"subject": "root"}, "subject": "root"}


# --- derived contexts: a member added (the request id), then removed ----------------------

_TEXT = st.text(max_size=20)
_CONTEXTS = st.dictionaries(
    st.text(max_size=8),
    st.one_of(st.none(), st.booleans(), st.integers(), _TEXT, st.lists(_TEXT, max_size=3)),
    max_size=5,
)


def _strict(text: str) -> bool:
    try:
        CallerContext({text: text})
    except InvalidContextError:
        return False
    return True


@given(values=_CONTEXTS, name=_TEXT.filter(_strict), value=_TEXT.filter(_strict))
def test_a_member_added_then_removed_gives_the_contexts_built_from_scratch(
    values: dict[str, Any], name: str, value: str
) -> None:
    try:
        base = CallerContext(values)
    except InvalidContextError:
        return
    added = base.with_member(name, value)

    assert added == CallerContext({**values, name: value})
    assert added.digest == CallerContext({**values, name: value}).digest
    without = {key: item for key, item in values.items() if key != name}
    assert added.without_member(name) == CallerContext(without)


def test_removing_the_member_just_added_gives_back_the_context_it_was_added_to() -> None:
    base = CallerContext(subject="alice", roles=["analyst"])
    added = base.with_member("request_id", "r-1")

    assert added.without_member("request_id") is base
    assert added.as_dict() == {"subject": "alice", "roles": ["analyst"], "request_id": "r-1"}


def test_replacing_a_member_then_removing_it_drops_it_altogether() -> None:
    base = CallerContext(subject="alice", request_id="from-the-token")
    replaced = base.with_member("request_id", "r-2")

    assert replaced.get("request_id") == "r-2"
    assert replaced.without_member("request_id") == CallerContext(subject="alice")


def test_removing_a_member_a_context_lacks_gives_the_context_itself() -> None:
    base = CallerContext(subject="alice")
    assert base.without_member("request_id") is base


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("request_id", "\ud800"),  # a lone surrogate
        ("request_id", "\ufdd0"),  # a noncharacter
        ("request_id", "ok\U0010ffff"),
        ("\udfff", "ok"),
        ("\ufffe", "ok"),
        ("request_id", 7),
        (None, "ok"),
    ],
)
def test_a_member_a_policy_could_not_read_is_refused(name: Any, value: Any) -> None:
    with pytest.raises(InvalidContextError):
        CallerContext(subject="alice").with_member(name, value)


def test_a_member_that_makes_the_context_too_large_is_refused() -> None:
    with pytest.raises(InvalidContextError, match="exceeds"):
        CallerContext(subject="alice").with_member("request_id", "x" * (64 * 1024))

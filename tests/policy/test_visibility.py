"""The visibility decision: a listing shows each caller what the policy lets it see.

One batch per listing, cached per revision, tool and caller, fail closed, and consistent
with the call decision of the shipped policies.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import Authorization, ToolDefinition
from gateway.policy import (
    DEFAULT_VISIBILITY_PATH,
    CallerContext,
    DecisionCache,
    EmbeddedEngine,
    EngineError,
    OpaRestEngine,
    PolicyAuthorizer,
    ToolVisibility,
    VisibilityDocument,
    caller_context,
)
from gateway.testing import UNDEFINED, FakeClock, OpaServer, StaticEngine
from tests.policy.conftest import POLICY_DIR, SHIPPED_BUNDLE
from tests.policy.test_rest import MisbehavingOpa, answer

SCHEMA: Final = {"type": "object"}
TOOLS: Final = [
    ToolDefinition(name, SCHEMA, description=f"the {name} tool")
    for name in ("add", "fetch_url", "pay", "read_file", "run_command", "search", "write_file")
]
READER: Final = CallerContext({"subject": "alice", "roles": ["reader"], "tenant": "acme"})
#: A call of each tool the shipped example data allows for the role that grants it.
ALLOWED_CALLS: Final = {
    "read_file": {"path": "/srv/tenants/acme/report.txt"},
    "write_file": {"path": "/srv/tenants/acme/out.txt", "content": "x"},
    "fetch_url": {"url": "https://api.example.com/x"},
    "search": {"query": "x"},
    "add": {"a": 1, "b": 2},
}


def _names(definitions: list[ToolDefinition]) -> list[str]:
    return [definition.name for definition in definitions]


@pytest.fixture(scope="module")
def shipped() -> Iterator[EmbeddedEngine]:
    engine = EmbeddedEngine.from_bundle(SHIPPED_BUNDLE)
    yield engine
    engine.close()


async def test_the_shipped_policy_shows_a_reader_only_the_tools_its_role_grants(
    shipped: EmbeddedEngine,
) -> None:
    visibility = ToolVisibility(shipped)
    shown = await visibility.visible(TOOLS, READER)
    assert _names(shown) == ["add", "fetch_url", "read_file", "search"]


@pytest.mark.parametrize(
    "context",
    [
        pytest.param({}, id="empty"),
        pytest.param({"roles": ["reader"], "tenant": "acme"}, id="no-subject"),
        pytest.param({"subject": "alice", "roles": ["reader"], "tenant": "nowhere"}, id="tenant"),
        pytest.param(
            {"subject": "alice", "roles": ["reader"], "actor": {"subject": "x"}}, id="agent"
        ),
    ],
)
async def test_the_shipped_policy_shows_an_invalid_caller_nothing(
    shipped: EmbeddedEngine, context: dict[str, Any]
) -> None:
    assert await ToolVisibility(shipped).visible(TOOLS, CallerContext(context)) == []


async def test_an_acting_agent_sees_only_what_it_is_entrusted_with(
    shipped: EmbeddedEngine,
) -> None:
    agent = CallerContext({**json.loads(READER.json), "actor": {"subject": "report-bot"}})
    assert _names(await ToolVisibility(shipped).visible(TOOLS, agent)) == ["read_file", "search"]


async def test_the_caller_in_force_is_the_default(shipped: EmbeddedEngine) -> None:
    with caller_context(READER):
        shown = await ToolVisibility(shipped).visible(TOOLS)
    assert "read_file" in _names(shown)


@settings(max_examples=40, deadline=None)
@given(
    roles=st.lists(st.sampled_from(["reader", "writer", "analyst", "clerk", "x"]), max_size=3),
    tenant=st.sampled_from(["acme", "globex", None]),
    actor=st.sampled_from([None, "report-bot", "other-bot"]),
)
async def test_an_allowed_call_is_always_of_a_listed_tool_and_an_unlisted_tool_is_refused(
    shipped: EmbeddedEngine, roles: list[str], tenant: str | None, actor: str | None
) -> None:
    fields: dict[str, Any] = {"subject": "alice", "roles": roles}
    if tenant is not None:
        fields["tenant"] = tenant
    if actor is not None:
        fields["actor"] = {"subject": actor}
    caller = CallerContext(fields)
    shown = set(_names(await ToolVisibility(shipped).visible(TOOLS, caller)))
    authorizer = PolicyAuthorizer(shipped)
    for definition in TOOLS:
        arguments = json.dumps(ALLOWED_CALLS.get(definition.name, {})).encode()
        with caller_context(caller):
            decision = await authorizer.authorize(Authorization(definition, arguments))
        if decision.allowed:
            assert definition.name in shown, "a caller could call a tool it is not shown"
        if definition.name not in shown:
            assert not decision.allowed


def test_the_visibility_input_has_the_tool_and_the_caller_and_no_arguments() -> None:
    document = VisibilityDocument(TOOLS[0], READER).to_dict()
    assert set(document) == {"tool", "context", "visibility"}
    assert document["visibility"] == {"version": 1}
    assert document["context"] == json.loads(READER.json)
    assert document["tool"]["name"] == "add"


def test_the_visibility_digest_changes_with_the_tool_and_the_caller_only() -> None:
    one = VisibilityDocument(TOOLS[0], READER).digest
    assert one == VisibilityDocument(TOOLS[0], CallerContext(json.loads(READER.json))).digest
    assert one != VisibilityDocument(TOOLS[1], READER).digest
    assert one != VisibilityDocument(TOOLS[0], CallerContext({"subject": "bob"})).digest


# -- fail closed ------------------------------------------------------------------------------


def _by_name(answers: dict[str, Any]) -> Any:
    def answer_for(document: dict[str, Any]) -> Any:
        result = answers[document["tool"]["name"]]
        if isinstance(result, Exception):
            raise result
        return result

    return answer_for


async def test_a_tool_whose_visibility_is_not_decided_is_not_listed() -> None:
    engine = StaticEngine(
        {
            DEFAULT_VISIBILITY_PATH: _by_name(
                {
                    "add": True,
                    "fetch_url": UNDEFINED,
                    "pay": {"allow": "yes"},
                    "read_file": EngineError("fault"),
                    "run_command": {"allow": True, "extra": 1},
                    "search": {"allow": True, "cache": {"ttl_s": 5}},
                    "write_file": 1,
                }
            )
        }
    )
    shown = await ToolVisibility(engine).visible(TOOLS, READER)
    assert _names(shown) == ["add", "search"]


async def test_a_failed_listing_round_trip_lists_nothing() -> None:
    async with (
        MisbehavingOpa(answer(500, b'{"code":"internal_error"}')) as server,
        OpaRestEngine(server.url, revision_interval=0) as engine,
    ):
        assert await ToolVisibility(engine).visible(TOOLS, READER) == []


async def test_without_a_visibility_rule_nothing_is_listed() -> None:
    assert await ToolVisibility(StaticEngine()).visible(TOOLS, READER) == []


# -- one batch, cached -------------------------------------------------------------------------


async def test_a_listing_is_one_request_to_opa_and_a_warm_listing_none() -> None:
    items = ",".join(f'"{i}":[{{"allow":true,"cache":{{"ttl_s":30}}}}]' for i in range(len(TOOLS)))
    body = f'{{"result":[{{"r":{{{items}}}}}]}}'.encode()
    async with (
        MisbehavingOpa(answer(200, body)) as server,
        OpaRestEngine(server.url, revision_interval=0) as engine,
    ):
        visibility = ToolVisibility(engine, cache=DecisionCache())
        assert len(await visibility.visible(TOOLS, READER)) == len(TOOLS)
        assert len(server.decisions) == 1
        assert len(await visibility.visible(TOOLS, READER)) == len(TOOLS)
        assert len(server.decisions) == 1


async def test_a_real_opa_decides_a_listing_as_the_embedded_engine_does(
    opa_binary: str, shipped: EmbeddedEngine
) -> None:
    with OpaServer(binary=opa_binary, policy_paths=[POLICY_DIR]) as server:
        async with OpaRestEngine(server.url, revision_interval=0) as rest:
            over_rest = await ToolVisibility(rest).visible(TOOLS, READER)
    assert over_rest == await ToolVisibility(shipped).visible(TOOLS, READER)


async def test_visibility_is_cached_per_revision_tool_and_caller() -> None:
    engine = StaticEngine({DEFAULT_VISIBILITY_PATH: {"allow": True, "cache": {"ttl_s": 30}}})
    visibility = ToolVisibility(engine, cache=DecisionCache(clock=FakeClock()))
    await visibility.visible(TOOLS, READER)
    assert engine.count == len(TOOLS)
    await visibility.visible(TOOLS, READER)
    assert engine.count == len(TOOLS), "a warm listing asked the engine"
    await visibility.visible(TOOLS[:2], CallerContext({"subject": "bob"}))
    assert engine.count == len(TOOLS) + 2, "another caller shared an entry"
    engine.set_revision("static-2")
    await visibility.visible(TOOLS, READER)
    assert engine.count == 2 * len(TOOLS) + 2, "a new revision reused an old entry"


async def test_a_visibility_decision_lives_no_longer_than_its_ttl() -> None:
    clock = FakeClock()
    engine = StaticEngine({DEFAULT_VISIBILITY_PATH: {"allow": True, "cache": {"ttl_s": 10}}})
    visibility = ToolVisibility(engine, cache=DecisionCache(clock=clock))
    await visibility.visible(TOOLS[:1], READER)
    clock.advance(10)
    await visibility.visible(TOOLS[:1], READER)
    assert engine.count == 2


async def test_a_visibility_decision_with_ttl_zero_is_not_cached() -> None:
    engine = StaticEngine({DEFAULT_VISIBILITY_PATH: {"allow": True, "cache": {"ttl_s": 0}}})
    visibility = ToolVisibility(engine, cache=DecisionCache(clock=FakeClock()))
    await visibility.visible(TOOLS[:1], READER)
    await visibility.visible(TOOLS[:1], READER)
    assert engine.count == 2


async def test_an_undecided_visibility_is_never_cached() -> None:
    engine = StaticEngine()
    visibility = ToolVisibility(engine, cache=DecisionCache(default_ttl=30, clock=FakeClock()))
    await visibility.visible(TOOLS[:1], READER)
    engine.set_answer(DEFAULT_VISIBILITY_PATH, True)
    assert _names(await visibility.visible(TOOLS[:1], READER)) == ["add"]

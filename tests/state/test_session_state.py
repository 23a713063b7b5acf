"""Session history, labels and quotas through the call pipeline, on the in-process backend."""

from __future__ import annotations

import asyncio
import json

import pytest

from gateway import Authorization, Guard, ToolCall, bind
from gateway.policy import DecisionCache, PolicyAuthorizer, caller_context
from gateway.service import ResultCode
from gateway.state import (
    QUOTA_MESSAGE,
    MemoryStateStore,
    StatefulAuthorizer,
    StateSettings,
    session_context,
)
from gateway.testing import FakeClock, RecordingTool, StaticEngine
from tests.state.helpers import ALICE, BOB, PATH, build, call, decide


async def test_labels_of_an_allowed_call_reach_the_next_decision_of_the_session() -> None:
    gateway, engine, _tools = build(MemoryStateStore(), reads=frozenset({"send_email", "echo"}))

    await gateway.call(call("read_secret"), caller=ALICE, session="s1")
    await gateway.call(call("echo"), caller=ALICE, session="s1")

    state = engine.calls[-1][1]["state"]
    assert state["version"] == 1
    assert state["session"]["labels"] == ["reads_secret"]
    assert state["session"]["calls"] == 1
    assert state["session"]["history"] == [
        {"tool": "read_secret", "labels": ["reads_secret"], "outcome": "ok"}
    ]
    assert state["session"]["tools"] == {"read_secret": {"allowed": 1, "ok": 1}}


async def test_the_lethal_trifecta_refuses_egress_and_either_leg_alone_does_not() -> None:
    gateway, _engine, tools = build(MemoryStateStore())

    await gateway.call(call("read_secret"), caller=ALICE, session="s1")
    alone = await gateway.call(call("send_email", 1), caller=ALICE, session="s1")
    await gateway.call(call("fetch_page"), caller=ALICE, session="s1")
    refused = await gateway.call(call("send_email", 2), caller=ALICE, session="s1")
    other_session = await gateway.call(call("send_email", 3), caller=ALICE, session="s2")

    assert alone.code == "ok"
    assert refused.code == ResultCode.DENIED
    assert refused.message == "no external egress in this session"
    assert other_session.code == "ok"
    assert tools["send_email"].count == 2


async def test_another_caller_naming_the_same_session_sees_nothing_of_it() -> None:
    gateway, _engine, _tools = build(MemoryStateStore())
    await gateway.call(call("read_secret"), caller=ALICE, session="shared")
    await gateway.call(call("fetch_page"), caller=ALICE, session="shared")

    bob = await gateway.call(call("send_email"), caller=BOB, session="shared")
    alice = await gateway.call(call("send_email", 1), caller=ALICE, session="shared")

    assert bob.code == "ok"
    assert alice.code == ResultCode.DENIED


async def test_a_denied_call_attaches_no_labels_and_is_not_counted() -> None:
    store = MemoryStateStore()
    gateway, engine, _tools = build(store, reads=frozenset({"send_email"}))
    engine.set_answer(PATH, lambda d: {"allow": False, "labels": ["reads_secret"]})
    await gateway.call(call("read_secret"), caller=ALICE, session="s1")
    engine.set_answer(PATH, decide)

    result = await gateway.call(call("send_email"), caller=ALICE, session="s1")

    state = engine.calls[-1][1]["state"]
    assert state["session"] == {"calls": 0, "labels": [], "tools": {}, "history": []}
    assert result.code == "ok"


async def test_egress_without_a_session_is_refused() -> None:
    gateway, _engine, tools = build(MemoryStateStore())

    result = await gateway.call(call("send_email"), caller=ALICE)

    assert result.code == ResultCode.DENIED
    assert tools["send_email"].count == 0


async def test_concurrent_calls_never_run_more_often_than_the_quota() -> None:
    gateway, _engine, tools = build(MemoryStateStore(), interleave=True)

    results = await asyncio.gather(
        *(gateway.call(call("pay", n), caller=ALICE, session=f"s{n}") for n in range(40))
    )

    assert tools["pay"].count == 5
    assert sum(r.code == "ok" for r in results) == 5
    refused = {r.message for r in results if r.code != "ok"}
    assert refused <= {"the payment quota is used up", QUOTA_MESSAGE}


async def test_a_quota_reached_between_decision_and_reservation_refuses_the_call() -> None:
    # The policy allows on any count (it reads none); only the reservation holds the line.
    store = MemoryStateStore()
    gateway, engine, tools = build(store, reads=frozenset())
    quota = [{"scope": "caller", "window_s": 60, "limit": 2}]
    engine.set_answer(PATH, {"allow": True, "quotas": quota})

    results = [await gateway.call(call("echo", n), caller=ALICE) for n in range(4)]

    assert [r.code for r in results] == ["ok", "ok", "denied", "denied"]
    assert results[-1].message == QUOTA_MESSAGE
    assert tools["echo"].count == 2


async def test_counts_are_per_fixed_window_of_the_stores_clock() -> None:
    clock = FakeClock(start=3600.0 * 10)
    gateway, _engine, tools = build(MemoryStateStore(clock=clock))
    for n in range(7):
        await gateway.call(call("pay", n), caller=ALICE)
    clock.advance(3600)
    later = await gateway.call(call("pay", 99), caller=ALICE)

    assert later.code == "ok"
    assert tools["pay"].count == 6


async def test_decisions_on_state_are_never_cached_and_the_others_still_are() -> None:
    cache = DecisionCache(maxsize=100, max_ttl=60, default_ttl=60)
    gateway, engine, _tools = build(MemoryStateStore(), cache=cache)

    for n in range(3):
        await gateway.call(call("send_email", n), caller=ALICE, session="s1")
    stateful = len(engine.calls)
    for n in range(3):
        await gateway.call(call("echo", n), caller=ALICE, session="s1")

    assert stateful == 3
    assert len(engine.calls) == 4


async def test_a_quota_on_a_window_not_counted_or_a_missing_scope_fails_closed() -> None:
    gateway, engine, tools = build(MemoryStateStore(), reads=frozenset())
    engine.set_answer(
        PATH, {"allow": True, "quotas": [{"scope": "caller", "window_s": 7, "limit": 9}]}
    )
    odd_window = await gateway.call(call("echo"), caller=ALICE)
    engine.set_answer(
        PATH, {"allow": True, "quotas": [{"scope": "session", "window_s": 60, "limit": 9}]}
    )
    no_session = await gateway.call(call("echo", 1), caller=ALICE)

    assert odd_window.code == no_session.code == "malformed_decision"
    assert tools["echo"].count == 0


async def test_the_history_keeps_the_last_calls_only() -> None:
    store = MemoryStateStore()
    engine = StaticEngine({PATH: lambda d: {"allow": True, "labels": []}})
    tool = RecordingTool("echo")
    authorizer = StatefulAuthorizer(
        PolicyAuthorizer(engine, path=PATH),
        store,
        settings=StateSettings(tools=frozenset({"*"}), history_max=3),
    )
    from gateway.service import Gateway

    gateway = Gateway([tool], authorizer=authorizer)
    for n in range(6):
        await gateway.call(ToolCall(f"c{n}", "echo", "{}"), caller=ALICE, session="s")

    session = engine.calls[-1][1]["state"]["session"]
    assert session["calls"] == 5
    assert len(session["history"]) == 3


async def test_a_session_id_that_is_not_visible_ascii_is_refused_before_anything_runs() -> None:
    gateway, engine, _tools = build(MemoryStateStore())

    for bad in ("", "a b", "x" * 257, "é", "a\nb"):
        result = await gateway.call(call("echo"), caller=ALICE, session=bad)
        assert result.code == "malformed_request"
    assert engine.calls == []


async def test_a_guard_over_the_stateful_authorizer_enforces_the_trifecta() -> None:
    store = MemoryStateStore()
    authorizer = StatefulAuthorizer(
        PolicyAuthorizer(StaticEngine({PATH: decide}), path=PATH),
        store,
        settings=StateSettings(tools=frozenset({"send_email"})),
    )
    guards = {name: bind(Guard(tool=RecordingTool(name), authorizer=authorizer)) for name in
              ("read_secret", "fetch_page", "send_email")}  # fmt: skip

    with caller_context(ALICE), session_context("g1"):
        for name in ("read_secret", "fetch_page"):
            await guards[name].call(guards[name].prepare(ToolCall("1", name, "{}")))
        email = guards["send_email"]
        from gateway import Failure

        with pytest.raises(Failure) as refused:
            await email.call(email.prepare(ToolCall("2", "send_email", "{}")))
    assert refused.value.output.text() == "no external egress in this session"


async def test_the_state_input_is_canonical_json_in_the_document() -> None:
    store = MemoryStateStore()
    engine = StaticEngine({PATH: True})
    authorizer = StatefulAuthorizer(
        PolicyAuthorizer(engine, path=PATH),
        store,
        settings=StateSettings(tools=frozenset({"*"}), windows=(60,)),
    )
    from gateway import ToolDefinition

    with caller_context(ALICE), session_context("s"):
        await authorizer.authorize(Authorization(ToolDefinition("echo", {"type": "object"}), b"{}"))
    state = engine.calls[-1][1]["state"]
    assert json.dumps(state["counts"], sort_keys=True) == json.dumps(
        {
            scope: {"60": 0}
            for scope in ("caller", "caller_tool", "session", "session_tool", "tenant",
                          "tenant_tool")
        },
        sort_keys=True,
    )  # fmt: skip


async def test_labels_added_while_egress_is_decided_make_it_decided_again() -> None:
    # fetch_page's labels land between send_email's read of the session and its
    # reservation: send_email is decided again on the new labels, not run on the old.
    gateway, _engine, tools = build(MemoryStateStore(), interleave=True)
    await gateway.call(call("read_secret"), caller=ALICE, session="s1")

    fetched, sent = await asyncio.gather(
        gateway.call(call("fetch_page"), caller=ALICE, session="s1"),
        gateway.call(call("send_email"), caller=ALICE, session="s1"),
    )

    assert fetched.code == "ok"
    assert sent.code == ResultCode.DENIED
    assert tools["send_email"].count == 0

"""Shadow evaluation: the candidate decides every call too, and never changes or delays it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway import Authorization, Decision, ToolDefinition
from gateway.audit import AuditingAuthorizer, AuditTrail, MemorySink
from gateway.policy import (
    CallerContext,
    EmbeddedEngine,
    EngineUnavailableError,
    PolicyAuthorizer,
    caller_context,
)
from gateway.policy._engine import PolicyEngine
from gateway.replay import DecisionTap, ObservedAuthorizer, ShadowEvaluator
from gateway.testing import GatedEngine, StaticEngine
from tests.replay.conftest import CALLS, SCHEMA, Call, expected_changes

PATH = "gateway/authz/decision"


def _pipeline(
    enforced: PolicyEngine, shadow: ShadowEvaluator | None, sink: MemorySink
) -> AuditingAuthorizer:
    trail = AuditTrail(DecisionTap(sink, shadow=shadow))
    return AuditingAuthorizer(ObservedAuthorizer(PolicyAuthorizer(enforced)), trail)


def _shadow(candidate: PolicyEngine, sink: MemorySink, **options: Any) -> ShadowEvaluator:
    return ShadowEvaluator(candidate, path=PATH, record=sink.submit, **options)


async def _decide(authorizer: AuditingAuthorizer, call: Call) -> Decision | str:
    context = CallerContext({"subject": "s", "roles": list(call.roles)})
    with caller_context(context):
        try:
            result = await authorizer.authorize(
                Authorization(ToolDefinition(call.tool, SCHEMA), call.arguments)
            )
        except Exception as exc:
            return str(getattr(exc, "code", "error"))
    assert isinstance(result, Decision)
    return result


def _shadow_records(sink: MemorySink) -> list[dict[str, Any]]:
    return [record for record in sink.records if record["type"] == "shadow"]


def _decision_ids(sink: MemorySink) -> list[str]:
    return [record["decision_id"] for record in sink.records if record["type"] == "decision"]


async def test_every_disagreement_of_a_real_candidate_becomes_a_shadow_record_and_a_count(
    baseline_engine: EmbeddedEngine, candidate_engine: EmbeddedEngine
) -> None:
    sink = MemorySink()
    seen: list[tuple[str, str | None]] = []
    shadow = _shadow(candidate_engine, sink, on_result=lambda *pair: seen.append(pair))
    authorizer = _pipeline(baseline_engine, shadow, sink)

    for call in CALLS:
        await _decide(authorizer, call)
    await shadow.drain()

    ids = _decision_ids(sink)
    records = _shadow_records(sink)
    assert {r["decision_id"]: r["change"] for r in records} == {
        ids[n]: call.change for n, call in enumerate(CALLS) if call.change
    }
    assert shadow.stats().disagreed == expected_changes()
    assert shadow.stats().agreed == sum(1 for call in CALLS if call.change is None)
    assert seen == [(call.tool, call.change) for call in CALLS]
    flip = next(r for r in records if r["change"] == "deny-to-allow")
    assert flip["enforced"] == {"result": "deny", "code": "denied"}
    assert flip["candidate"] == {"result": "allow", "code": None}
    assert "hunter2" not in repr(sink.records)


async def test_the_candidate_never_changes_the_enforced_outcome(
    baseline_engine: EmbeddedEngine, candidate_engine: EmbeddedEngine
) -> None:
    sink = MemorySink()
    with_shadow = _pipeline(baseline_engine, _shadow(candidate_engine, sink), sink)
    alone = _pipeline(baseline_engine, None, MemorySink())

    for call in CALLS:
        shadowed, plain = await _decide(with_shadow, call), await _decide(alone, call)
        if isinstance(shadowed, Decision) and isinstance(plain, Decision):
            assert (shadowed.allowed, shadowed.message, shadowed.reasons) == (
                plain.allowed,
                plain.message,
                plain.reasons,
            )
        else:
            assert shadowed == plain


async def test_the_call_is_answered_while_the_candidate_is_still_waiting() -> None:
    sink = MemorySink()
    candidate = GatedEngine(StaticEngine({PATH: {"allow": False}}))
    shadow = _shadow(candidate, sink)
    authorizer = _pipeline(StaticEngine({PATH: {"allow": True}}), shadow, sink)

    decision = await _decide(authorizer, CALLS[0])
    await asyncio.sleep(0)  # let the worker reach the gate

    assert isinstance(decision, Decision)
    assert decision.allowed is True
    assert candidate.waiting == 1
    candidate.gate.set()
    await shadow.drain()
    assert [r["change"] for r in _shadow_records(sink)] == ["allow-to-deny"]


async def test_when_the_queue_is_full_evaluations_are_dropped_and_counted_never_awaited() -> None:
    sink = MemorySink()
    candidate = GatedEngine(StaticEngine({PATH: {"allow": False}}))
    shadow = _shadow(candidate, sink, queue_size=2, workers=1)
    authorizer = _pipeline(StaticEngine({PATH: {"allow": True}}), shadow, sink)

    await _decide(authorizer, CALLS[0])
    await asyncio.sleep(0)  # the worker takes the first and waits at the gate
    for _ in range(6):
        assert isinstance(await _decide(authorizer, CALLS[0]), Decision)

    stats = shadow.stats()
    assert (stats.submitted, stats.dropped) == (7, 4)  # one in flight, two queued
    candidate.gate.set()
    await shadow.drain()
    stats = shadow.stats()
    assert stats.evaluated + stats.dropped == stats.submitted
    assert len(_shadow_records(sink)) == 3


async def test_a_candidate_slower_than_the_budget_is_counted_as_timed_out_and_not_recorded() -> (
    None
):
    sink = MemorySink()
    candidate = GatedEngine(StaticEngine({PATH: {"allow": False}}))  # the gate never opens
    shadow = _shadow(candidate, sink, budget_s=0.01)
    authorizer = _pipeline(StaticEngine({PATH: {"allow": True}}), shadow, sink)

    await _decide(authorizer, CALLS[0])
    await shadow.drain()

    assert shadow.stats().timed_out == 1
    assert _shadow_records(sink) == []


async def test_a_failing_candidate_is_an_error_outcome_and_the_call_is_unaffected() -> None:
    def broken(_: dict[str, Any]) -> Any:
        raise EngineUnavailableError("candidate down: secret-text")

    sink = MemorySink()
    shadow = _shadow(StaticEngine({PATH: broken}), sink)
    authorizer = _pipeline(StaticEngine({PATH: {"allow": True}}), shadow, sink)

    decision = await _decide(authorizer, CALLS[0])
    await shadow.drain()

    assert isinstance(decision, Decision)
    assert decision.allowed is True
    (record,) = _shadow_records(sink)
    assert record["change"] == "allow-to-error"
    assert record["candidate"] == {"result": "error", "code": "engine_unavailable"}
    assert "secret-text" not in repr(sink.records)


async def test_a_shadow_record_that_cannot_be_written_is_counted_and_never_fails_a_call() -> None:
    sink = MemorySink()

    def unwritable(record: dict[str, Any]) -> Any:
        raise OSError("disk full")

    def rejected(record: dict[str, Any]) -> Any:
        failing = MemorySink()
        failing.failing = True
        return failing.submit(record)

    for record in (unwritable, rejected):
        shadow = ShadowEvaluator(StaticEngine({PATH: {"allow": False}}), path=PATH, record=record)
        authorizer = _pipeline(StaticEngine({PATH: {"allow": True}}), shadow, sink)

        decision = await _decide(authorizer, CALLS[0])
        await shadow.drain()

        assert isinstance(decision, Decision)
        assert decision.allowed is True
        assert shadow.stats().failed == 1


async def test_an_enforced_error_is_compared_too_and_linked_by_its_decision_id() -> None:
    sink = MemorySink()
    shadow = _shadow(StaticEngine({PATH: {"allow": True}}), sink)
    authorizer = _pipeline(StaticEngine({}), shadow, sink)  # undefined: no decision

    assert await _decide(authorizer, CALLS[0]) == "undefined_decision"
    await shadow.drain()

    (record,) = _shadow_records(sink)
    assert record["change"] == "error-to-allow"
    assert record["decision_id"] == _decision_ids(sink)[0]


async def test_a_closed_evaluator_drops_and_counts_what_it_is_given() -> None:
    sink = MemorySink()
    candidate = GatedEngine(StaticEngine({PATH: {"allow": False}}))
    shadow = _shadow(candidate, sink)
    authorizer = _pipeline(StaticEngine({PATH: {"allow": True}}), shadow, sink)
    await _decide(authorizer, CALLS[0])
    await _decide(authorizer, CALLS[0])
    await asyncio.sleep(0)

    await shadow.aclose()
    await _decide(authorizer, CALLS[0])

    stats = shadow.stats()
    assert (stats.submitted, stats.dropped, stats.evaluated) == (3, 2, 0)


def test_without_a_running_loop_a_submission_is_dropped_and_counted() -> None:
    shadow = ShadowEvaluator(StaticEngine({PATH: True}), path=PATH)
    observation: Any = None

    assert shadow.submit("d-1", observation) is False
    assert shadow.stats().dropped == 1


@pytest.mark.parametrize(
    "options", [{"queue_size": 0}, {"workers": 0}, {"budget_s": 0}, {"budget_s": float("nan")}]
)
def test_an_evaluator_refuses_unbounded_or_empty_settings(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="queue_size"):
        ShadowEvaluator(StaticEngine({}), **options)

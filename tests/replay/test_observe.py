"""The decision tap links each decision record to the input its policy saw, or to nothing."""

from __future__ import annotations

from pathlib import Path

from gateway import Authorization, ToolDefinition
from gateway.audit import AuditingAuthorizer, AuditTrail, MemorySink
from gateway.policy import CallerContext, PolicyAuthorizer, caller_context
from gateway.replay import (
    Captured,
    DecisionTap,
    KeyRing,
    ObservedAuthorizer,
    ReplayCapture,
    index_captures,
    open_capture,
)
from gateway.testing import StaticAuthorizer, StaticEngine
from tests.replay.conftest import SCHEMA, key_entry

PATH = "gateway/authz/decision"
RING = KeyRing.parse(key_entry("k1", 1))


def _opened(folder: Path) -> dict[str, Captured | str]:
    index = index_captures(folder)
    try:
        found: dict[str, Captured | str] = {}
        for decision_id in index.entries:
            line = index.read(decision_id)
            assert line is not None
            found[decision_id] = open_capture(line, decision_id, RING)
        return found
    finally:
        index.close()


async def test_the_capture_holds_the_exact_document_the_policy_saw_under_the_records_id(
    tmp_path: Path,
) -> None:
    engine = StaticEngine({PATH: {"allow": False, "message": "no", "reasons": ["r"]}})
    sink = MemorySink()
    capture = ReplayCapture(tmp_path, RING)
    trail = AuditTrail(DecisionTap(sink, capture=capture))
    authorizer = AuditingAuthorizer(ObservedAuthorizer(PolicyAuthorizer(engine)), trail)
    arguments = b'{"b": 1.50, "a": {"password": "hunter2"}}'

    with caller_context(CallerContext({"subject": "s", "roles": ["x"]})):
        await authorizer.authorize(Authorization(ToolDefinition("t", SCHEMA), arguments))
    capture.close()

    (record,) = sink.records
    assert "hunter2" not in repr(record)  # masked in the trail ...
    opened = _opened(tmp_path)[record["decision_id"]]
    assert isinstance(opened, Captured)
    assert b'"password":"hunter2"' in opened.document  # ... whole in the capture
    assert b'"b":1.50' in opened.document  # numbers exactly as admitted
    (seen,) = engine.calls
    assert seen[1]["arguments"]["a"] == {"password": "hunter2"}
    assert (opened.recorded.result, opened.recorded.message, opened.recorded.reasons) == (
        "deny",
        "no",
        ("r",),
    )
    assert opened.roles == ("x",)


async def test_a_decision_record_without_an_observation_is_counted_and_not_captured(
    tmp_path: Path,
) -> None:
    sink = MemorySink()
    capture = ReplayCapture(tmp_path, RING)
    tap = DecisionTap(sink, capture=capture)
    authorizer = AuditingAuthorizer(StaticAuthorizer(True), AuditTrail(tap))  # not observed

    await authorizer.authorize(Authorization(ToolDefinition("t", SCHEMA), b"{}"))
    capture.close()

    assert tap.unobserved == 1
    assert capture.written == 0
    assert len(sink.records) == 1


async def test_an_observation_is_used_once_and_only_for_its_own_tool_and_arguments(
    tmp_path: Path,
) -> None:
    sink = MemorySink()
    capture = ReplayCapture(tmp_path, RING)
    tap = DecisionTap(sink, capture=capture)
    trail = AuditTrail(tap)
    observed = ObservedAuthorizer(StaticAuthorizer(True))
    plain = AuditingAuthorizer(StaticAuthorizer(True), trail)

    # Noted for one call, never recorded; then another call's record passes the tap.
    await observed.authorize(Authorization(ToolDefinition("t", SCHEMA), b'{"a": 1}'))
    await plain.authorize(Authorization(ToolDefinition("u", SCHEMA), b'{"a": 1}'))
    await observed.authorize(Authorization(ToolDefinition("t", SCHEMA), b'{"a": 1}'))
    await plain.authorize(Authorization(ToolDefinition("t", SCHEMA), b'{"a": 2}'))
    capture.close()

    assert (tap.unobserved, capture.written) == (2, 0)


async def test_the_tap_passes_every_record_on_unchanged(tmp_path: Path) -> None:
    tapped, direct = MemorySink(), MemorySink()
    capture = ReplayCapture(tmp_path, RING)
    for sink in (DecisionTap(tapped, capture=capture), direct):
        trail = AuditTrail(sink, wall_clock=lambda: 0.0, timer=lambda: 0.0, new_id=lambda: "d1")
        authorizer = AuditingAuthorizer(ObservedAuthorizer(StaticAuthorizer(False)), trail)
        await authorizer.authorize(Authorization(ToolDefinition("t", SCHEMA), b"{}"))
    capture.close()

    assert tapped.records == direct.records

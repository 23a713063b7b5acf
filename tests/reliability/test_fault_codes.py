"""How the fault matrix classifies each call's code by when the call ran."""

from __future__ import annotations

from reliability.faults import (
    AT_A_TRANSITION,
    FAULTS,
    CallRecord,
    FaultResult,
    Timeline,
    _check_codes,
)

FAULT = next(fault for fault in FAULTS if fault.name == "policy_undefined")
# Injected at 10, in force from 11 to 20, cleared at 21; recovered at 22.
TIMELINE = Timeline(injected=10.0, active=11.0, clearing=20.0, cleared=21.0)


def _classify(*calls: CallRecord) -> FaultResult:
    result = FaultResult(
        fault=FAULT.name, description=FAULT.description, expected_code=FAULT.expected
    )
    _check_codes(result, FAULT, calls, TIMELINE, 22.0, drain_s=1.0)
    return result


def _call(kind: str, started: float, ended: float, code: str) -> CallRecord:
    return CallRecord(f"{kind}-{started}", kind, started, ended, code, None)


def test_an_engine_timeout_at_a_transition_fails_closed_and_is_no_wrong_code() -> None:
    assert "engine_timeout" in AT_A_TRANSITION
    result = _classify(
        _call("allowed", 10.2, 11.5, "engine_timeout"),
        _call("denied", 19.5, 21.5, "engine_timeout"),
    )
    assert result.wrong_codes == 0


def test_an_engine_timeout_before_the_fault_in_it_or_after_recovery_is_a_wrong_code() -> None:
    result = _classify(
        _call("allowed", 1.0, 2.0, "engine_timeout"),
        _call("allowed", 12.0, 13.0, "engine_timeout"),
        _call("allowed", 24.0, 25.0, "engine_timeout"),
    )
    assert result.wrong_codes == 3
    assert result.failures_after_recovery == 1


def test_an_allow_for_a_denied_caller_at_a_transition_is_a_wrong_code() -> None:
    result = _classify(_call("denied", 10.2, 10.5, "ok"))
    assert result.wrong_codes == 1

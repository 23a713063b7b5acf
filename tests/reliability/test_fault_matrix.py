"""The fault matrix, reduced for CI: each fault once, eight callers, short phases.

Every fault must end with zero executions without an explicit allow, the fault's own code
for every call made while it was in force, recovery without any restart of the gateway,
and an audit trail that accounts for every call and verifies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

from reliability.faults import (
    FAULTS,
    Fault,
    FaultEnvironment,
    FaultResult,
    MatrixConfig,
    run_fault,
    run_revocation,
)

#: Eight callers, a 0.4 s deadline, each fault held for three deadlines.
CI: Final = MatrixConfig(
    callers=8, timeout=0.4, baseline=0.3, duration=1.2, settle=0.8, recovery_limit=10.0
)


def assert_held(result: FaultResult) -> None:
    """Every property of one fault, with what went wrong in the message."""
    facts = result.to_json()
    assert result.calls_in_fault > 0, facts
    assert result.executions > 0, facts
    assert result.unauthorized_executions == 0, facts
    assert result.denied_caller_executions == 0, facts
    assert result.executions_not_ok == 0, facts
    assert result.ok_not_executed == 0, facts
    assert result.codes_in_fault == {result.expected_code: result.calls_in_fault}, facts
    assert result.wrong_codes == 0, result.wrong_code_examples
    assert result.undocumented_codes == 0, facts
    assert result.recovered, facts
    assert result.failures_after_recovery == 0, facts
    assert result.lost_records == 0, result.audit_problems
    assert result.extra_records == 0, result.audit_problems
    assert result.mismatched_records == 0, result.audit_problems
    assert result.decision_records + result.refusal_records == result.calls, facts
    assert result.outcome_records + result.refusal_records == result.calls, facts
    assert result.trail_verified, result.trail_error
    assert result.trail_records == result.decision_records * 2 + result.refusal_records
    assert result.passed


@pytest.mark.parametrize("fault", FAULTS, ids=[fault.name for fault in FAULTS])
async def test_fault_under_load(
    fault: Fault, environment: FaultEnvironment, tmp_path: Path
) -> None:
    result = await run_fault(environment, fault, CI, tmp_path)

    assert_held(result)
    # A frozen or dripping engine costs at most the deadline (plus scheduling slack).
    assert result.max_fault_latency_s < CI.timeout + 1.5
    assert result.recovery_s is not None
    assert result.recovery_s < CI.timeout + 3.0


async def test_a_revoked_permission_stops_being_served_from_the_cache_within_the_bound(
    environment: FaultEnvironment, tmp_path: Path
) -> None:
    result = await run_revocation(environment, CI, tmp_path, revision_interval=0.3, hold=1.5)

    facts = result.to_json()
    assert result.cache_hits > 0, facts  # the cache was really in play
    assert result.revision_seen_s is not None, facts
    # The documented bound, plus scheduling slack for a loaded 2-core CI machine (the
    # harness itself reports the bound strictly).
    assert result.last_allow_after_change_s is None or (
        result.last_allow_after_change_s <= result.bound_s + 0.5
    ), facts
    assert result.denied_after_bound > 0, facts
    assert result.allowed_again_s is not None, facts
    assert result.unauthorized_executions == 0, facts
    assert result.executions_not_ok == 0, facts
    assert (result.lost_records, result.extra_records, result.mismatched_records) == (0, 0, 0)
    assert result.cached_allow_records > 0, facts
    assert result.trail_verified

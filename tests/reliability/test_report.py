"""RELIABILITY.md is generated from results: every figure comes from the report."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from reliability.faults import FAULTS, FaultResult, MatrixConfig, RevocationResult
from reliability.load import LoadConfig, LoadResult
from reliability.report import markdown, summary
from reliability.run import main


def report(*, broken: bool = False) -> dict[str, Any]:
    faults = []
    for number, fault in enumerate(FAULTS):
        result = FaultResult(fault.name, fault.description, fault.expected)
        result.calls, result.calls_in_fault, result.executions = 100 + number, 40, 30
        result.codes_in_fault = {fault.expected: 40}
        result.recovered, result.recovery_s = True, 0.01 * (number + 1)
        result.trail_verified, result.trail_records = True, 190
        faults.append(result.to_json())
    if broken:
        faults[1]["unauthorized_executions"] = 1
        faults[1]["passed"] = False
    load = LoadResult("embedded", 32, duration_s=20.0, requests=5000, p50_ms=4.5, p99_ms=20.5)
    load.trail_verified, load.rss_start_mib, load.rss_end_mib = True, 100.0, 101.0
    revocation = RevocationResult(bound_s=1.5, revision_seen_s=0.2, allowed_again_s=0.1)
    revocation.trail_verified = True
    data: dict[str, Any] = {
        "mode": "default",
        "command": "python -m reliability",
        "matrix_config": dataclasses.asdict(MatrixConfig()),
        "load_config": dataclasses.asdict(LoadConfig()),
        "faults": faults,
        "revocation": revocation.to_json(),
        "load": [load.to_json()],
        "machine": {"cores": 2},
        "elapsed_s": 99.0,
    }
    data["summary"] = summary(data)
    return data


def test_the_markdown_names_every_fault_and_quotes_the_figures() -> None:
    data = report()
    text = markdown(data)

    assert data["summary"]["passed"] is True
    assert data["summary"]["calls"] == sum(100 + n for n in range(len(FAULTS)))
    assert data["summary"]["max_recovery_s"] == pytest.approx(0.01 * len(FAULTS))
    assert "every property held" in text
    assert "unauthorized executions: 0" in text
    assert "Lost audit records: 0" in text
    for fault in FAULTS:
        assert f"| {fault.name} | `{fault.expected}` |" in text
    assert "p50 4.50 ms, p99 20.50 ms" in text
    assert "suite run time: 99 s" in text


def test_a_failed_property_is_the_verdict() -> None:
    data = report(broken=True)
    assert data["summary"]["passed"] is False
    assert data["summary"]["unauthorized_executions"] == 1
    assert "SOME PROPERTY FAILED" in markdown(data)


def test_matrix_configs_that_cannot_show_a_freeze_are_refused() -> None:
    with pytest.raises(ValueError, match="twice the timeout"):
        MatrixConfig(timeout=1.0, duration=1.5)


@pytest.mark.parametrize("argv", [["--soak", "0"], ["--soak", "-3"], ["--bogus"]])
def test_bad_arguments_are_refused_before_anything_runs(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2

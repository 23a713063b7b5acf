"""The flip report's counts add up, whatever the mix of changes and unreplayable decisions."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.replay import (
    CHANGES,
    FAIL_ON_TOKENS,
    REASONS,
    RESULTS,
    Outcome,
    ReplayReport,
    change,
    parse_fail_on,
    role_key,
)

outcomes = st.builds(
    Outcome,
    st.sampled_from(RESULTS),
    st.sampled_from([None, "denied", "engine_timeout"]),
    st.sampled_from([None, "m1", "m2"]),
    st.lists(st.sampled_from(["r1", "r2"]), max_size=2).map(tuple),
)
roles = st.one_of(st.none(), st.lists(st.sampled_from(["a", "b", "c"]), max_size=3))
tools = st.sampled_from(["t1", "t2", "t3"])
entries = st.lists(
    st.one_of(
        st.tuples(st.just("replayed"), tools, roles, outcomes, outcomes),
        st.tuples(st.just("not"), tools, st.sampled_from(sorted(REASONS))),
    ),
    max_size=60,
)


def _fill(items: list[tuple[object, ...]], examples: int) -> ReplayReport:
    report = ReplayReport(examples_wanted=examples)
    for number, item in enumerate(items):
        if item[0] == "replayed":
            _, tool, who, recorded, candidate = item
            report.add_replayed(f"d{number}", tool, who, recorded, candidate)  # type: ignore[arg-type]
        else:
            _, tool, reason = item
            report.add_not_replayed(f"d{number}", tool, reason)  # type: ignore[arg-type]
    return report


@given(entries, st.integers(min_value=0, max_value=5))
def test_report_counts_add_up(items: list[tuple[object, ...]], examples: int) -> None:
    report = _fill(items, examples)

    assert report.decisions == len(items) == report.replayed + report.not_replayed_total
    assert report.replayed == report.unchanged + report.changed
    for table in (report.by_tool, report.by_role):
        summed: dict[str, int] = {}
        for counts in table.values():
            for name, count in counts.items():
                summed[name] = summed.get(name, 0) + count
        assert summed == {name: n for name, n in report.changes.items() if n}
    by_tool = sum(sum(c.values()) for c in report.not_replayed_by_tool.values())
    assert by_tool == report.not_replayed_total
    assert len(report.examples) == min(examples, report.changed)
    assert len(report.unreplayed) == min(examples, report.not_replayed_total)
    document = report.as_dict(fail_on=FAIL_ON_TOKENS)
    json.dumps(document)
    assert sum(document["changes"].values()) == document["changed"]
    assert set(document["changes"]) == set(CHANGES)
    assert document["passed"] == (report.changed == 0 and report.not_replayed_total == 0)


@given(entries)
def test_a_fail_on_token_fails_exactly_when_its_count_is_not_zero(
    items: list[tuple[object, ...]],
) -> None:
    report = _fill(items, 3)

    for name in CHANGES:
        assert (name in report.failures({name})) == (report.changes.get(name, 0) > 0)
    assert report.failures({"deny-to-allow", "error-to-allow"}) == {
        name: report.changes[name]
        for name in ("deny-to-allow", "error-to-allow")
        if report.changes.get(name)
    }


@given(outcomes, outcomes)
def test_two_outcomes_differ_by_at_most_one_change_and_only_when_they_differ(
    recorded: Outcome, candidate: Outcome
) -> None:
    found = change(recorded, candidate)

    if found is None:
        assert (recorded.result, recorded.message, recorded.reasons) == (
            candidate.result,
            candidate.message,
            candidate.reasons,
        )
    else:
        assert found in CHANGES
        assert (found == f"{recorded.result}-to-{candidate.result}") == (
            recorded.result != candidate.result
        )


def test_role_keys_are_the_sorted_distinct_roles_or_no_roles() -> None:
    assert role_key(["writer", "reader", "writer"]) == "reader+writer"
    assert role_key([]) == role_key(None) == "(no roles)"


def test_fail_on_reads_lists_and_refuses_unknown_tokens() -> None:
    assert parse_fail_on("deny-to-allow, message") == {"deny-to-allow", "message"}
    assert parse_fail_on("none") == frozenset()
    for bad in ("", "deny-to-permit", "none,deny-to-allow"):
        with pytest.raises(ValueError, match="fail-on"):
            parse_fail_on(bad)

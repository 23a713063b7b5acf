"""The decision's labels and quotas are read strictly; session ids are checked before use."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import Decision
from gateway.policy import MalformedDecisionError, read_decision
from gateway.state import SCOPES, valid_session_id

_LABEL = re.compile(r"[a-z][a-z0-9_.:-]{0,63}")
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def test_labels_and_quotas_are_read_into_the_decision() -> None:
    decision = read_decision(
        {
            "allow": True,
            "labels": ["untrusted_content", "reads_secret", "reads_secret"],
            "quotas": [{"scope": "caller_tool", "window_s": 3600, "limit": 5}],
        }
    )

    assert decision.labels == ("reads_secret", "untrusted_content")
    assert decision.quotas == (("caller_tool", 3600, 5),)
    assert decision.well_formed()


@given(_JSON)
def test_any_labels_value_is_read_as_labels_or_refused(value: Any) -> None:
    try:
        decision = read_decision({"allow": True, "labels": value})
    except MalformedDecisionError:
        return
    assert all(_LABEL.fullmatch(label) for label in decision.labels)
    assert len(decision.labels) <= 32


@given(_JSON)
def test_any_quotas_value_is_read_as_quotas_or_refused(value: Any) -> None:
    try:
        decision = read_decision({"allow": True, "quotas": value})
    except MalformedDecisionError:
        return
    for scope, window, limit in decision.quotas:
        assert scope in SCOPES
        assert type(window) is int
        assert window > 0
        assert type(limit) is int
        assert limit >= 0


@pytest.mark.parametrize(
    "quota",
    [
        {"scope": "caller", "window_s": 60},
        {"scope": "caller", "window_s": 60, "limit": 1, "extra": 1},
        {"scope": "planet", "window_s": 60, "limit": 1},
        {"scope": "caller", "window_s": 0, "limit": 1},
        {"scope": "caller", "window_s": 1.5, "limit": 1},
        {"scope": "caller", "window_s": True, "limit": 1},
        {"scope": "caller", "window_s": 60, "limit": -1},
        {"scope": "caller", "window_s": 60, "limit": "5"},
        {"scope": "caller", "window_s": 31 * 86400 + 1, "limit": 1},
    ],
)
def test_a_malformed_quota_makes_the_decision_malformed(quota: dict[str, Any]) -> None:
    with pytest.raises(MalformedDecisionError):
        read_decision({"allow": True, "quotas": [quota]})


def test_a_decision_with_labels_of_the_wrong_type_is_not_well_formed() -> None:
    assert not Decision(allowed=True, labels=["x"]).well_formed()  # type: ignore[arg-type]
    assert not Decision(allowed=True, quotas=(("caller", 0, 1),)).well_formed()
    assert not Decision(allowed=True, quotas=(("caller", 60, True),)).well_formed()


@given(st.text(max_size=300))
def test_a_session_id_is_accepted_exactly_when_it_is_1_to_256_visible_ascii(text: str) -> None:
    expected = 1 <= len(text) <= 256 and all("!" <= ch <= "~" for ch in text)
    assert valid_session_id(text) is expected


_ASCII = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)


@given(
    st.lists(st.tuples(_ASCII, _ASCII, _ASCII), max_size=6),
    st.dictionaries(_ASCII, st.dictionaries(_ASCII, st.integers(0, 2**53), max_size=3)),
)
def test_the_state_input_encoding_is_the_canonical_one(
    history: list[tuple[str, str, str]], tools: dict[str, dict[str, int]]
) -> None:
    from gateway import _json
    from gateway.state import encode_state

    document = {
        "version": 1,
        "session": {
            "calls": len(history),
            "labels": sorted({label for _t, label, _o in history}),
            "tools": tools,
            "history": [{"tool": t, "labels": [label], "outcome": o} for t, label, o in history],
        },
        "counts": {"caller": {"60": 1, "3600": 2}},
    }

    assert encode_state(document) == _json.canonical(document)

"""Strict reading of decision documents: every accepted and every refused shape."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from gateway import Decision
from gateway import MalformedDecisionError as CoreMalformedDecisionError
from gateway.policy import MalformedDecisionError, PolicyError, normalize_path, read_decision
from gateway.policy._decision import normalize


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(True, Decision(allowed=True), id="true"),
        pytest.param(False, Decision(allowed=False), id="false"),
        pytest.param({"allow": True}, Decision(allowed=True), id="allow-only"),
        pytest.param({"allow": False}, Decision(allowed=False), id="deny-only"),
        pytest.param(
            {"allow": False, "message": "ask an admin"},
            Decision(allowed=False, message="ask an admin"),
            id="message",
        ),
        pytest.param({"allow": False, "message": ""}, Decision(allowed=False), id="empty-message"),
        pytest.param(
            {"allow": False, "reasons": ["b", "a"]},
            Decision(allowed=False, reasons=("b", "a")),
            id="reasons-array-order-kept",
        ),
        pytest.param(
            {"allow": False, "reasons": {"b", "c", "a"}},
            Decision(allowed=False, reasons=("a", "b", "c")),
            id="reasons-set-sorted",
        ),
        pytest.param(
            {"allow": False, "reasons": frozenset({"y", "x"})},
            Decision(allowed=False, reasons=("x", "y")),
            id="reasons-frozenset-sorted",
        ),
        pytest.param(
            {"allow": True, "reasons": []}, Decision(allowed=True), id="reasons-empty-array"
        ),
        pytest.param({"allow": True, "reasons": set()}, Decision(allowed=True), id="reasons-empty"),
        pytest.param(
            {"allow": True, "cache": {"ttl_s": 30}},
            Decision(allowed=True, cache_ttl=30.0),
            id="ttl-int",
        ),
        pytest.param(
            {"allow": True, "cache": {"ttl_s": 0}},
            Decision(allowed=True, cache_ttl=0.0),
            id="ttl-zero",
        ),
        pytest.param(
            {"allow": True, "cache": {"ttl_s": 1.5}},
            Decision(allowed=True, cache_ttl=1.5),
            id="ttl-float",
        ),
        pytest.param(
            {"allow": True, "cache": {"ttl_s": Decimal("0.25")}},
            Decision(allowed=True, cache_ttl=0.25),
            id="ttl-decimal",
        ),
        pytest.param({"allow": True, "cache": {}}, Decision(allowed=True), id="cache-empty"),
        pytest.param(
            {
                "allow": False,
                "message": "no",
                "reasons": {"r2", "r1"},
                "cache": {"ttl_s": 5},
            },
            Decision(allowed=False, message="no", reasons=("r1", "r2"), cache_ttl=5.0),
            id="every-member",
        ),
    ],
)
def test_accepted_shapes(value: Any, expected: Decision) -> None:
    decision = read_decision(value)
    assert decision == expected
    assert decision.well_formed()
    assert type(decision.allowed) is bool
    assert type(decision.reasons) is tuple


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="null"),
        pytest.param(1, id="one"),
        pytest.param(0, id="zero"),
        pytest.param(Decimal("1.0"), id="decimal-one"),
        pytest.param("true", id="string-true"),
        pytest.param("", id="empty-string"),
        pytest.param([], id="empty-array"),
        pytest.param([True], id="array-true"),
        pytest.param({"b", "a"}, id="set"),
        pytest.param({}, id="empty-object"),
        pytest.param({"message": "hi"}, id="allow-missing"),
        pytest.param({"allow": 1}, id="allow-one"),
        pytest.param({"allow": 0}, id="allow-zero"),
        pytest.param({"allow": "true"}, id="allow-string-true"),
        pytest.param({"allow": "yes"}, id="allow-string-yes"),
        pytest.param({"allow": None}, id="allow-null"),
        pytest.param({"allow": [True]}, id="allow-array"),
        pytest.param({"allow": {"value": True}}, id="allow-object"),
        pytest.param({"allow": True, "extra": 1}, id="unknown-member"),
        pytest.param({"allow": True, "Allow": True}, id="unknown-member-case"),
        pytest.param({"allow": True, "ttl_s": 5}, id="ttl-at-top-level"),
        pytest.param({"allow": False, "message": 1}, id="message-number"),
        pytest.param({"allow": False, "message": ["no"]}, id="message-array"),
        pytest.param({"allow": False, "message": True}, id="message-bool"),
        pytest.param({"allow": False, "reasons": "because"}, id="reasons-string"),
        pytest.param({"allow": False, "reasons": [1, 2]}, id="reasons-numbers"),
        pytest.param({"allow": False, "reasons": ["a", None]}, id="reasons-with-null"),
        pytest.param({"allow": False, "reasons": [["a"]]}, id="reasons-nested"),
        pytest.param({"allow": False, "reasons": {"a": "b"}}, id="reasons-object"),
        pytest.param({"allow": False, "reasons": {1, 2}}, id="reasons-set-of-numbers"),
        pytest.param({"allow": False, "reasons": None}, id="reasons-null"),
        pytest.param({"allow": True, "cache": 30}, id="cache-number"),
        pytest.param({"allow": True, "cache": []}, id="cache-array"),
        pytest.param({"allow": True, "cache": "30"}, id="cache-string"),
        pytest.param({"allow": True, "cache": {"ttl_s": 1, "max": 2}}, id="cache-unknown-member"),
        pytest.param({"allow": True, "cache": {"ttl": 1}}, id="cache-misspelt"),
        pytest.param({"allow": True, "cache": {"ttl_s": -1}}, id="ttl-negative"),
        pytest.param({"allow": True, "cache": {"ttl_s": -0.5}}, id="ttl-negative-float"),
        pytest.param({"allow": True, "cache": {"ttl_s": Decimal("-1E-9")}}, id="ttl-neg-decimal"),
        pytest.param({"allow": True, "cache": {"ttl_s": True}}, id="ttl-true"),
        pytest.param({"allow": True, "cache": {"ttl_s": False}}, id="ttl-false"),
        pytest.param({"allow": True, "cache": {"ttl_s": "30"}}, id="ttl-string"),
        pytest.param({"allow": True, "cache": {"ttl_s": [30]}}, id="ttl-array"),
        pytest.param({"allow": True, "cache": {"ttl_s": {"s": 30}}}, id="ttl-object"),
    ],
)
def test_refused_shapes(value: Any) -> None:
    with pytest.raises(MalformedDecisionError) as caught:
        read_decision(value)
    error = caught.value
    assert error.code == "malformed_decision"
    assert isinstance(error, PolicyError)
    assert isinstance(error, CoreMalformedDecisionError)
    assert error.__cause__ is None


def test_provenance_is_passed_through() -> None:
    decision = read_decision(
        {"allow": True}, engine="opa:http://x", decision_id="d-1", revision="policies:abc"
    )
    assert decision == Decision(
        allowed=True, engine="opa:http://x", decision_id="d-1", revision="policies:abc"
    )
    assert read_decision(False, engine="e", decision_id="d", revision="r") == Decision(
        allowed=False, engine="e", decision_id="d", revision="r"
    )


def test_the_input_is_not_changed() -> None:
    value = {"allow": False, "reasons": {"b", "a"}, "cache": {"ttl_s": 1}}
    read_decision(value)
    assert value == {"allow": False, "reasons": {"b", "a"}, "cache": {"ttl_s": 1}}


def test_normalize_turns_sets_into_sorted_lists_everywhere() -> None:
    value = {
        "s": {"b", "a"},
        "nested": [{"z", "y"}, ({3, 1, 2},)],
        "objects": {"k": frozenset({"q", "p"})},
        "mixed": {1, "a", False, None},
        "plain": [3, 1, 2],
    }
    assert normalize(value) == {
        "s": ["a", "b"],
        "nested": [["y", "z"], [[1, 2, 3]]],
        "objects": {"k": ["p", "q"]},
        # Sorted by canonical JSON text: "a" < 1 < false < null.
        "mixed": ["a", 1, False, None],
        "plain": [3, 1, 2],
    }


def test_normalize_sorts_sets_deterministically() -> None:
    first = normalize({"x", "y", "z", "w", "v"})
    for _ in range(5):
        assert normalize({"v", "w", "x", "y", "z"}) == first


@pytest.mark.parametrize(
    "path",
    [
        "gateway/authz/decision",
        "/gateway/authz/decision/",
        "gateway.authz.decision",
        "data.gateway.authz.decision",
        " gateway/authz/decision ",
    ],
)
def test_decision_path_forms(path: str) -> None:
    assert normalize_path(path) == "gateway/authz/decision"


@pytest.mark.parametrize(
    "path", ["", "/", "data.", "gateway//authz", "gateway/authz/de-cision", "a/1b", "a b"]
)
def test_invalid_decision_paths(path: str) -> None:
    with pytest.raises(ValueError, match="decision path"):
        normalize_path(path)

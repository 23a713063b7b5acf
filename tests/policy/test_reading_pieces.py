"""The uncached decision path's shortcuts: a document handed over in pieces, a decision read
once per answer text. Each shortcut gives what the whole reading gives."""

from __future__ import annotations

import dataclasses
import json
import string
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import Authorization, Decision, ToolDefinition
from gateway import _json as gateway_json
from gateway.policy import (
    CallerContext,
    EngineAnswer,
    InputDocument,
    MalformedDecisionError,
    PolicyAuthorizer,
)
from gateway.policy._document import state_input
from tests.helpers import IJSON_CHARACTERS

_TEXT = st.text(IJSON_CHARACTERS, max_size=8)
_SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT
)
_JSON = st.recursive(
    _SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_NAME = st.text(string.ascii_letters + "_", min_size=1, max_size=8)


@given(
    name=_NAME,
    description=_TEXT,
    properties=st.dictionaries(_NAME, st.just({"type": "string"}), max_size=3),
    arguments=st.dictionaries(_TEXT, _JSON, max_size=4),
    context=st.dictionaries(_TEXT, _JSON, max_size=4),
    state=st.none() | st.dictionaries(_TEXT, _JSON, max_size=3),
)
def test_the_head_with_the_tool_spliced_in_is_the_encoding_of_the_whole_document(
    *,
    name: str,
    description: str,
    properties: dict[str, Any],
    arguments: dict[str, Any],
    context: dict[str, Any],
    state: dict[str, Any] | None,
) -> None:
    definition = ToolDefinition(name, {"type": "object", "properties": properties}, description)
    encoded = json.dumps(arguments, indent=1).encode()
    if state is None:
        document = InputDocument(Authorization(definition, encoded), CallerContext(context))
    else:
        with state_input(gateway_json.canonical(state)):
            document = InputDocument(Authorization(definition, encoded), CallerContext(context))
    whole = document.to_json()
    spliced = document.head_json()[:-1] + b',"tool":' + document.tool_json + b"}"
    assert spliced == whole
    head = gateway_json.parse(document.head_json(), max_depth=10_000)
    assert isinstance(head, dict)
    assert {**head, "tool": gateway_json.parse(document.tool_json)} == document.to_dict()


_DECISIONS = st.builds(
    Decision,
    allowed=st.booleans(),
    message=st.none() | _TEXT,
    reasons=st.lists(_TEXT, max_size=3).map(tuple),
    decision_id=st.none() | _TEXT,
    revision=st.none() | _TEXT,
    cache_ttl=st.none() | st.floats(min_value=0, max_value=1e9),
    engine=st.none() | _TEXT,
    labels=st.lists(_NAME, max_size=2).map(tuple),
)


@given(decision=_DECISIONS, decision_id=st.none() | _TEXT, revision=st.none() | _TEXT)
def test_a_decision_given_another_id_and_revision_equals_one_made_with_them(
    decision: Decision, decision_id: str | None, revision: str | None
) -> None:
    identified = decision.identified(decision_id, revision)
    assert identified == dataclasses.replace(decision, decision_id=decision_id, revision=revision)
    assert identified.well_formed() is decision.well_formed()


def test_a_decision_given_an_id_of_the_wrong_type_is_not_well_formed() -> None:
    decision = Decision(allowed=True).identified(7, "r")  # type: ignore[arg-type]
    assert not decision.well_formed()


class _TextEngine:
    """An engine answering one fixed value, stating the text it gave it as."""

    identity = "text-engine"

    def __init__(self, value: Any, text: bytes) -> None:
        self.value, self.text = value, text
        self.answered = 0

    def revision(self) -> str:
        return f"r{self.answered}"

    async def evaluate(self, path: str, document: InputDocument) -> EngineAnswer:
        self.answered += 1
        return EngineAnswer(True, self.value, f"id{self.answered}", self.revision(), self.text)


_ADD = ToolDefinition("add", {"type": "object"}, "Add.")


async def test_a_decision_read_again_from_the_same_text_has_its_own_id_and_revision() -> None:
    value = {"allow": True, "message": "ok", "reasons": ["b", "a"], "cache": {"ttl_s": 5}}
    engine = _TextEngine(value, json.dumps(value).encode())
    authorizer = PolicyAuthorizer(engine)
    first = await authorizer.authorize(Authorization(_ADD, b"{}"))
    second = await authorizer.authorize(Authorization(_ADD, b"{}"))
    assert (first.decision_id, first.revision) == ("id1", "r1")
    assert (second.decision_id, second.revision) == ("id2", "r2")
    expected = Decision(
        allowed=True,
        message="ok",
        reasons=("b", "a"),
        cache_ttl=5.0,
        engine="text-engine",
        decision_id="id2",
        revision="r2",
    )
    assert second == expected
    assert second.well_formed()


@pytest.mark.parametrize(
    "value",
    [{"allow": "yes"}, {"allow": True, "extra": 1}, [True], None],
    ids=["allow-string", "unknown-member", "array", "null"],
)
async def test_a_malformed_decision_is_refused_every_time_its_text_is_answered(value: Any) -> None:
    engine = _TextEngine(value, json.dumps(value).encode())
    authorizer = PolicyAuthorizer(engine)
    for _ in range(3):
        with pytest.raises(MalformedDecisionError):
            await authorizer.authorize(Authorization(_ADD, b"{}"))

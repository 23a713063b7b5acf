"""Admission remembers argument documents that satisfied the schema, and nothing else.

The memo is by exact bytes (the same bytes always decode to the same value), so admitting
a document a second time answers exactly as the first time did.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gateway import ToolCall, ToolDefinition, ToolOutput, bind
from gateway._contract import Invocation
from gateway._errors import InvalidInvocationError

SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 0, "maximum": 9},
        "s": {"type": "string", "maxLength": 3},
    },
    "required": ["n"],
    "additionalProperties": False,
}


class _Tool:
    def definition(self) -> ToolDefinition:
        return ToolDefinition("memo", SCHEMA)

    async def call(self, invocation: Invocation) -> ToolOutput:
        return ToolOutput.from_text("ok")


def _outcome(contract: object, raw: bytes) -> tuple[bool, str]:
    try:
        invocation = contract.prepare(ToolCall("1", "memo", raw))  # type: ignore[attr-defined]
    except InvalidInvocationError as exc:
        return False, str(exc)
    return True, invocation.arguments.decode()


_values = st.recursive(
    st.none() | st.booleans() | st.integers(-20, 20) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
_documents = st.dictionaries(st.sampled_from(["n", "s", "x"]), _values, max_size=3)


@given(first=_documents, second=_documents)
def test_admitting_the_same_bytes_again_answers_as_the_first_time(
    first: dict[str, object], second: dict[str, object]
) -> None:
    contract = bind(_Tool()).contract
    raws = [json.dumps(first).encode(), json.dumps(second).encode()]

    before = [_outcome(contract, raw) for raw in raws]
    again = [_outcome(contract, raw) for raw in reversed(raws)]

    assert again == list(reversed(before))


def test_only_documents_that_satisfied_the_schema_are_remembered() -> None:
    contract = bind(_Tool()).contract
    state = contract._state

    assert _outcome(contract, b'{"n": 1}')[0]
    assert not _outcome(contract, b'{"n": 10}')[0]
    assert not _outcome(contract, b'{"n": 1, "x": 2}')[0]

    assert set(state.valid) == {b'{"n": 1}'}
    assert not _outcome(contract, b'{"n": 10}')[0]


def test_the_memo_is_bounded() -> None:
    contract = bind(_Tool()).contract
    state = contract._state

    for n in range(3000):
        assert _outcome(contract, json.dumps({"n": n % 10, "s": str(n)}).encode())[0] == (
            len(str(n)) <= 3
        )

    assert len(state.valid) <= 1024
    assert sum(map(len, state.valid)) == state.valid_bytes <= 64 * 1024


def test_the_memo_of_one_contract_holds_at_most_its_byte_budget() -> None:
    contract = bind(_Tool()).contract
    state = contract._state

    for n in range(600):
        raw = ("{" + " " * (n % 7) * 40 + f'"n": {n % 10}, "s": "{n}"' + "}").encode()
        assert _outcome(contract, raw)[0] == (n < 1000)
        assert sum(map(len, state.valid)) == state.valid_bytes <= 64 * 1024

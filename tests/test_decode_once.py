"""Admission's decoding is the only one: the policy input, the cache and the audit read it.

A call admitted from raw bytes is decoded strictly once (by the contract) and encoded
canonically once (for the policy input, whose encoding the audit record's digest reuses),
whatever authorizers stand between the Guard and the engine. What they produce is exactly
what decoding the bytes again would produce, and an Authorization that does not carry
admission's decoding of its own bytes (a copy with other arguments) is decoded afresh.
"""

from __future__ import annotations

import dataclasses
import hashlib
from decimal import Decimal
from typing import Any, Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import Decision, Guard, Registry, ToolCall, ToolDefinition, ToolOutput, _json, bind
from gateway._authorization import Authorization, admitted_authorization, decoding
from gateway._call import decoded_arguments, decoded_call
from gateway._contract import AdmissionLimits, decoding_of
from gateway.approvals._gate import call_key
from gateway.audit import AuditTrail, MemorySink
from gateway.audit._mask import Masker
from gateway.policy import (
    CachingAuthorizer,
    CallerContext,
    DecisionCache,
    InputDocument,
    caller_context,
)
from gateway.policy._facts import _compute, sql_locations
from gateway.service import Gateway
from gateway.service._tracing import argument_digest
from gateway.testing import JsonWork, RecordingTool, StaticAuthorizer
from tests.helpers import ADMISSIBLE_SCALARS, json_values, serialized

SQL_SCHEMA: Final = {
    "type": "object",
    "properties": {"sql": {"contentMediaType": "application/sql"}},
}
ANY: Final = RecordingTool("any").definition()
SQL: Final = RecordingTool("query", SQL_SCHEMA).definition()


def _tool(definition: ToolDefinition) -> RecordingTool:
    return RecordingTool(definition.name, definition.input_schema)


KEY: Final = b"k" * 32


def _seen_documents() -> tuple[list[InputDocument], CachingAuthorizer]:
    seen: list[InputDocument] = []

    async def decide(document: InputDocument) -> Decision:
        seen.append(document)
        return Decision(allowed=True, cache_ttl=60)

    return seen, CachingAuthorizer(
        decide, engine="test", path="gateway/authz/decision", cache=DecisionCache(max_ttl=60)
    )


async def test_a_guarded_audited_call_decodes_its_arguments_once_and_encodes_them_once() -> None:
    seen, cached = _seen_documents()
    sink = MemorySink(key=KEY)
    tool = _tool(ANY)
    binding = bind(AuditTrail(sink).guard(tool, cached))
    raw = b'{ "b": [1.50, {"z": null}], "a": "x" }'

    with caller_context({"user": "alice"}):
        # The tool's definition is encoded for the policy input once, here.
        await binding.call(binding.prepare(ToolCall("0", "any", b"{}")))
        seen.clear()
        sink.records.clear()
    with caller_context({"user": "alice"}), JsonWork() as work:
        invocation = binding.prepare(ToolCall("1", "any", raw))
        await binding.call(invocation)

    canonical = _json.canonical(_json.parse(raw))
    assert work.count("parse") == 1, work.by_caller
    assert work.count("parse", "gateway._contract") == 1
    assert work.count("canonical") == 1, work.by_caller
    assert seen[0].canonical_arguments == canonical
    decision = next(r for r in sink.records if r["type"] == "decision")
    assert decision["arguments_digest"] == hashlib.sha256(canonical).hexdigest()
    assert decision["arguments"] == {"a": "x", "b": [1.5, {"z": None}]}
    assert tool.count == 2


async def test_a_repeated_call_hits_the_cache_without_decoding_again_beyond_admission() -> None:
    seen, cached = _seen_documents()
    binding = bind(Guard(tool=_tool(ANY), authorizer=cached))
    raw = b'{"q": 1}'
    with caller_context({"user": "alice"}):
        await binding.call(binding.prepare(ToolCall("1", "any", raw)))
        with JsonWork() as work:
            await binding.call(binding.prepare(ToolCall("2", "any", raw)))

    assert len(seen) == 1
    assert work.count("parse") == 1, work.by_caller
    assert work.count("canonical") == 0, work.by_caller


def test_a_copy_with_other_arguments_does_not_carry_the_decoding_of_the_first() -> None:
    # An authorizer that hands on a changed Authorization must have the changed arguments
    # decided on and recorded, never the admitted ones.
    invocation = bind(_tool(ANY)).prepare(ToolCall("1", "any", b'{"to": "bob"}'))
    admitted = admitted_authorization(ANY, decoding_of(invocation))
    changed = dataclasses.replace(admitted, arguments=b'{"to": "mallory"}')

    assert decoding(admitted) is decoding_of(invocation)
    assert decoding(changed) is None
    assert InputDocument(changed).canonical_arguments == b'{"to":"mallory"}'
    assert InputDocument(admitted).canonical_arguments == b'{"to":"bob"}'


def test_an_authorization_made_by_its_constructor_carries_no_decoding() -> None:
    assert decoding(Authorization(ANY, b"{}")) is None


def test_only_the_strict_json_module_makes_a_decoding() -> None:
    with pytest.raises(TypeError):
        _json.Decoded(object(), b"{}", {}, None)


def test_a_decoding_encodes_its_value_once() -> None:
    made = _json.decoded(b'{"b":1, "a":2}', {"b": 1, "a": 2})
    with JsonWork() as work:
        first, second = made.canonical(), made.canonical()

    assert first == second == b'{"a":2,"b":1}'
    assert work.count("canonical") == 1


# -- what is decided and recorded is what decoding the bytes again gives ------------------

_statements = st.sampled_from(["select * from t", "drop table t", "select 1; delete from t", "x"])
_values = json_values(ADMISSIBLE_SCALARS | st.just("token=sk-abcdefghijklmnop1234"))
_documents = st.fixed_dictionaries(
    {},
    optional={
        "sql": _statements | st.text() | _values,
        "a": _values,
        "password": _values,
        "b": _values,
    },
)


@given(st.data(), _documents, st.sampled_from([ANY, SQL]))
def test_the_input_document_and_the_audit_record_agree_with_decoding_the_bytes_again(
    data: st.DataObject, document: dict[str, Any], definition: ToolDefinition
) -> None:
    # The same document as a caller may send it: any member order, white space, escaping.
    try:
        raw = data.draw(serialized(document)).encode("utf-8")
        _json.parse(raw)
    except (UnicodeError, _json.StrictJSONError):  # a lone surrogate: not admissible
        return
    invocation = bind(_tool(definition)).prepare(ToolCall("1", definition.name, raw))
    admitted = admitted_authorization(definition, decoding_of(invocation))
    plain = Authorization(definition, invocation.arguments)

    with caller_context({"user": "alice"}):
        # The facts straight from the bytes (the facts memo would answer for both below).
        canonical = _json.canonical(_json.parse(raw))
        fresh = _compute(sql_locations(definition), canonical, None)
        assert InputDocument(admitted).facts_json == fresh
        assert InputDocument(admitted).to_json() == InputDocument(plain).to_json()
        assert InputDocument(admitted).digest == InputDocument(plain).digest
        # Fresh trails: no memo of one answers for the other.
        records = [
            AuditTrail(MemorySink(key=KEY), masker=Masker(key=KEY)).decision_record(
                authorization, call_id="1", decision=None, error=None, latency=0.0
            )[1]
            for authorization in (admitted, plain)
        ]
    for record in records:
        record.pop("time")
        record.pop("decision_id")
    assert records[0] == records[1]


def test_exact_numbers_reach_the_policy_input_from_the_decoding_as_they_were_sent() -> None:
    raw = b'{"n": 1.10, "big": 123456789012345678901234567890, "e": 1E+300}'
    invocation = bind(_tool(ANY)).prepare(ToolCall("1", "any", raw))
    decoded = decoding_of(invocation)

    assert decoded.value["n"] == Decimal("1.10")
    assert InputDocument(admitted_authorization(ANY, decoded)).canonical_arguments == (
        b'{"big":123456789012345678901234567890,"e":1E+300,"n":1.10}'
    )


# -- a registry's binding admits again from the same decoding ------------------------------


class _Deeper:
    # A tool whose own contract bounds nesting tighter than the gateway's.
    def __init__(self) -> None:
        self.calls: list[bytes] = []

    def definition(self) -> ToolDefinition:
        return ANY

    async def call(self, invocation: Any) -> ToolOutput:
        self.calls.append(invocation.arguments)
        return ToolOutput.from_text("ok")


async def test_a_registry_tool_behind_the_gateway_decodes_its_arguments_once() -> None:
    seen, cached = _seen_documents()
    tool = _tool(ANY)
    gateway = Gateway([Registry(tool)], authorizer=cached, audit=AuditTrail(MemorySink(key=KEY)))
    raw = b'{"z": [1, 2.50], "a": {"b": "c"}}'
    with caller_context({"user": "alice"}):
        await gateway.call(ToolCall("0", "any", b"{}"))
        with JsonWork() as work:
            result = await gateway.call(ToolCall("1", "any", raw))

    assert result.ok, result.code
    assert tool.calls[-1] == raw
    assert work.count("parse") == 1, work.by_caller
    assert work.count("canonical") == 1, work.by_caller
    assert seen[-1].canonical_arguments == _json.canonical(_json.parse(raw))


async def test_a_registry_tool_keeps_its_own_admission_bounds_on_the_reused_decoding() -> None:
    inner = _Deeper()
    registry = Registry(inner, limits=AdmissionLimits(max_depth=2))
    gateway = Gateway([registry], authorizer=StaticAuthorizer(True))

    deep = await gateway.call(ToolCall("1", "any", b'{"a": {"b": {"c": 1}}}'))
    shallow = await gateway.call(ToolCall("2", "any", b'{"a": {"b": 1}}'))

    assert not deep.ok
    assert deep.code == "invalid_arguments"
    assert shallow.ok
    assert inner.calls == [b'{"a": {"b": 1}}']


def test_a_decoding_of_other_bytes_is_not_reused_by_admission() -> None:
    # Only a decoding of the very bytes admitted counts; anything else is decoded afresh.
    other = _json.decoded(b'{"to": "bob"}', {"to": "bob"})
    call = dataclasses.replace(decoded_call("1", "any", other), arguments=b'{"to": "eve"}')
    invocation = bind(_tool(ANY)).prepare(call)

    assert decoded_arguments(call) is None
    assert decoding_of(invocation).value == {"to": "eve"}


def test_the_trace_digest_of_admitted_arguments_is_the_audit_digest_without_a_decoding() -> None:
    raw = b'{"b": 1.0, "a": [true]}'
    invocation = bind(_tool(ANY)).prepare(ToolCall("1", "any", raw))
    admitted = admitted_authorization(ANY, decoding_of(invocation))

    with JsonWork() as work:
        digest = argument_digest(admitted)

    assert work.count("parse") == 0
    assert digest == argument_digest(Authorization(ANY, raw))
    assert digest == hashlib.sha256(b'{"a":[true],"b":1.0}').hexdigest()
    assert argument_digest(Authorization(ANY, b"{,")) == hashlib.sha256(b"{,").hexdigest()


def test_an_approval_is_bound_to_the_same_key_from_admission_s_decoding() -> None:
    raw = b'{"amount": 10.50, "to": "bob"}'
    invocation = bind(_tool(ANY)).prepare(ToolCall("1", "any", raw))
    admitted = admitted_authorization(ANY, decoding_of(invocation))
    caller = CallerContext({"user": "alice"})

    with JsonWork() as work:
        key = call_key(admitted, caller)

    assert work.count("parse") == 0
    assert key == call_key(Authorization(ANY, raw), caller)
    assert key.arguments_digest == hashlib.sha256(b'{"amount":10.50,"to":"bob"}').hexdigest()

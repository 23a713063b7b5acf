"""One strict decoding per call: the HTTP body is decoded once, its arguments not again.

The counts come from :class:`gateway.testing.JsonWork` (a hook of the strict JSON module),
through the real HTTP app (authentication, pipeline, embedded engine, cache, audit trail).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import ToolCall, ToolDefinition, _json, bind, function_tool
from gateway._call import admitted_call, parsed_arguments
from gateway._contract import AdmissionLimits
from gateway._errors import InvalidInvocationError
from gateway.server import build_service
from gateway.service import parse_config
from gateway.testing import JsonWork
from tests.helpers import json_values
from tests.server.conftest import ALICE, REPO_ROOT, served_client, shipped_service_config

#: What a whole allowed call (fresh arguments: a cache miss) costs at most: one strict parse
#: of the body and one canonical encoding of its arguments (the surface); admission, the
#: policy input and the audit record read that decoding and that encoding (none of their
#: own); the caller context, checked strictly when it was made, is never decoded again.
MAX_PARSES_PER_CALL: Final = 1
MAX_ENCODINGS_PER_CALL: Final = 1


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    service = build_service(parse_config(shipped_service_config(tmp_path), base=REPO_ROOT))
    async with served_client(service, {"X-API-Key": ALICE}) as client:
        yield client


async def _call(http: httpx.AsyncClient, arguments: object) -> None:
    answer = await http.post("/v1/calls", json={"id": "1", "name": "add", "arguments": arguments})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "ok"


async def test_an_http_call_is_decoded_once_and_its_arguments_not_again_on_admission(
    http: httpx.AsyncClient,
) -> None:
    await _call(http, {"a": 0, "b": 0})  # the tool's definition is encoded once, here
    with JsonWork() as work:
        await _call(http, {"a": 1, "b": 2})

    assert work.count("parse", "gateway.server._app") == 1
    assert work.count("canonical", "gateway.server._app") == 1
    assert work.count("parse", "gateway._contract") == 0
    assert work.count("canonical", "gateway._contract") == 0


async def test_arguments_sent_as_json_text_are_decoded_once_on_admission(
    http: httpx.AsyncClient,
) -> None:
    await _call(http, {"a": 0, "b": 0})
    with JsonWork() as work:
        await _call(http, '{"b": 4, "a": 3}')

    assert work.count("parse", "gateway.server._app") == 1
    assert work.count("canonical", "gateway.server._app") == 0
    assert work.count("parse", "gateway._contract") == 1


async def test_a_whole_allowed_call_does_no_more_strict_json_work_than_its_budget(
    http: httpx.AsyncClient,
) -> None:
    await _call(http, {"a": 0, "b": 0})
    with JsonWork() as work:
        await _call(http, {"a": 5, "b": 6})

    assert work.count("parse") <= MAX_PARSES_PER_CALL, work.by_caller
    assert work.count("canonical") <= MAX_ENCODINGS_PER_CALL, work.by_caller
    assert work.count("parse", "gateway.policy._document") == 0
    assert work.count("parse", "gateway.audit._trail") == 0


async def test_the_caller_context_of_an_api_key_is_not_validated_again_per_call(
    http: httpx.AsyncClient,
) -> None:
    # Validated once, when the configuration is read; a call only reads it.
    await _call(http, {"a": 0, "b": 0})
    with JsonWork() as work:
        await _call(http, {"a": 7, "b": 8})

    assert work.count("canonical", "gateway.policy._context") == 0
    assert work.by_caller[("parse", "gateway.policy._context.__init__")] == 0


async def test_a_call_never_strictly_decodes_the_caller_context_again(
    http: httpx.AsyncClient,
) -> None:
    # The audit record reads the context as a fresh copy: its stored encoding was checked.
    await _call(http, {"a": 0, "b": 0})
    with JsonWork() as work:
        await _call(http, {"a": 7, "b": 9})

    assert work.count("parse", "gateway.policy._context") == 0


# -- admission of a decoded call is admission of its bytes --------------------------------


ANY_OBJECT: Final = ToolDefinition("any", {"type": "object"})
_objects = st.dictionaries(st.text(), json_values(), max_size=4)


def _strict(document: dict[str, Any]) -> Any:
    # As the HTTP surface holds it: the value of a strict decoding of the body.
    try:
        return _json.parse(_json.canonical({"arguments": document}))["arguments"]
    except (_json.StrictJSONError, UnicodeError):
        return None


class _Any:
    def definition(self) -> ToolDefinition:
        return ANY_OBJECT

    async def call(self, invocation: object) -> Any:
        raise AssertionError("not called")


def _outcome(call: ToolCall, limits: AdmissionLimits) -> bytes | str:
    try:
        return bind(_Any(), limits=limits).prepare(call).arguments
    except InvalidInvocationError as exc:
        return str(exc)


@given(_objects, st.integers(min_value=1, max_value=4))
def test_a_call_decoded_by_its_surface_is_admitted_exactly_as_its_canonical_bytes(
    document: dict[str, Any], max_depth: int
) -> None:
    value = _strict(document)
    if value is None:  # not representable as strict JSON (a lone surrogate, ...)
        return
    parsed = _json.encode_parsed(value)
    limits = AdmissionLimits(max_depth=max_depth)

    decoded = _outcome(admitted_call("1", "any", parsed), limits)
    plain = _outcome(ToolCall("1", "any", parsed.canonical), limits)

    assert decoded == plain


def test_a_decoded_call_deeper_than_the_contract_allows_is_refused() -> None:
    parsed = _json.encode_parsed(_json.parse(b'{"a": {"b": {"c": 1}}}'))

    with pytest.raises(InvalidInvocationError, match="nesting exceeds 2 levels"):
        bind(_Any(), limits=AdmissionLimits(max_depth=2)).prepare(admitted_call("1", "any", parsed))


def _add2(a: int, b: int) -> int:
    return a + b


def test_a_decoded_call_still_meets_the_schema() -> None:
    contract = bind(function_tool(name="add2")(_add2))
    parsed = _json.encode_parsed(_json.parse(b'{"a": 1, "b": "two"}'))

    with pytest.raises(InvalidInvocationError, match="arguments:"):
        contract.prepare(admitted_call("1", "add2", parsed))


def test_a_decoding_is_not_carried_by_a_copy_of_the_call() -> None:
    call = admitted_call("1", "any", _json.encode_parsed({"a": Decimal("1.0")}))

    copy = dataclasses.replace(call, arguments=b'{"a": 2}')

    assert parsed_arguments(call) is not None
    assert parsed_arguments(copy) is None
    assert copy == ToolCall("1", "any", b'{"a": 2}')
    assert call == ToolCall("1", "any", b'{"a":1.0}')
    assert "_parsed" not in repr(call)


def test_only_the_strict_json_module_makes_a_decoding() -> None:
    with pytest.raises(TypeError):
        _json.Parsed(object(), {"a": 1}, b'{"a":2}')


def test_json_work_counts_by_the_caller_and_stops_counting_on_exit() -> None:
    with JsonWork() as work:
        _json.parse(b"{}")
        _json.encode_parsed({"a": 1})
        _json.parse_trusted(b"[]")
    _json.parse(b"{}")

    assert work.count("parse") == 1
    assert work.count("canonical", __name__) == 1
    assert work.count("parse_trusted") == 1
    here = f"{__name__}.test_json_work_counts_by_the_caller_and_stops_counting_on_exit"
    assert set(work.by_caller) == {("parse", here), ("canonical", here), ("parse_trusted", here)}

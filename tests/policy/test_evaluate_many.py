"""Batch decisions (``evaluate_many``): one round trip for N documents, fail closed per item.

Against a real OPA (one ``POST /v1/query`` per batch), the embedded engine (one thread hop),
and any other engine (asked per document). The query text is a function of the decision
path alone: no document ever becomes query text.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy import (
    EmbeddedEngine,
    EngineAnswer,
    EngineError,
    EngineUnavailableError,
    OpaRestEngine,
    OpaRestEngineSync,
    PolicyError,
    evaluate_many,
)
from gateway.policy._rest import batch_body, batch_query, read_batch_response
from gateway.testing import OpaServer, StaticEngine
from tests.policy.test_rest import MisbehavingOpa, answer
from tests.policy.wasm_support import built_bundle

POLICY: Final = """package batch

pick := 1 if input.x == 1

pick := 2 if input.x == 2

# Two values for x == 3: an evaluation error for that input only.
pick := 3 if input.x == 3

pick := 4 if input.x == 3

echo := input
"""
PATH: Final = "batch/pick"


class Raw:
    """An input document given as its JSON value."""

    def __init__(self, value: Any) -> None:
        self._bytes = json.dumps(value).encode()

    def to_json(self) -> bytes:
        return self._bytes

    def to_dict(self) -> Any:
        return json.loads(self._bytes)


@pytest.fixture(scope="module")
def policy_dir() -> Any:
    with tempfile.TemporaryDirectory(prefix="batch-policy-") as scratch:
        Path(scratch, "batch.rego").write_text(POLICY)
        yield scratch


@pytest.fixture
def batch_opa(opa_binary: str, policy_dir: str) -> Any:
    with OpaServer(binary=opa_binary, policy_paths=[Path(policy_dir)]) as server:
        yield server


def _values(answers: list[EngineAnswer | PolicyError]) -> list[Any]:
    return [
        type(item).__name__
        if isinstance(item, PolicyError)
        else item.value
        if item.defined
        else None
        for item in answers
    ]


async def test_a_real_opa_decides_a_batch_item_by_item(batch_opa: OpaServer) -> None:
    documents = [Raw({"x": 2}), Raw({"x": 1}), Raw({"x": 9}), Raw({"y": 1})]
    async with OpaRestEngine(batch_opa.url, revision_interval=0) as engine:
        answers = await evaluate_many(engine, PATH, documents)
        single = [await engine.evaluate(PATH, document) for document in documents]  # type: ignore[arg-type]
    assert _values(answers) == [2, 1, None, None]
    assert [a.defined for a in answers if isinstance(a, EngineAnswer)] == [
        s.defined for s in single
    ]


async def test_each_item_of_a_batch_is_the_whole_input_of_its_evaluation(
    batch_opa: OpaServer,
) -> None:
    documents = [Raw({"x": 1, "batch": ["no"]}), Raw({"input": {"x": 2}})]
    async with OpaRestEngine(batch_opa.url, revision_interval=0) as engine:
        answers = await evaluate_many(engine, "batch/echo", documents)
    assert _values(answers) == [{"x": 1, "batch": ["no"]}, {"input": {"x": 2}}]


def test_the_sync_engine_decides_a_batch_in_one_request(batch_opa: OpaServer) -> None:
    with OpaRestEngineSync(batch_opa.url) as engine:
        answers = engine.evaluate_many_sync(PATH, [Raw({"x": 1}), Raw({"x": 5})])
    assert _values(answers) == [1, None]


async def test_an_evaluation_error_in_a_batch_over_rest_decides_no_item(
    batch_opa: OpaServer,
) -> None:
    # OPA evaluates the batch as one query: an error in any item fails the round trip.
    async with OpaRestEngine(batch_opa.url, revision_interval=0) as engine:
        with pytest.raises(EngineError):
            await evaluate_many(engine, PATH, [Raw({"x": 1}), Raw({"x": 3})])


async def test_a_batch_is_one_request_to_the_query_api() -> None:
    body = b'{"result":[{"r":{"0":[true],"1":[],"2":[{"allow":false}]}}]}'
    async with (
        MisbehavingOpa(answer(200, body)) as server,
        OpaRestEngine(server.url, revision_interval=0) as engine,
    ):
        answers = await engine.evaluate_many(PATH, [Raw({"a": 1}), Raw({"b": 2}), Raw({})])
    assert len(server.decisions) == 1
    (request,) = server.decisions
    assert request.target.startswith("/v1/query")
    sent = json.loads(request.body)
    assert sent == {
        "query": batch_query(PATH),
        "input": {"batch": [{"a": 1}, {"b": 2}, {}]},
    }
    assert _values(answers) == [True, None, {"allow": False}]


async def test_an_empty_batch_asks_nothing() -> None:
    async with (
        MisbehavingOpa(answer(500, b"{}")) as server,
        OpaRestEngine(server.url, revision_interval=0) as engine,
    ):
        assert await evaluate_many(engine, PATH, []) == []
    assert server.decisions == []


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"result":[]}', id="no-bindings"),
        pytest.param(b'{"result":[{"r":[1]}]}', id="not-an-object"),
        pytest.param(b'{"code":"x"}', id="no-result"),
        pytest.param(b"garbage", id="garbage"),
    ],
)
async def test_a_batch_answer_of_the_wrong_shape_decides_no_item(body: bytes) -> None:
    async with (
        MisbehavingOpa(answer(200, body)) as server,
        OpaRestEngine(server.url, revision_interval=0) as engine,
    ):
        with pytest.raises(EngineError):
            await evaluate_many(engine, PATH, [Raw({"x": 1})])


async def test_an_item_missing_or_doubled_in_the_answer_is_undecided_alone() -> None:
    body = b'{"result":[{"r":{"0":[1],"2":[1,2],"3":"x"}}]}'
    async with (
        MisbehavingOpa(answer(200, body)) as server,
        OpaRestEngine(server.url, revision_interval=0) as engine,
    ):
        answers = await evaluate_many(engine, PATH, [Raw({}), Raw({}), Raw({}), Raw({})])
    assert _values(answers) == [1, "EngineError", "EngineError", "EngineError"]


async def test_an_unreachable_opa_fails_the_round_trip(batch_opa: OpaServer) -> None:
    url = batch_opa.url
    batch_opa.kill()
    async with OpaRestEngine(url, revision_interval=0) as engine:
        with pytest.raises(EngineUnavailableError):
            await evaluate_many(engine, PATH, [Raw({"x": 1})])


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.text(max_size=8),
            st.text(max_size=12) | st.integers() | st.booleans(),
            max_size=3,
        ),
        max_size=4,
    )
)
def test_no_document_ever_becomes_query_text(values: list[dict[str, Any]]) -> None:
    body = json.loads(batch_body(PATH, [Raw(value) for value in values]))
    assert body["query"] == batch_query(PATH)
    assert body["input"] == {"batch": values}


def test_path_parts_are_quoted_names_in_the_query() -> None:
    assert batch_query("gateway/authz/import") == (
        'r := {i: [v | v := data["gateway"]["authz"]["import"] with input as b]'
        " | some i, b in input.batch}"
    )


def test_reading_a_batch_answer_keeps_the_order_of_the_documents() -> None:
    body = b'{"result":[{"r":{"1":["b"],"0":["a"]}}]}'
    answers = read_batch_response(200, body, count=2, revision="r1")
    assert _values(answers) == ["a", "b"]
    assert all(isinstance(a, EngineAnswer) and a.revision == "r1" for a in answers)


# -- the embedded engine ------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded(opa_binary: str, policy_dir: str) -> Any:
    bundle = built_bundle(opa_binary, policy_dir, (PATH, "batch/echo"))
    engine = EmbeddedEngine(bundle, identity="embedded:batch")
    yield engine
    engine.close()


async def test_the_embedded_engine_decides_a_batch_and_fails_closed_per_item(
    embedded: EmbeddedEngine,
) -> None:
    documents = [Raw({"x": 1}), Raw({"x": 3}), Raw({"x": 2}), Raw({"z": 0})]
    answers = await evaluate_many(embedded, PATH, documents)
    assert _values(answers) == [1, "EngineError", 2, None]


async def test_the_embedded_engine_answers_a_batch_as_it_answers_each_item(
    embedded: EmbeddedEngine,
) -> None:
    documents = [Raw({"x": n}) for n in (1, 2, 7)]
    answers = await embedded.evaluate_many(PATH, documents)
    single = [embedded.evaluate_sync(PATH, document.to_json()) for document in documents]
    assert [(a.defined, a.value, a.revision) for a in answers if isinstance(a, EngineAnswer)] == [
        (s.defined, s.value, s.revision) for s in single
    ]


async def test_a_closed_embedded_engine_fails_the_round_trip(
    opa_binary: str, policy_dir: str
) -> None:
    engine = EmbeddedEngine(built_bundle(opa_binary, policy_dir, (PATH, "batch/echo")))
    engine.close()
    with pytest.raises(EngineUnavailableError):
        await evaluate_many(engine, PATH, [Raw({"x": 1})])


# -- an engine without its own batch ------------------------------------------------------


async def test_an_engine_without_a_batch_is_asked_per_document_and_fails_closed_per_item() -> None:
    def pick(document: dict[str, Any]) -> Any:
        if document["x"] == 3:
            raise EngineError("fault")
        if document["x"] == 4:
            raise RuntimeError("a foreign failure with SECRET text")
        return document["x"]

    engine = StaticEngine({PATH: pick})
    answers = await evaluate_many(engine, PATH, [Raw({"x": n}) for n in (1, 3, 4, 2)])
    assert _values(answers) == [1, "EngineError", "EngineError", 2]
    assert engine.count == 4
    assert all("SECRET" not in str(a) for a in answers)

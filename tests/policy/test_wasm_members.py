"""The embedded engine keeps each tool definition parsed per instance: never a stale one.

Every evaluation's input is the whole document (``input.tool`` is the whole definition);
only its parsing is saved. These tests hold the engine to that: a policy that hands its
input back sees exactly the document, whatever definitions came before, across bundle
swaps, instance resets after failures and timeouts, and the bound on what is kept.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import Authorization, ToolDefinition
from gateway.policy import (
    CallerContext,
    EmbeddedEngine,
    EngineError,
    EngineTimeoutError,
    InputDocument,
    _epoch,
    _wasm,
    _wasm_abi,
)
from gateway.policy._bundle import Bundle
from tests.policy.wasm_support import built_bundle

MEMBERS: Final = """package members

echo := input

schema := input.tool.input_schema

spin := count([x | some x in numbers.range(1, input.arguments.n); x % 7 == 0])

# Two values for one rule: an evaluation that fails (OPA: eval_conflict_error).
conflict := input.arguments.a

conflict := input.arguments.b
"""
ENTRYPOINTS: Final = ("members/echo", "members/schema", "members/spin", "members/conflict")
CONTEXT: Final = CallerContext({"subject": "alice", "roles": ["reader"], "tenant": "acme"})


@pytest.fixture(scope="module")
def members(opa_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    """A policy that hands back its input, or the tool's schema, or spins, or fails."""
    return _members_bundle(opa_binary, tmp_path_factory.mktemp("members"), MEMBERS)


def _members_bundle(opa_binary: str, root: Path, text: str) -> Bundle:
    directory = root / "members"
    directory.mkdir(exist_ok=True)
    (directory / "members.rego").write_text(text)
    return built_bundle(opa_binary, str(directory), ENTRYPOINTS)


def _tool(name: str, properties: dict[str, Any], description: str = "") -> ToolDefinition:
    return ToolDefinition(name, {"type": "object", "properties": properties}, description)


def _document(definition: ToolDefinition, arguments: bytes = b"{}") -> InputDocument:
    return InputDocument(Authorization(definition, arguments), CONTEXT)


def _seen(engine: EmbeddedEngine, document: InputDocument) -> Any:
    answer = engine.evaluate_sync("members/echo", document)
    assert answer.defined
    return answer.value


def _instance(engine: EmbeddedEngine) -> _wasm_abi.PolicyInstance:
    loaded = engine._loaded
    return engine._instance(loaded)


def test_the_policy_sees_the_whole_document_and_the_definition_is_kept_once(
    members: Bundle,
) -> None:
    engine = EmbeddedEngine(members)
    document = _document(_tool("add", {"a": {"type": "integer"}}, "Add."), b'{"a": 1}')
    for _ in range(3):
        assert _seen(engine, document) == document.to_dict()
    assert _instance(engine).kept_members == 1


async def test_an_evaluation_on_the_event_loop_sees_the_whole_document_too(
    members: Bundle,
) -> None:
    engine = EmbeddedEngine(members)
    document = _document(_tool("add", {"a": {"type": "integer"}}), b'{"a": 2}')
    for _ in range(2):
        answer = await engine.evaluate("members/echo", document)
        assert answer.value == document.to_dict()


def test_two_definitions_with_one_name_are_never_confused(members: Bundle) -> None:
    engine = EmbeddedEngine(members)
    first = _tool("files", {"path": {"type": "string"}})
    second = _tool("files", {"path": {"type": "string", "pattern": "^/srv/"}})
    for _ in range(3):
        for definition in (first, second):
            answer = engine.evaluate_sync("members/schema", _document(definition))
            assert answer.value == json.loads(definition.input_schema_json)
    assert _instance(engine).kept_members == 2


def test_a_new_bundle_is_evaluated_with_its_own_instance_and_definitions(
    members: Bundle, opa_binary: str, tmp_path: Path
) -> None:
    engine = EmbeddedEngine(members)
    definition = _tool("files", {"path": {"type": "string"}})
    assert _seen(engine, _document(definition)) == _document(definition).to_dict()
    before = _instance(engine)
    other = _members_bundle(
        opa_binary,
        tmp_path,
        MEMBERS.replace("echo := input", 'echo := {"v": 2, "tool": input.tool}'),
    )
    engine.activate(other)
    changed = _tool("files", {"path": {"type": "string", "maxLength": 3}})
    for candidate in (definition, changed):
        expected = {"v": 2, "tool": _document(candidate).to_dict()["tool"]}
        assert _seen(engine, _document(candidate)) == expected
    assert _instance(engine) is not before
    assert before.kept_members == 1  # the old instance is no longer asked


def test_after_a_timeout_the_next_evaluation_sees_its_own_definition(members: Bundle) -> None:
    engine = EmbeddedEngine(members, timeout_s=0.001, tick_s=0.001)
    slow = _tool("files", {"n": {"type": "integer"}})
    with pytest.raises(EngineTimeoutError):
        engine.evaluate_sync("members/spin", _document(slow, b'{"n": 100000000}'))
    fresh = _instance(engine)
    assert fresh.kept_members == 0
    changed = _tool("files", {"n": {"type": "integer", "maximum": 5}})
    document = _document(changed, b'{"n": 3}')
    # A busy machine may preempt even this past a 1 ms deadline: a few tries.
    for _ in range(20):
        try:
            assert _seen(engine, document) == document.to_dict()
            break
        except EngineTimeoutError:
            continue
    else:
        pytest.fail("no evaluation finished inside its deadline")
    engine.close()


def test_after_a_failed_evaluation_the_next_sees_its_own_definition(members: Bundle) -> None:
    engine = EmbeddedEngine(members)
    failing = _tool("pair", {"a": {"type": "integer"}})
    assert _seen(engine, _document(failing, b'{"a": 1, "b": 2}'))["tool"]["name"] == "pair"
    with pytest.raises(EngineError) as caught:
        engine.evaluate_sync("members/conflict", _document(failing, b'{"a": 1, "b": 2}'))
    assert caught.value.code == "engine_error"
    assert _instance(engine).kept_members == 0  # the thread got a fresh instance
    changed = _tool("pair", {"a": {"type": "string"}})
    assert _seen(engine, _document(changed)) == _document(changed).to_dict()


def test_what_an_instance_keeps_is_bounded_and_every_answer_stays_right(
    members: Bundle,
) -> None:
    engine = _epoch.new_engine()
    policy = _wasm_abi.compile_policy(engine, members.wasm, members.data, memory_limit=2 << 20)
    instance = _wasm_abi.PolicyInstance(policy)
    entrypoint = policy.entrypoints["members/echo"]
    most = 0
    assert instance.member_budget == (2 << 20) // 8
    for index in range(400):
        document = _document(_tool(f"t{index}", {f"p{index}": {"type": "string"}}, "x" * 200))
        encoded, tool = document.to_json(), document.tool_json
        head = _wasm._head(encoded, tool)
        assert head is not None
        text = instance.evaluate_member(entrypoint, head, b"tool", tool, 1 << 40)
        assert text == instance.evaluate(entrypoint, encoded, 1 << 40)
        assert instance.kept_bytes <= instance.member_budget
        most = max(most, instance.kept_members)
    # An eighth of 2 MiB holds some of the 400 definitions, never all: it was let go.
    assert 1 < most < 400


def test_a_definition_too_long_to_keep_is_parsed_with_each_input(members: Bundle) -> None:
    engine = EmbeddedEngine(members)
    long = _tool("big", {"a": {"type": "string"}}, "y" * (_wasm_abi.MEMBER_MAX_BYTES + 1))
    document = _document(long, b'{"a": "z"}')
    assert _seen(engine, document) == document.to_dict()
    assert _instance(engine).kept_members == 0


def test_a_head_is_cut_only_where_the_document_ends_with_its_tool() -> None:
    document = b'{"arguments":{},"tool":{"name":"t"}}'
    assert _wasm._head(document, b'{"name":"t"}') == b'{"arguments":{}}'
    for tool in (b'{"name":"u"}', b'"t"}', b"", b'{"arguments":{},"tool":{"name":"t"}}'):
        assert _wasm._head(document, tool) is None
    assert _wasm._head(b'{"tool":{"name":"t"}}', b'{"name":"t"}') is None


_TEXT: Final = st.text(
    alphabet=st.characters(exclude_categories=["Cs"]) | st.sampled_from('"\\/\n\u2028'),
    max_size=12,
)
_JSON: Final = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str).map(float)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    definitions=st.lists(
        st.tuples(
            st.sampled_from(["t", "u"]),
            st.dictionaries(
                st.text(string.ascii_letters, min_size=1, max_size=5), _JSON, max_size=3
            ),
            _TEXT,
        ),
        min_size=1,
        max_size=4,
    ),
    arguments=st.dictionaries(_TEXT, _JSON, max_size=3),
)
def test_evaluation_with_kept_definitions_equals_evaluation_of_the_whole_document(
    members: Bundle,
    definitions: list[tuple[str, dict[str, Any], str]],
    arguments: dict[str, Any],
) -> None:
    engine = _property_engine(members)
    encoded_arguments = json.dumps(arguments).encode()
    for name, schema, description in definitions:
        # "type" last: a generated member named "type" must not override it.
        definition = ToolDefinition(name, {**schema, "type": "object"}, description)
        document = _document(definition, encoded_arguments)
        kept = engine.evaluate_sync("members/echo", document)
        whole = engine.evaluate_sync("members/echo", document.to_json())
        assert kept.value == whole.value == document.to_dict()


_ENGINES: dict[bytes, EmbeddedEngine] = {}


def _property_engine(bundle: Bundle) -> EmbeddedEngine:
    # One engine across the examples: what its instance kept from one example must not
    # leak into the next.
    engine = _ENGINES.get(bundle.wasm)
    if engine is None:
        engine = _ENGINES[bundle.wasm] = EmbeddedEngine(bundle)
    return engine


def test_an_answer_whose_text_was_read_before_has_the_same_value_and_its_own_id(
    members: Bundle,
) -> None:
    engine = EmbeddedEngine(members)
    document = _document(_tool("add", {"a": {"type": "integer"}}), b'{"a": 1.50}')
    first = engine.evaluate_sync("members/echo", document)
    again = [engine.evaluate_sync("members/echo", document) for _ in range(3)]
    assert first.text is not None
    for answer in again:
        assert answer.text == first.text
        assert answer.value == first.value == document.to_dict()
        assert answer.value is answer.value  # decoded once, then kept
        assert answer.revision == first.revision
    assert len({first.decision_id, *(answer.decision_id for answer in again)}) == 4


def test_a_result_read_once_is_read_again_exactly_when_another_document_gives_it(
    members: Bundle,
) -> None:
    # Two documents with one schema: the same text for the schema entrypoint, each decoded.
    engine = EmbeddedEngine(members)
    one = _document(_tool("one", {"x": {"type": "string"}}))
    two = _document(_tool("two", {"x": {"type": "string"}}))
    first = engine.evaluate_sync("members/schema", one)
    second = engine.evaluate_sync("members/schema", two)
    assert second.text == first.text
    assert second.value == first.value == one.to_dict()["tool"]["input_schema"]
    assert second.value is not first.value

"""The AuthZEN Authorization API 1.0: the certification scenario's own cases, and the mapping
of a request onto the gateway's tool calls and shipped policies.

The certification cases run against a gateway whose tools are the fixture's actions (read,
write, delete) decided by the fixture policy, compiled and evaluated by the embedded
engine; the harness is a trusted PEP with its own API key. The mapping cases run against
the shipped policies' bundle with the example tools, as an ordinary caller.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.audit import AuditTrail, MemorySink
from gateway.policy import EmbeddedEngine, EngineUnavailableError, PolicyAuthorizer
from gateway.server import build_service, load_config
from gateway.server._authzen import (
    AuthzenApi,
    BadRequestError,
    parse_body,
    read_evaluation,
)
from gateway.service import Authenticator, Gateway, api_key_digest
from gateway.service._config import ApiKey, AuthConfig, import_tools
from gateway.testing import RecordingTool, StaticEngine
from tests.server.authzen_cases import BASIC, BATCH, Case
from tests.server.conftest import ALICE as CONF_ALICE
from tests.server.conftest import BUNDLE, gateway_toml, key, read_audit, serve

FIXTURE: Final = Path(__file__).with_name("authzen_fixture")
PEP_KEY: Final = "authzen-harness-key"
ALICE_KEY: Final = "authzen-alice-key"
HARNESS: Final = {"subject": "certification-harness"}
ALICE: Final = {"subject": "alice", "roles": ["reader"], "tenant": "acme"}
_RECORD_ARGUMENTS: Final = {
    "type": "object",
    "properties": {"resource": {"type": "object"}, "action": {"type": "object"}},
    "required": ["resource"],
    "additionalProperties": False,
}

# The example tools, imported as the service imports them (not as a second module name).
TOOLS = import_tools("examples.example_tools:TOOLS")


def _authenticator() -> Authenticator:
    keys = (
        ApiKey(sha256=api_key_digest(PEP_KEY), context=HARNESS),
        ApiKey(sha256=api_key_digest(ALICE_KEY), context=ALICE),
    )
    return Authenticator(AuthConfig(api_keys=keys))


@pytest.fixture(scope="module")
def fixture_engine(opa_binary: str) -> EmbeddedEngine:
    return EmbeddedEngine.from_directory(
        FIXTURE, entrypoints=("authzen_fixture/decision",), opa_binary=opa_binary
    )


@pytest.fixture
async def harness(fixture_engine: EmbeddedEngine) -> AsyncIterator[httpx.AsyncClient]:
    """The fixture PDP, called as the certification harness (a trusted PEP)."""
    tools = [RecordingTool(name, _RECORD_ARGUMENTS) for name in ("read", "write", "delete")]
    authorizer = PolicyAuthorizer(fixture_engine, path="authzen_fixture/decision")
    gateway = Gateway(tools, authorizer=authorizer, audit=AuditTrail(MemorySink()))
    api = AuthzenApi(gateway, _authenticator(), trusted_peps=("certification-harness",))
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(
        transport=transport, base_url="https://pdp.test", headers={"x-api-key": PEP_KEY}
    ) as client:
        yield client


async def _send(client: httpx.AsyncClient, case: Case) -> httpx.Response:
    content = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
    headers = {"content-type": case.content_type, **case.headers}
    return await client.post(case.path, content=content, headers=headers)


def _decision(item: Mapping[str, Any]) -> bool:
    assert isinstance(item["decision"], bool)
    assert "context" not in item or isinstance(item["context"], dict)
    return bool(item["decision"])


@pytest.mark.parametrize("case", BASIC, ids=lambda case: case.id)
async def test_the_certification_scenarios_access_evaluation_cases(
    harness: httpx.AsyncClient, case: Case
) -> None:
    response = await _send(harness, case)
    assert response.status_code == case.status, response.text
    assert response.headers["content-type"] == "application/json"
    if case.status == 200:
        decision = _decision(response.json())
        if case.decision is not None:
            assert decision is case.decision


@pytest.mark.parametrize("case", BATCH, ids=lambda case: case.id)
async def test_the_certification_scenarios_access_evaluations_cases(
    harness: httpx.AsyncClient, case: Case
) -> None:
    response = await _send(harness, case)
    assert response.status_code == case.status, response.text
    items = response.json()["evaluations"]
    assert case.decisions is not None
    assert len(items) == len(case.decisions)
    for item, expected in zip(items, case.decisions, strict=True):
        decision = _decision(item)
        if expected is not None:
            assert decision is expected


async def test_the_same_request_gets_the_same_decision_every_time(
    harness: httpx.AsyncClient,
) -> None:
    case = BASIC[0]
    decisions = [_decision((await _send(harness, case)).json()) for _ in range(5)]
    assert decisions == [True] * 5


async def test_the_request_id_sent_is_echoed_and_one_is_made_when_none_is_sent(
    harness: httpx.AsyncClient,
) -> None:
    sent = "bfe9eb29-ab87-4ca3-be83-a1d5d8305716 with spaces, as the spec allows"
    for case in (BASIC[0], BASIC[9], BATCH[1]):  # a decision, a 400, a batch
        echoed = await _send(
            harness, Case(case.id, case.path, case.body, headers={"x-request-id": sent})
        )
        assert echoed.headers["x-request-id"] == sent
    assert (await _send(harness, BASIC[0])).headers["x-request-id"]


async def test_the_metadata_names_the_pdp_and_both_evaluation_endpoints(
    harness: httpx.AsyncClient,
) -> None:
    response = await harness.get("/.well-known/authzen-configuration", headers={"x-api-key": ""})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "policy_decision_point": "https://pdp.test",
        "access_evaluation_endpoint": "https://pdp.test/access/v1/evaluation",
        "access_evaluations_endpoint": "https://pdp.test/access/v1/evaluations",
    }


@pytest.mark.parametrize(
    ("semantic", "expected"),
    [
        ("execute_all", [True, False, True]),
        ("deny_on_first_deny", [True, False]),
        ("permit_on_first_permit", [True]),
    ],
)
async def test_the_three_evaluation_semantics(
    harness: httpx.AsyncClient, semantic: str, expected: list[bool]
) -> None:
    body = {
        "subject": {"type": "user", "id": "bob"},
        "resource": {"type": "record", "id": "record-1"},
        "options": {"evaluations_semantic": semantic},
        "evaluations": [
            {"action": {"name": "read"}},
            {"action": {"name": "write"}},
            {"action": {"name": "read"}},
        ],
    }
    response = await harness.post("/access/v1/evaluations", json=body)
    assert [item["decision"] for item in response.json()["evaluations"]] == expected


@pytest.mark.parametrize(
    "body",
    [
        {"evaluations": [{}], "options": {"evaluations_semantic": "first_wins"}},
        {"evaluations": {"not": "an array"}},
        {"evaluations": [], "options": []},
        {"evaluations": [{"subject": {"type": "u", "id": "a"}}] * 65},
        {"evaluations": [], "subject": {"type": "u", "id": "a"}},  # empty: one evaluation
    ],
)
async def test_a_batch_the_specification_does_not_allow_is_400(
    harness: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    assert (await harness.post("/access/v1/evaluations", json=body)).status_code == 400


async def test_an_unauthenticated_request_is_401_before_any_policy(
    harness: httpx.AsyncClient,
) -> None:
    case = BASIC[0]
    for wrong in ("", "not-a-key"):
        response = await harness.post(case.path, json=case.body, headers={"x-api-key": wrong})
        assert response.status_code == 401


# -- the mapping onto tool calls, with the shipped policies -----------------------------------


@pytest.fixture(scope="module")
def shipped_engine() -> EmbeddedEngine:
    return EmbeddedEngine.from_bundle(BUNDLE)


@pytest.fixture
def sink() -> MemorySink:
    return MemorySink()


@pytest.fixture
async def alice(
    shipped_engine: EmbeddedEngine, sink: MemorySink
) -> AsyncIterator[httpx.AsyncClient]:
    """The example tools behind the shipped policies, called by alice (not a trusted PEP)."""
    trail = AuditTrail(sink)
    gateway = Gateway(TOOLS, authorizer=PolicyAuthorizer(shipped_engine), audit=trail)
    api = AuthzenApi(
        gateway, _authenticator(), audit=trail, trusted_peps=("certification-harness",)
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api),
        base_url="http://pdp",
        headers={"x-api-key": ALICE_KEY},
    ) as client:
        yield client


def _tool(
    name: str, arguments: Any, *, action: str = "tools/call", subject: str = "alice"
) -> dict[str, Any]:
    return {
        "subject": {"type": "identity", "id": subject},
        "action": {"name": action},
        "resource": {"type": "tool", "id": name, "properties": {"arguments": arguments}},
    }


async def _decide(client: httpx.AsyncClient, body: Any) -> dict[str, Any]:
    response = await client.post("/access/v1/evaluation", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def test_a_tool_call_is_decided_as_the_call_itself_would_be(
    alice: httpx.AsyncClient, sink: MemorySink
) -> None:
    allowed = await _decide(alice, _tool("search", {"query": "q", "tenant": "acme"}))
    other_tenant = await _decide(alice, _tool("search", {"query": "q", "tenant": "globex"}))
    by_name = await _decide(
        alice, _tool("search", {"query": "q", "tenant": "acme"}, action="search")
    )
    assert allowed["decision"] is True
    assert other_tenant["decision"] is False
    assert other_tenant["context"]["code"] == "denied"
    assert (
        other_tenant["context"]["reason"]
        == "the request refers to data outside the caller's tenant"
    )
    assert by_name["decision"] is True
    decisions = [r for r in sink.records if r["type"] == "decision"]
    assert [(r["tool"], r["result"]) for r in decisions] == [
        ("search", "allow"),
        ("search", "deny"),
        ("search", "allow"),
    ]
    assert allowed["context"]["decision_id"] == decisions[0]["decision_id"]


async def test_an_ordinary_caller_is_always_the_subject(
    alice: httpx.AsyncClient, sink: MemorySink
) -> None:
    as_bob = await _decide(
        alice, _tool("search", {"query": "q", "tenant": "globex"}, subject="bob")
    )
    assert as_bob["decision"] is False
    assert as_bob["context"]["code"] == "subject_not_caller"
    pep_style = _tool("search", {"query": "q", "tenant": "globex"})
    pep_style["subject"]["properties"] = {"tenant": "globex", "roles": ["admin"]}
    assert (await _decide(alice, pep_style))["decision"] is False  # properties change nothing
    assert all(r["context"]["subject"] == "alice" for r in sink.records if r["type"] == "decision")


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (_tool("add", {"a": "1", "b": 2}), "invalid_arguments"),
        (_tool("add", {"a": 1, "b": 2, "c": 3}), "invalid_arguments"),
        (_tool("add", [1, 2]), "invalid_arguments"),
        (_tool("delete_everything", {}), "unknown_tool"),
        (_tool("add", {"a": 1, "b": 2}, action="search"), "unknown_tool"),
        ({**_tool("add", {}), "resource": {"type": "document", "id": "add"}}, "unknown_tool"),
        ({**_tool("add", {}), "action": {"name": "resources/read"}}, "unknown_tool"),
    ],
)
async def test_a_call_that_would_not_be_admitted_is_false_without_asking_the_policy(
    alice: httpx.AsyncClient, sink: MemorySink, body: dict[str, Any], code: str
) -> None:
    answer = await _decide(alice, body)
    assert answer["decision"] is False
    assert answer["context"]["code"] == code
    assert not [r for r in sink.records if r["type"] == "decision"]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"subject": {"type": "u", "id": "alice", "id": "bob"}, "action": {"name": "add"},'
        b' "resource": {"type": "tool", "id": "add"}}',
        b'{"subject": {"type": "u", "id": "\\ud800"}, "action": {"name": "add"},'
        b' "resource": {"type": "tool", "id": "add"}}',
        b'{"subject": {"type": "u", "id": "alice"}, "action": {"name": "add"},'
        b' "resource": {"type": "tool", "id": "add", "properties": {"arguments": {"a": NaN}}}}',
        b"[]",
        b"\xff\xfe",
    ],
)
async def test_a_body_that_is_not_strict_i_json_is_400(
    alice: httpx.AsyncClient, raw: bytes
) -> None:
    response = await alice.post(
        "/access/v1/evaluation", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400


async def test_an_engine_that_cannot_answer_fails_the_request_closed() -> None:
    def down(document: Any) -> Any:
        raise EngineUnavailableError("OPA is unreachable", detail="connection refused: secret")

    engine = StaticEngine({"gateway/authz/decision": down})
    gateway = Gateway(TOOLS, authorizer=PolicyAuthorizer(engine), audit=AuditTrail(MemorySink()))
    api = AuthzenApi(gateway, _authenticator())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api),
        base_url="http://pdp",
        headers={"x-api-key": ALICE_KEY},
    ) as client:
        body = _tool("add", {"a": 1, "b": 2})
        single = await client.post("/access/v1/evaluation", json=body)
        batch = await client.post("/access/v1/evaluations", json={"evaluations": [body, body]})
    assert single.status_code == 503
    assert single.json()["code"] == "engine_unavailable"
    assert "secret" not in single.text
    items = batch.json()["evaluations"]
    assert [item["decision"] for item in items] == [False, False]
    assert items[0]["context"]["error"]["status"] == 503
    assert "secret" not in batch.text


# -- the parsers of untrusted input ------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=6,
)
_MEMBERS = st.fixed_dictionaries(
    {},
    optional={
        "subject": _JSON | st.fixed_dictionaries({"type": _JSON, "id": _JSON, "properties": _JSON}),
        "action": _JSON | st.fixed_dictionaries({"name": _JSON, "properties": _JSON}),
        "resource": _JSON
        | st.fixed_dictionaries({"type": _JSON, "id": _JSON, "properties": _JSON}),
    },
)


@given(raw=st.binary(max_size=200) | _JSON.map(lambda value: json.dumps(value).encode()))
def test_the_body_parser_only_ever_refuses_with_a_bad_request(raw: bytes) -> None:
    try:
        document = parse_body(raw)
    except BadRequestError:
        return
    assert isinstance(document, dict)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(item=_MEMBERS, defaults=_MEMBERS)
def test_an_evaluation_is_read_whole_or_refused_with_a_bad_request(
    item: dict[str, Any], defaults: dict[str, Any]
) -> None:
    try:
        evaluation = read_evaluation(item, defaults)
    except BadRequestError:
        return
    for entity, members in (
        (evaluation.subject, ("type", "id")),
        (evaluation.resource, ("type", "id")),
    ):
        assert all(isinstance(entity[member], str) for member in members)
    assert isinstance(evaluation.action["name"], str)
    assert evaluation.subject is item.get("subject", defaults.get("subject"))


# -- served by the HTTP service from its configuration ----------------------------------------


def _service_config(tmp_path: Path, policy_dir: Path, opa_binary: str, authzen: str) -> Path:
    text = gateway_toml(
        engine="embedded",
        audit_path=tmp_path / "audit.jsonl",
        policies=policy_dir,
        opa_binary=opa_binary,
    )
    path = tmp_path / "gateway.toml"
    path.write_text(text + authzen, encoding="utf-8")
    return path


def test_the_http_service_serves_the_authzen_api_when_configured_and_not_otherwise(
    tmp_path: Path, policy_dir: Path, opa_binary: str
) -> None:
    on = _service_config(
        tmp_path,
        policy_dir,
        opa_binary,
        '\n[authzen]\nenabled = true\nbase_url = "https://pdp.example"\n',
    )
    body = _tool("add", {"a": 1, "b": 2})
    with serve(build_service(load_config(on)).app) as url:
        decided = httpx.post(
            f"{url}/access/v1/evaluation",
            json=body,
            headers={**key(CONF_ALICE), "x-request-id": "r-1"},
        )
        metadata = httpx.get(f"{url}/.well-known/authzen-configuration")
        refused = httpx.post(f"{url}/access/v1/evaluation", json=body)
    assert decided.status_code == 200
    assert decided.json()["decision"] is True
    assert decided.headers["x-request-id"] == "r-1"
    assert (
        metadata.json()["access_evaluation_endpoint"] == "https://pdp.example/access/v1/evaluation"
    )
    assert refused.status_code == 401
    records = read_audit(tmp_path / "audit.jsonl")
    assert [(r["tool"], r["result"], r["context"]["request_id"]) for r in records] == [
        ("add", "allow", "r-1")
    ]
    off = _service_config(tmp_path, policy_dir, opa_binary, "")
    with serve(build_service(load_config(off)).app) as url:
        assert (
            httpx.post(
                f"{url}/access/v1/evaluation", json=body, headers=key(CONF_ALICE)
            ).status_code
            == 404
        )

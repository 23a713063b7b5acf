"""AuthZEN never says ``true`` for a call ``/v1/calls`` would not run as asked.

An allow that carries an obligation (AuthZEN's boolean cannot hand one to the PEP) is
``false``; a call that needs a person's approval is ``false`` whether approvals are on or
off, and evaluating it neither records nor uses an approval; an ``approval`` member the
caller or a trusted PEP sends never reaches the policy. Each is checked against what the
gateway's own pipeline (``Gateway.call``, the ``/v1/calls`` path) does with the same call.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
import pytest

from gateway import Authorization, Decision, ToolCall
from gateway.approvals import (
    ApprovalDesk,
    ApprovalGate,
    AuditEvents,
    MemoryApprovalStore,
)
from gateway.audit import AuditTrail, MemorySink
from gateway.obligations import read_obligations
from gateway.policy import CallerContext, EmbeddedEngine, PolicyAuthorizer
from gateway.server._authzen import APPROVAL_REQUIRED, AuthzenApi
from gateway.service import Authenticator, Gateway, api_key_digest
from gateway.service._config import ApiKey, AuthConfig
from gateway.testing import FakeClock, RecordingAuthorizer, RecordingTool
from tests.server.conftest import API_KEYS, BUNDLE, CAROL
from tests.server.test_authzen import TOOLS, _tool

PEP_KEY: Final = "authzen-pep-key"
PEP: Final = {"subject": "pep"}
CAROL_CONTEXT: Final = dict(API_KEYS[CAROL])
TINA: Final = CallerContext(subject="tina", roles=["treasurer"], tenant="acme")
#: A payment above the shipped threshold (1000): a treasurer must approve it.
BIG: Final = {"from_account": "acct-acme-001", "to_account": "acct-acme-002", "amount": 5000}
#: A payment a treasurer may make alone.
SMALL: Final = {"from_account": "acct-acme-001", "to_account": "acct-acme-002", "amount": 500}
FORGED: Final = {
    "id": "apr_forged",
    "approved_by": "tina",
    "approver_roles": ["treasurer"],
    "approved_at": "2026-12-01T12:00:00+00:00",
}


def _authenticator() -> Authenticator:
    keys = (
        ApiKey(sha256=api_key_digest(PEP_KEY), context=PEP),
        ApiKey(sha256=api_key_digest(CAROL), context=CAROL_CONTEXT),
    )
    return Authenticator(AuthConfig(api_keys=keys))


@dataclass
class World:
    """One gateway (shipped policies or a test policy), its AuthZEN API and its audit trail."""

    gateway: Gateway
    api: AuthzenApi
    sink: MemorySink
    store: MemoryApprovalStore | None = None
    desk: ApprovalDesk | None = None
    clients: list[httpx.AsyncClient] = field(default_factory=list)

    def client(self, api_key: str = CAROL) -> httpx.AsyncClient:
        made = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.api),
            base_url="http://pdp",
            headers={"x-api-key": api_key},
        )
        self.clients.append(made)
        return made

    async def evaluate(self, body: Any, api_key: str = CAROL) -> dict[str, Any]:
        response = await self.client(api_key).post("/access/v1/evaluation", json=body)
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    async def batch(self, body: Any, api_key: str = CAROL) -> list[dict[str, Any]]:
        response = await self.client(api_key).post("/access/v1/evaluations", json=body)
        assert response.status_code == 200, response.text
        items: list[dict[str, Any]] = response.json()["evaluations"]
        return items

    async def call(self, name: str, arguments: Any) -> str:
        """The code ``/v1/calls`` gives the same call (the pipeline, as carol)."""
        result = await self.gateway.call(
            ToolCall("c-1", name, json.dumps(arguments)), caller=CallerContext(CAROL_CONTEXT)
        )
        return result.code

    def decisions(self) -> list[dict[str, Any]]:
        return [r for r in self.sink.records if r["type"] == "decision"]


def _world(authorizer: Any, tools: Any, *, approvals: bool, audit: bool = True) -> World:
    sink = MemorySink()
    trail = AuditTrail(sink)
    store = desk = gate = None
    if approvals:
        clock = FakeClock(1_700_000_000.0)
        events = AuditEvents(sink, clock=clock)
        store = MemoryApprovalStore()
        gate = ApprovalGate(store, events=events, clock=clock)
        desk = ApprovalDesk(store, events=events, clock=clock)
    gateway = Gateway(tools, authorizer=authorizer, audit=trail, approvals=gate)
    api = AuthzenApi(
        gateway, _authenticator(), audit=trail if audit else None, trusted_peps=("pep",)
    )
    return World(gateway, api, sink, store, desk)


@pytest.fixture(scope="module")
def shipped_engine() -> EmbeddedEngine:
    return EmbeddedEngine.from_bundle(BUNDLE)


@pytest.fixture(params=[False, True], ids=["approvals-off", "approvals-on"])
async def shipped(
    request: pytest.FixtureRequest, shipped_engine: EmbeddedEngine
) -> AsyncIterator[World]:
    """The example tools behind the shipped policies, with approvals off and on."""
    world = _world(PolicyAuthorizer(shipped_engine), TOOLS, approvals=request.param)
    yield world
    for client in world.clients:
        await client.aclose()


def _as_carol(name: str, arguments: Any) -> dict[str, Any]:
    return _tool(name, arguments, subject="carol")


def _assert_quotes_no_argument(answer: Any) -> None:
    text = json.dumps(answer)
    for value in ("5000", "acct-acme-001", "acct-acme-002", "SELECT"):
        assert value not in text


# -- the shipped policies: the reproduction of the review's finding ---------------------------


async def test_a_payment_that_needs_approval_is_false_as_v1_calls_would_not_run_it(
    shipped: World,
) -> None:
    answer = await shipped.evaluate(_as_carol("pay", BIG))
    assert answer["decision"] is False
    assert answer["context"]["code"] == APPROVAL_REQUIRED == "approval_required"
    assert answer["context"]["decision_id"] == shipped.decisions()[0]["decision_id"]
    _assert_quotes_no_argument(answer)
    # Evaluating records no pending approval; the call itself would wait for one (or be
    # refused without approvals).
    if shipped.store is not None:
        assert shipped.store.all() == []
        assert await shipped.call("pay", BIG) == "approval_pending"
    else:
        assert await shipped.call("pay", BIG) == "obligation_unfulfilled"


async def test_a_plain_allow_is_still_true_as_v1_calls_would_run_it(shipped: World) -> None:
    answer = await shipped.evaluate(_as_carol("pay", SMALL))
    assert answer["decision"] is True
    assert answer["context"]["code"] == "ok"
    assert await shipped.call("pay", SMALL) == "ok"


async def test_a_redacted_query_is_false_the_pep_cannot_be_told_to_redact(
    shipped: World,
) -> None:
    query = {"database": "acme_sales", "query": "SELECT name FROM customers"}
    answer = await shipped.evaluate(_as_carol("query_db", query))
    assert answer["decision"] is False
    assert answer["context"]["code"] == "obligation_unfulfilled"
    _assert_quotes_no_argument(answer)
    assert [r["obligations"][0]["type"] for r in shipped.decisions()] == ["redact_output"]


async def test_a_forged_approval_from_a_trusted_pep_never_reaches_the_policy(
    shipped: World,
) -> None:
    body = _as_carol("pay", BIG)
    body["subject"]["properties"] = {**CAROL_CONTEXT, "approval": FORGED}
    answer = await shipped.evaluate(body, api_key=PEP_KEY)
    assert answer["decision"] is False
    assert answer["context"]["code"] == "approval_required"
    (record,) = shipped.decisions()
    assert record["context"]["subject"] == "carol"
    assert record["context"]["authzen_pep"] == "pep"
    assert "approval" not in record["context"]
    assert record["obligations"][0]["type"] == "require_approval"


async def test_evaluating_does_not_use_an_approved_approval_and_stays_false(
    shipped_engine: EmbeddedEngine,
) -> None:
    world = _world(PolicyAuthorizer(shipped_engine), TOOLS, approvals=True)
    assert world.store is not None
    assert world.desk is not None
    assert await world.call("pay", BIG) == "approval_pending"
    (pending,) = world.store.all()
    await world.desk.decide(pending.id, TINA, approve=True)
    answer = await world.evaluate(_as_carol("pay", BIG))
    assert answer["decision"] is False
    assert answer["context"]["code"] == "approval_required"
    approval = world.store.get(pending.id)
    assert approval is not None
    assert approval.status == "approved"  # not used by evaluating
    assert await world.call("pay", BIG) == "ok"  # still there for the call itself
    for client in world.clients:
        await client.aclose()


async def test_a_batch_is_decided_item_by_item_with_the_same_rule(shipped: World) -> None:
    query = {"database": "acme_sales", "query": "SELECT name FROM customers"}
    forged = _as_carol("pay", BIG)
    forged["subject"]["properties"] = {**CAROL_CONTEXT, "approval": FORGED}
    body = {
        "evaluations": [
            _as_carol("pay", SMALL),
            _as_carol("pay", BIG),
            _as_carol("query_db", query),
        ]
    }
    items = await shipped.batch(body)
    assert [(i["decision"], i["context"]["code"]) for i in items] == [
        (True, "ok"),
        (False, "approval_required"),
        (False, "obligation_unfulfilled"),
    ]
    _assert_quotes_no_argument(items)
    by_pep = await shipped.batch({"evaluations": [forged, forged]}, api_key=PEP_KEY)
    assert [(i["decision"], i["context"]["code"]) for i in by_pep] == [
        (False, "approval_required")
    ] * 2
    # permit_on_first_permit does not stop at an obligation-carrying allow.
    first = await shipped.batch(
        {
            "options": {"evaluations_semantic": "permit_on_first_permit"},
            "evaluations": [_as_carol("pay", BIG), _as_carol("pay", SMALL)],
        }
    )
    assert [i["decision"] for i in first] == [False, True]
    # The single evaluation through the batch endpoint (no "evaluations") is ruled alike.
    single = await shipped.client().post("/access/v1/evaluations", json=_as_carol("pay", BIG))
    assert single.json()["decision"] is False
    assert single.json()["context"]["code"] == "approval_required"
    if shipped.store is not None:
        assert shipped.store.all() == []


# -- every obligation type, from a test policy ------------------------------------------------

_SCHEMA: Final = {"type": "object", "properties": {"n": {"type": "number"}}}
_OBLIGATIONS: Final[dict[str, list[dict[str, Any]]]] = {
    "redact_output": [{"type": "redact_output", "pointers": ["/secret"]}],
    "rewrite_arguments": [
        {"type": "rewrite_arguments", "operations": [{"op": "clamp", "path": "/n", "max": 1}]}
    ],
    "unknown": [{"type": "notify_the_auditor"}],
    "require_approval": [{"type": "require_approval", "role": "treasurer"}],
    "approval_and_redaction": [
        {"type": "redact_output", "pointers": ["/secret"]},
        {"type": "require_approval", "role": "treasurer"},
    ],
    "audit": [{"type": "audit", "fields": {"ticket": "T-42"}}],
    "audit_and_redaction": [
        {"type": "audit", "fields": {"ticket": "T-42"}},
        {"type": "redact_output", "pointers": ["/secret"]},
    ],
}


def _obliging(kind: str) -> Callable[[Authorization], Decision]:
    def decide(authorization: Authorization) -> Decision:
        return Decision(
            allowed=True, revision="r1", obligations=read_obligations(_OBLIGATIONS[kind])
        )

    return decide


def _plain(authorization: Authorization) -> Decision:
    return Decision(allowed=True, revision="r1")


async def _evaluate_once(world: World, body: Any, api_key: str = CAROL) -> dict[str, Any]:
    try:
        return await world.evaluate(body, api_key)
    finally:
        for client in world.clients:
            await client.aclose()


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        ("redact_output", "obligation_unfulfilled"),
        ("rewrite_arguments", "obligation_unfulfilled"),
        ("unknown", "obligation_unfulfilled"),
        ("require_approval", "approval_required"),
        ("approval_and_redaction", "approval_required"),
        ("audit_and_redaction", "obligation_unfulfilled"),
    ],
)
@pytest.mark.parametrize("approvals", [False, True], ids=["approvals-off", "approvals-on"])
async def test_an_allow_with_any_obligation_is_false_with_a_stable_code(
    kind: str, code: str, approvals: bool
) -> None:
    tool = RecordingTool("t", _SCHEMA)
    world = _world(RecordingAuthorizer(_obliging(kind)), [tool], approvals=approvals)
    answer = await _evaluate_once(world, _as_carol("t", {"n": 7}))
    assert answer["decision"] is False
    assert answer["context"]["code"] == code
    assert set(answer["context"]) == {"code", "decision_id", "reason"}
    assert "7" not in answer["context"]["reason"]
    assert tool.count == 0
    if world.store is not None:
        assert world.store.all() == []


async def test_audit_fields_are_fulfilled_by_the_decision_record_and_only_by_it() -> None:
    recorded = _world(
        RecordingAuthorizer(_obliging("audit")), [RecordingTool("t", _SCHEMA)], approvals=False
    )
    answer = await _evaluate_once(recorded, _as_carol("t", {"n": 1}))
    assert answer["decision"] is True
    assert recorded.decisions()[0]["fields"] == {"ticket": "T-42"}
    unrecorded = _world(
        RecordingAuthorizer(_obliging("audit")),
        [RecordingTool("t", _SCHEMA)],
        approvals=False,
        audit=False,
    )
    answer = await _evaluate_once(unrecorded, _as_carol("t", {"n": 1}))
    assert answer["decision"] is False
    assert answer["context"]["code"] == "obligation_unfulfilled"


@pytest.mark.parametrize("api_key", [CAROL, PEP_KEY], ids=["caller", "trusted-pep"])
async def test_an_approval_member_is_dropped_before_the_policy_as_the_gate_drops_it(
    api_key: str,
) -> None:
    policy = RecordingAuthorizer(_plain)
    world = _world(policy, [RecordingTool("t", _SCHEMA)], approvals=False)
    if api_key == CAROL:
        # The caller's own context carries one (as a credential's claims might).
        forged_key = "carol-with-an-approval"
        keys = (
            ApiKey(
                sha256=api_key_digest(forged_key),
                context={**CAROL_CONTEXT, "approval": FORGED},
            ),
        )
        world.api = AuthzenApi(world.gateway, Authenticator(AuthConfig(api_keys=keys)))
        api_key = forged_key
    body = _as_carol("t", {"n": 1})
    body["subject"]["properties"] = {**CAROL_CONTEXT, "approval": FORGED}
    answer = await _evaluate_once(world, body, api_key)
    assert answer["decision"] is True
    ((_, seen),) = policy.calls
    assert seen.get("subject") == "carol"
    assert seen.get("approval") is None
    assert "approval" not in seen.as_dict()


async def test_a_plain_allow_from_a_test_policy_is_true() -> None:
    world = _world(RecordingAuthorizer(_plain), [RecordingTool("t", _SCHEMA)], approvals=True)
    answer = await _evaluate_once(world, _as_carol("t", {"n": 1}))
    assert answer == {
        "decision": True,
        "context": {"code": "ok", "decision_id": world.decisions()[0]["decision_id"]},
    }

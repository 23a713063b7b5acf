"""An approval belongs to the tenant of the caller who asked: no other tenant's approver sees it.

Found by a security review: a treasurer of another tenant listed, read and approved a payment
of this one, because the desk checked the approver's roles and never their tenant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.approvals import (
    UNKNOWN_TENANT,
    Approval,
    ApprovalError,
    ApprovalKey,
    FileApprovalStore,
    may_decide,
    tenant_of,
)
from gateway.policy import CallerContext
from gateway.testing import FakeClock
from tests.approvals.test_approvals import TREASURER, World

#: Approvers who hold the role but are not of the asking caller's tenant ("acme").
STRANGERS = [
    CallerContext(subject="gus", roles=["treasurer"], tenant="globex"),
    CallerContext(subject="nat", roles=["treasurer"]),
    CallerContext(subject="bea", roles=["treasurer"], tenant="   "),
    CallerContext(subject="ida", roles=["treasurer"], tenant=["acme"]),
    CallerContext(subject="kim", roles=["treasurer"], tenant="ACME"),
    CallerContext(subject="lou", roles=["treasurer"], tenant="acme "),
]


@pytest.mark.parametrize("stranger", STRANGERS, ids=lambda c: str(c.get("subject")))
async def test_an_approver_of_another_tenant_neither_lists_sees_nor_decides(
    stranger: CallerContext,
) -> None:
    world = World()
    pending = await world.pay(500)

    assert await world.desk.pending(stranger) == []
    for action in (world.desk.show(pending.approval_id, stranger),):
        with pytest.raises(ApprovalError) as seen:
            await action
        assert seen.value.code == "approval_not_found"
    for approve in (True, False):
        with pytest.raises(ApprovalError) as decided:
            await world.desk.decide(pending.approval_id, stranger, approve=approve)
        assert decided.value.code == "approval_not_found"

    assert world.store.get(pending.approval_id).status == "pending"  # type: ignore[union-attr]
    assert world.events() == ["requested"]
    assert (await world.pay(500)).code == "approval_pending"
    assert world.tool.count == 0


async def test_the_approval_keeps_the_askers_tenant_and_its_own_tenant_approves() -> None:
    world = World()
    pending = await world.pay(500)
    approval = world.store.get(pending.approval_id)
    assert approval is not None
    assert approval.tenant == "acme"
    assert approval.public(world.clock())["tenant"] == "acme"

    assert [a.id for a in await world.desk.pending(TREASURER)] == [pending.approval_id]
    await world.desk.decide(pending.approval_id, TREASURER, approve=True)
    assert (await world.pay(500)).code == "ok"


async def test_a_caller_without_a_tenant_is_approved_only_by_an_approver_without_one() -> None:
    world = World()
    asker = CallerContext(subject="carol", roles=["clerk"])
    pending = await world.pay(500, caller=asker)
    tenanted = CallerContext(subject="tess", roles=["treasurer"], tenant="acme")
    with pytest.raises(ApprovalError) as refused:
        await world.desk.decide(pending.approval_id, tenanted, approve=True)
    assert refused.value.code == "approval_not_found"

    plain = CallerContext(subject="tess", roles=["treasurer"])
    await world.desk.decide(pending.approval_id, plain, approve=True)
    assert (await world.pay(500, caller=asker)).code == "ok"


async def test_a_stored_approval_from_before_tenants_is_decided_by_nobody(tmp_path: Path) -> None:
    clock = FakeClock(1_700_000_000.0)
    path = tmp_path / "approvals.json"
    world = World(FileApprovalStore(path, clock=clock), clock)
    pending = await world.pay(500)
    stored = json.loads(path.read_text(encoding="utf-8"))
    for item in _approval_items(stored):
        del item["tenant"]
    path.write_text(json.dumps(stored), encoding="utf-8")

    reread = World(FileApprovalStore(path, clock=clock), clock)
    approval = reread.store.get(pending.approval_id)
    assert approval is not None
    assert approval.tenant == UNKNOWN_TENANT
    for approver in (TREASURER, CallerContext(subject="tess", roles=["treasurer"])):
        assert await reread.desk.pending(approver) == []
        with pytest.raises(ApprovalError):
            await reread.desk.decide(pending.approval_id, approver, approve=True)


def _approval_items(stored: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    stack = [stored]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "tenant" in item and "key" in item:
                found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    assert found, "the file store keeps approvals as JSON objects with a key"
    return found


tenants = st.one_of(st.none(), st.text(max_size=6), st.integers(), st.lists(st.text(max_size=3)))


@settings(max_examples=300, deadline=None)
@given(asker=tenants, approver=tenants)
def test_may_decide_holds_exactly_when_the_tenants_are_one(asker: Any, approver: Any) -> None:
    approval = Approval(
        id="apr_x",
        key=ApprovalKey("pay", "d" * 64, "c" * 64),
        revision="r1",
        role="treasurer",
        subject="carol",
        tenant=tenant_of(CallerContext(tenant=asker)),
        message=None,
        created_at=0.0,
        expires_at=10.0,
    )
    who = CallerContext(subject="tess", roles=["treasurer"], tenant=approver)
    expected = tenant_of(who) == approval.tenant
    assert may_decide(approval, who) is expected
    assert may_decide(approval, CallerContext(subject="carol", roles=["treasurer"])) is False

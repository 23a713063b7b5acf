"""Approvals through the pipeline: pending, approve, run once, expiry, binding, roles, restart."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from gateway import Authorization, Decision, ToolCall, ToolOutput
from gateway.approvals import (
    ApprovalDesk,
    ApprovalError,
    ApprovalGate,
    AuditEvents,
    FileApprovalStore,
    MemoryApprovalStore,
)
from gateway.audit import AuditTrail, MemorySink
from gateway.obligations import RequireApproval
from gateway.policy import CallerContext, current_caller
from gateway.service import Gateway
from gateway.testing import FakeClock, RecordingAuthorizer, RecordingTool

SCHEMA: dict[str, Any] = {"type": "object", "properties": {"amount": {"type": "number"}}}
CLERK = CallerContext(subject="carol", roles=["clerk"], tenant="acme")
TREASURER = CallerContext(subject="tess", roles=["treasurer"], tenant="acme")
OTHER = CallerContext(subject="olga", roles=["clerk"], tenant="acme")


def policy(authorization: Authorization) -> Decision:
    """Payments above 100 need a treasurer's approval; the policy sees who approved."""
    amount = json.loads(authorization.arguments).get("amount", 0)
    approval = current_caller().get("approval")
    approved = isinstance(approval, dict) and "treasurer" in approval.get("approver_roles", [])
    if amount > 100 and not approved:
        return Decision(
            allowed=True,
            revision="r1",
            obligations=(RequireApproval("treasurer", "a treasurer must approve this payment"),),
        )
    return Decision(allowed=True, revision="r1", reasons=(f"approved={approved}",))


class World:
    def __init__(self, store: Any = None, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock(1_700_000_000.0)
        self.store = store if store is not None else MemoryApprovalStore()
        self.sink = MemorySink()
        events = AuditEvents(self.sink, clock=self.clock)
        self.policy = RecordingAuthorizer(policy)
        self.tool = RecordingTool("pay", SCHEMA, output=ToolOutput.from_text("paid"))
        self.gate = ApprovalGate(self.store, events=events, clock=self.clock)
        self.desk = ApprovalDesk(self.store, events=events, clock=self.clock)
        self.gateway = Gateway(
            [self.tool], authorizer=self.policy, audit=AuditTrail(self.sink), approvals=self.gate
        )

    async def pay(self, amount: float, caller: CallerContext = CLERK) -> Any:
        return await self.gateway.call(
            ToolCall("c1", "pay", json.dumps({"amount": amount})), caller=caller
        )

    def events(self) -> list[str]:
        return [r["event"] for r in self.sink.records if r["type"] == "approval"]


async def test_a_call_that_needs_approval_does_not_run_and_gets_a_pending_approval() -> None:
    world = World()
    result = await world.pay(500)
    assert (result.status, result.code) == (202, "approval_pending")
    assert result.approval_id is not None
    assert result.message == "a treasurer must approve this payment"
    assert world.tool.count == 0
    approval = world.store.get(result.approval_id)
    assert approval is not None
    assert (approval.status, approval.role, approval.subject) == ("pending", "treasurer", "carol")
    assert world.events() == ["requested"]


async def test_a_retry_while_pending_gets_the_same_approval() -> None:
    world = World()
    first, second = await world.pay(500), await world.pay(500)
    assert first.approval_id == second.approval_id
    assert world.tool.count == 0


async def test_after_approval_the_retry_runs_once_and_the_policy_sees_who_approved() -> None:
    world = World()
    pending = await world.pay(500)
    await world.desk.decide(pending.approval_id, TREASURER, approve=True)
    ran = await world.pay(500)
    assert ran.code == "ok"
    assert world.tool.count == 1
    seen = world.policy.calls[-1][1].get("approval")
    assert seen["id"] == pending.approval_id
    assert seen["approved_by"] == "tess"
    assert seen["approver_roles"] == ["treasurer"]
    again = await world.pay(500)  # single-use: the replay needs a new approval
    assert again.code == "approval_pending"
    assert again.approval_id != pending.approval_id
    assert world.tool.count == 1
    assert world.events() == ["requested", "approved", "used", "requested"]
    decision = [r for r in world.sink.records if r["type"] == "decision"][1]
    assert decision["context"]["approval"]["approved_by"] == "tess"


async def test_changed_arguments_need_a_new_approval() -> None:
    world = World()
    pending = await world.pay(500)
    await world.desk.decide(pending.approval_id, TREASURER, approve=True)
    changed = await world.pay(501)
    assert changed.code == "approval_pending"
    assert changed.approval_id != pending.approval_id
    assert world.tool.count == 0


async def test_another_caller_cannot_use_someone_elses_approval() -> None:
    world = World()
    pending = await world.pay(500)
    await world.desk.decide(pending.approval_id, TREASURER, approve=True)
    other = await world.pay(500, caller=OTHER)
    assert other.code == "approval_pending"
    assert world.tool.count == 0
    assert (await world.pay(500)).code == "ok"


async def test_an_approval_expires_before_it_is_decided_or_used() -> None:
    world = World()
    pending = await world.pay(500)
    world.clock.advance(901)
    with pytest.raises(ApprovalError) as info:
        await world.desk.decide(pending.approval_id, TREASURER, approve=True)
    assert info.value.code == "approval_expired"
    world2 = World()
    pending2 = await world2.pay(500)
    await world2.desk.decide(pending2.approval_id, TREASURER, approve=True)
    world2.clock.advance(901)
    late = await world2.pay(500)
    assert late.code == "approval_pending"
    assert world2.tool.count == 0


async def test_an_approver_without_the_role_or_the_caller_themself_cannot_approve() -> None:
    world = World()
    pending = await world.pay(500)
    for approver in (OTHER, CLERK, CallerContext(roles=["treasurer"], tenant="acme")):
        with pytest.raises(ApprovalError) as info:
            await world.desk.decide(pending.approval_id, approver, approve=True)
        assert info.value.code == "approver_not_allowed"
    selfish = CallerContext(subject="carol", roles=["clerk", "treasurer"], tenant="acme")
    world2 = World()
    mine = await world2.pay(500, caller=selfish)
    with pytest.raises(ApprovalError):
        await world2.desk.decide(mine.approval_id, selfish, approve=True)
    assert world.events() == ["requested"]


async def test_a_rejected_approval_never_runs_the_call_and_cannot_be_approved_later() -> None:
    world = World()
    pending = await world.pay(500)
    await world.desk.decide(pending.approval_id, TREASURER, approve=False)
    with pytest.raises(ApprovalError) as info:
        await world.desk.decide(pending.approval_id, TREASURER, approve=True)
    assert info.value.code == "approval_decided"
    assert (await world.pay(500)).code == "approval_pending"
    assert world.tool.count == 0


async def test_a_caller_cannot_smuggle_an_approval_into_its_own_context() -> None:
    world = World()
    forged = CallerContext(
        subject="carol", roles=["clerk"], tenant="acme",
        approval={"id": "x", "approved_by": "tess", "approver_roles": ["treasurer"]},
    )  # fmt: skip
    result = await world.pay(500, caller=forged)
    assert result.code == "approval_pending"
    assert world.tool.count == 0


async def test_an_approval_under_another_policy_revision_is_void() -> None:
    world = World()
    pending = await world.pay(500)
    await world.desk.decide(pending.approval_id, TREASURER, approve=True)
    # As if the approval had been asked for under revision r0 (the policy now answers r1).
    world.store.update(pending.approval_id, lambda a: dataclasses.replace(a, revision="r0"))
    result = await world.pay(500)
    assert result.code == "approval_pending"
    assert world.tool.count == 0
    assert world.store.get(pending.approval_id).status == "void"  # type: ignore[union-attr]


async def test_pending_and_approved_approvals_survive_a_restart(tmp_path: Path) -> None:
    clock = FakeClock(1_700_000_000.0)
    path = tmp_path / "approvals.json"
    world = World(FileApprovalStore(path, clock=clock), clock)
    pending = await world.pay(500)
    restarted = World(FileApprovalStore(path, clock=clock), clock)
    listed = await restarted.desk.pending(TREASURER)
    assert [a.id for a in listed] == [pending.approval_id]
    await restarted.desk.decide(pending.approval_id, TREASURER, approve=True)
    again = World(FileApprovalStore(path, clock=clock), clock)
    assert (await again.pay(500)).code == "ok"
    assert (await again.pay(500)).code == "approval_pending"
    assert again.tool.count == 1


async def test_without_an_approval_gate_an_approval_obligation_denies() -> None:
    tool = RecordingTool("pay", SCHEMA)
    gateway = Gateway([tool], authorizer=RecordingAuthorizer(policy))
    result = await gateway.call(ToolCall("c1", "pay", '{"amount": 500}'), caller=CLERK)
    assert (result.status, result.code) == (403, "obligation_unfulfilled")
    assert tool.count == 0


async def test_the_approver_lists_only_live_approvals_of_their_roles() -> None:
    world = World()
    pending = await world.pay(500)
    assert [a.id for a in await world.desk.pending(TREASURER)] == [pending.approval_id]
    assert await world.desk.pending(OTHER) == []
    world.clock.advance(901)
    assert await world.desk.pending(TREASURER) == []


async def test_a_corrupt_approval_file_refuses_rather_than_guessing(tmp_path: Path) -> None:
    path = tmp_path / "approvals.json"
    path.write_text("{not json", encoding="utf-8")
    world = World(FileApprovalStore(path, clock=FakeClock()))
    result = await world.pay(500)
    assert result.code == "no_decision"
    assert world.tool.count == 0


async def test_two_retries_at_once_after_an_approval_run_the_call_once() -> None:
    world = World()
    pending = await world.pay(500)
    await world.desk.decide(pending.approval_id, TREASURER, approve=True)
    results = await asyncio.gather(*(world.pay(500) for _ in range(4)))
    assert sorted(r.code for r in results) == ["approval_pending"] * 3 + ["ok"]
    assert world.tool.count == 1


async def test_two_retries_at_once_on_the_file_store_run_the_call_once(tmp_path: Path) -> None:
    clock = FakeClock(1_700_000_000.0)
    world = World(FileApprovalStore(tmp_path / "a.json", clock=clock), clock)
    pending = await world.pay(500)
    await world.desk.decide(pending.approval_id, TREASURER, approve=True)
    results = await asyncio.gather(*(world.pay(500) for _ in range(4)))
    assert [r.code for r in results].count("ok") == 1
    assert world.tool.count == 1


async def test_an_approval_another_process_decided_is_seen_by_a_running_gateway(
    tmp_path: Path,
) -> None:
    clock = FakeClock(1_700_000_000.0)
    path = tmp_path / "approvals.json"
    serving = World(FileApprovalStore(path, clock=clock), clock)
    pending = await serving.pay(500)
    assert (await serving.pay(500)).code == "approval_pending"  # its view is now cached
    elsewhere = ApprovalDesk(FileApprovalStore(path, clock=clock), clock=clock)
    await elsewhere.decide(pending.approval_id, TREASURER, approve=True)
    assert (await serving.pay(500)).code == "ok"
    assert (await serving.pay(500)).code == "approval_pending"

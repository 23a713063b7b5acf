"""A policy in Python over input.state (the shipped Rego rules' logic), and a served gateway."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway import Authorization, Authorizer, Decision, ToolCall
from gateway.policy import CallerContext, DecisionCache, PolicyAuthorizer
from gateway.service import Gateway
from gateway.state import StatefulAuthorizer, StateSettings, StateStore
from gateway.testing import RecordingTool, StaticEngine

PATH = "gateway/authz/decision"
LABELS = {
    "read_secret": ["reads_secret"],
    "fetch_page": ["untrusted_content"],
    "send_email": ["external_egress"],
}
QUOTA = 5


def decide(document: dict[str, Any], quota: int = QUOTA) -> dict[str, Any]:
    """Trifecta and a per-caller quota on ``pay``, as policies/gateway/authz/flow.rego does."""
    tool = document["tool"]["name"]
    state = document.get("state")
    decision: dict[str, Any] = {"allow": True, "labels": LABELS.get(tool, [])}
    if tool == "send_email":
        session = state["session"] if state is not None else None
        labels = set(session["labels"]) if session is not None else None
        if labels is None or {"reads_secret", "untrusted_content"} <= labels:
            return {"allow": False, "message": "no external egress in this session"}
    if tool == "pay":
        if state is None or int(state["counts"]["caller_tool"]["3600"]) >= quota:
            return {"allow": False, "message": "the payment quota is used up"}
        decision["quotas"] = [{"scope": "caller_tool", "window_s": 3600, "limit": quota}]
    return decision


TOOLS = ("read_secret", "fetch_page", "send_email", "pay", "echo")


def build(
    store: StateStore,
    *,
    reads: frozenset[str] = frozenset({"send_email", "pay"}),
    cache: DecisionCache | None = None,
    quota: int = QUOTA,
    interleave: bool = False,
) -> tuple[Gateway, StaticEngine, dict[str, RecordingTool]]:
    engine = StaticEngine({PATH: lambda document: decide(document, quota)})
    policy: Authorizer = PolicyAuthorizer(engine, path=PATH, cache=cache)
    if interleave:
        policy = _Interleaving(policy)
    tools = {name: RecordingTool(name) for name in TOOLS}
    authorizer = StatefulAuthorizer(policy, store, settings=StateSettings(tools=reads))
    return Gateway(list(tools.values()), authorizer=authorizer), engine, tools


class _Interleaving:
    # Lets every other call run between reading state and deciding (as a remote engine
    # would), so that concurrent decisions see the same counts.
    def __init__(self, inner: Authorizer) -> None:
        self._inner = inner

    async def authorize(self, authorization: Authorization) -> bool | Decision:
        for _ in range(5):
            await asyncio.sleep(0)
        return await self._inner.authorize(authorization)


def call(name: str, n: int = 0) -> ToolCall:
    return ToolCall(f"c-{name}-{n}", name, "{}")


ALICE = CallerContext(subject="alice", roles=["agent"], tenant="acme")
BOB = CallerContext(subject="bob", roles=["agent"], tenant="acme")

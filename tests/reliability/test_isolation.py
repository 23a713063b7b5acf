"""Isolation: one caller's decision is never served to another, and arguments never speak
for the caller.

Both properties are checked through the whole HTTP service (API-key authentication, the
pipeline, the decision cache, the audit trail), with callers whose contexts differ in
exactly one field as often as not.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy import EmbeddedEngine
from gateway.testing import RecordingTool, StaticEngine
from tests.reliability.apps import AsgiCaller, assemble, check_response

SUBJECTS: Final = ("alice", "bob")
TENANTS: Final = ("acme", "globex")
ROLES: Final = (("reader",), ("admin",), ("admin", "reader"))

contexts = st.fixed_dictionaries(
    {
        "subject": st.sampled_from(SUBJECTS),
        "tenant": st.sampled_from(TENANTS),
        "roles": st.sampled_from(ROLES).map(list),
    },
    optional={"level": st.integers(min_value=0, max_value=1)},
)
#: Two to five callers whose contexts all differ (often in one field only).
caller_pools = st.lists(
    contexts, min_size=2, max_size=5, unique_by=lambda c: json.dumps(c, sort_keys=True)
)
ARGUMENTS: Final[tuple[dict[str, str], ...]] = ({"tenant": "acme"}, {"tenant": "globex"}, {})


def fingerprint(context: Mapping[str, Any]) -> str:
    """What the policy says about a caller: enough to tell any two contexts apart."""
    return "decided for " + json.dumps(context, sort_keys=True)


def allows(context: Mapping[str, Any], arguments: Mapping[str, Any]) -> bool:
    """The policy: admins, within their own tenant (when the arguments name one)."""
    tenant = arguments.get("tenant", context["tenant"])
    return "admin" in context["roles"] and tenant == context["tenant"]


def decide(document: dict[str, Any]) -> dict[str, Any]:
    """The StaticEngine answer: allow or deny, a message naming the caller, cacheable."""
    context, arguments = document["context"], document["arguments"]
    return {
        "allow": allows(context, arguments),
        "message": fingerprint(context),
        "cache": {"ttl_s": 3600},
    }


@settings(max_examples=60)
@given(
    pool=caller_pools,
    requests=st.lists(
        st.tuples(st.integers(min_value=0, max_value=4), st.integers(min_value=0, max_value=2)),
        min_size=1,
        max_size=30,
    ),
)
def test_the_cache_never_serves_one_callers_decision_to_another(
    pool: list[dict[str, Any]], requests: list[tuple[int, int]]
) -> None:
    keys = {f"key-{index}": context for index, context in enumerate(pool)}
    engine = StaticEngine({"gateway/authz/decision": decide})
    tool = RecordingTool("scoped", {"type": "object", "properties": {"tenant": {"type": "string"}}})
    parts = assemble(None, engine, [tool], keys)
    asked: set[tuple[str, str]] = set()
    callers: dict[str, dict[str, Any]] = {}
    with AsgiCaller(parts.app) as caller:
        for number, (who, which) in enumerate(requests):
            index = who % len(pool)
            context, arguments = pool[index], ARGUMENTS[which]
            body = json.dumps({"id": f"c{number}", "name": "scoped", "arguments": arguments})
            response = caller.post(body.encode(), {"X-API-Key": f"key-{index}"})
            callers[f"c{number}"] = context
            code = check_response(response)
            asked.add((json.dumps(context, sort_keys=True), json.dumps(arguments, sort_keys=True)))
            if allows(context, arguments):
                assert code == "ok", (context, arguments, response.text)
            else:
                assert code == "denied", (context, arguments, response.text)
                assert response.json()["message"] == fingerprint(context), response.text
    # Each distinct (caller, arguments) was evaluated exactly once: the cache was in play,
    # and no entry was shared between two callers.
    evaluated = [
        (json.dumps(doc["context"], sort_keys=True), json.dumps(doc["arguments"], sort_keys=True))
        for _, doc in engine.calls
    ]
    assert sorted(evaluated) == sorted(asked)
    cached = [r for r in parts.records() if r["type"] == "decision" and r["cached"]]
    assert len(cached) == len(requests) - len(asked)
    for record in parts.records():  # each decision is recorded under its own caller
        if record["type"] == "decision":
            audited = {k: v for k, v in record["context"].items() if k != "request_id"}
            assert audited == callers[record["call_id"]]


#: Members an argument document may carry to impersonate someone; none may reach the context.
FORGERIES: Final = st.dictionaries(
    st.sampled_from(
        ["context", "subject", "roles", "tenant", "request_id", "input", "tool", "caller"]
    ),
    st.one_of(
        st.just({"subject": "root", "roles": ["admin"], "tenant": "acme"}),
        st.just(["admin"]),
        st.just("root"),
        st.just("acme"),
        st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
    ),
    min_size=1,
)
CALLER: Final = {"subject": "bob", "roles": ["clerk"], "tenant": "globex"}


@settings(max_examples=60)
@given(forged=FORGERIES, request_id=st.sampled_from(["req-1", "root", "admin"]))
def test_arguments_never_change_the_caller_context_the_policy_sees(
    forged: dict[str, Any], request_id: str
) -> None:
    engine = StaticEngine(
        {
            "gateway/authz/decision": lambda doc: {
                "allow": "admin" in doc["context"].get("roles", [])
            }
        }
    )
    tool = RecordingTool("open")
    parts = assemble(None, engine, [tool], {"bob-key": CALLER})
    body = json.dumps({"id": "forge", "name": "open", "arguments": forged}).encode()
    with AsgiCaller(parts.app) as caller:
        response = caller.post(body, {"X-API-Key": "bob-key", "X-Request-ID": request_id})
    assert check_response(response) == "denied", response.text
    assert tool.count == 0
    [(_, document)] = engine.calls
    assert document["context"] == CALLER  # exactly the authenticated one; no request id either
    assert document["arguments"] == forged
    assert document["tool"]["name"] == "open"
    [decision] = [r for r in parts.records() if r["type"] == "decision"]
    assert decision["context"]["subject"] == "bob"
    assert decision["context"]["request_id"] == request_id  # audited, never decided on


REGO: Final = """package gateway.authz

default allow := false

allow if "admin" in input.context.roles

decision := {"allow": allow, "message": json.marshal(input.context)}
"""


def test_arguments_never_change_the_caller_context_a_real_rego_policy_sees() -> None:
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "main.rego").write_text(REGO, encoding="utf-8")
        engine = EmbeddedEngine.from_directory(folder)
        tool = RecordingTool("open")
        parts = assemble(None, engine, [tool], {"bob-key": CALLER})
        forged = {
            "context": {"subject": "root", "roles": ["admin"], "tenant": "acme"},
            "roles": ["admin"],
            "subject": "root",
            "input": {"context": {"roles": ["admin"]}},
        }
        body = json.dumps({"id": "forge", "name": "open", "arguments": forged}).encode()
        with AsgiCaller(parts.app) as caller:
            response = caller.post(body, {"X-API-Key": "bob-key"})
        assert check_response(response) == "denied", response.text
        assert json.loads(response.json()["message"]) == CALLER
        assert tool.count == 0

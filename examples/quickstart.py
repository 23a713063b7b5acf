"""The gateway in one file: admit, authorize with the shipped Rego policies, run or refuse.

Runs on the embedded engine (OPA's compiled WebAssembly of the shipped policies, committed as
bundles/policies.tar.gz), so neither an OPA server nor the opa binary is needed:
    make quickstart
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway import (
    AuthorizationError,
    Failure,
    Guard,
    InvalidInvocationError,
    Registry,
    ToolCall,
    function_tool,
)
from gateway.policy import DecisionCache, EmbeddedEngine, PolicyAuthorizer, caller_context

BUNDLE = Path(__file__).resolve().parent.parent / "bundles" / "policies.tar.gz"


@function_tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@function_tool
def read_file(path: str) -> str:
    """Read a file below the caller's tenant folder (a stand-in that reads nothing)."""
    return f"contents of {path}"


async def attempt(registry: Registry, call: ToolCall) -> str:
    binding = registry.resolve(call.name)
    if binding is None:
        return f"unknown tool {call.name!r}"
    try:
        invocation = binding.prepare(call)
        output = await binding.call(invocation)
    except InvalidInvocationError as exc:
        return f"refused at admission: {exc}"
    except Failure as failure:
        return f"denied by policy ({failure.kind}): {failure.output.text()}"
    except AuthorizationError as exc:
        return f"no decision ({exc.code}): {exc}"
    return f"ran: {output.text()}"


async def main() -> None:
    engine = EmbeddedEngine.from_bundle(BUNDLE)
    authorizer = PolicyAuthorizer(engine, cache=DecisionCache(max_ttl=30))
    registry = Registry(
        Guard(tool=add, authorizer=authorizer),
        Guard(tool=read_file, authorizer=authorizer),
    )
    print(f"bundle {BUNDLE.name} revision {engine.revision()} on {engine.identity}")
    print("tools:", ", ".join(d.name for d in registry.definitions()))

    alice = {"subject": "alice", "roles": ["reader"], "tenant": "acme"}
    scenarios = [
        ("alice adds", alice, ToolCall("c1", "add", '{"a": 2, "b": 3}')),
        ("alice sends 1.0 as an integer", alice, ToolCall("c2", "add", '{"a": 1.0, "b": 3}')),
        ("alice sends an unknown member", alice, ToolCall("c3", "add", '{"a": 1, "b": 2, "c": 3}')),
        (
            "alice reads her tenant's file",
            alice,
            ToolCall("c4", "read_file", '{"path": "/srv/tenants/acme/report.txt"}'),
        ),
        (
            "alice tries path traversal",
            alice,
            ToolCall("c5", "read_file", '{"path": "/srv/tenants/acme/../globex/pay.csv"}'),
        ),
        (
            "alice reads another tenant",
            alice,
            ToolCall("c6", "read_file", '{"path": "/srv/tenants/globex/pay.csv"}'),
        ),
        ("no caller context", None, ToolCall("c7", "add", '{"a": 2, "b": 3}')),
    ]
    for title, context, call in scenarios:
        if context is None:
            outcome = await attempt(registry, call)
        else:
            with caller_context(context):
                outcome = await attempt(registry, call)
        print(f"- {title}: {outcome}")
    cache = authorizer.cache
    if cache is not None:
        stats = cache.stats()
        print(f"decision cache: {stats.hits} hits, {stats.misses} misses, {stats.size} entries")


if __name__ == "__main__":
    asyncio.run(main())

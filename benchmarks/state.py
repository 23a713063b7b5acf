"""The cost of session state per decision: no state, the in-process backend, Redis.

    python -m benchmarks.state [--quick]

Each line is one decision of the shipped policies on the embedded engine (uncached), for a
caller in a session: without state, then through :class:`gateway.state.StatefulAuthorizer`
reading ``input.state`` and reserving the call on the in-process backend and on a real
``redis-server`` on loopback (``$REDIS_BIN`` or ``scripts/provision-redis``). The three are
timed in rotation, call by call, so that drift on a shared machine hits each alike.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gateway import Authorization, ToolDefinition
from gateway.policy import EmbeddedEngine, PolicyAuthorizer, caller_context
from gateway.state import (
    MemoryStateStore,
    RedisStateStore,
    StatefulAuthorizer,
    StateSettings,
    session_context,
)
from gateway.testing import RedisServer

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "bundles" / "policies.tar.gz"
CONTEXT = {"subject": "alice", "roles": ["agent"], "tenant": "acme"}
#: send_email: the trifecta rule reads the session's labels (no quota, so no call is ever
#: refused for its count however many run).
TOOL = ToolDefinition("send_email", {"type": "object", "additionalProperties": False})


def _summary(samples: list[int]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"median_us": statistics.median(ordered) / 1000, "p99_us": p99 / 1000, "n": len(ordered)}


async def _rotation(
    scenarios: dict[str, Callable[[], Awaitable[object]]], n: int, warmup: int = 200
) -> dict[str, dict[str, float]]:
    for _ in range(warmup):
        for fn in scenarios.values():
            await fn()
    samples: dict[str, list[int]] = {name: [] for name in scenarios}
    clock = time.perf_counter_ns
    for _ in range(n):
        for name, fn in scenarios.items():
            start = clock()
            await fn()
            samples[name].append(clock() - start)
    return {name: _summary(values) for name, values in samples.items()}


async def state_lines(n: int) -> dict[str, dict[str, float]]:
    """``s_decision_*``: median and p99 of one decision without state, in process, Redis."""
    # A generous deadline: this measures cost, not the deadline path, on a shared machine.
    engine = EmbeddedEngine.from_bundle(BUNDLE, timeout_s=10.0)
    policy = PolicyAuthorizer(engine)
    settings = StateSettings(tools=frozenset({TOOL.name}))
    memory = StatefulAuthorizer(policy, MemoryStateStore(), settings=settings)
    authorization = Authorization(TOOL, b"{}")
    try:
        with RedisServer() as server:
            store = RedisStateStore(server.url, timeout_s=5.0)
            redis = StatefulAuthorizer(policy, store, settings=settings)
            with caller_context(CONTEXT), session_context("bench"):
                # Without state the trifecta rule refuses (no session state): the same
                # evaluation work, one decision.
                results = await _rotation(
                    {
                        "s_decision_without_state": lambda: policy.authorize(authorization),
                        "s_decision_state_memory": lambda: memory.authorize(authorization),
                        "s_decision_state_redis": lambda: redis.authorize(authorization),
                    },
                    n,
                )
            await store.close()
    finally:
        engine.close()
    return results


def main(argv: list[str] | None = None) -> int:
    """Print the three lines."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.state")
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args(argv)
    results: dict[str, Any] = asyncio.run(state_lines(500 if args.quick else 5000))
    print("| scenario | median µs | p99 µs | n |")
    print("| --- | ---: | ---: | ---: |")
    for name, value in results.items():
        print(f"| {name} | {value['median_us']:.1f} | {value['p99_us']:.1f} | {value['n']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

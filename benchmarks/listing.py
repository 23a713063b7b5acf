"""The cost of a per-caller tool listing: 100 tools, cold (no cached visibility) and warm.

    python -m benchmarks.listing [--quick]

The shipped policies with 100 more generic tools, half of them granted to role ``reader``;
one listing asks the visibility decision of every tool the cache does not hold in one batch
(:func:`gateway.policy.evaluate_many`). Lines: the embedded engine cold and warm, a real OPA
server cold (one ``POST /v1/query`` per listing) and warm, and, for comparison, OPA asked
once per tool (what a listing would cost without the batch).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gateway import ToolDefinition
from gateway.policy import (
    DEFAULT_VISIBILITY_PATH,
    CallerContext,
    DecisionCache,
    EmbeddedEngine,
    OpaRestEngine,
    ToolVisibility,
    VisibilityDocument,
    read_bundle,
)
from gateway.policy._bundle import digest_revision
from gateway.testing import OpaServer, find_opa_binary

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "bundles" / "policies.tar.gz"
POLICIES = ROOT / "policies"
TOOLS = [
    ToolDefinition(f"tool_{n:03d}", {"type": "object"}, description=f"tool {n}") for n in range(100)
]
READER = CallerContext({"subject": "alice", "roles": ["reader"], "tenant": "acme"})


def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((POLICIES / "data.json").read_text(encoding="utf-8"))
    config = data["gateway"]["config"]
    for tool in TOOLS:
        config["tools"][tool.name] = {"kind": "generic"}
    config["roles"]["reader"]["tools"] += [tool.name for tool in TOOLS[::2]]
    return data


def _summary(samples: list[int]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"median_ms": statistics.median(ordered) / 1e6, "p99_ms": p99 / 1e6, "n": len(ordered)}


async def _time(fn: Callable[[], Awaitable[object]], n: int) -> dict[str, float]:
    for _ in range(max(3, n // 10)):
        await fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        await fn()
        samples.append(time.perf_counter_ns() - start)
    return _summary(samples)


async def measure(n: int) -> dict[str, dict[str, float]]:
    data = _data()
    encoded = json.dumps(data).encode()
    bundle = read_bundle(BUNDLE)
    bundle = dataclasses.replace(
        bundle, data=encoded, revision=digest_revision(bundle.wasm, encoded)
    )
    lines: dict[str, dict[str, float]] = {}
    embedded = EmbeddedEngine(bundle)
    try:
        shown = await ToolVisibility(embedded).visible(TOOLS, READER)
        assert len(shown) == 50, len(shown)
        lines["listing100_embedded_cold"] = await _time(
            lambda: ToolVisibility(embedded).visible(TOOLS, READER), n
        )
        warm = ToolVisibility(embedded, cache=DecisionCache())
        lines["listing100_embedded_warm"] = await _time(lambda: warm.visible(TOOLS, READER), n)
    finally:
        embedded.close()
    with tempfile.TemporaryDirectory() as scratch:
        data_file = Path(scratch, "data.json")
        await asyncio.to_thread(data_file.write_text, json.dumps(data), encoding="utf-8")
        modules = sorted(p for p in POLICIES.rglob("*.rego") if not p.name.endswith("_test.rego"))
        with OpaServer(binary=find_opa_binary(), policy_paths=[*modules, data_file]) as server:
            async with OpaRestEngine(server.url, revision_interval=0) as rest:
                cold = ToolVisibility(rest)
                assert len(await cold.visible(TOOLS, READER)) == 50
                lines["listing100_opa_cold_batch"] = await _time(
                    lambda: cold.visible(TOOLS, READER), n
                )
                warm_rest = ToolVisibility(rest, cache=DecisionCache())
                lines["listing100_opa_warm"] = await _time(
                    lambda: warm_rest.visible(TOOLS, READER), n
                )
                documents = [VisibilityDocument(tool, READER) for tool in TOOLS]

                async def one_by_one() -> object:
                    return [
                        await rest.evaluate(DEFAULT_VISIBILITY_PATH, document)  # type: ignore[arg-type]
                        for document in documents
                    ]

                lines["listing100_opa_per_tool_requests"] = await _time(one_by_one, max(3, n // 5))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args()
    lines = asyncio.run(measure(10 if args.quick else 50))
    for name, figures in lines.items():
        print(
            f"{name:36s} median {figures['median_ms']:8.2f} ms"
            f"  p99 {figures['p99_ms']:8.2f} ms  (n={figures['n']:.0f})"
        )


if __name__ == "__main__":
    main()

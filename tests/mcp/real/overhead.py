"""The overhead of a call through ``gateway mcp`` against a direct call of the same server.

    OPA_BIN=... python -m tests.mcp.real.overhead [--calls N]

One Python SDK client process holds two stdio sessions: one to server-everything directly,
one to ``gateway mcp`` in front of the same server (the shipped policies plus the test
grants, decision cache and audit trail on as configured). It calls ``echo`` on each in
turn, interleaved, after a warm-up, and prints the median and p99 of each and of their
difference. A measurement, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from tests.mcp.real.conftest import (
    AUDIT_KEY,
    AUDIT_KEY_ENV,
    REPO,
    Peers,
    direct_command,
    gateway_stdio,
    make_upstreams,
    write_gateway_config,
)


def _params(command: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(calls: int, warmup: int, fsync: str) -> dict[str, list[float]]:
    peers = Peers(Path(os.environ.get("MCP_PEERS") or REPO / ".tools" / "mcp"))
    tmp = Path(tempfile.mkdtemp(prefix="mcp-overhead-"))
    upstreams = make_upstreams(tmp)
    # No wire recorder in front of the server: the gateway runs it exactly as the direct side.
    config = write_gateway_config(
        tmp, peers, upstreams, ("everything",), recorded=False, audit=(f'fsync = "{fsync}"',)
    )
    os.environ[AUDIT_KEY_ENV] = AUDIT_KEY
    direct = _params(direct_command(peers, upstreams, "everything"))
    proxied = _params(gateway_stdio(config))
    samples: dict[str, list[float]] = {"direct": [], "gateway": []}
    async with (
        Client(direct, mode="legacy", cache=None) as plain,
        Client(proxied, mode="legacy", cache=None) as gated,
    ):
        for index in range(warmup + calls):
            for name, client in (("direct", plain), ("gateway", gated)):
                started = time.perf_counter_ns()
                result = await client.call_tool("echo", {"message": f"call {index}"})
                elapsed = (time.perf_counter_ns() - started) / 1e6
                assert not result.is_error
                if index >= warmup:
                    samples[name].append(elapsed)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--fsync", default="always", help="the audit trail's [audit] fsync")
    args = parser.parse_args()
    samples = anyio.run(measure, args.calls, args.warmup, args.fsync)
    extra = [g - d for g, d in zip(samples["gateway"], samples["direct"], strict=True)]
    for name, values in (*samples.items(), ("gateway - direct (paired)", extra)):
        print(
            f"{name:28s} n={len(values)} median={statistics.median(values):.3f} ms "
            f"p99={_quantile(values, 0.99):.3f} ms"
        )


if __name__ == "__main__":
    main()

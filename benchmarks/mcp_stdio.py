"""What ``gateway mcp`` over stdio adds to a direct call of the same upstream tool.

    python -m benchmarks.mcp_stdio [--calls N] [--warmup N] [--fsync POLICY] [--json PATH]

One Python SDK client process holds two stdio sessions: one to the reference server
``server-everything`` directly, one to ``gateway mcp`` in front of the same server (the
shipped policies plus a grant of ``echo`` to the reader, compiled once to a bundle; decision
cache and audit trail on, ``[audit] fsync`` as asked). Each round calls ``echo`` four times,
interleaved: directly and through the gateway with arguments new to the gateway (an uncached
decision), then directly and through the gateway with the arguments of the first round (a
decision cache hit). Each gateway call is paired with the direct call just before it, so the
paired difference is what the gateway adds while the machine's load is the same for both.
Figures: median and 99th percentile of each side and of the paired difference, the gateway
process's CPU time per call (user + system, from ``/proc``) and the load average around the
run. The target (#17): at most 0.7 ms added at the median. A measurement, not a test.

The real peers come from ``scripts/provision-mcp`` (``$MCP_PEERS``), opa from ``$OPA_BIN``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import anyio
from mcp import Client, StdioServerParameters

from reliability.host import machine
from tests.mcp.real.conftest import (
    AUDIT_KEY,
    AUDIT_KEY_ENV,
    REPO,
    Peers,
    compile_test_policies,
    direct_command,
    gateway_stdio,
    make_tenants,
    make_upstreams,
    write_gateway_config,
)

#: The most the gateway may add to a direct call at the median, in milliseconds (#17).
TARGET_MS: Final = 0.7
KINDS: Final = ("uncached", "cached")


def _params(command: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median_ms": statistics.median(values),
        "p99_ms": _quantile(values, 0.99),
        "n": float(len(values)),
    }


def _cpu_s(pid: int) -> tuple[float, float]:
    """The process's user and system CPU time so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _gateway_pid(config: Path) -> int | None:
    """The ``gateway mcp`` process this benchmark started (a child of this process)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if parent == os.getpid() and str(config).encode() in command:
            return int(entry.name)
    return None


async def measure(calls: int, warmup: int, fsync: str) -> dict[str, Any]:
    """The interleaved samples, in milliseconds, and the gateway's CPU per call."""
    peers = Peers(Path(os.environ.get("MCP_PEERS") or REPO / ".tools" / "mcp"))
    tmp = Path(tempfile.mkdtemp(prefix="bench-mcp-stdio-"))
    tenants = make_tenants(tmp / "tenants")
    bundle = compile_test_policies(tmp / "compiled", tenants)
    upstreams = make_upstreams(tmp, tenants)
    # No wire recorder in front of the server: the gateway runs it exactly as the direct side.
    config = write_gateway_config(
        tmp,
        peers,
        upstreams,
        ("everything",),
        recorded=False,
        audit=(f'fsync = "{fsync}"',),
        bundle=bundle,
    )
    os.environ[AUDIT_KEY_ENV] = AUDIT_KEY
    samples: dict[str, list[float]] = {
        name: [] for kind in KINDS for name in (f"direct_{kind}", f"gateway_{kind}")
    }
    cpu = (0.0, 0.0)
    async with (
        Client(_params(direct_command(peers, upstreams, "everything")), cache=None) as plain,
        Client(_params(gateway_stdio(config)), cache=None) as gated,
    ):
        pid = _gateway_pid(config)
        for index in range(warmup + calls):
            if index == warmup and pid is not None:
                cpu = _cpu_s(pid)
            for kind, message in (("uncached", f"call {index}"), ("cached", "call 0")):
                for side, client in (("direct", plain), ("gateway", gated)):
                    started = time.perf_counter_ns()
                    result = await client.call_tool("echo", {"message": message})
                    elapsed = (time.perf_counter_ns() - started) / 1e6
                    if result.is_error:
                        raise RuntimeError(f"the {side} call failed: {result.content}")
                    if index >= warmup:
                        samples[f"{side}_{kind}"].append(elapsed)
        if pid is not None:
            user, system = _cpu_s(pid)
            cpu = (user - cpu[0], system - cpu[1])
    per_call = 1e6 / (2 * calls)
    return {
        "samples": samples,
        "gateway_cpu_us_per_call": (cpu[0] + cpu[1]) * per_call,
        "gateway_user_us_per_call": cpu[0] * per_call,
        "gateway_system_us_per_call": cpu[1] * per_call,
    }


def report(measured: dict[str, Any], fsync: str, loads: tuple[str, str]) -> dict[str, Any]:
    samples: dict[str, list[float]] = measured["samples"]
    lines = {name: _summary(values) for name, values in samples.items()}
    for kind in KINDS:
        paired = [
            g - d
            for g, d in zip(samples[f"gateway_{kind}"], samples[f"direct_{kind}"], strict=True)
        ]
        lines[f"added_{kind}"] = _summary(paired)
    return {
        "machine": machine(),
        "fsync": fsync,
        "load_before": loads[0],
        "load_after": loads[1],
        "lines": lines,
        "gateway_cpu_us_per_call": measured["gateway_cpu_us_per_call"],
        "gateway_user_us_per_call": measured["gateway_user_us_per_call"],
        "gateway_system_us_per_call": measured["gateway_system_us_per_call"],
        "target_added_median_ms": TARGET_MS,
        "met": {kind: lines[f"added_{kind}"]["median_ms"] <= TARGET_MS for kind in KINDS},
    }


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.mcp_stdio", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--calls", type=int, default=1000, help="rounds measured")
    parser.add_argument("--warmup", type=int, default=50, help="rounds before measuring")
    parser.add_argument("--fsync", default="always", help="the audit trail's [audit] fsync")
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    before = _load()
    measured = anyio.run(measure, args.calls, args.warmup, args.fsync)
    result = report(measured, args.fsync, (before, _load()))
    for name, line in result["lines"].items():
        print(
            f"{name:18s} median {line['median_ms']:7.3f} ms  p99 {line['p99_ms']:7.3f} ms  "
            f"n={line['n']:.0f}"
        )
    print(
        f"gateway CPU per call: {result['gateway_cpu_us_per_call']:.0f} us "
        f"(user {result['gateway_user_us_per_call']:.0f} us, "
        f"system {result['gateway_system_us_per_call']:.0f} us)"
    )
    for kind in KINDS:
        verdict = "met" if result["met"][kind] else "MISSED"
        print(f"added_{kind} median <= {TARGET_MS} ms: {verdict}")
    print(f"load average before {before}, after {result['load_after']}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

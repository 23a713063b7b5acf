"""The reliability harness: the fault matrix, a revocation under cache, and load, in one run.

    python -m reliability [--quick] [--soak SECONDS] [--json PATH] [--markdown RELIABILITY.md]

It starts its own real OPA (``$OPA_BIN`` or ``scripts/provision-opa``), injects every fault
under concurrent load, revokes a permission while the decision cache is on, drives sustained
traffic through the HTTP service on both engines, prints RELIABILITY.md and writes it and
the JSON results when asked. The exit status is 0 only when every property held.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from reliability.faults import FaultEnvironment, MatrixConfig, run_matrix, run_revocation
from reliability.front import FaultyFront
from reliability.host import machine
from reliability.load import LoadConfig, run_load
from reliability.opa import main_module, opa_binary, opa_version, start_opa
from reliability.report import markdown, summary
from reliability.service import service_config

QUICK_MATRIX = MatrixConfig(callers=16, timeout=0.5, baseline=0.5, duration=1.2, settle=1.0)
QUICK_LOAD = LoadConfig(callers=16, duration=4.0, warmup=1.0)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every part of the suite against one real OPA."""
    started = time.perf_counter()
    matrix = QUICK_MATRIX if args.quick else MatrixConfig()
    load = QUICK_LOAD if args.quick else LoadConfig()
    mode = "quick" if args.quick else "default"
    if args.soak:
        load = dataclasses.replace(load, duration=float(args.soak))
        mode = "soak"
    binary = opa_binary()
    command = "python -m reliability" + (" --quick" if args.quick else "")
    if args.soak:
        command += f" --soak {args.soak:g}"
    report: dict[str, Any] = {
        "mode": mode,
        "command": command,
        "matrix_config": dataclasses.asdict(matrix),
        "load_config": dataclasses.asdict(load),
    }
    with tempfile.TemporaryDirectory(prefix="reliability-") as folder:
        workdir = Path(folder)
        opa = await asyncio.to_thread(start_opa, binary)
        front = FaultyFront(opa.url).start()
        try:
            environment = FaultEnvironment(opa, front, *main_module(opa))
            faults = await run_matrix(environment, matrix, workdir)
            report["faults"] = [fault.to_json() for fault in faults]
            revocation = await run_revocation(environment, matrix, workdir)
            report["revocation"] = revocation.to_json()
            runs = []
            for engine, url in (("embedded", None), ("opa", opa.url)):
                config = service_config(
                    audit_path=workdir / f"load-{engine}" / "audit.jsonl", opa_url=url
                )
                before = os.getloadavg()
                figures = (await run_load(engine, config, load)).to_json()
                figures["load_average"] = {"before": before, "after": os.getloadavg()}
                runs.append(figures)
            report["load"] = runs
        finally:
            front.stop()
            await asyncio.to_thread(opa.close)
    report["machine"] = {**machine(), "opa": opa_version(binary)}
    report["elapsed_s"] = time.perf_counter() - started
    report["summary"] = summary(report)
    return report


def main(argv: list[str] | None = None) -> int:
    """Run the suite; print RELIABILITY.md; write it and the JSON results when asked."""
    parser = argparse.ArgumentParser(
        prog="python -m reliability", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="shorter faults and load (a smoke run)"
    )
    parser.add_argument(
        "--soak", type=float, metavar="SECONDS", help="drive the load for this long per engine"
    )
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    parser.add_argument("--markdown", type=Path, help="write RELIABILITY.md here")
    args = parser.parse_args(argv)
    if args.soak is not None and args.soak <= 0:
        parser.error("--soak must be a positive number of seconds")
    report = asyncio.run(run(args))
    text = markdown(report)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    return 0 if report["summary"]["passed"] else 1

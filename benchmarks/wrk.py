"""The HTTP service end to end under ``wrk``: ``gateway serve`` as shipped, in its own process.

``python -m benchmarks.wrk`` starts the real ``gateway serve`` (embedded engine, cache, audit
trail) once per audit fsync policy, drives ``POST /v1/calls`` (an allowed ``add``, a cache
hit after the first call) with ``wrk`` at 32 connections and at one, and prints the figures
as JSON. ``wrk`` is a C load generator from Debian's packages: installed with apt-get when
missing and this runs as root; without it the benchmark fails, it never skips.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "bundles" / "policies.tar.gz"
API_KEY = "demo-key-alice"
BODY = '{"id":"c","name":"add","arguments":{"a":1,"b":2}}'
SCRIPT = f"""wrk.method = "POST"
wrk.body = '{BODY}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-API-Key"] = "{API_KEY}"
"""
STARTUP_S = 60.0


def ensure_wrk() -> str:
    """The path of ``wrk``, installing Debian's package when missing (as root).

    Raises:
        SystemExit: wrk is missing and cannot be installed.
    """
    found = shutil.which("wrk")
    if found is None and hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "wrk"],  # noqa: S607 - the system package manager
            check=False,
            capture_output=True,
        )
        found = shutil.which("wrk")
    if found is None:
        raise SystemExit("benchmarks.wrk: wrk is required (apt-get install wrk)")
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _config(folder: Path, fsync: str, port: int) -> Path:
    digest = hashlib.sha256(API_KEY.encode()).hexdigest()
    text = f"""
[engine]
kind = "embedded"
bundle = {json.dumps(str(BUNDLE))}

[cache]
enabled = true
max_ttl_s = 3600

[audit]
enabled = true
path = {json.dumps(str(folder / "audit.jsonl"))}
fsync = "{fsync}"
unkeyed = true

[server]
host = "127.0.0.1"
port = {port}

[[auth.api_keys]]
sha256 = "{digest}"
context = {{ subject = "alice", roles = ["reader"], tenant = "acme" }}

[tools]
modules = ["benchmarks.run:TOOLS"]
"""
    path = folder / "gateway.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("benchmarks.wrk: gateway serve exited during start-up")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as response:  # noqa: S310
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("benchmarks.wrk: gateway serve did not start")


def _wrk(wrk: str, url: str, script: Path, connections: int, seconds: int) -> dict[str, Any]:
    out = subprocess.run(  # noqa: S603 - argv list, no shell
        [wrk, "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rate = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    p50 = re.search(r"50%\s+([0-9.]+)(us|ms|s)\b", out)
    if rate is None or p50 is None or "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"benchmarks.wrk: unexpected wrk output:\n{out}")
    scale = {"us": 1.0, "ms": 1e3, "s": 1e6}[p50[2]]
    return {"requests_per_s": float(rate[1]), "p50_us": float(p50[1]) * scale}


def measure(fsync: str, seconds: int) -> dict[str, Any]:
    """The service's figures under one audit fsync policy."""
    wrk = ensure_wrk()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        port = _free_port()
        config = _config(folder, fsync, port)
        script = folder / "post.lua"
        script.write_text(SCRIPT, encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with subprocess.Popen(  # noqa: S603 - argv list, no shell
            [sys.executable, "-m", "gateway", "serve", "--config", str(config)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ) as process:
            try:
                url = f"http://127.0.0.1:{port}"
                _wait_ready(url, process)
                calls = url + "/v1/calls"
                return {
                    "c32": _wrk(wrk, calls, script, 32, seconds),
                    "c1": _wrk(wrk, calls, script, 1, seconds),
                }
            finally:
                process.terminate()
                process.wait(30)


def main(argv: list[str] | None = None) -> int:
    """Run the wrk scenario and print its figures as JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.wrk", description=__doc__)
    parser.add_argument("--seconds", type=int, default=5, help="duration of each wrk run")
    parser.add_argument(
        "--fsync", action="append", choices=["always", "batch", "none"], help="repeatable"
    )
    args = parser.parse_args(argv)
    results = {policy: measure(policy, args.seconds) for policy in args.fsync or ["always", "none"]}
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

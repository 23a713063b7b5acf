"""The three real clients, each run through one plan: list the tools, make calls.

A plan runs once per client, transport and protocol era, through the gateway and directly
against the same servers; the tests compare what each client got.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.mcp.real.conftest import API_KEY, AUDIT_KEY_ENV, CLIENT_MJS, Peers

Era = Literal["legacy", "2026-07-28"]
#: The environment a stdio gateway needs (the opa binary, the audit key).
PASSED_ENV = ("OPA_BIN", AUDIT_KEY_ENV, "PYTHONPATH")


@dataclass(frozen=True)
class Target:
    """Where a client connects: a command it launches (stdio) or a URL (streamable HTTP)."""

    command: tuple[str, ...] | None = None
    url: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"X-API-Key": API_KEY}


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict[str, Any]


@dataclass
class Transcript:
    """What a client got: the negotiated version (when the client tells), every result."""

    version: str | None
    tools: list[dict[str, Any]]
    results: list[dict[str, Any]]


def _dump(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


async def _python(target: Target, era: Era, calls: list[Call]) -> Transcript:
    async with contextlib.AsyncExitStack() as stack:
        connect: Any
        if target.command is not None:
            connect = StdioServerParameters(
                command=target.command[0], args=list(target.command[1:]), env=dict(os.environ)
            )
        else:
            assert target.url is not None
            # The transport does not close a client it was given: this stack does.
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=target.headers, timeout=httpx2.Timeout(60))
            )
            connect = streamable_http_client(target.url, http_client=http)
        client = await stack.enter_async_context(Client(connect, mode=era, cache=None))
        tools = [_dump(tool) for tool in (await client.list_tools()).tools]
        results = [_dump(await client.call_tool(c.name, c.arguments)) for c in calls]
        return Transcript(client.protocol_version, tools, results)


def python_client(target: Target, era: Era, calls: list[Call]) -> Transcript:
    """The Python SDK client (``mcp.Client``), in mode ``era``."""
    return anyio.run(_python, target, era, calls)


def typescript_client(peers: Peers, target: Target, calls: list[Call], work: Path) -> Transcript:
    """The TypeScript SDK client (``client.mjs`` on Node.js 22)."""
    plan: dict[str, Any] = {
        "target": (
            {"command": list(target.command)}
            if target.command is not None
            else {"url": target.url, "headers": target.headers}
        ),
        "steps": [{"op": "list"}]
        + [{"op": "call", "name": c.name, "arguments": c.arguments} for c in calls],
    }
    work.mkdir(parents=True, exist_ok=True)
    plan_path = work / f"plan-{os.getpid()}-{id(plan)}.json"
    plan_path.write_text(json.dumps(plan))
    done = subprocess.run(
        [str(peers.node), str(CLIENT_MJS), str(plan_path)],
        env={**os.environ, "MCP_PEERS": str(peers.root)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout)
    listing, *results = out["results"]
    return Transcript(out["protocolVersion"], listing["tools"], results)


def inspector(
    peers: Peers, target: Target, era: Literal["legacy", "modern"], *method: str
) -> dict[str, Any]:
    """One Inspector CLI run (``--cli --format json``); its JSON output."""
    # Options first: what follows "--" is the server command, passed on unchanged.
    if target.command is not None:
        # The Inspector gives a server only a default environment: pass on what it needs.
        env = [arg for k in PASSED_ENV if k in os.environ for arg in ("-e", f"{k}={os.environ[k]}")]
        # A stdio gateway compiles its policies and starts its upstreams before it answers.
        where = ["--connect-timeout", "120000", *env, "--", *target.command]
    else:
        assert target.url is not None
        headers = [arg for k, v in target.headers.items() for arg in ("--header", f"{k}: {v}")]
        where = ["--transport", "http", "--server-url", target.url, *headers]
    done = subprocess.run(
        [*peers.inspector, "--format", "json", "-q", "--protocol-era", era, *method, *where],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.stdout.strip(), done.stderr[-4000:]
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def inspector_client(
    peers: Peers, target: Target, era: Literal["legacy", "modern"], calls: list[Call]
) -> Transcript:
    """The Inspector CLI: one run for the listing, one per call."""
    listing = inspector(peers, target, era, "--method", "tools/list")
    assert "result" in listing, listing
    results = []
    for call in calls:
        out = inspector(
            peers,
            target,
            era,
            "--method",
            "tools/call",
            "--tool-name",
            call.name,
            "--tool-args-json",
            json.dumps(call.arguments),
        )
        results.append(out.get("result", out))
    return Transcript(None, listing["result"]["tools"], results)

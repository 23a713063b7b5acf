"""The MCP front: a real SDK client against the gateway, which proxies a real upstream.

The end-to-end tests run ``python -m gateway mcp`` as a stdio subprocess, or the service's
streamable HTTP app in-process under uvicorn, in front of ``upstream_server.py`` (its own
subprocess). The upstream's record shows what reached it; the audit trail is verified.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
import uvicorn
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from gateway import (
    Failure,
    FailureKind,
    Invocation,
    MediaContent,
    TextContent,
    ToolDefinition,
    ToolOutput,
)
from gateway.audit import AuditTrail, MemorySink
from gateway.cli import main
from gateway.mcp import McpFront, McpService, to_call_result
from gateway.policy import EmbeddedEngine, PolicyAuthorizer
from gateway.server import Authenticator, CallResult, Gateway, api_key_digest, load_config
from gateway.service._auth import API_KEYS_ONLY
from gateway.service._config import ApiKey, AuthConfig
from gateway.service._middleware import API_KEY_CHALLENGE
from gateway.testing import RecordingTool, StaticAuthorizer
from tests.mcp.conftest import (
    ALICE,
    ALLOWED_PATH,
    OTHER_TENANT_PATH,
    POLICIES,
    REPO,
    ConfigWriter,
    audit_records,
    calls,
    serving,
)
from tests.mcp.surfaces import INITIALIZED, initialize, tool_call
from tests.mcp.upstream_server import read_record

NO_DECISION = "no policy decision could be made; the call was not run"


def _text(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def _code(result: types.CallToolResult) -> Any:
    return (result.meta or {}).get("gateway/code")


async def test_stdio_gateway_serves_allowed_calls_and_refuses_the_rest_before_the_upstream(
    write_config: ConfigWriter, record: Path, audit_path: Path
) -> None:
    config = write_config()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "gateway", "mcp", "--config", str(config), "--transport", "stdio"],
        cwd=REPO,
        env=dict(os.environ),
    )
    async with Client(params, cache=None, read_timeout_seconds=30) as client:
        listed = await client.list_tools()
        allowed = await client.call_tool("read_file", {"path": ALLOWED_PATH})
        denied = await client.call_tool("read_file", {"path": OTHER_TENANT_PATH})
        invalid = await client.call_tool("read_file", {"path": 42})
        unknown = await client.call_tool("delete_everything", {})
        failed = await client.call_tool("read_file", {"path": "/srv/tenants/acme/missing.txt"})

    # tools/list: the upstream's usable tools, with their schemas; 'bad name' and broken_ref
    # cannot be imported and are not served.
    assert {tool.name: tool.input_schema for tool in listed.tools} == {
        "read_file": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": False,
        },
        "search": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "tenant": {"type": "string"}},
            "required": ["query", "tenant"],
        },
    }
    assert not allowed.is_error
    assert _text(allowed) == f"contents of {ALLOWED_PATH}"
    assert allowed.structured_content == {"path": ALLOWED_PATH, "size": 42}
    assert _code(allowed) == "ok"

    # Refusals are tool results with isError and the public text only.
    assert denied.is_error
    assert _text(denied) == "path is not allowed: it is outside the allowed directories"
    assert _code(denied) == "denied"
    assert invalid.is_error
    assert _code(invalid) == "invalid_arguments"
    assert "must be a string (type)" in _text(invalid)
    assert unknown.is_error
    assert _text(unknown) == "no tool of that name is served"
    assert _code(unknown) == "unknown_tool"
    # An upstream error result is a Failure(FAILED) carrying the upstream's own text.
    assert failed.is_error
    assert _text(failed) == "no such file: /srv/tenants/acme/missing.txt"
    assert _code(failed) == "tool_failed"

    # Only the allowed call (and the upstream's own failure) reached the upstream.
    assert calls(read_record(record)) == [
        ("read_file", {"path": ALLOWED_PATH}),
        ("read_file", {"path": "/srv/tenants/acme/missing.txt"}),
    ]

    # Every call is in the verified audit trail, with the stdio caller context.
    records = audit_records(audit_path)
    decisions = [
        (r["tool"], r["arguments"], r["result"]) for r in records if r["type"] == "decision"
    ]
    assert decisions == [
        ("read_file", {"path": ALLOWED_PATH}, "allow"),
        ("read_file", {"path": OTHER_TENANT_PATH}, "deny"),
        ("read_file", {"path": "/srv/tenants/acme/missing.txt"}, "allow"),
    ]
    assert all(r["context"]["subject"] == "alice" for r in records if "context" in r)
    outcomes = [(r["tool"], r["outcome"], r["code"]) for r in records if r["type"] == "outcome"]
    assert outcomes == [
        ("read_file", "executed", None),
        ("read_file", "rejected", "denied"),
        ("read_file", "invalid", "invalid_arguments"),
        ("delete_everything", "invalid", "unknown_tool"),
        ("read_file", "failed", "tool_failed"),
    ]
    denial = next(r for r in records if r["type"] == "decision" and r["result"] == "deny")
    assert denial["reasons"]  # the audit-only reasons are recorded, never sent
    assert not any(reason in _text(denied) for reason in denial["reasons"])


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_gateway_takes_the_caller_context_from_each_requests_credentials(
    write_config: ConfigWriter, record: Path, audit_path: Path, mode: str
) -> None:
    service = McpService(load_config(write_config(stdio_context=None)))
    key = {"value": "alice-key"}

    async def authenticate(request: httpx2.Request) -> None:
        request.headers["x-api-key"] = key["value"]

    async with (
        service,
        serving(service.http_server(host="127.0.0.1", port=0, log_level="warning")) as url,
        httpx2.AsyncClient(timeout=30, event_hooks={"request": [authenticate]}) as http,
        Client(
            streamable_http_client(f"{url}/mcp", http_client=http),
            mode=mode,
            cache=None,
            read_timeout_seconds=30,
        ) as client,
    ):
        allowed = await client.call_tool("read_file", {"path": ALLOWED_PATH})
        other_tenant = await client.call_tool("search", {"query": "q", "tenant": "globex"})
        # Same client: bob's key on the next request. On the modern wire every request
        # stands alone; on the legacy wire the session is alice's, so bob is told it does
        # not exist and nothing is called.
        key["value"] = "bob-key"
        if mode == "legacy":
            with pytest.raises(MCPError, match="Session not found"):
                await client.call_tool("read_file", {"path": ALLOWED_PATH})
            not_permitted = None
        else:
            not_permitted = await client.call_tool("read_file", {"path": ALLOWED_PATH})
        key["value"] = "alice-key"

    assert not allowed.is_error
    assert _text(allowed) == f"contents of {ALLOWED_PATH}"
    assert other_tenant.is_error
    assert _text(other_tenant) == "the request refers to data outside the caller's tenant"
    assert calls(read_record(record)) == [("read_file", {"path": ALLOWED_PATH})]
    decisions = [
        (r["context"]["subject"], r["tool"], r["result"])
        for r in audit_records(audit_path)
        if r["type"] == "decision"
    ]
    expected = [("alice", "read_file", "allow"), ("alice", "search", "deny")]
    if not_permitted is not None:
        assert not_permitted.is_error
        assert _text(not_permitted) == "the caller's roles do not permit this tool"
        expected.append(("bob", "read_file", "deny"))
    assert decisions == expected
    assert all(r["context"].get("request_id") for r in audit_records(audit_path) if "context" in r)


async def test_http_gateway_answers_401_without_valid_credentials_before_the_mcp_layer() -> None:
    sink = MemorySink()
    tool = _echo()
    authenticator = Authenticator(
        AuthConfig(api_keys=(ApiKey(sha256=api_key_digest("alice-key"), context=ALICE),))
    )
    front = McpFront(
        Gateway([tool], authorizer=StaticAuthorizer(True), audit=AuditTrail(sink)),
        authenticator=authenticator,
    )
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}},
    }
    accept = {"accept": "application/json, text/event-stream"}
    server = uvicorn.Server(
        uvicorn.Config(front.http_app(), log_level="warning", ws="none", access_log=False)
    )
    async with serving(server) as url:
        async with httpx.AsyncClient(timeout=30) as http:
            missing = await http.post(f"{url}/mcp", json=body, headers=accept)
            wrong = await http.post(
                f"{url}/mcp", json=body, headers={**accept, "x-api-key": "not-a-key"}
            )
            bad_bearer = await http.post(
                f"{url}/mcp", json=body, headers={**accept, "authorization": "Bearer x.y.z"}
            )
        with pytest.raises(Exception) as refused:  # noqa: PT011 - whatever the SDK raises
            async with (
                httpx2.AsyncClient(timeout=30) as http2,
                Client(streamable_http_client(f"{url}/mcp", http_client=http2), cache=None),
            ):
                pass
        async with (
            httpx2.AsyncClient(timeout=30, headers={"x-api-key": "alice-key"}) as http2,
            Client(streamable_http_client(f"{url}/mcp", http_client=http2), cache=None) as alice,
        ):
            allowed = await alice.call_tool("echo", {"text": "hi"})

    for response in (missing, wrong, bad_bearer):
        assert response.status_code == 401
        # Only API keys are configured: the challenge names their header.
        assert response.headers["www-authenticate"] == API_KEY_CHALLENGE
    assert missing.json()["message"] == wrong.json()["message"] == "authentication required"
    assert bad_bearer.json()["message"] == API_KEYS_ONLY
    # The SDK reports the refused connection as an MCPError (it does not name the 401).
    assert any(isinstance(leaf, MCPError) for leaf in _leaves(refused.value))
    assert _text(allowed) == "echoed"
    assert len(tool.calls) == 1  # only the authenticated call
    assert [r["context"]["subject"] for r in sink.records if r["type"] == "decision"] == ["alice"]


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _front(tool: Any, authorizer: Any, **kwargs: Any) -> McpFront:
    return McpFront(Gateway([tool], authorizer=authorizer, **kwargs))


def _echo() -> RecordingTool:
    return RecordingTool(
        "echo",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        output=ToolOutput.from_text("echoed"),
    )


async def test_no_decision_is_an_error_result_with_the_public_text_only() -> None:
    # The shipped policies asked for a decision they do not define: an undefined decision.
    engine = EmbeddedEngine.from_directory(POLICIES)
    authorizer = PolicyAuthorizer(engine, path="gateway/authz/no_such_decision")
    sink = MemorySink()
    tool = _echo()
    front = McpFront(
        Gateway([tool], authorizer=authorizer, audit=AuditTrail(sink)),
        stdio_context=None,
    )
    async with Client(front.server, cache=None) as client:
        result = await client.call_tool("echo", {"text": "hi"})

    assert result.is_error
    assert _text(result) == NO_DECISION
    assert _code(result) == "undefined_decision"
    assert tool.calls == []
    decision = next(r for r in sink.records if r["type"] == "decision")
    assert decision["result"] == "error"
    assert decision["code"] == "undefined_decision"


async def test_without_a_caller_context_the_shipped_policies_deny() -> None:
    # In-process (no HTTP request, no stdio context): the empty context.
    engine = EmbeddedEngine.from_directory(POLICIES)
    tool = RecordingTool(
        "read_file",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
    front = _front(tool, PolicyAuthorizer(engine))
    async with Client(front.server, cache=None) as client:
        result = await client.call_tool("read_file", {"path": ALLOWED_PATH})

    assert result.is_error
    assert _text(result) == "caller identity is required"
    assert tool.calls == []


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_arguments_that_are_not_an_object_are_refused_by_admission_not_the_protocol(
    mode: str,
) -> None:
    sink = MemorySink()
    tool = _echo()
    front = _front(tool, StaticAuthorizer(True), audit=AuditTrail(sink))

    class RawCall(types.Request[dict[str, Any], str]):
        pass

    async with Client(front.server, mode=mode, cache=None) as client:
        results = [
            await client.session.send_request(
                RawCall(method="tools/call", params={"name": "echo", "arguments": arguments}),
                types.CallToolResult,
            )
            for arguments in ([1], "{}", 7)
        ]

    for result in results:
        assert result.is_error
        assert _code(result) == "invalid_arguments"
        assert "must be an object (type)" in _text(result)
    assert tool.calls == []
    assert [(r["outcome"], r["code"]) for r in sink.records] == [
        ("invalid", "invalid_arguments")
    ] * 3


class _Raising:
    def __init__(self, name: str, error: Exception) -> None:
        self._definition = ToolDefinition(name, {"type": "object"})
        self._error = error

    def definition(self) -> ToolDefinition:
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        raise self._error


async def test_tool_failures_and_errors_are_error_results() -> None:
    failing = _Raising("flaky", Failure(FailureKind.FAILED, "disk full", cause=OSError("ENOSPC")))
    broken = _Raising("broken", RuntimeError("secret detail"))
    front = McpFront(Gateway([failing, broken], authorizer=StaticAuthorizer(True)))
    async with Client(front.server, cache=None) as client:
        failed = await client.call_tool("flaky", {})
        errored = await client.call_tool("broken", {})

    assert failed.is_error
    assert _text(failed) == "disk full"
    assert _code(failed) == "tool_failed"
    assert errored.is_error
    assert _text(errored) == "the tool failed"
    assert "secret" not in _text(errored)


def test_outputs_map_to_mcp_content_and_structured_content() -> None:
    output = ToolOutput.from_items(
        [
            TextContent("hello"),
            MediaContent("image/png", data=b"\x89PNG"),
            MediaContent("audio/wav", data=b"RIFF"),
            MediaContent("application/pdf", data=b"%PDF"),
            MediaContent("text/html", uri="https://example.com/page"),
        ],
        details=b'{"n": 1}',
    )
    result = to_call_result(CallResult(200, "ok", None, output, "d-1"))

    assert [block.type for block in result.content] == [
        "text",
        "image",
        "audio",
        "resource",
        "resource_link",
    ]
    assert result.structured_content == {"n": 1}
    assert result.meta == {"gateway/code": "ok", "gateway/decision_id": "d-1"}
    only_json = to_call_result(CallResult(200, "ok", None, ToolOutput.from_json("[1, 2]")))
    assert only_json.structured_content is None  # not an object: sent as text only
    assert _text(only_json) == "[1, 2]"
    denied = to_call_result(CallResult(403, "denied", "not allowed", None, "d-2"))
    assert denied.is_error
    assert _text(denied) == "not allowed"


def test_the_stdio_transport_needs_a_configured_caller_context(
    write_config: ConfigWriter, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(stdio_context=None)

    status = main(["mcp", "--config", str(config), "--transport", "stdio"])

    assert status == 2
    assert "mcp.stdio_context: required for the stdio transport" in capsys.readouterr().err


async def test_a_call_uses_the_gateway_current_when_it_arrives() -> None:
    first, second = _echo(), RecordingTool("other", {"type": "object"})
    front = _front(first, StaticAuthorizer(True))
    async with Client(front.server, cache=None) as client:
        before = [tool.name for tool in (await client.list_tools()).tools]
        front.gateway = Gateway([second], authorizer=StaticAuthorizer(True))
        after = [tool.name for tool in (await client.list_tools()).tools]
        gone = await client.call_tool("echo", {"text": "x"})

    assert (before, after) == (["echo"], ["other"])
    assert gone.is_error
    assert _code(gone) == "unknown_tool"
    assert first.calls == []


def test_stdio_gateway_admits_the_bytes_sent_not_what_a_lenient_parser_makes_of_them(
    write_config: ConfigWriter, record: Path, audit_path: Path
) -> None:
    config = write_config()
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "mcp", "--config", str(config), "--transport", "stdio"],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(os.environ),
    )
    assert process.stdin is not None
    assert process.stdout is not None

    def exchange(line: bytes) -> dict[str, Any]:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(line + b"\n")
        process.stdin.flush()
        answer: dict[str, Any] = json.loads(process.stdout.readline())
        return answer

    try:
        exchange(initialize(1))
        process.stdin.write(INITIALIZED + b"\n")
        allowed_last = exchange(
            tool_call(
                2,
                f'{{"path": "{OTHER_TENANT_PATH}", "path": "{ALLOWED_PATH}"}}'.encode(),
                name="read_file",
            )
        )
        denied_last = exchange(
            tool_call(
                3,
                f'{{"path": "{ALLOWED_PATH}", "path": "{OTHER_TENANT_PATH}"}}'.encode(),
                name="read_file",
            )
        )
        not_utf8 = exchange(tool_call(4, b'{"path": "/srv/tenants/acme/\xff"}', name="read_file"))
        bad_envelope = exchange(b'{"jsonrpc": "2.0", "id": 5, "id": 6, "method": "tools/list"}')
        plain = exchange(tool_call(7, f'{{"path": "{ALLOWED_PATH}"}}'.encode(), name="read_file"))
    finally:
        process.stdin.close()
        process.wait(30)
        process.stdout.close()

    for answer in (allowed_last, denied_last, not_utf8):
        assert answer["result"]["isError"] is True
        assert answer["result"]["_meta"]["gateway/code"] == "invalid_arguments"
    assert bad_envelope["error"]["code"] == -32700
    assert plain["result"]["_meta"]["gateway/code"] == "ok"
    # Only the plain call reached the upstream; the refusals are audited as invalid.
    assert calls(read_record(record)) == [("read_file", {"path": ALLOWED_PATH})]
    outcomes = [
        (r["outcome"], r["code"]) for r in audit_records(audit_path) if r["type"] == "outcome"
    ]
    assert outcomes == [("invalid", "invalid_arguments")] * 3 + [("executed", None)]


def test_the_front_opens_no_sdk_span_per_request() -> None:
    # The SDK's OpenTelemetryMiddleware would open a span on the global tracer provider
    # (never set by the gateway: a span recording nothing) for every message. The front
    # makes its own spans with [telemetry]; the caller's trace context alone stays current
    # (test_tracing: it reaches the upstream unchanged when the gateway does not trace).
    from mcp.server._otel import OpenTelemetryMiddleware

    middleware = _front(_echo(), StaticAuthorizer(True)).server.middleware

    assert not [item for item in middleware if isinstance(item, OpenTelemetryMiddleware)]
    assert type(middleware[0]).__name__ == "_CallerTraceContext"

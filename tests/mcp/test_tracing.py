"""Traces of proxied MCP calls, as a real OTLP/HTTP receiver on loopback records them.

The gateway serves MCP over streamable HTTP with ``[telemetry]`` on, exporting to an
:class:`~gateway.testing.OtlpReceiver`; a client sends one allowed and one denied
``tools/call`` to the upstream's ``read_file``, each with its own W3C ``traceparent`` in
``params._meta``. Each call is one trace under the caller's span: the MCP server span, the
``execute_tool`` span, the ``apply_guardrail`` decision span (allow / deny, decision id as
audited, policy and revision, the audited argument digest) and, for the allowed call only,
the client span to the upstream, whose ``traceparent`` the upstream received. No span
carries an argument value.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final, cast

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.mcp import McpService
from gateway.server import load_config
from gateway.testing import OtlpReceiver, ReceivedSpan
from tests.mcp.conftest import (
    ALLOWED_PATH,
    OTHER_TENANT_PATH,
    ConfigWriter,
    audit_records,
    serving,
)
from tests.mcp.upstream_server import read_record

ALLOWED_TRACE: Final = "4bf92f3577b34da6a3ce929d0e0e4736"
DENIED_TRACE: Final = "5cf92f3577b34da6a3ce929d0e0e4737"
CALLER_SPAN: Final = "00f067aa0ba902b7"


def _traced(path: Path, endpoint: str) -> Path:
    path.write_text(
        path.read_text() + f'\n[telemetry]\nenabled = true\nendpoint = "{endpoint}"\n'
        'service_name = "gateway-under-test"\n'
    )
    return path


@contextlib.asynccontextmanager
async def _client(config: Path) -> AsyncIterator[Client]:
    # Alice's MCP client session with the service of ``config``, over streamable HTTP.
    service = McpService(load_config(config))
    async with (
        service,
        serving(service.http_server(host="127.0.0.1", port=0, log_level="warning")) as url,
        httpx2.AsyncClient(timeout=30, headers={"x-api-key": "alice-key"}) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), cache=None) as client,
    ):
        yield client


def _tree(spans: list[ReceivedSpan], trace_id: str) -> dict[tuple[str, str], ReceivedSpan]:
    return {(span.name, span.kind): span for span in spans if span.trace_id == trace_id}


def show(spans: list[ReceivedSpan]) -> str:
    """The spans as the receiver recorded them, one JSON object a line (for the report)."""
    return "\n".join(
        json.dumps(
            {
                "trace_id": s.trace_id,
                "span_id": s.span_id,
                "parent_span_id": s.parent_span_id,
                "name": s.name,
                "kind": s.kind,
                "status": s.status,
                "attributes": s.attributes,
            },
            sort_keys=True,
        )
        for s in spans
    )


async def test_an_allowed_and_a_denied_proxied_call_are_each_one_trace_caller_to_upstream(
    write_config: ConfigWriter, record: Path, audit_path: Path
) -> None:
    with OtlpReceiver() as receiver:
        config = _traced(
            write_config(stdio_context=None, modules=["examples.example_tools:add"]),
            receiver.endpoint,
        )
        async with _client(config) as client:
            allowed = await client.call_tool(
                "read_file",
                {"path": ALLOWED_PATH},
                meta=cast(Any, {"traceparent": f"00-{ALLOWED_TRACE}-{CALLER_SPAN}-01"}),
            )
            denied = await client.call_tool(
                "read_file",
                {"path": OTHER_TENANT_PATH},
                meta=cast(Any, {"traceparent": f"00-{DENIED_TRACE}-{CALLER_SPAN}-01"}),
            )
        # Closing the service flushed the exporter.
        spans = receiver.wait_for(
            lambda s: len(_tree(s, ALLOWED_TRACE)) == 4 and len(_tree(s, DENIED_TRACE)) == 3
        )
    print(show([s for s in spans if s.trace_id in (ALLOWED_TRACE, DENIED_TRACE)]))
    assert not allowed.is_error
    assert denied.is_error

    decisions = {r["result"]: r for r in audit_records(audit_path) if r["type"] == "decision"}
    for trace_id, result in ((ALLOWED_TRACE, "allow"), (DENIED_TRACE, "deny")):
        tree = _tree(spans, trace_id)
        server = tree["tools/call read_file", "SERVER"]
        run = tree["execute_tool read_file", "INTERNAL"]
        guard = tree["apply_guardrail read_file", "INTERNAL"]
        assert server.kind == "SERVER"
        assert server.parent_span_id == CALLER_SPAN
        assert server.attributes["mcp.method.name"] == "tools/call"
        assert server.attributes["gen_ai.tool.name"] == "read_file"
        assert run.parent_span_id == server.span_id
        assert run.attributes["gen_ai.operation.name"] == "execute_tool"
        assert run.attributes["gen_ai.tool.call.id"].startswith("mcp-")
        assert guard.parent_span_id == run.span_id
        assert guard.attributes["gen_ai.operation.name"] == "apply_guardrail"
        assert guard.attributes["gateway.decision"] == result
        audited = decisions[result]
        assert guard.attributes["gateway.decision.id"] == audited["decision_id"]
        assert guard.attributes["gateway.arguments.sha256"] == audited["arguments_digest"]
        assert guard.attributes["gateway.policy.revision"] == audited["revision"]
        assert guard.attributes["gateway.policy.id"].endswith("#gateway/authz/decision")
        assert server.resource["service.name"] == "gateway-under-test"

    allowed_tree = _tree(spans, ALLOWED_TRACE)
    clients = [s for s in allowed_tree.values() if s.kind == "CLIENT"]
    assert [c.name for c in clients] == ["tools/call read_file"]
    assert clients[0].parent_span_id == allowed_tree["execute_tool read_file", "INTERNAL"].span_id
    assert allowed_tree["execute_tool read_file", "INTERNAL"].status == "UNSET"
    denied_tree = _tree(spans, DENIED_TRACE)
    assert denied_tree["execute_tool read_file", "INTERNAL"].attributes["error.type"] == "denied"
    assert not [s for s in denied_tree.values() if s.kind == "CLIENT"]

    # The upstream received the client span's context, and only for the call it ran.
    traces = [e for e in read_record(record) if e["event"] == "trace"]
    assert [e["traceparent"] for e in traces] == [f"00-{ALLOWED_TRACE}-{clients[0].span_id}-01"]

    everything = show(spans)
    for value in ("/srv/tenants", "acme/report", "globex"):
        assert value not in everything


async def test_without_telemetry_the_callers_trace_context_reaches_the_upstream_unchanged(
    write_config: ConfigWriter, record: Path, audit_path: Path
) -> None:
    # A gateway that does not trace is no participant in the caller's trace: the upstream
    # gets the caller's own traceparent, as through any proxy that forwards it.
    config = write_config(stdio_context=None, modules=["examples.example_tools:add"])
    async with _client(config) as client:
        allowed = await client.call_tool(
            "read_file",
            {"path": ALLOWED_PATH},
            meta=cast(Any, {"traceparent": f"00-{ALLOWED_TRACE}-{CALLER_SPAN}-01"}),
        )
        plain = await client.call_tool("read_file", {"path": ALLOWED_PATH})
    assert not allowed.is_error
    assert not plain.is_error
    traces = [e for e in read_record(record) if e["event"] == "trace"]
    assert [e["traceparent"] for e in traces] == [f"00-{ALLOWED_TRACE}-{CALLER_SPAN}-01"]

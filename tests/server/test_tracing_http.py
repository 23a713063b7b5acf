"""Traces over the HTTP API, down to a real OPA server that traces too.

The gateway decides with a real OPA (``distributed_tracing`` on, exporting over OTLP/HTTP to
the same loopback receiver as the gateway). A call sent with a W3C ``traceparent`` header is
one trace: the gateway's ``POST /v1/calls`` server span under the caller's span, its
``execute_tool`` and ``apply_guardrail`` spans, and OPA's own span of the decision request,
whose parent is the gateway's decision span: the trace context reached OPA in the headers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import httpx

from gateway.server import build_service, load_config
from gateway.testing import OpaServer, OtlpReceiver
from tests.server.conftest import (
    ALICE,
    DECISION_LOGS,
    POLICIES,
    POLICY_OVERLAY,
    call_body,
    gateway_toml,
    key,
    serve,
)

TRACE: Final = "0af7651916cd43dd8448eb211c80319c"
CALLER: Final = "b7ad6b7169203331"


def test_a_call_over_http_is_one_trace_through_the_gateway_and_into_opa(
    tmp_path: Path, opa_binary: str
) -> None:
    with OtlpReceiver() as receiver:
        address = receiver.endpoint.removeprefix("http://").removesuffix("/v1/traces")
        opa = OpaServer(
            binary=opa_binary,
            policy_paths=[POLICIES],
            data=POLICY_OVERLAY,
            extra_args=[
                DECISION_LOGS,
                "--set=distributed_tracing.type=http",
                f"--set=distributed_tracing.address={address}",
                "--set=distributed_tracing.encryption=off",
                "--set=distributed_tracing.sample_percentage=100",
                "--set=distributed_tracing.service_name=opa-under-test",
            ],
        ).start()
        try:
            config = tmp_path / "gateway.toml"
            config.write_text(
                gateway_toml(engine="opa", audit_path=tmp_path / "audit.jsonl", opa_url=opa.url)
                + f'\n[telemetry]\nenabled = true\nendpoint = "{receiver.endpoint}"\n',
                encoding="utf-8",
            )
            with serve(build_service(load_config(config)).app) as url:
                answer = httpx.post(
                    f"{url}/v1/calls",
                    json=call_body("add", {"a": 2, "b": 3}),
                    headers={**key(ALICE), "traceparent": f"00-{TRACE}-{CALLER}-01"},
                    timeout=10,
                )
            assert answer.status_code == 200, answer.text
            spans = receiver.wait_for(
                lambda s: (
                    any(x.trace_id == TRACE and x.scope != "gateway" for x in s)
                    and any(x.name == "apply_guardrail add" for x in s)
                )
            )
        finally:
            opa.stop()
    ours = {s.name: s for s in spans if s.trace_id == TRACE and s.scope == "gateway"}
    server = ours["POST /v1/calls"]
    run = ours["execute_tool add"]
    guard = ours["apply_guardrail add"]
    assert server.kind == "SERVER"
    assert server.parent_span_id == CALLER
    assert server.attributes["http.response.status_code"] == 200
    assert run.parent_span_id == server.span_id
    assert guard.parent_span_id == run.span_id
    assert guard.attributes["gateway.decision"] == "allow"
    assert guard.attributes["gateway.policy.id"].startswith("opa:http://127.0.0.1:")
    opas = [
        s
        for s in spans
        if s.resource.get("service.name") == "opa-under-test" and s.trace_id == TRACE
    ]
    assert opas
    assert any(s.parent_span_id == guard.span_id and s.kind == "SERVER" for s in opas)

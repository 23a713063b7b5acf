"""OpenTelemetry traces of every call, exported over OTLP/HTTP; off unless ``[telemetry]`` says.

The spans follow the OpenTelemetry GenAI and MCP semantic conventions (both in development):

- a server span per request: ``POST /v1/calls`` over the HTTP API (the HTTP conventions),
  ``tools/call <tool>`` over MCP (``mcp.method.name``, ``jsonrpc.request.id``,
  ``mcp.protocol.version``; its parent is the W3C trace context in the request's
  ``params._meta``, else in the HTTP headers);
- ``execute_tool <tool>`` (``gen_ai.operation.name = execute_tool``, ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``, ``gen_ai.tool.type``, ``error.type`` on failure) around the guarded
  tool run;
- ``apply_guardrail <tool>`` (``gen_ai.operation.name = apply_guardrail``) around the policy
  decision, inside it: ``gateway.decision`` (``allow`` / ``deny`` / ``error``), the decision
  id, the policy (engine and decision path) and its revision, whether it came from the
  cache, the result code, and the arguments' digest (the audit record's
  ``arguments_digest``);
- ``tools/call <tool>`` client spans to upstream MCP servers, whose trace context travels in
  the request's ``params._meta``; a request to an OPA server carries it in its headers.

No span ever carries an argument value, a tool's output, a policy's message or reasons, or a
credential: only names, ids, codes and digests. Spans are exported by the official SDK's
batch processor and OTLP/HTTP exporter, off the call path.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import _json
from gateway._authorization import Authorization, Decision, canonical_arguments
from gateway._definition import ToolDefinition
from gateway.service._logs import engine_name
from gateway.service._observe import CallObserver, DecisionWatch, RunWatch, error_code

#: The instrumentation scope of every span.
SCOPE: Final = "gateway"
#: The W3C trace context members propagated in MCP ``params._meta`` and HTTP headers.
TRACE_KEYS: Final = ("traceparent", "tracestate")
#: Result codes after which the call counts as a success (the span status stays unset).
_OK_CODES: Final = frozenset({"ok", "denied"})


# The tracer of the service running in this process (one tracing configuration per process,
# as OpenTelemetry's own global provider): set while a service with [telemetry] is open.
_ACTIVE: list[Tracer] = []


def use_tracer(tracer: Tracer | None) -> None:
    """Make ``tracer`` the one the surfaces and the engines' clients use (``None``: none)."""
    _ACTIVE.clear()
    if tracer is not None:
        _ACTIVE.append(tracer)


def active_tracer() -> Tracer | None:
    """The tracer set by :func:`use_tracer`, if any."""
    return _ACTIVE[0] if _ACTIVE else None


def new_provider(
    exporter: SpanExporter, *, service_name: str = "gateway", batch: bool = True
) -> TracerProvider:
    """A tracer provider exporting through ``exporter`` (batched, off the call path)."""
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if batch:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    else:
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: PLC0415

        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def otlp_provider(
    endpoint: str,
    *,
    service_name: str = "gateway",
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
) -> TracerProvider:
    """A provider exporting to an OTLP/HTTP traces endpoint (``http://host:4318/v1/traces``)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )

    exporter = OTLPSpanExporter(endpoint=endpoint, headers=dict(headers or {}), timeout=timeout_s)
    return new_provider(exporter, service_name=service_name)


def extract(carrier: Mapping[str, Any] | None) -> otel_context.Context | None:
    """The W3C trace context in ``carrier`` (MCP ``_meta`` or headers), if it holds one."""
    if not carrier:
        return None
    found = {key: value for key in TRACE_KEYS if isinstance(value := carrier.get(key), str)}
    if "traceparent" not in found:
        return None
    extracted = propagate.extract(found)
    span = trace.get_current_span(extracted)
    return extracted if span.get_span_context().is_valid else None


def inject(carrier: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Put the current trace context (``traceparent``, ``tracestate``) into ``carrier``."""
    if trace.get_current_span().get_span_context().is_valid:
        propagate.inject(carrier)
    return carrier


def argument_digest(authorization: Authorization) -> str:
    """The audit record's ``arguments_digest`` of these arguments (never the arguments).

    The SHA-256 of their canonical JSON (admission's, when the authorization carries it);
    of the bytes themselves if they do not parse.
    """
    try:
        return hashlib.sha256(canonical_arguments(authorization)).hexdigest()
    except _json.StrictJSONError:
        return hashlib.sha256(authorization.arguments).hexdigest()


class _DecisionSpan(DecisionWatch):
    __slots__ = ("_inner", "_policy", "_revision", "_span")

    def __init__(self, span: Span, inner: DecisionWatch, policy: str, revision: str) -> None:
        self._span = span
        self._inner = inner
        self._policy = policy
        self._revision = revision

    def answered(self, decision: Decision | None) -> None:
        self._inner.answered(decision)
        span = self._span
        if decision is None:
            span.set_attribute("gateway.decision", "error")
            span.set_attribute("gateway.result.code", "malformed_decision")
            span.set_attribute("error.type", "malformed_decision")
            span.set_status(Status(StatusCode.ERROR))
            return
        allowed = decision.allowed is True
        span.set_attribute("gateway.decision", "allow" if allowed else "deny")
        span.set_attribute("gateway.result.code", "ok" if allowed else "denied")
        span.set_attribute("gateway.decision.cached", bool(decision.cached))
        if decision.decision_id is not None:
            span.set_attribute("gateway.decision.id", decision.decision_id)
        span.set_attribute("gateway.policy.revision", decision.revision or self._revision)
        if decision.engine is not None:  # never a server URL's credentials
            span.set_attribute("gateway.policy.engine", engine_name(decision.engine))

    def failed(self, error: Exception) -> None:
        self._inner.failed(error)
        code = error_code(error)
        self._span.set_attribute("gateway.decision", "error")
        self._span.set_attribute("gateway.result.code", code)
        self._span.set_attribute("error.type", code)
        self._span.set_status(Status(StatusCode.ERROR))


class _RunSpan(RunWatch):
    __slots__ = ("_inner", "_span")

    def __init__(self, span: Span, inner: RunWatch) -> None:
        self._span = span
        self._inner = inner

    def finished(self, code: str, decision: Decision | None) -> None:
        self._inner.finished(code, decision)
        self._span.set_attribute("gateway.result.code", code)
        if decision is not None and decision.decision_id is not None:
            self._span.set_attribute("gateway.decision.id", decision.decision_id)
        if code != "ok":
            # The tool did not run, or failed. A denial is the policy doing its work: its
            # span says why (error.type) but is not a fault (status unset).
            self._span.set_attribute("error.type", code)
            if code not in _OK_CODES:
                self._span.set_status(Status(StatusCode.ERROR))


class TracingObserver(CallObserver):
    """Spans for every call's tool run and decision, around another observer's work.

    Args:
        tracer: where the spans go.
        inner: the observer it wraps (the service's state lines).
        policy: the policy's name in the spans (engine identity and decision path).
        revision: the engine's current revision, read when a decision names none.
    """

    def __init__(
        self,
        tracer: Tracer,
        inner: CallObserver,
        *,
        policy: str,
        revision: Any = None,
    ) -> None:
        self._tracer = tracer
        self._inner = inner
        self._policy = policy
        self._revision = revision

    @property
    def inner(self) -> CallObserver:
        """The wrapped observer."""
        return self._inner

    @contextlib.contextmanager
    def running(self, definition: ToolDefinition, call_id: str) -> Iterator[RunWatch]:
        """``execute_tool <tool>``, current while the guarded tool runs."""
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": definition.name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
        }
        with (
            self._tracer.start_as_current_span(
                f"execute_tool {definition.name}",
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            ) as span,
            self._inner.running(definition, call_id) as inner,
        ):
            yield _RunSpan(span, inner)

    @contextlib.contextmanager
    def deciding(self, authorization: Authorization) -> Iterator[DecisionWatch]:
        """``apply_guardrail <tool>``, current while the policy decides."""
        name = authorization.definition.name
        revision = self._revision() if callable(self._revision) else self._revision
        attributes = {
            "gen_ai.operation.name": "apply_guardrail",
            "gen_ai.tool.name": name,
            "gateway.policy.id": self._policy,
            "gateway.policy.revision": str(revision) if revision is not None else "unknown",
            "gateway.arguments.sha256": argument_digest(authorization),
        }
        with (
            self._tracer.start_as_current_span(
                f"apply_guardrail {name}",
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            ) as span,
            self._inner.deciding(authorization) as inner,
        ):
            yield _DecisionSpan(span, inner, self._policy, attributes["gateway.policy.revision"])

    def audit_error(self, error: Exception) -> None:
        """Passed to the wrapped observer."""
        self._inner.audit_error(error)


@contextlib.contextmanager
def mcp_server_span(
    tracer: Tracer | None,
    *,
    tool: str,
    request_id: object,
    meta: Mapping[str, Any] | None,
    headers: Mapping[str, str] | None = None,
    protocol_version: str | None = None,
    transport: str = "tcp",
) -> Iterator[None]:
    """The MCP server span of one ``tools/call`` (nothing without a tracer).

    Its parent is the trace context in ``params._meta``, else the one in the HTTP headers.
    """
    if tracer is None:
        yield
        return
    parent = extract(meta) or extract(headers)
    attributes: dict[str, Any] = {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": tool,
        "gen_ai.operation.name": "execute_tool",
        "network.transport": transport,
    }
    if isinstance(request_id, str | int) and not isinstance(request_id, bool):
        attributes["jsonrpc.request.id"] = str(request_id)
    if protocol_version:
        attributes["mcp.protocol.version"] = protocol_version
    with tracer.start_as_current_span(
        f"tools/call {tool}", context=parent, kind=SpanKind.SERVER, attributes=attributes
    ):
        yield


@contextlib.contextmanager
def mcp_client_span(
    tracer: Tracer | None, *, tool: str, upstream: str, transport: str
) -> Iterator[dict[str, Any]]:
    """The client span of one ``tools/call`` to an upstream; yields the ``_meta`` to add."""
    if tracer is None:
        yield {}
        return
    attributes = {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": tool,
        "gen_ai.operation.name": "execute_tool",
        "network.transport": transport,
        "gateway.upstream": upstream,
    }
    with tracer.start_as_current_span(
        f"tools/call {tool}", kind=SpanKind.CLIENT, attributes=attributes
    ):
        yield dict(inject({}))


class TraceRequests:
    """ASGI middleware: a server span per HTTP request to ``paths``, parented by its headers.

    The tracer is ``tracer``, else the open service's (:func:`active_tracer`); with neither,
    requests pass through untouched.

    The span is named ``<METHOD> <route>`` and has the HTTP semantic conventions' method,
    route, scheme and status; never a header value, the query or the body.
    """

    def __init__(
        self, app: ASGIApp, *, paths: frozenset[str], tracer: Tracer | None = None
    ) -> None:
        self._app = app
        self._tracer = tracer
        self._paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path")
        tracer = self._tracer or active_tracer()
        if tracer is None or scope["type"] != "http" or path not in self._paths:
            await self._app(scope, receive, send)
            return
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name.lower() in (b"traceparent", b"tracestate")
        }
        method = str(scope.get("method", "GET"))
        attributes = {
            "http.request.method": method,
            "http.route": path,
            "url.scheme": str(scope.get("scheme", "http")),
        }
        with tracer.start_as_current_span(
            f"{method} {path}",
            context=extract(headers),
            kind=SpanKind.SERVER,
            attributes=attributes,
        ) as span:

            async def sending(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(Status(StatusCode.ERROR))
                        span.set_attribute("error.type", str(status))
                await send(message)

            await self._app(scope, receive, sending)

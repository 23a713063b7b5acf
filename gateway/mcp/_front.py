"""The MCP front: a :class:`~gateway.service.Gateway` served as an MCP server.

``tools/list`` answers the gateway's definitions (name, description, input schema).
``tools/call`` goes through :meth:`Gateway.call` exactly like the HTTP API: admission by the
tool's contract, the policy decision, the audit trail. Every refusal is a tool result with
``isError: true`` whose only text is the public message of :class:`CallResult` (an unknown
tool, invalid arguments, a denial, no decision, an audit failure); it is never a protocol
error and never "tool not found". ``_meta`` carries the stable result ``gateway/code`` and
the ``gateway/decision_id``.

Who is calling:

- over streamable HTTP, every request is authenticated in front of the SDK by the service
  layer's :class:`~gateway.service.AuthenticationMiddleware` (the HTTP API's own: API keys,
  JWT); without valid credentials the answer is 401 before the MCP layer sees the request.
  The caller context and the request id are put in the request's ASGI scope, and each tool
  call reads them from the request the SDK hands to the handler (``ctx.request``), so they
  are per request, not per session;
- over stdio, the launcher is local and trusted: every call gets the configured
  ``stdio_context`` (``[mcp] stdio_context``);
- otherwise (an in-process client, a transport without the authenticating layer) the
  context is empty, which the shipped policies deny.

What was sent: over streamable HTTP and stdio, every message is read from its raw bytes
before the SDK decodes it (:mod:`gateway.mcp._wire`): a tool call's ``arguments`` reach
:meth:`~gateway.Contract.prepare` as the exact bytes sent, so the same bytes get the same
admission and decision as over the HTTP API; an envelope that is not strict JSON is refused
with a JSON-RPC parse error. A tool call arriving over HTTP or stdio without the raw
message is refused (it cannot happen through :meth:`McpFront.http_app` or
:meth:`McpFront.serve_stdio`).

HTTP sessions (:mod:`gateway.mcp._sessions`) belong to the principal that opened them,
are capped per principal and are audited.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.message import SessionMessage
from opentelemetry import context as otel_context
from starlette.types import ASGIApp

from gateway import _json
from gateway._call import ToolCall
from gateway._definition import ToolDefinition
from gateway._ids import random_hex
from gateway._output import ToolOutput
from gateway.audit import AuditTrail
from gateway.mcp._bridge import Bridge, GatewayServer
from gateway.mcp._content import UpstreamOutput, gateway_version, structured, to_blocks
from gateway.mcp._sessions import SessionGuard, SessionTable
from gateway.mcp._stdio import (
    DEFAULT_MAX_LINE_BYTES,
    pump,
    std_streams,
)
from gateway.mcp._upstream import UpstreamSet
from gateway.mcp._wire import MESSAGE_SCOPE_KEY, Message
from gateway.policy import EMPTY_CONTEXT, CallerContext, ToolVisibility, caller_context
from gateway.service import (
    CALLER_SCOPE_KEY,
    AuthenticationMiddleware,
    Authenticator,
    CallResult,
    Gateway,
    active_tracer,
    extract,
    mcp_server_span,
    request_id_in,
)

_LOG: Final = logging.getLogger("gateway.mcp")
#: The service layer's authentication middleware, under the name this package offered.
AuthenticatingApp = AuthenticationMiddleware
_UNSET: Final = object()
#: How often a serving front checks the policy revision (for list_changed).
REVISION_CHECK_INTERVAL_S: Final = 1.0
#: The ``tools/list`` members taken from ``listing_extras`` (never the ones a policy sees).
_LISTING_EXTRAS: Final = frozenset({"execution", "icons", "_meta"})
# Arguments that are not a JSON object, kept aside so that the SDK's own params validation
# (which would answer with a protocol error) lets the call reach the gateway's admission.
_RAW_ARGUMENTS: contextvars.ContextVar[object] = contextvars.ContextVar(
    "gateway_mcp_raw_arguments", default=_UNSET
)


class _CallerTraceContext:
    """Server middleware: the caller's W3C trace context (``params._meta``) is current.

    In place of the SDK's ``OpenTelemetryMiddleware``. That one opens a span for every
    request through the global tracer provider, which the gateway never sets: a span that
    records nothing, for the cost of its attributes, a propagator run and a context switch
    on every message. The gateway makes its own MCP server span, with ``[telemetry]``. What
    the SDK's span did do was make the caller's trace context current, so that a gateway
    that does not trace forwards the caller's ``traceparent`` to the upstream unchanged;
    this keeps exactly that.
    """

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        meta = ctx.meta
        parent = extract(meta) if meta else None
        if parent is None:
            return await call_next(ctx)
        token = otel_context.attach(parent)
        try:
            return await call_next(ctx)
        finally:
            otel_context.detach(token)


def _without_sdk_spans(server: Server[Any]) -> None:
    # The SDK installs its OpenTelemetryMiddleware first; the caller's context takes its place.
    middleware = server.middleware
    middleware[:] = [
        _CallerTraceContext() if isinstance(item, OpenTelemetryMiddleware) else item
        for item in middleware
    ]


class _NonObjectArguments:
    """Server middleware: let a ``tools/call`` with non-object arguments reach the handler.

    The handler then refuses it through the gateway (an audited ``invalid_arguments``)
    instead of the SDK answering a protocol error.
    """

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        params = ctx.params
        if (
            ctx.method == "tools/call"
            and isinstance(params, Mapping)
            and params.get("arguments") is not None
            and not isinstance(params.get("arguments"), Mapping)
        ):
            token = _RAW_ARGUMENTS.set(params["arguments"])
            try:
                rest = {key: value for key, value in params.items() if key != "arguments"}
                return await call_next(dataclasses.replace(ctx, params=rest))
            finally:
                _RAW_ARGUMENTS.reset(token)
        return await call_next(ctx)


def _encode_arguments(arguments: object) -> bytes:
    if arguments is None:
        return b"{}"
    try:
        return _json.canonical(arguments)
    except (_json.StrictJSONError, UnicodeError, RecursionError):
        # Non-finite numbers or lone surrogates: encode them so that admission refuses them.
        return json.dumps(arguments, ensure_ascii=True, allow_nan=True, default=repr).encode()


def _meta(result: CallResult) -> dict[str, Any]:
    meta: dict[str, Any] = {"gateway/code": result.code}
    if result.decision_id is not None:
        meta["gateway/decision_id"] = result.decision_id
    if result.required_scopes:
        # Step-up: the OAuth scopes the refusal names as missing, space-separated.
        meta["gateway/required_scope"] = " ".join(result.required_scopes)
    if result.approval_id is not None:
        meta["gateway/approval_id"] = result.approval_id
    return meta


def _refusal_text(result: CallResult) -> str:
    if result.code == "approval_pending" and result.approval_id is not None:
        # What the model reads: the call is parked, not refused, and how it goes on.
        return (
            f"{result.message or 'the call awaits approval'}. It did not run: it awaits "
            f"approval {result.approval_id}. Once a person has approved it, call the tool "
            "again with exactly the same arguments; it then runs once."
        )
    return result.message or result.code


def to_call_result(result: CallResult) -> types.CallToolResult:
    """The MCP tool result for a gateway call result.

    A successful call carries the output's content (and its JSON details as structured
    content when they are an object, also as text when there is no other content). Anything
    else is ``isError`` with public text only: a tool's own Failure output, or the
    refusal's message.
    """
    if result.ok or result.is_tool_failure:
        output = result.output or ToolOutput()
        blocks = to_blocks(output)
        if isinstance(output, UpstreamOutput):
            # An upstream's result passes through as it was sent.
            return types.CallToolResult(
                content=blocks,
                structured_content=structured(output),
                is_error=not result.ok,
                _meta=_meta(result),
            )
        if not blocks and output.details is not None:
            blocks = [types.TextContent(text=output.details.decode("utf-8"))]
        if not blocks and not result.ok:
            blocks = [types.TextContent(text=result.message or "the tool failed")]
        return types.CallToolResult(
            content=blocks,
            structured_content=structured(output),
            is_error=not result.ok,
            _meta=_meta(result),
        )
    return types.CallToolResult(
        content=[types.TextContent(text=_refusal_text(result))],
        is_error=True,
        _meta=_meta(result),
    )


class McpFront:
    """A gateway served over MCP (stdio or streamable HTTP).

    Args:
        gateway: the call pipeline; replace it with :attr:`gateway` when the tools change.
        authenticator: authenticates HTTP requests (required for :meth:`http_app`).
        stdio_context: the caller context of stdio calls (required for :meth:`serve_stdio`).
        name: the server name told to clients.
        audit: the trail HTTP session records go to (the gateway's own trail).
        listing_extras: for a tool name, further ``tools/list`` members to answer as they
            are (an upstream tool's ``execution``, ``icons``, ``_meta``), or ``None``.
        upstreams: the upstream servers whose resources, prompts and logging are offered
            (see :mod:`gateway.mcp._bridge`).
        visibility: when given, ``tools/list`` shows each caller only the tools the
            policy's visibility decision shows it (fail closed), and a new policy revision
            is announced (``notifications/tools/list_changed``, see :meth:`check_revision`).
    """

    def __init__(
        self,
        gateway: Gateway,
        *,
        authenticator: Authenticator | None = None,
        stdio_context: CallerContext | None = None,
        name: str = "gateway",
        audit: AuditTrail | None = None,
        listing_extras: Callable[[str], Mapping[str, Any] | None] | None = None,
        upstreams: UpstreamSet | None = None,
        visibility: ToolVisibility | None = None,
    ) -> None:
        self._gateway = gateway
        self._visibility = visibility
        self._listed_revision = visibility.revision() if visibility is not None else None
        self._watcher: asyncio.Task[None] | None = None
        self._listing_extras = listing_extras
        self._authenticator = authenticator
        self._stdio_context = stdio_context
        # The session of a client without HTTP sessions (stdio, in process): one per front,
        # as one such front serves one client (gateway.state keys it by the caller too).
        self._pipe_session = f"pipe-{random_hex()}"
        self._audit = audit
        self.server: Server[Any] = GatewayServer(
            name,
            version=gateway_version(),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            get_tool_input_schema=self._input_schema,
        )
        _without_sdk_spans(self.server)
        self.server.middleware.append(_NonObjectArguments())
        self._bridge = Bridge(lambda: self._gateway, self._caller, audit=audit, upstreams=upstreams)
        self._bridge.install(self.server)

    @property
    def gateway(self) -> Gateway:
        """The gateway served now (each call uses the one current when it arrives)."""
        return self._gateway

    @gateway.setter
    def gateway(self, gateway: Gateway) -> None:
        before = self._gateway.definitions()
        self._gateway = gateway
        if gateway.definitions() != before:
            # Connected clients are told (notifications/tools/list_changed).
            self._bridge.tools_changed()

    def check_revision(self) -> bool:
        """Announce ``notifications/tools/list_changed`` if the policy revision changed.

        What each caller may see depends on the policy, so a new revision may change every
        caller's list. Checked on every request, and every ``REVISION_CHECK_INTERVAL_S``
        by a watcher that the first listing starts.

        Returns:
            Whether the revision changed since the last check.
        """
        if self._visibility is None:
            return False
        revision = self._visibility.revision()
        if revision == self._listed_revision:
            return False
        self._listed_revision = revision
        self._bridge.tools_changed()
        return True

    async def _watch_revision(self, interval_s: float) -> None:
        while True:
            await anyio.sleep(interval_s)
            self.check_revision()

    def _ensure_watcher(self) -> None:
        # Over HTTP the front has no task group of its own: the first request starts the
        # watcher on the serving loop (it ends with the loop).
        if self._visibility is None or self._watcher is not None:
            return
        self._watcher = asyncio.get_running_loop().create_task(
            self._watch_revision(REVISION_CHECK_INTERVAL_S)
        )

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        definitions = self._gateway.definitions()
        if self._visibility is not None:
            self._ensure_watcher()
            self.check_revision()
            definitions = await self._visibility.visible(definitions, self._caller(ctx))
        return types.ListToolsResult(tools=[self._listed(definition) for definition in definitions])

    def _listed(self, definition: ToolDefinition) -> types.Tool:
        # The definition as the policy sees it (name, title, description, schemas,
        # annotations), plus the members a policy does not decide on, as the upstream sent them.
        listed: dict[str, Any] = {}
        extras = self._listing_extras(definition.name) if self._listing_extras else None
        if extras:
            listed.update((key, value) for key, value in extras.items() if key in _LISTING_EXTRAS)
        listed["name"] = definition.name
        listed["inputSchema"] = json.loads(definition.input_schema_json)
        if definition.description:
            listed["description"] = definition.description
        if definition.title is not None:
            listed["title"] = definition.title
        if definition.annotations_json is not None:
            listed["annotations"] = json.loads(definition.annotations_json)
        if definition.output_schema_json is not None:
            listed["outputSchema"] = json.loads(definition.output_schema_json)
        return types.Tool.model_validate(listed)

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        binding = self._gateway.registry.resolve(name)
        if binding is None:
            return None
        schema: dict[str, Any] = json.loads(binding.definition.input_schema_json)
        return schema

    def _caller(self, ctx: ServerRequestContext[Any, Any]) -> CallerContext:
        request = ctx.request
        if request is not None:
            scope = getattr(request, "scope", None)
            caller = scope.get(CALLER_SCOPE_KEY) if isinstance(scope, Mapping) else None
            return caller if isinstance(caller, CallerContext) else EMPTY_CONTEXT
        return self._stdio_context or EMPTY_CONTEXT

    def _session(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        # The MCP session the transport names (Mcp-Session-Id, bound to its principal by
        # the session table), never anything from the request's params.
        request = ctx.request
        if request is None:
            return self._pipe_session
        headers = getattr(request, "headers", None)
        session = headers.get("mcp-session-id") if headers is not None else None
        return session if isinstance(session, str) else None

    @staticmethod
    def _request_id(ctx: ServerRequestContext[Any, Any]) -> str | None:
        scope = getattr(ctx.request, "scope", None)
        return request_id_in(scope) if isinstance(scope, Mapping) else None

    @staticmethod
    def _arguments(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> bytes:
        """The argument bytes to admit: over a transport, exactly those that were sent."""
        request = ctx.request
        if request is None:
            # An in-process client: there are no bytes, only the values it passed.
            raw = _RAW_ARGUMENTS.get()
            return _encode_arguments(params.arguments if raw is _UNSET else raw)
        scope = getattr(request, "scope", None)
        message = scope.get(MESSAGE_SCOPE_KEY) if isinstance(scope, Mapping) else None
        request_id = ctx.request_id
        if (
            not isinstance(message, Message)
            or not message.is_tool_call
            or type(message.request_id) is not type(request_id)
            or message.request_id != request_id
        ):
            # Fail closed: never admit values the SDK decoded in place of the bytes sent.
            _LOG.error("a tool call reached the handler without its raw message; refused")
            raise MCPError(code=types.INVALID_REQUEST, message="the request could not be read")
        return b"{}" if message.arguments is None else message.arguments

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        self.check_revision()
        arguments = self._arguments(ctx, params)

        async def start() -> types.CallToolResult:
            call = ToolCall(f"mcp-{random_hex()}", params.name, arguments)
            gateway = self._gateway
            request = ctx.request
            with (
                caller_context(self._caller(ctx)),
                mcp_server_span(  # nothing unless the service traces ([telemetry])
                    active_tracer(),
                    tool=params.name[:128],
                    request_id=ctx.request_id,
                    meta=params.meta if isinstance(params.meta, Mapping) else None,
                    headers=getattr(request, "headers", None),
                    transport="pipe" if request is None else "tcp",
                ),
            ):
                result = await gateway.call(
                    call, request_id=self._request_id(ctx), session=self._session(ctx)
                )
            return to_call_result(result)

        # Upstreams may ask the client on the way (a 2026-07-28 client: in rounds).
        return await self._bridge.serve(
            ctx, start, target=params.name, arguments=arguments, params=params
        )

    async def serve_stdio(self) -> None:
        """Serve over this process's stdin and stdout until stdin closes.

        Raises:
            ValueError: no ``stdio_context`` was given.
        """
        if self._stdio_context is None:
            raise ValueError("mcp.stdio_context: required for the stdio transport")
        with std_streams() as (stdin, stdout):
            await self.serve_streams(stdin, stdout)

    async def serve_streams(
        self,
        stdin: anyio.abc.ByteReceiveStream,
        stdout: anyio.abc.ByteSendStream,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        """Serve newline-delimited JSON-RPC over these byte streams until ``stdin`` ends.

        This is the stdio transport on any pair of streams; every call gets the
        ``stdio_context``.

        Raises:
            ValueError: no ``stdio_context`` was given.
        """
        if self._stdio_context is None:
            raise ValueError("mcp.stdio_context: required for the stdio transport")
        read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception]()
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage]()
        context = {CALLER_SCOPE_KEY: self._stdio_context}
        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: pump(
                    stdin,
                    stdout,
                    read_writer,
                    write_reader,
                    context=context,
                    max_line_bytes=max_line_bytes,
                )
            )
            async with read_stream, write_stream:
                await self.server.run(
                    read_stream, write_stream, self.server.create_initialization_options()
                )
            group.cancel_scope.cancel()

    def http_app(
        self,
        *,
        host: str = "127.0.0.1",
        path: str = "/mcp",
        max_body_bytes: int = 2 * 1024 * 1024,
        sessions: SessionTable | None = None,
    ) -> ASGIApp:
        """A fresh streamable HTTP ASGI app at ``path``, every request authenticated.

        ``host`` is where it listens: on a loopback address the SDK's DNS-rebinding
        protection is on. ``sessions`` bounds the sessions per principal and their idle
        timeout (default: :class:`SessionTable` defaults); the SDK is given the same
        timeout. Build a new app for every server run (the SDK's session manager runs
        once).

        Raises:
            ValueError: no authenticator was given.
        """
        if self._authenticator is None:
            raise ValueError("an authenticator is required to serve MCP over HTTP")
        table = sessions if sessions is not None else SessionTable()
        app = self.server.streamable_http_app(
            streamable_http_path=path,
            host=host,
            max_request_body_size=max_body_bytes,
            session_idle_timeout=table.idle_timeout,
        )
        guarded = SessionGuard(
            app,
            table=table,
            audit=self._audit,
            max_body_bytes=max_body_bytes,
            caller_key=CALLER_SCOPE_KEY,
        )
        return AuthenticationMiddleware(guarded, self._authenticator)

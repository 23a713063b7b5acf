"""The HTTP API (ASGI, Starlette): list tools, call a tool, health, readiness, metrics.

Every ``/v1`` request is authenticated first, by the service layer's
:class:`~gateway.service.AuthenticationMiddleware` (the one MCP over HTTP uses too); an
unauthenticated request gets 401 and never reaches the policy. Each failure has its own
machine-readable ``code`` and status.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette._utils import get_route_path
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway import _json
from gateway._call import ToolCall, admitted_call
from gateway._numerals import ascii_digits
from gateway._output import MediaContent, TextContent, ToolOutput
from gateway.approvals import ApprovalDesk
from gateway.policy import CallerContext, ToolVisibility
from gateway.server._approvals import ApprovalsApi, approval_url, is_approval_path
from gateway.server._authzen import AuthzenApi, is_authzen_path
from gateway.server._openapi import openapi_document
from gateway.service import (
    AUTHENTICATION_REQUIRED,
    CALLER_SCOPE_KEY,
    AccessLog,
    AuthenticationMiddleware,
    Authenticator,
    CallResult,
    Gateway,
    GatewayMetrics,
    TraceRequests,
    error_body,
    insufficient_scope,
    request_id_in,
    request_id_of,
)

_LOG: Final = logging.getLogger("gateway.server")
#: The authenticated routes, by path, and their metrics label.
_ROUTES: Final = {"/v1/tools": "tools", "/v1/calls": "calls"}
# The bytes JSONResponse would send (compact, UTF-8, no NaN), from one encoder: json.dumps
# with these options would build a new one for every response.
_RESPONSE_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":")
)
#: The request header naming the caller's session (its state is the caller's own).
SESSION_HEADER: Final = "x-gateway-session"

#: The message of every 405: error messages never quote what the caller sent.
_WRONG_METHOD: Final = "the path does not take that method"

#: The message of a 415.
_NOT_JSON: Final = "send the call as JSON: Content-Type: application/json"

Readiness = Callable[[], Awaitable[bool]]


class _Endpoint:
    # A plain ASGI handler as a Starlette route's endpoint (Starlette wraps functions and
    # methods in its request/response adapter, never other callables).
    __slots__ = ("_handler",)

    def __init__(self, handler: ASGIApp) -> None:
        self._handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._handler(scope, receive, send)


def _is_json(content_type: str | None) -> bool:
    # No Content-Type is read as JSON; any other media type than JSON is refused, so a body
    # sent as a form, text or XML is never parsed as if it were a call.
    if content_type is None:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def _not_found(request: Request, exc: Exception) -> Response:
    request_id = request_id_in(request.scope) or request_id_of(request.headers)
    return JSONResponse(
        error_body("not_found", "no such path", request_id),
        status_code=404,
        headers={"X-Request-ID": request_id},
    )


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    request_id = request_id_in(request.scope) or request_id_of(request.headers)
    allowed = getattr(exc, "headers", None) or {}
    return JSONResponse(
        # The Allow header names the methods the path takes; the message quotes nothing the
        # caller sent (neither the method nor the path).
        error_body("method_not_allowed", _WRONG_METHOD, request_id),
        status_code=405,
        headers={"X-Request-ID": request_id, **allowed},
    )


def output_json(output: ToolOutput) -> dict[str, Any]:
    """The wire form of a ToolOutput."""
    content: list[dict[str, Any]] = []
    for item in output.content:
        if isinstance(item, TextContent):
            content.append({"type": "text", "text": item.text})
        elif isinstance(item, MediaContent):
            content.append({"type": "media", "mime_type": item.mime_type, "uri": item.uri})
    details = None if output.details is None else _json.to_plain(output.json())
    return {"content": content, "details": details, "text": output.text()}


class GatewayApp:
    """The ASGI application around a :class:`Gateway`.

    Args:
        gateway: the call pipeline.
        authenticator: turns headers into caller context.
        ready: an async check for ``/readyz`` (policies loaded, engine reachable).
        metrics: the service's metrics.
        max_body_bytes: the largest accepted request body.
    """

    def __init__(
        self,
        gateway: Gateway,
        *,
        authenticator: Authenticator,
        ready: Readiness,
        metrics: GatewayMetrics,
        max_body_bytes: int = 2 * 1024 * 1024,
        lifespan: Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]] | None = None,
        access_log: bool = False,
        approvals: ApprovalDesk | None = None,
        authzen: AuthzenApi | None = None,
        tracing: bool = False,
        visibility: ToolVisibility | None = None,
        console: Any | None = None,
    ) -> None:
        self._gateway = gateway
        # The operator console ([console]), at its own path with its own sign-in.
        self._console = console
        self._authenticator = authenticator
        # /v1/approvals, behind its own authentication (its paths hold the approval id).
        self._approvals = ApprovalsApi(approvals, authenticator) if approvals is not None else None
        self._visibility = visibility
        # /access/v1/evaluation(s) and the AuthZEN metadata, behind their own authentication.
        self._authzen: ASGIApp | None = None
        if authzen is not None:
            self._authzen = AccessLog(authzen) if access_log else authzen
        self._ready = ready
        self._metrics = metrics
        self._limit = max_body_bytes
        self._too_large = f"request body exceeds {max_body_bytes} bytes"
        self._counters: dict[tuple[str, int], Any] = {}
        self.app = Starlette(
            routes=[
                Route("/v1/tools", self.list_tools, methods=["GET"]),
                Route("/v1/calls", _Endpoint(self.call), methods=["POST"]),
                Route("/healthz", self.healthz, methods=["GET"]),
                Route("/readyz", self.readyz, methods=["GET"]),
                Route("/metrics", self.metrics, methods=["GET"]),
                Route("/openapi.json", self.openapi, methods=["GET"]),
            ],
            lifespan=lifespan,
            exception_handlers={404: _not_found, 405: _method_not_allowed},
        )
        self._asgi: ASGIApp = AuthenticationMiddleware(
            self._dispatch, authenticator, paths=_ROUTES, on_refusal=self._count_refusal
        )
        if tracing:
            self._asgi = TraceRequests(self._asgi, paths=frozenset(_ROUTES))
        if access_log:
            self._asgi = AccessLog(self._asgi)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # Each part is found by the path as the router matches it (without a root path).
        path = get_route_path(scope) if "path" in scope else None
        if self._console is not None and self._console.handles(path):
            await self._console(scope, receive, send)
            return
        if self._authzen is not None and is_authzen_path(path):
            await self._authzen(scope, receive, send)
            return
        if self._approvals is not None and is_approval_path(path):
            await self._approvals(scope, receive, send)
            return
        await self._asgi(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Behind the authentication middleware: a call goes straight to its handler; every
        # other request (and a call under a root path) through Starlette's router.
        if (
            scope["type"] == "http"
            and scope["path"] == "/v1/calls"
            and scope["method"] == "POST"
            and not scope.get("root_path")
        ):
            await self.call(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _count_refusal(self, scope: Any) -> None:
        self._count(_ROUTES.get(get_route_path(scope), "other"), 401)

    @staticmethod
    def _request_id(request: Request) -> str:
        # Set by the middleware for every HTTP request; a fresh one if it was bypassed.
        return request_id_in(request.scope) or request_id_of({})

    @staticmethod
    def _caller(request: Request) -> CallerContext | None:
        # Set by the authentication middleware alone; None: the request was not
        # authenticated, and is refused rather than served as an empty context.
        caller = request.scope.get(CALLER_SCOPE_KEY)
        return caller if isinstance(caller, CallerContext) else None

    def _count(self, route: str, status: int) -> None:
        # The counter's child per (route, status), bound once: no label lookup per request.
        child = self._counters.get((route, status))
        if child is None:
            child = self._counters[route, status] = self._metrics.requests.labels(
                route, str(status)
            )
        child.inc()

    def _respond(
        self, route: str, status: int, body: dict[str, Any], request_id: str
    ) -> JSONResponse:
        self._count(route, status)
        return JSONResponse(body, status_code=status, headers={"X-Request-ID": request_id})

    async def list_tools(self, request: Request) -> Response:
        """``GET /v1/tools``: the definitions the caller may see (after authentication).

        With a :class:`ToolVisibility`, only the tools the policy's visibility decision
        shows this caller (fail closed); the call-time decision still decides every call.
        """
        request_id = self._request_id(request)
        caller = self._caller(request)
        if caller is None:
            body = error_body("unauthenticated", AUTHENTICATION_REQUIRED, request_id=request_id)
            return self._respond("tools", 401, body, request_id)
        definitions = self._gateway.definitions()
        if self._visibility is not None:
            definitions = await self._visibility.visible(definitions, caller)
        tools = [
            {"name": d.name, "description": d.description, "input_schema": d.input_schema}
            for d in definitions
        ]
        return self._respond("tools", 200, {"tools": tools}, request_id)

    async def call(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST /v1/calls`` with ``{"id", "name", "arguments"}`` (a plain ASGI handler).

        The service's hot route: it reads the body, the three headers it needs and the
        scope the authentication middleware set, with no framework request or response
        objects in between. Every other route is Starlette's.
        """
        request_id = request_id_in(scope) or request_id_of({})
        content_type = declared = session = None
        for name, value in scope["headers"]:
            if name == b"content-type" and content_type is None:
                content_type = value.decode("latin-1")
            elif name == b"content-length" and declared is None:
                declared = value.decode("latin-1")
            elif name == b"x-gateway-session" and session is None:
                session = value.decode("latin-1")
        if declared is not None and ascii_digits(declared) and int(declared) > self._limit:
            await self._error(send, 413, "body_too_large", self._too_large, request_id)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: nobody to answer
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._limit:
                await self._error(send, 413, "body_too_large", self._too_large, request_id)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        if not _is_json(content_type):
            await self._error(send, 415, "unsupported_media_type", _NOT_JSON, request_id)
            return
        parsed = self._parse_call(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if isinstance(parsed, str):
            await self._error(send, 400, "malformed_request", parsed, request_id)
            return
        caller = scope.get(CALLER_SCOPE_KEY)
        if not isinstance(caller, CallerContext):
            # Only the authentication middleware sets the caller: a call that reached this
            # handler without it is refused, never decided for an empty context.
            await self._error(send, 401, "unauthenticated", AUTHENTICATION_REQUIRED, request_id)
            return
        # The caller's session (gateway.state), from the transport, bound to the caller by
        # the pipeline; never from the model's arguments.
        result = await self._gateway.call(
            parsed,
            caller=caller,
            request_id=request_id,
            session=session,
        )
        await self._result(send, result, parsed, request_id)

    @staticmethod
    def _parse_call(body: bytes) -> ToolCall | str:
        try:
            document = _json.parse(body, max_depth=80)
        except _json.StrictJSONError as exc:
            return f"request body is not valid JSON: {exc}"
        if not isinstance(document, dict):
            return "request body must be a JSON object"
        unknown = sorted(set(document) - {"id", "name", "arguments"})
        if unknown:
            # The name is the caller's: never quoted (see _WRONG_METHOD).
            return "the request body has a member other than id, name and arguments"
        call_id, name = document.get("id"), document.get("name")
        if not isinstance(call_id, str) or not isinstance(name, str):
            return "id and name must be strings"
        arguments = document.get("arguments", "")
        if isinstance(arguments, dict):
            # Re-encoded from the exact decoded value (numbers are never rounded), which
            # admission checks as it is: the body is the one strict decoding of the call.
            return admitted_call(call_id, name, _json.encode_parsed(arguments))
        return (
            ToolCall(call_id, name, arguments)
            if isinstance(arguments, str)
            else "arguments must be a JSON object or JSON text"
        )

    async def _send(
        self,
        send: Send,
        status: int,
        body: dict[str, Any],
        request_id: str,
        extra: dict[str, str] | None = None,
    ) -> None:
        self._count("calls", status)
        content = _RESPONSE_ENCODER.encode(body).encode("utf-8")
        headers = [
            (b"x-request-id", request_id.encode("latin-1")),
            (b"content-length", str(len(content)).encode("latin-1")),
            (b"content-type", b"application/json"),
        ]
        if extra:
            headers += [
                (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()
            ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    async def _error(
        self,
        send: Send,
        status: int,
        code: str,
        message: str,
        request_id: str,
        *,
        decision_id: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> None:
        body = error_body(code, message, request_id, decision_id)
        await self._send(send, status, body, request_id, extra)

    async def _result(
        self, send: Send, result: CallResult, call: ToolCall, request_id: str
    ) -> None:
        if result.ok or result.is_tool_failure:
            body: dict[str, Any] = {
                "id": call.id,
                "status": "ok" if result.ok else result.code,
                "is_error": not result.ok,
                "output": output_json(result.output) if result.output is not None else None,
                "decision_id": result.decision_id,
                "request_id": request_id,
            }
            await self._send(send, 200, body, request_id)
            return
        if result.code == "approval_pending" and result.approval_id is not None:
            body = error_body(result.code, result.message or result.code, request_id)
            body["decision_id"] = result.decision_id
            body["approval_id"] = result.approval_id
            body["approval_url"] = approval_url(result.approval_id)
            await self._send(send, 202, body, request_id)
            return
        # Step-up: the client may ask for a token with these scopes and call again.
        extra = (
            insufficient_scope(self._authenticator, result.required_scopes)
            if result.required_scopes
            else None
        )
        await self._error(
            send,
            result.status,
            result.code,
            result.message or result.code,
            request_id,
            decision_id=result.decision_id,
            extra=extra,
        )

    async def healthz(self, request: Request) -> Response:
        """``GET /healthz``: the process is alive."""
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        """``GET /readyz``: policies loaded and the engine reachable."""
        try:
            ready = await self._ready()
        except Exception:  # noqa: BLE001 - any failure to check means not ready
            ready = False
        return JSONResponse({"ready": ready}, status_code=200 if ready else 503)

    async def metrics(self, request: Request) -> Response:
        """``GET /metrics``: Prometheus text format."""
        return Response(self._metrics.render(), media_type="text/plain; version=0.0.4")

    async def openapi(self, request: Request) -> Response:
        """``GET /openapi.json``."""
        return JSONResponse(openapi_document())

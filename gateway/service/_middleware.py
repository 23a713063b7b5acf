"""Authentication as one ASGI middleware, in front of every surface served over HTTP.

As Starlette's ``AuthenticationMiddleware`` does, it authenticates a request before the
application sees it and hands the result on in the ASGI scope. Unlike it, a request
without valid credentials never reaches the application: it is answered ``401`` here, with
the one error body and ``WWW-Authenticate`` header every surface uses, so no policy is ever
asked about it.

Every HTTP request (authenticated or not) gets a request id: the caller's
``X-Request-ID`` when it is a short token of safe characters, else a fresh one. It is put
in the scope beside the caller context, never inside it: the request id is for the audit
trail and the response, and the policy never sees it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

from starlette._utils import get_route_path
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway._ids import random_hex
from gateway.service._auth import Authenticator, AuthFailure

_LOG: Final = logging.getLogger("gateway.service")

#: The ASGI scope key holding the authenticated caller context (a ``CallerContext``).
CALLER_SCOPE_KEY: Final = "gateway.caller"
#: The ASGI scope key holding the authenticated principal (see ``Identity.principal``).
PRINCIPAL_SCOPE_KEY: Final = "gateway.principal"
#: The ASGI scope key holding the request id of an HTTP request.
REQUEST_ID_SCOPE_KEY: Final = "gateway.request_id"

#: What a caller's ``X-Request-ID`` must look like to be kept (else a fresh id is made).
REQUEST_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9._:-]{1,128}")
#: The challenge of every 401 where bearer tokens are accepted.
WWW_AUTHENTICATE: Final = 'Bearer realm="gateway"'
#: The challenge where only API keys are (a 401 must name a scheme; this one names the header).
API_KEY_CHALLENGE: Final = 'APIKey realm="gateway", header="X-API-Key"'
#: The public message of every 401.
AUTHENTICATION_REQUIRED: Final = "authentication required"

#: Called with the scope of every request refused 401 (for example to count it).
OnRefusal = Callable[[Scope], None]


def new_request_id() -> str:
    """A fresh request id: 32 hexadecimal digits (128 random bits, see ``gateway._ids``)."""
    return random_hex()


def request_id_of(headers: Mapping[str, str], *, new_id: Callable[[], str] | None = None) -> str:
    """The caller's ``X-Request-ID`` when it fits :data:`REQUEST_ID_PATTERN`, else a new id."""
    given = headers.get("x-request-id")
    if given is not None and REQUEST_ID_PATTERN.fullmatch(given):
        return given
    return new_id() if new_id is not None else new_request_id()


def error_body(
    code: str, message: str, request_id: str, decision_id: str | None = None
) -> dict[str, Any]:
    """The one error body of the HTTP surfaces: ``code``, ``message``, ids."""
    return {"code": code, "message": message, "decision_id": decision_id, "request_id": request_id}


def unauthenticated(
    code: str,
    request_id: str,
    *,
    challenge: str = WWW_AUTHENTICATE,
    message: str = AUTHENTICATION_REQUIRED,
) -> JSONResponse:
    """The 401 answer: the error body, the challenge and the request id."""
    return JSONResponse(
        error_body(code, message, request_id),
        status_code=401,
        headers={"WWW-Authenticate": challenge, "X-Request-ID": request_id},
    )


def insufficient_scope(authenticator: Authenticator, scopes: tuple[str, ...]) -> dict[str, str]:
    """The challenge header of a call refused for scopes the caller's token lacks (step-up).

    RFC 6750's ``insufficient_scope`` with the scopes the call needs, and the resource
    metadata when the gateway is an OAuth resource server.
    """
    scope = " ".join(scopes)
    challenge = authenticator.challenge(error="insufficient_scope", scope=scope)
    return {"WWW-Authenticate": challenge or f'Bearer error="insufficient_scope", scope="{scope}"'}


def request_id_in(scope: Mapping[str, Any]) -> str | None:
    """The request id the middleware put in this scope, if any."""
    found = scope.get(REQUEST_ID_SCOPE_KEY)
    return found if isinstance(found, str) else None


class AuthenticationMiddleware:
    """Authenticates every HTTP request to ``app`` (or those to ``paths``), else answers 401.

    Args:
        app: the application behind it.
        authenticator: turns request headers into an identity, or refuses.
        paths: when given, only requests to exactly these paths are authenticated (each
            path as the router matches it: without the scope's root path); the
            others pass through with only the request id set. ``None``: every request.
        on_refusal: called with the scope of every request refused 401.
        new_id: makes a request id where the caller sent none that fits.

    Every HTTP request reaches ``app`` with :data:`REQUEST_ID_SCOPE_KEY` set; an
    authenticated one also with :data:`CALLER_SCOPE_KEY` and :data:`PRINCIPAL_SCOPE_KEY`.
    Other scope types (lifespan, websocket) pass through unchanged.
    """

    def __init__(
        self,
        app: ASGIApp,
        authenticator: Authenticator,
        *,
        paths: Collection[str] | None = None,
        on_refusal: OnRefusal | None = None,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        self._app = app
        self._auth = authenticator
        self._paths = frozenset(paths) if paths is not None else None
        self._on_refusal = on_refusal
        self._new_id = new_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        request_id = request_id_of(headers, new_id=self._new_id)
        resource = self._auth.resource_server
        # The path as the router matches it: under a root path (a mount, a proxy's prefix)
        # the request path carries the prefix, which the router strips before matching.
        path = get_route_path(scope)
        if resource is not None and path in resource.metadata_paths:
            # RFC 9728: the protected resource metadata, for anyone (it is how a client
            # that got a 401 finds the authorization server).
            metadata = Response(
                resource.metadata_body(),
                media_type="application/json",
                headers={"X-Request-ID": request_id, "Cache-Control": "max-age=300"},
            )
            await metadata(scope, receive, send)
            return
        if self._paths is not None and path not in self._paths:
            await self._app({**scope, REQUEST_ID_SCOPE_KEY: request_id}, receive, send)
            return
        try:
            identity = await self._auth.identify_async(headers)
        except AuthFailure as failure:
            _LOG.info("unauthenticated request %s: %s", request_id, failure.detail)
            if self._on_refusal is not None:
                self._on_refusal(scope)
            default = WWW_AUTHENTICATE if self._auth.accepts_bearer else API_KEY_CHALLENGE
            challenge = self._auth.challenge(error=failure.error) or default
            refusal = unauthenticated(
                failure.code,
                request_id,
                challenge=challenge,
                message=failure.hint or AUTHENTICATION_REQUIRED,
            )
            await refusal(scope, receive, send)
            return
        inner = {
            **scope,
            REQUEST_ID_SCOPE_KEY: request_id,
            CALLER_SCOPE_KEY: identity.context,
            PRINCIPAL_SCOPE_KEY: identity.principal,
        }
        await self._app(inner, receive, send)

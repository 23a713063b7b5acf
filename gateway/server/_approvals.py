"""The HTTP approval API: ``/v1/approvals`` for approvers and for callers awaiting one.

Every request is authenticated (API key or bearer token, as ``/v1/calls``); what the
caller may do follows from its context:

- ``GET /v1/approvals``: the pending approvals the caller may decide (their ``role`` is
  one of the caller's roles).
- ``GET /v1/approvals/{id}``: one approval, for the caller who asked for it (to poll its
  ``status``: ``pending``, ``approved``, ``rejected``, ``used``, ``void``, ``expired``) or
  an approver of its role; anyone else gets 404.
- ``POST /v1/approvals/{id}/approve`` and ``.../reject``: decide it (an approver of its
  role who is not the caller who asked; 403 otherwise). The body is ignored.

An approval shows the tool, the digest of the arguments (never their values), who asked,
the role, the policy's public message, the revision, its status and times.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.approvals import ApprovalDesk, ApprovalError
from gateway.policy import EMPTY_CONTEXT, CallerContext
from gateway.service import (
    CALLER_SCOPE_KEY,
    AuthenticationMiddleware,
    Authenticator,
    error_body,
    request_id_in,
    request_id_of,
)

PREFIX: Final = "/v1/approvals"
_STATUS: Final = {
    "approval_not_found": 404,
    "approver_not_allowed": 403,
    "approval_expired": 409,
    "approval_decided": 409,
}


def approval_url(approval_id: str) -> str:
    """Where a caller polls the approval its call awaits."""
    return f"{PREFIX}/{approval_id}"


def is_approval_path(path: object) -> bool:
    """Whether a request path belongs to this API."""
    return isinstance(path, str) and (path == PREFIX or path.startswith(PREFIX + "/"))


class ApprovalsApi:
    """The ASGI app of ``/v1/approvals``, behind its own authentication."""

    def __init__(self, desk: ApprovalDesk, authenticator: Authenticator) -> None:
        self._desk = desk
        app = Starlette(
            routes=[
                Route(PREFIX, self.list_pending, methods=["GET"]),
                Route(PREFIX + "/{approval_id}", self.show, methods=["GET"]),
                Route(PREFIX + "/{approval_id}/approve", self.approve, methods=["POST"]),
                Route(PREFIX + "/{approval_id}/reject", self.reject, methods=["POST"]),
            ]
        )
        self._asgi: ASGIApp = AuthenticationMiddleware(app, authenticator)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._asgi(scope, receive, send)

    @staticmethod
    def _caller(request: Request) -> CallerContext:
        caller = request.scope.get(CALLER_SCOPE_KEY)
        return caller if isinstance(caller, CallerContext) else EMPTY_CONTEXT

    @staticmethod
    def _request_id(request: Request) -> str:
        return request_id_in(request.scope) or request_id_of({})

    def _ok(self, request: Request, body: dict[str, Any]) -> JSONResponse:
        request_id = self._request_id(request)
        return JSONResponse(body, headers={"X-Request-ID": request_id})

    def _refused(self, request: Request, error: Exception) -> JSONResponse:
        request_id = self._request_id(request)
        if isinstance(error, ApprovalError):
            status = _STATUS.get(error.code, 503)
            body = error_body(error.code, str(error), request_id)
        else:  # the store or the audit trail failed: nothing was decided
            status = 503
            body = error_body(
                "approval_unavailable", "approvals cannot be read or decided now", request_id
            )
        return JSONResponse(body, status_code=status, headers={"X-Request-ID": request_id})

    async def list_pending(self, request: Request) -> Response:
        """``GET /v1/approvals``."""
        try:
            pending = await self._desk.pending(self._caller(request))
        except Exception as exc:  # noqa: BLE001 - answered as a refusal, never leaked
            return self._refused(request, exc)
        now = self._desk.clock()
        return self._ok(request, {"approvals": [a.public(now) for a in pending]})

    async def show(self, request: Request) -> Response:
        """``GET /v1/approvals/{id}``."""
        try:
            approval = await self._desk.show(
                request.path_params["approval_id"], self._caller(request)
            )
        except Exception as exc:  # noqa: BLE001 - answered as a refusal, never leaked
            return self._refused(request, exc)
        return self._ok(request, approval.public(self._desk.clock()))

    async def _decide(self, request: Request, *, approve: bool) -> Response:
        try:
            approval = await self._desk.decide(
                request.path_params["approval_id"], self._caller(request), approve=approve
            )
        except Exception as exc:  # noqa: BLE001 - answered as a refusal, never leaked
            return self._refused(request, exc)
        return self._ok(request, approval.public(self._desk.clock()))

    async def approve(self, request: Request) -> Response:
        """``POST /v1/approvals/{id}/approve``."""
        return await self._decide(request, approve=True)

    async def reject(self, request: Request) -> Response:
        """``POST /v1/approvals/{id}/reject``."""
        return await self._decide(request, approve=False)

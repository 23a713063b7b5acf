"""The OpenID AuthZEN Authorization API 1.0 on the gateway's own policies.

``POST /access/v1/evaluation`` and ``POST /access/v1/evaluations`` answer "may this subject
run this tool with these arguments?" with the decision the policy would give that call
through ``/v1/calls`` or MCP, without running anything; ``GET
/.well-known/authzen-configuration`` is the PDP metadata. Both POST endpoints are
authenticated like every ``/v1`` request (401 before any policy is asked).

How a request maps onto a call (the SARC model onto tool calls):

- **subject**: the authenticated caller, never the body's. The body's ``subject`` must be
  there and well-formed (``type`` and ``id`` strings), and its ``id`` must be the caller's
  ``subject``, else the decision is ``false``. Only a caller listed in ``[authzen]
  trusted_peps`` (a PEP with its own credential) names the subject: the policy then sees
  ``{**subject.properties, "subject": subject.id, "authzen_pep": <the PEP's subject>}``.
- **action**: a served tool's name, or ``tools/call`` (the COAZ-MCP default mapping: the
  tool is then ``resource.id`` and ``resource.type`` must be ``tool``). Other MCP methods
  are not decided here (``false``).
- **resource**: ``{"type": "tool", "id": <tool>, "properties": {"arguments": {...}}}``; any
  other resource type is an application object the action's tool is asked about: its
  arguments are then ``{"resource": <the resource>, "action": <action.properties>}``.
  Either way the arguments are admitted exactly as a call's are (strict I-JSON, the tool's
  JSON Schema): a call that would be refused gets ``false``.
- **context**: accepted and ignored; the policy's context is the caller's. An ``approval``
  member (in a trusted PEP's ``subject.properties`` or the caller's own context) is dropped
  exactly as the approval gate drops it from a call's context
  (:data:`gateway.approvals.APPROVAL_MEMBER`): only the gate sets it, so the policy never
  sees an approval here.

Obligations and approvals (fail closed): ``decision: true`` means the call would run as
asked, with nothing else to do. AuthZEN's boolean cannot carry an obligation to the PEP, so
an allow that still carries one after the decision record (which fulfils ``audit``) is
answered ``false``: code ``approval_required`` when it includes ``require_approval`` (the
call would wait for a person through ``/v1/calls``: ``approval_pending``, or be refused
without ``[approvals]``), else ``obligation_unfulfilled`` (``redact_output``,
``rewrite_arguments``, an unknown type: the call would not run as asked). Evaluation never
goes through the approval gate: it neither records a pending approval nor uses an approved
one, so a call needing approval is ``false`` even once an approval for it exists.

A decision is recorded in the audit trail like a call's (the decision record; no outcome:
nothing runs). The response is ``{"decision": bool, "context": {...}}`` with the decision
id, the result code and, on a denial, the policy's public message; never its reasons, an
obligation's contents, or an argument value.

Batches are evaluated item by item through the same authorizer (decision cache, audit,
argument facts), concurrently for ``execute_all`` and in order for the short-circuiting
semantics; the engine-level ``evaluate_many`` is not used, since it bypasses the
authorizer's facts, cache and audit record.

Errors, as the specification requires: 400 for a body that is not one strict JSON object,
a missing or mistyped required member (``subject``/``action``/``resource`` and their
``type``/``id``/``name``), a ``Content-Type`` other than ``application/json``, an empty
body, an unknown ``evaluations_semantic`` or too many evaluations; 413 for a body over the
limit. Unknown members are ignored. ``X-Request-ID`` is echoed when sent (a fresh one
otherwise).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway import _json
from gateway._authorization import (
    Authorization,
    AuthorizationError,
    Decision,
    admitted_authorization,
    read_answer,
)
from gateway._call import ToolCall
from gateway._contract import decoding_of
from gateway._errors import GatewayError, InvalidInvocationError, MalformedDecisionError
from gateway._ids import random_hex
from gateway._numerals import ascii_digits
from gateway.approvals import APPROVAL_MEMBER
from gateway.audit import AuditingAuthorizer, AuditScope, AuditTrail, AuditWriteError
from gateway.obligations import RequireApproval
from gateway.policy import EMPTY_CONTEXT, CallerContext, caller_context
from gateway.service import (
    CALLER_SCOPE_KEY,
    AuthenticationMiddleware,
    Authenticator,
    Gateway,
    GatewayMetrics,
    ResultCode,
    error_body,
    request_id_in,
    request_id_of,
    result_code,
)

EVALUATION_PATH: Final = "/access/v1/evaluation"
EVALUATIONS_PATH: Final = "/access/v1/evaluations"
METADATA_PATH: Final = "/.well-known/authzen-configuration"
#: The MCP method of a tool call (COAZ-MCP's default mapping names it as the action).
TOOLS_CALL: Final = "tools/call"
SEMANTICS: Final = ("execute_all", "deny_on_first_deny", "permit_on_first_permit")
DEFAULT_MAX_EVALUATIONS: Final = 64
_MAX_DEPTH: Final = 64
_MAX_ECHOED_ID: Final = 256
#: The code of an allow that needs a person's approval first (never ``decision: true``).
APPROVAL_REQUIRED: Final = "approval_required"
_APPROVAL_REASON: Final = "the policy requires a person's approval before this call runs"
_UNFULFILLED_REASON: Final = (
    "the policy obliges something the PEP cannot be told to do; the call would not run as asked"
)
_ROUTE_LABELS: Final = {
    EVALUATION_PATH: "authzen_evaluation",
    EVALUATIONS_PATH: "authzen_evaluations",
}


def is_authzen_path(path: object) -> bool:
    """Whether a request path is one of this API's."""
    return path in (EVALUATION_PATH, EVALUATIONS_PATH, METADATA_PATH)


class BadRequestError(Exception):
    """The request (or one evaluation of a batch) is not what the specification requires."""


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One evaluation as the request states it (members validated, values untrusted)."""

    subject: Mapping[str, Any]
    action: Mapping[str, Any]
    resource: Mapping[str, Any]


def _entity(value: object, name: str, required: tuple[str, ...]) -> Mapping[str, Any]:
    # A Subject, Resource or Action: an object with string members `required` and an
    # optional object `properties`; other members are ignored (forward compatibility).
    if not isinstance(value, dict):
        raise BadRequestError(f"{name} must be an object")
    for member in required:
        if member not in value:
            raise BadRequestError(f"{name}.{member} is required")
        if not isinstance(value[member], str):
            raise BadRequestError(f"{name}.{member} must be a string")
    properties = value.get("properties")
    if properties is not None and not isinstance(properties, dict):
        raise BadRequestError(f"{name}.properties must be an object")
    return value


_REQUIRED: Final = {"subject": ("type", "id"), "action": ("name",), "resource": ("type", "id")}


def read_evaluation(item: Mapping[str, Any], defaults: Mapping[str, Any]) -> Evaluation:
    """One evaluation: each of subject, action, resource from ``item`` or, whole, ``defaults``.

    Raises:
        BadRequestError: a required member is missing from both, or is not well-formed.
    """
    found: dict[str, Mapping[str, Any]] = {}
    for name, required in _REQUIRED.items():
        value = item.get(name, defaults.get(name))
        if value is None:
            raise BadRequestError(f"{name} is required")
        found[name] = _entity(value, name, required)
    return Evaluation(found["subject"], found["action"], found["resource"])


def _context(item: object, name: str) -> None:
    if item is not None and not isinstance(item, dict):
        raise BadRequestError(f"{name} must be an object")


def read_item(item: object, defaults: Mapping[str, Any]) -> Evaluation:
    """One member of ``evaluations``, with the request's top-level defaults.

    Raises:
        BadRequestError: it is not an object, or not a complete evaluation with them.
    """
    if not isinstance(item, dict):
        raise BadRequestError("an evaluation must be an object")
    _context(item.get("context"), "context")
    return read_evaluation(item, defaults)


def read_batch(document: Mapping[str, Any], max_evaluations: int) -> tuple[list[Any], str]:
    """The ``evaluations`` (``[]`` when absent) and the semantic of an evaluations request.

    Raises:
        BadRequestError: a member of the wrong type, an unknown semantic, too many items.
    """
    _context(document.get("context"), "context")
    items = document.get("evaluations", [])
    options = document.get("options", {})
    if not isinstance(items, list):
        raise BadRequestError("evaluations must be an array")
    if not isinstance(options, dict):
        raise BadRequestError("options must be an object")
    semantic = options.get("evaluations_semantic", "execute_all")
    if semantic not in SEMANTICS:
        raise BadRequestError(f"options.evaluations_semantic must be one of {', '.join(SEMANTICS)}")
    if len(items) > max_evaluations:
        raise BadRequestError(f"at most {max_evaluations} evaluations per request")
    return items, semantic


def parse_body(body: bytes) -> dict[str, Any]:
    """The request body as one strict JSON object.

    Raises:
        BadRequestError: empty, not strict JSON (RFC 7493), or not an object.
    """
    if not body.strip():
        raise BadRequestError("the request body is empty")
    try:
        document = _json.parse(body, max_depth=_MAX_DEPTH)
    except _json.StrictJSONError as exc:
        raise BadRequestError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise BadRequestError("the request body must be a JSON object")
    return document


@dataclass(frozen=True, slots=True)
class Answer:
    """One decision as the response states it."""

    decision: bool
    code: str
    decision_id: str | None = None
    reason: str | None = None
    status: int | None = None

    def json(self) -> dict[str, Any]:
        """``{"decision": ..., "context": {...}}``."""
        context: dict[str, Any] = {"code": self.code}
        if self.decision_id is not None:
            context["decision_id"] = self.decision_id
        if self.reason is not None:
            context["reason"] = self.reason
        if self.status is not None:
            context["error"] = {"status": self.status, "message": self.reason or self.code}
        return {"decision": self.decision, "context": context}


def _refusal(code: ResultCode, reason: str) -> Answer:
    return Answer(False, code.value, reason=reason)


def allowed_answer(decision: Decision) -> Answer:
    """The answer to an allowed ``decision``: ``true`` only when it obliges nothing.

    An obligation left on the decision (the audit trail has already taken its ``audit``
    fields) is one the PEP cannot be shown to fulfil: ``false``, with a fixed reason.
    """
    obligations = decision.obligations
    if not obligations:
        return Answer(True, ResultCode.OK.value, decision.decision_id)
    if any(isinstance(o, RequireApproval) for o in obligations):
        return Answer(False, APPROVAL_REQUIRED, decision.decision_id, reason=_APPROVAL_REASON)
    return Answer(
        False,
        ResultCode.OBLIGATION_UNFULFILLED.value,
        decision.decision_id,
        reason=_UNFULFILLED_REASON,
    )


class AuthzenApi:
    """The AuthZEN endpoints as one ASGI app, behind the service's authentication.

    Args:
        gateway: whose tools, contracts and authorizer decide.
        authenticator: the service's.
        audit: the audit trail decisions are recorded in (``None``: not recorded).
        trusted_peps: caller subjects trusted to name the subject in the body.
        base_url: the ``policy_decision_point`` identifier (default: the request's own
            scheme, host and port).
        max_evaluations: the most evaluations one batch may hold.
        max_body_bytes: the largest body accepted.
        metrics: where requests are counted.
    """

    def __init__(
        self,
        gateway: Gateway,
        authenticator: Authenticator,
        *,
        audit: AuditTrail | None = None,
        trusted_peps: tuple[str, ...] = (),
        base_url: str | None = None,
        max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
        max_body_bytes: int = 2 * 1024 * 1024,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.gateway = gateway
        self._audit = audit
        self._trusted = frozenset(trusted_peps)
        self._base_url = base_url.rstrip("/") if base_url else None
        self._max = max_evaluations
        self._limit = max_body_bytes
        self._metrics = metrics
        app = Starlette(
            routes=[
                Route(EVALUATION_PATH, self.evaluation, methods=["POST"]),
                Route(EVALUATIONS_PATH, self.evaluations, methods=["POST"]),
                Route(METADATA_PATH, self.metadata, methods=["GET"]),
            ]
        )
        self._asgi: ASGIApp = AuthenticationMiddleware(
            app, authenticator, paths=(EVALUATION_PATH, EVALUATIONS_PATH)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._asgi(scope, receive, send)

    # -- HTTP ----------------------------------------------------------------------------------

    @staticmethod
    def _echoed_id(request: Request) -> str:
        # The PEP's own X-Request-ID, byte for byte, when it is printable ASCII of a sane
        # length; else the id the service gave the request.
        given = request.headers.get("x-request-id")
        if given and len(given) <= _MAX_ECHOED_ID and all(" " <= c <= "~" for c in given):
            return given
        return request_id_in(request.scope) or request_id_of({})

    def _json(self, request: Request, status: int, body: dict[str, Any]) -> JSONResponse:
        label = _ROUTE_LABELS.get(request.url.path, "authzen_metadata")
        if self._metrics is not None:
            self._metrics.requests.labels(label, str(status)).inc()
        return JSONResponse(
            body, status_code=status, headers={"X-Request-ID": self._echoed_id(request)}
        )

    def _error(self, request: Request, status: int, code: str, message: str) -> JSONResponse:
        request_id = request_id_in(request.scope) or request_id_of({})
        return self._json(request, status, error_body(code, message, request_id))

    async def _document(self, request: Request) -> dict[str, Any] | JSONResponse:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            return self._error(
                request, 400, "malformed_request", "Content-Type must be application/json"
            )
        declared = request.headers.get("content-length")
        too_large = self._error(
            request, 413, "body_too_large", f"request body exceeds {self._limit} bytes"
        )
        if declared is not None and ascii_digits(declared) and int(declared) > self._limit:
            return too_large
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self._limit:
                return too_large
            chunks.append(chunk)
        try:
            return parse_body(b"".join(chunks))
        except BadRequestError as exc:
            return self._error(request, 400, "malformed_request", str(exc))

    @staticmethod
    def _caller(request: Request) -> CallerContext:
        caller = request.scope.get(CALLER_SCOPE_KEY)
        return caller if isinstance(caller, CallerContext) else EMPTY_CONTEXT

    async def evaluation(self, request: Request) -> Response:
        """``POST /access/v1/evaluation``: one decision."""
        document = await self._document(request)
        if isinstance(document, JSONResponse):
            return document
        try:
            _context(document.get("context"), "context")
            item = read_evaluation(document, {})
        except BadRequestError as exc:
            return self._error(request, 400, "malformed_request", str(exc))
        answer = await self.decide(item, self._caller(request), request_id_in(request.scope))
        if answer.status is not None and answer.status >= 500:
            # No decision could be made: the whole request failed (fail closed).
            return self._error(request, answer.status, answer.code, answer.reason or answer.code)
        return self._json(request, 200, answer.json())

    async def evaluations(self, request: Request) -> Response:
        """``POST /access/v1/evaluations``: a batch (or one decision without ``evaluations``)."""
        document = await self._document(request)
        if isinstance(document, JSONResponse):
            return document
        try:
            items, semantic = read_batch(document, self._max)
            single = read_evaluation(document, {}) if not items else None
        except BadRequestError as exc:
            return self._error(request, 400, "malformed_request", str(exc))
        caller, request_id = self._caller(request), request_id_in(request.scope)
        if single is not None:  # no evaluations, or none: the single evaluation API
            answer = await self.decide(single, caller, request_id)
            return self._json(request, 200, answer.json())
        answers = await self._batch(items, document, semantic, caller, request_id)
        return self._json(request, 200, {"evaluations": [a.json() for a in answers]})

    async def _batch(
        self,
        items: list[Any],
        defaults: Mapping[str, Any],
        semantic: str,
        caller: CallerContext,
        request_id: str | None,
    ) -> list[Answer]:
        async def one(item: Any) -> Answer:
            try:
                evaluation = read_item(item, defaults)
            except BadRequestError as exc:
                return Answer(False, "malformed_request", reason=str(exc), status=400)
            return await self.decide(evaluation, caller, request_id)

        if semantic == "execute_all":
            return list(await asyncio.gather(*(one(item) for item in items)))
        stop_on = semantic == "permit_on_first_permit"
        answers: list[Answer] = []
        for item in items:
            answer = await one(item)
            answers.append(answer)
            if answer.decision is stop_on:
                break
        return answers

    async def metadata(self, request: Request) -> Response:
        """``GET /.well-known/authzen-configuration``: the PDP metadata."""
        base = self._base_url or f"{request.url.scheme}://{request.url.netloc}"
        return self._json(
            request,
            200,
            {
                "policy_decision_point": base,
                "access_evaluation_endpoint": base + EVALUATION_PATH,
                "access_evaluations_endpoint": base + EVALUATIONS_PATH,
            },
        )

    # -- the decision --------------------------------------------------------------------------

    def _subject(self, evaluation: Evaluation, caller: CallerContext) -> CallerContext | Answer:
        subject = evaluation.subject
        pep = caller.get("subject") if isinstance(caller, CallerContext) else None
        if isinstance(pep, str) and pep in self._trusted:
            properties = subject.get("properties") or {}
            try:
                return CallerContext({**properties, "subject": subject["id"], "authzen_pep": pep})
            except GatewayError:
                return _refusal(
                    ResultCode.INVALID_CONTEXT, "the subject's properties are not a valid context"
                )
        if subject["id"] != pep:
            return Answer(
                False, "subject_not_caller", reason="the subject is not the authenticated caller"
            )
        return caller

    def _call(self, evaluation: Evaluation) -> ToolCall | Answer:
        action, resource = evaluation.action, evaluation.resource
        name = action["name"]
        if name == TOOLS_CALL or resource["type"] == "tool":
            if resource["type"] != "tool":
                return _refusal(ResultCode.UNKNOWN_TOOL, "tools/call needs a resource of type tool")
            tool = resource["id"]
            if name not in (TOOLS_CALL, tool):
                return _refusal(ResultCode.UNKNOWN_TOOL, "the action is not the resource's tool")
            arguments = (resource.get("properties") or {}).get("arguments", {})
            if not isinstance(arguments, dict):
                return _refusal(
                    ResultCode.INVALID_ARGUMENTS, "resource.properties.arguments must be an object"
                )
        else:
            tool = name
            arguments = {"resource": dict(resource)}
            if action.get("properties") is not None:
                arguments["action"] = action["properties"]
        if self.gateway.registry.resolve(tool) is None:
            return _refusal(ResultCode.UNKNOWN_TOOL, "no such tool")
        # Re-encoded from the exact decoded values: numbers are never rounded.
        return ToolCall(f"authzen-{random_hex()}", tool, _json.canonical(arguments))

    async def decide(
        self, evaluation: Evaluation, caller: CallerContext, request_id: str | None
    ) -> Answer:
        """The policy's decision on ``evaluation`` for ``caller``; never raises but on cancel."""
        context = self._subject(evaluation, caller)
        if isinstance(context, Answer):
            return context
        # Only the approval gate sets an approval, and it is not asked here: a caller's (or a
        # PEP's) own is dropped, as the gate drops it from every call's context.
        context = context.without_member(APPROVAL_MEMBER)
        call = self._call(evaluation)
        if isinstance(call, Answer):
            return call
        binding = self.gateway.registry.resolve(call.name)
        assert binding is not None  # noqa: S101 - resolved in _call
        try:
            invocation = binding.prepare(call)
        except InvalidInvocationError as exc:
            return _refusal(ResultCode.INVALID_ARGUMENTS, str(exc))
        authorization = admitted_authorization(binding.definition, decoding_of(invocation))
        return await self._ask(authorization, context, AuditScope(call.id, request_id=request_id))

    async def _ask(
        self, authorization: Authorization, context: CallerContext, scope: AuditScope
    ) -> Answer:
        authorizer = self.gateway.authorizer
        try:
            with caller_context(context):
                if self._audit is not None:
                    answer = await AuditingAuthorizer(authorizer, self._audit).authorize(
                        authorization, scope=scope
                    )
                else:
                    answer = await authorizer.authorize(authorization)
            decision = read_answer(answer)
        except asyncio.CancelledError:
            raise
        except AuditWriteError:
            code = ResultCode.AUDIT_FAILED
            return Answer(
                False, code.value, reason="the decision could not be audited", status=code.status
            )
        except (MalformedDecisionError, AuthorizationError, GatewayError) as exc:
            code = result_code(getattr(exc, "code", "no_decision"))
            return Answer(
                False, code.value, reason="no policy decision could be made", status=code.status
            )
        except Exception:  # noqa: BLE001 - sealed: an authorizer's error never reaches the PEP
            code = ResultCode.NO_DECISION
            return Answer(
                False, code.value, reason="no policy decision could be made", status=code.status
            )
        if decision.allowed is True:
            return allowed_answer(decision)
        return Answer(
            False,
            ResultCode.DENIED.value,
            decision.decision_id,
            reason=decision.message or "denied",
        )

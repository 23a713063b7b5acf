"""The service pipeline shared by every surface (HTTP, MCP, CLI).

``Gateway.call`` takes an untrusted ToolCall, the caller (or the caller context already
set) and the request id, and always returns a :class:`CallResult` with a stable ``code``
and an HTTP-style status: unknown tool, invalid arguments, denied, no decision, audit
failure, a tool's own Failure, a tool error, or the output. It never raises for a bad call;
only cancellation propagates.

One call's steps share one :class:`CallScope`, made and set by the pipeline: the call id,
the request id, the decision once made, and what its audit records share. Admission
refuses or prepares; the served tool's Guard asks its authorizer, the pipeline's decision
step, which asks the policy (through the audit trail: the decision record is durable
before the tool runs) and keeps the decision in the scope; the tool runs only on an
explicit allow; the pipeline writes the outcome record from the result, whatever happened.
The request id lives in the scope, never in the caller context: the policy never sees it
(nor does the decision cache), and the audit records carry it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import time
import traceback
from collections.abc import Iterable
from typing import Final

from gateway import _json
from gateway._authorization import (
    Authorization,
    AuthorizationError,
    Authorizer,
    Decision,
    read_answer,
)
from gateway._call import ToolCall, decoded_call
from gateway._contract import (
    DEFAULT_LIMITS,
    AdmissionLimits,
    Binding,
    Contract,
    DecodingValidator,
    InputValidator,
    Invocation,
    Tool,
    decoding_of,
)
from gateway._definition import ToolDefinition
from gateway._errors import InvalidInvocationError, MalformedDecisionError
from gateway._failure import Failure
from gateway._guard import Guard
from gateway._output import ToolOutput
from gateway._registry import Registry
from gateway.approvals import APPROVAL_MEMBER, ApprovalGate, ApprovalPendingError
from gateway.audit import AuditingAuthorizer, AuditScope, AuditTrail, AuditWriteError
from gateway.obligations import OutputWithheldError, UnfulfilledObligationError
from gateway.policy import CallerContext, caller_context, current_caller
from gateway.service._codes import ResultCode, result_code
from gateway.service._metrics import GatewayMetrics
from gateway.service._observe import NO_OBSERVER, CallObserver
from gateway.state import CallTracker, session_context, track_call, valid_session_id

_LOG: Final = logging.getLogger("gateway.server")
_NO_DECISION: Final = "no policy decision could be made; the call was not run"
_UNFULFILLED: Final = (
    "the policy requires something that cannot be done for this call; it was not run"
)
#: The name is the caller's and is never quoted: no error message repeats what a caller sent.
_UNKNOWN_TOOL: Final = "no tool of that name is served"
_WITHHELD: Final = "the tool ran, but its output could not be redacted as the policy requires"


@dataclasses.dataclass(frozen=True, slots=True)
class CallResult:
    """What a surface reports for one call.

    Attributes:
        status: the HTTP status the code table gives ``code``.
        code: a :class:`~gateway.service.ResultCode` value (the one table of codes).
        message: public text for the caller (never engine internals).
        output: the tool's output, or a tool Failure's public output.
        decision_id: the policy decision's id, when a decision was made.
        approval_id: the approval the call awaits (code ``approval_pending``).
        required_scopes: the OAuth scopes a refusal names as missing (step-up), if any.
    """

    status: int
    code: str
    message: str | None = None
    output: ToolOutput | None = None
    decision_id: str | None = None
    approval_id: str | None = None
    required_scopes: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        code: ResultCode,
        message: str | None = None,
        output: ToolOutput | None = None,
        decision_id: str | None = None,
        approval_id: str | None = None,
        *,
        required_scopes: tuple[str, ...] = (),
    ) -> CallResult:
        """The result for ``code``, with the table's HTTP status."""
        return cls(
            code.status, code.value, message, output, decision_id, approval_id, required_scopes
        )

    @property
    def ok(self) -> bool:
        """Whether the tool ran and succeeded."""
        return self.code == "ok"

    @property
    def is_tool_failure(self) -> bool:
        """Whether the tool ran (or refused itself) and returned a Failure."""
        return self.code in ("tool_failed", "tool_rejected")


@dataclasses.dataclass(slots=True)
class CallScope:
    """What the steps of one call share; made and set by the pipeline, one per call.

    Attributes:
        call_id: the admitted call's id.
        request_id: the surface's request id (HTTP ``X-Request-ID``), or ``None``. It is
            for the audit records and the response only; the policy never sees it.
        decision: the policy's decision, once made (``None``: not asked yet, or no
            decision could be made).
        audit: what this call's audit records share (their decision id, the masked values).
    """

    call_id: str
    request_id: str | None = None
    decision: Decision | None = None
    audit: AuditScope = dataclasses.field(default_factory=lambda: AuditScope(None))

    @property
    def decision_id(self) -> str | None:
        """The decision's id as the caller is told it (the audit record's, when audited)."""
        return self.decision.decision_id if self.decision is not None else None


# The scope of the call in progress. The Guard hands its authorizer only the Authorization
# (by design: a policy decides on the call, not on ids), so the decision step finds its
# call's scope here; the pipeline itself holds the scope and reads it directly.
_SCOPE: contextvars.ContextVar[CallScope | None] = contextvars.ContextVar(
    "gateway_call_scope", default=None
)


# The member's name as it opens in a context's canonical JSON: only a context holding it
# (at any depth) is decoded to drop it.
_APPROVAL_NAME: Final = f'"{APPROVAL_MEMBER}":'.encode()


class _DecisionStep:
    # The authorizer of every served tool's Guard: asks the policy, through the audit trail
    # when there is one, and keeps a well-formed decision in the call's scope. Outside a
    # pipeline call (a served binding called directly) it still asks the policy.
    __slots__ = ("_approvals", "_auditing", "_observer", "_policy")

    def __init__(
        self,
        policy: Authorizer,
        audit: AuditTrail | None,
        observer: CallObserver,
        approvals: ApprovalGate | None = None,
    ) -> None:
        self._policy = policy
        self._auditing = AuditingAuthorizer(policy, audit) if audit is not None else None
        self._observer = observer
        self._approvals = approvals

    async def _ask(self, authorization: Authorization, scope: CallScope | None) -> bool | Decision:
        if self._auditing is not None:
            audit = scope.audit if scope is not None else None
            return await self._auditing.authorize(authorization, scope=audit)
        return await self._policy.authorize(authorization)

    async def _unapproved(
        self, authorization: Authorization, scope: CallScope | None
    ) -> bool | Decision:
        # Without an approval gate no approval exists, and none reaches the policy: an
        # ``approval`` member of the caller's own context (a token's claim, say) is dropped
        # as the gate drops it, so that it can never stand for a person's approval.
        caller = current_caller()
        if _APPROVAL_NAME in caller.json:
            plain = caller.without_member(APPROVAL_MEMBER)
            if plain is not caller:
                with caller_context(plain):
                    return await self._ask(authorization, scope)
        return await self._ask(authorization, scope)

    async def authorize(self, authorization: Authorization) -> bool | Decision:
        scope = _SCOPE.get()
        with self._observer.deciding(authorization) as watch:
            try:
                if self._approvals is not None:
                    # The approval steps around the audited decision (see gateway.approvals).
                    answer = await self._approvals.decide(
                        authorization, lambda: self._ask(authorization, scope)
                    )
                else:
                    answer = await self._unapproved(authorization, scope)
            except Exception as exc:
                watch.failed(exc)
                raise
            decision = None
            # A malformed answer keeps no decision here: the Guard refuses it itself.
            with contextlib.suppress(MalformedDecisionError):
                decision = read_answer(answer)
            if scope is not None and decision is not None:
                scope.decision = decision
            watch.answered(decision)
        return answer


class BoundTool:
    """A tool already bound in a Registry, presented as a Tool again so it can be guarded.

    Its input validator runs the inner contract's full admission, so the policy only ever
    sees arguments the inner tool would accept.
    """

    def __init__(self, binding: Binding) -> None:
        self._binding = binding

    def definition(self) -> ToolDefinition:
        """The inner contract's definition."""
        return self._binding.definition

    def input_validator(self) -> InputValidator:
        """Full admission by the inner contract (of the outer admission's decoding)."""
        return _InnerAdmission(self._binding.contract)

    async def call(self, invocation: Invocation) -> ToolOutput:
        """Re-admit through the inner contract (same bytes, same decoding) and run."""
        inner = self._binding.prepare(
            decoded_call(invocation.call_id, invocation.tool_name, decoding_of(invocation))
        )
        return await self._binding.call(inner)


class _InnerAdmission(DecodingValidator):
    # A registry binding's contract admits what the outer contract admitted: from the
    # outer admission's decoding when it is handed over, else from the bytes.
    def __init__(self, contract: Contract) -> None:
        self._contract = contract
        self._name = contract.definition.name

    def __call__(self, raw: bytes) -> None:
        self._contract.prepare(ToolCall("validate", self._name, raw))

    def validate_decoded(self, decoded: _json.Decoded) -> None:
        self._contract.prepare(decoded_call("validate", self._name, decoded))


def expand(tools: Iterable[Tool | Registry]) -> list[Tool]:
    """Flatten tools and registries into tools (registry entries become BoundTools)."""
    flat: list[Tool] = []
    for item in tools:
        if isinstance(item, Registry):
            for definition in item.definitions():
                binding = item.resolve(definition.name)
                if binding is not None:
                    flat.append(BoundTool(binding))
        else:
            flat.append(item)
    return flat


class Gateway:
    """Every tool behind one authorizer (and audit trail), with one call pipeline.

    Args:
        tools: tools and registries to serve.
        authorizer: decides every call (e.g. a :class:`gateway.policy.PolicyAuthorizer`).
        audit: the audit trail; ``None`` disables auditing.
        limits: admission limits for every tool.
        metrics: where to count decisions and latencies.
        observer: told about every decision and tool run (logs, traces).
        approvals: the approval gate for decisions that require a person's approval
            (``None``: such a decision cannot be fulfilled, and the call is refused).
    """

    def __init__(
        self,
        tools: Iterable[Tool | Registry],
        *,
        authorizer: Authorizer,
        audit: AuditTrail | None = None,
        limits: AdmissionLimits = DEFAULT_LIMITS,
        metrics: GatewayMetrics | None = None,
        observer: CallObserver = NO_OBSERVER,
        approvals: ApprovalGate | None = None,
    ) -> None:
        self._audit = audit
        self._metrics = metrics
        self._authorizer = authorizer
        self._observer = observer
        step = _DecisionStep(authorizer, audit, observer, approvals)
        guarded = [Guard(tool=tool, authorizer=step) for tool in expand(tools)]
        self._registry = Registry(*guarded, limits=limits)

    @property
    def registry(self) -> Registry:
        """The registry of guarded tools."""
        return self._registry

    @property
    def authorizer(self) -> Authorizer:
        """The authorizer every call is checked against."""
        return self._authorizer

    def definitions(self) -> list[ToolDefinition]:
        """The served definitions, in name order."""
        return self._registry.definitions()

    async def call(
        self,
        call: ToolCall,
        *,
        caller: CallerContext | None = None,
        request_id: str | None = None,
        session: str | None = None,
    ) -> CallResult:
        """Admit, authorize and run one call; never raises except on cancellation.

        Args:
            call: the untrusted call.
            caller: who is calling (the policy's ``context``); ``None``: the caller
                context already set (:func:`gateway.policy.caller_context`).
            request_id: the surface's request id, recorded in the audit trail; the policy
                never sees it.
            session: the session the surface names for this caller (an HTTP header, the
                MCP session), never the model's; its state is the caller's own
                (:mod:`gateway.state`). ``None``: the session already set, if any.
        """
        started = time.perf_counter()
        in_session = session_context(session) if session is not None else contextlib.nullcontext()
        if session is not None and not valid_session_id(session):
            result = CallResult.of(ResultCode.MALFORMED_REQUEST, "the session id is not valid")
        elif caller is None:
            with in_session:
                result = await self._call(call, request_id)
        else:
            with caller_context(caller), in_session:
                result = await self._call(call, request_id)
        if self._metrics is not None:
            self._metrics.observe(result.code, time.perf_counter() - started)
        return result

    async def _refuse(
        self, call: ToolCall, request_id: str | None, code: ResultCode, message: str
    ) -> CallResult:
        if self._audit is not None:
            try:
                await self._audit.refusal(call, code=code, message=message, request_id=request_id)
            except Exception as exc:  # noqa: BLE001 - nothing ran; the refusal stands either way
                self._observer.audit_error(exc)
        return CallResult.of(code, message)

    async def _call(self, call: ToolCall, request_id: str | None) -> CallResult:
        name = call.name if isinstance(call.name, str) else ""
        if name:
            # Before anything is looked up or recorded: ids and names must be text.
            try:
                call.validate()
            except InvalidInvocationError as exc:
                return await self._refuse(call, request_id, ResultCode.INVALID_ARGUMENTS, str(exc))
        binding = self._registry.resolve(name)
        if binding is None:
            return await self._refuse(call, request_id, ResultCode.UNKNOWN_TOOL, _UNKNOWN_TOOL)
        try:
            invocation = binding.prepare(call)
        except InvalidInvocationError as exc:
            return await self._refuse(call, request_id, ResultCode.INVALID_ARGUMENTS, str(exc))
        scope = CallScope(invocation.call_id, request_id)
        scope.audit = AuditScope(invocation.call_id, request_id=request_id)
        token = _SCOPE.set(scope)
        started = self._audit.timer() if self._audit is not None else 0.0
        result: CallResult | None = None
        tracker = CallTracker()
        try:
            with (
                self._observer.running(binding.definition, invocation.call_id) as run,
                track_call() as tracker,
            ):
                result = await self._run(binding, invocation, scope)
                run.finished(result.code, scope.decision)
        finally:
            _SCOPE.reset(token)
            if self._audit is not None:
                # Submitted, not awaited: a cancelled call (result None) still gets its record.
                self._record_outcome(binding.definition, scope, result, started)
            if tracker.reserved and result is None:
                _finish_later(tracker, "cancelled")
        if tracker.reserved:
            # The session's history entry was written before the call ran; this adds how
            # it ended (a failure to record it is logged, the result stands).
            await tracker.finish(result.code)
        return result

    async def _run(self, binding: Binding, invocation: Invocation, scope: CallScope) -> CallResult:
        try:
            output = await binding.call(invocation)
        except asyncio.CancelledError:
            raise
        except Failure as failure:
            decision = scope.decision
            if decision is not None and decision.allowed is not True:
                return CallResult.of(
                    ResultCode.DENIED,
                    failure.output.text(),
                    None,
                    scope.decision_id,
                    required_scopes=decision.required_scopes,
                )
            code = (
                ResultCode.TOOL_REJECTED if failure.kind == "rejected" else ResultCode.TOOL_FAILED
            )
            return CallResult.of(code, failure.output.text(), failure.output, scope.decision_id)
        except AuthorizationError as exc:
            return _not_run(exc, scope)
        except OutputWithheldError:
            return CallResult.of(ResultCode.OUTPUT_WITHHELD, _WITHHELD, None, scope.decision_id)
        except Exception as exc:  # noqa: BLE001 - a tool's unexpected error is reported, not leaked
            # The message may repeat argument values (a password, a token): log where it
            # happened and its type, never its text.
            _LOG.error(
                "tool %s raised %s (message withheld)\n%s",
                invocation.tool_name,
                type(exc).__name__,
                "".join(traceback.format_tb(exc.__traceback__)),
            )
            return CallResult.of(ResultCode.TOOL_ERROR, "the tool failed", None, scope.decision_id)
        return CallResult.of(ResultCode.OK, None, output, scope.decision_id)

    def _record_outcome(
        self,
        definition: ToolDefinition,
        scope: CallScope,
        result: CallResult | None,
        started: float,
    ) -> None:
        assert self._audit is not None  # noqa: S101 - only called with a trail
        outcome, code, message = _outcome(result)
        record = self._audit.outcome_record(
            definition,
            call_id=scope.call_id,
            decision_id=scope.audit.decision_id,
            outcome=outcome,
            code=code,
            message=message,
            latency=self._audit.timer() - started,
            secrets=scope.audit.secrets,
        )
        self._audit.sink.submit(record)


_FINISHING: Final[set[asyncio.Future[None]]] = set()


def _finish_later(tracker: CallTracker, outcome: str) -> None:
    # A cancelled call's outcome is recorded by a task of its own (held until it ends).
    task = asyncio.ensure_future(tracker.finish(outcome))
    _FINISHING.add(task)
    task.add_done_callback(_FINISHING.discard)


def _not_run(exc: AuthorizationError, scope: CallScope) -> CallResult:
    # Recognised by the cause: the core only adopts the policy layer's codes, so an audit
    # failure would otherwise be reported as a plain "no_decision".
    cause = exc.cause
    if isinstance(cause, AuditWriteError) or exc.code == "audit_failed":
        return CallResult.of(
            ResultCode.AUDIT_FAILED, "the call could not be audited; it was not run"
        )
    if isinstance(cause, ApprovalPendingError):
        return CallResult.of(
            ResultCode.APPROVAL_PENDING,
            cause.public_message,
            decision_id=scope.audit.decision_id,
            approval_id=cause.approval_id,
        )
    if isinstance(cause, UnfulfilledObligationError):
        return CallResult.of(
            ResultCode.OBLIGATION_UNFULFILLED, _UNFULFILLED, None, scope.decision_id
        )
    return CallResult.of(result_code(exc.code), _NO_DECISION)


def _outcome(result: CallResult | None) -> tuple[str, str | None, str | None]:
    # The outcome record's (outcome, code, message) for a call's result; None: cancelled.
    if result is None:
        return "cancelled", "cancelled", None
    code = result_code(result.code)
    if code is ResultCode.OK:
        return code.outcome, None, None
    # Only a Failure's public output is a message worth recording (the policy's refusal
    # text included); the others are the pipeline's own fixed texts.
    shown = code in (ResultCode.TOOL_FAILED, ResultCode.TOOL_REJECTED, ResultCode.DENIED)
    return code.outcome, code.value, result.message if shown else None

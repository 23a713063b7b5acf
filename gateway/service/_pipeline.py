"""The service pipeline shared by every surface (HTTP, MCP, CLI).

``Gateway.call`` takes an untrusted ToolCall, with the caller context already set by the
surface, and always returns a :class:`CallResult` with a stable ``code`` and an HTTP-style
status: unknown tool, invalid arguments, denied, no decision, audit failure, a tool's own
Failure, a tool error, or the output. It never raises for a bad call; only cancellation
propagates.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import time
import traceback
from collections.abc import Iterable
from typing import Final

from gateway._authorization import Authorization, AuthorizationError, Authorizer, Decision
from gateway._call import ToolCall
from gateway._capability import InputValidator
from gateway._contract import DEFAULT_LIMITS, AdmissionLimits, Binding, Invocation, Tool
from gateway._definition import ToolDefinition
from gateway._errors import InvalidInvocationError
from gateway._failure import Failure
from gateway._guard import Guard
from gateway._output import ToolOutput
from gateway._registry import Registry
from gateway.audit import AuditedTool, AuditingAuthorizer, AuditTrail, AuditWriteError
from gateway.policy import caller_context, current_caller
from gateway.service._metrics import GatewayMetrics

_LOG: Final = logging.getLogger("gateway.server")
_NO_DECISION: Final = "no policy decision could be made; the call was not run"


@dataclasses.dataclass(frozen=True, slots=True)
class CallResult:
    """What a surface reports for one call.

    Attributes:
        status: the HTTP status that fits (200, 400, 403, 404, 500, 503).
        code: ``ok``, ``tool_failed``, ``tool_rejected``, ``unknown_tool``,
            ``invalid_arguments``, ``denied``, ``audit_failed``, ``tool_error``, or the
            no-decision code (``engine_unavailable``, ``engine_timeout``,
            ``undefined_decision``, ``malformed_decision``, ``engine_error``,
            ``no_decision``).
        message: public text for the caller (never engine internals).
        output: the tool's output, or a tool Failure's public output.
        decision_id: the policy decision's id, when a decision was made.
    """

    status: int
    code: str
    message: str | None = None
    output: ToolOutput | None = None
    decision_id: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the tool ran and succeeded."""
        return self.code == "ok"

    @property
    def is_tool_failure(self) -> bool:
        """Whether the tool ran (or refused itself) and returned a Failure."""
        return self.code in ("tool_failed", "tool_rejected")


@dataclasses.dataclass(slots=True)
class _Capture:
    decision: Decision | None = None


_CAPTURE: contextvars.ContextVar[_Capture | None] = contextvars.ContextVar(
    "gateway_decision_capture", default=None
)


class _CapturingAuthorizer:
    # Remembers the decision of the current call so the pipeline can tell a policy denial
    # from a tool's own rejection, and report the decision id.
    def __init__(self, inner: Authorizer) -> None:
        self._inner = inner

    async def authorize(self, authorization: object) -> bool | Decision:
        result = await self._inner.authorize(authorization)  # type: ignore[arg-type]
        capture = _CAPTURE.get()
        if capture is not None:
            if isinstance(result, Decision):
                capture.decision = result
            elif result is True or result is False:
                capture.decision = Decision(allowed=result)
        return result


class _WithoutRequestId:
    # Asks the authorizer with the caller context minus ``request_id``. The request id is
    # unique per HTTP request and never part of a decision; left in the policy input it
    # would be part of every decision-cache key, so the cache could never hit. The audit
    # records (written around this authorizer) still carry it.
    def __init__(self, inner: Authorizer) -> None:
        self._inner = inner

    async def authorize(self, authorization: Authorization) -> bool | Decision:
        caller = current_caller()
        without = caller.without_member("request_id")
        if without is caller:
            return await self._inner.authorize(authorization)
        with caller_context(without):
            return await self._inner.authorize(authorization)


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
        """Full admission by the inner contract."""
        contract = self._binding.contract
        name = contract.definition.name

        def validate(raw: bytes) -> None:
            contract.prepare(ToolCall("validate", name, raw))

        return validate

    async def call(self, invocation: Invocation) -> ToolOutput:
        """Re-admit through the inner contract (same bytes) and run."""
        inner = self._binding.prepare(
            ToolCall(invocation.call_id, invocation.tool_name, invocation.arguments)
        )
        return await self._binding.call(inner)


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
    """

    def __init__(
        self,
        tools: Iterable[Tool | Registry],
        *,
        authorizer: Authorizer,
        audit: AuditTrail | None = None,
        limits: AdmissionLimits = DEFAULT_LIMITS,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self._audit = audit
        self._metrics = metrics
        self._authorizer = authorizer
        guarded: list[Tool] = []
        policy: Authorizer = _WithoutRequestId(authorizer)
        for tool in expand(tools):
            capturing = _CapturingAuthorizer(
                AuditingAuthorizer(policy, audit) if audit is not None else policy
            )
            guard = Guard(tool=tool, authorizer=capturing)
            guarded.append(AuditedTool(guard, audit) if audit is not None else guard)
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

    async def call(self, call: ToolCall) -> CallResult:
        """Admit, authorize and run one call; never raises except on cancellation."""
        started = time.perf_counter()
        result = await self._call(call)
        if self._metrics is not None:
            self._metrics.observe(result.code, time.perf_counter() - started)
        return result

    async def _refuse(self, call: ToolCall, status: int, code: str, message: str) -> CallResult:
        if self._audit is not None:
            try:
                await self._audit.refusal(call, code=code, message=message)
            except Exception:  # noqa: BLE001 - nothing ran; the refusal stands either way
                _LOG.exception("audit: could not record a refused call")
        return CallResult(status, code, message)

    async def _call(self, call: ToolCall) -> CallResult:  # noqa: PLR0911 - one return per outcome class
        name = call.name if isinstance(call.name, str) else ""
        if name:
            # Before anything is looked up or recorded: ids and names must be text.
            try:
                call.validate()
            except InvalidInvocationError as exc:
                return await self._refuse(call, 400, "invalid_arguments", str(exc))
        binding = self._registry.resolve(name)
        if binding is None:
            return await self._refuse(call, 404, "unknown_tool", f"unknown tool {name!r}")
        try:
            invocation = binding.prepare(call)
        except InvalidInvocationError as exc:
            return await self._refuse(call, 400, "invalid_arguments", str(exc))
        capture = _Capture()
        token = _CAPTURE.set(capture)
        try:
            output = await binding.call(invocation)
        except asyncio.CancelledError:
            raise
        except Failure as failure:
            decision = capture.decision
            decision_id = decision.decision_id if decision else None
            if decision is not None and decision.allowed is not True:
                return CallResult(403, "denied", failure.output.text(), None, decision_id)
            code = "tool_rejected" if failure.kind == "rejected" else "tool_failed"
            return CallResult(200, code, failure.output.text(), failure.output, decision_id)
        except AuthorizationError as exc:
            # Recognised by the cause: the core only adopts the policy layer's codes, so an
            # audit failure would otherwise be reported as a plain "no_decision".
            if isinstance(exc.cause, AuditWriteError) or exc.code == "audit_failed":
                return CallResult(
                    503, "audit_failed", "the call could not be audited; it was not run"
                )
            return CallResult(503, exc.code, _NO_DECISION)
        except Exception as exc:  # noqa: BLE001 - a tool's unexpected error is reported, not leaked
            # The message may repeat argument values (a password, a token): log where it
            # happened and its type, never its text.
            _LOG.error(
                "tool %s raised %s (message withheld)\n%s",
                name,
                type(exc).__name__,
                "".join(traceback.format_tb(exc.__traceback__)),
            )
            decision = capture.decision
            return CallResult(
                500,
                "tool_error",
                "the tool failed",
                None,
                decision.decision_id if decision else None,
            )
        finally:
            _CAPTURE.reset(token)
        decision = capture.decision
        return CallResult(200, "ok", None, output, decision.decision_id if decision else None)

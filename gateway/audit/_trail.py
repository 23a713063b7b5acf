"""Audit-or-deny: decision records before the tool runs, outcome records after it.

:meth:`AuditTrail.guard` wraps a tool as ``AuditedTool(Guard(tool, AuditingAuthorizer))``:

- the auditing authorizer asks the real authorizer, then writes the decision record (allow,
  deny or error) and waits until the sink says it is durable; if that write fails, it
  raises :class:`AuditWriteError`, which the Guard turns into "no decision" (code
  ``audit_failed``): the tool does not run;
- the audited tool writes the outcome record (executed, failed, rejected, cancelled),
  linked by ``decision_id``; a cancelled call still gets its record, because submitting a
  record never awaits.

Calls refused before any tool (unknown tool, invalid arguments) are recorded with
:meth:`AuditTrail.refusal`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import datetime
import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any, Final

import cachetools

from gateway import _json
from gateway._authorization import (
    Authorization,
    AuthorizationError,
    Authorizer,
    Decision,
    decoding,
    read_answer,
)
from gateway._call import ToolCall
from gateway._contract import Invocation, Tool
from gateway._definition import ToolDefinition
from gateway._errors import MalformedDecisionError
from gateway._failure import Failure, FailureKind
from gateway._guard import Guard
from gateway._ids import random_hex
from gateway._output import ToolOutput
from gateway.audit._mask import Masker
from gateway.audit._sinks import AuditSink, AuditWriteError, JsonlFileSink
from gateway.obligations import (
    AuditFields,
    RewriteArguments,
    UnfulfilledObligationError,
    describe,
    rewrite_arguments,
)
from gateway.policy import current_caller

_MEMO_MAX_BYTES: Final = 4096
_MEMO_ENTRIES: Final = 4096
#: Masked caller contexts remembered (each at most _MEMO_MAX_BYTES encoded).
_CONTEXT_MEMO_ENTRIES: Final = 1024


@dataclasses.dataclass(slots=True)
class AuditScope:
    """What the audit records of one call share.

    Attributes:
        call_id: the call's id.
        request_id: the surface's request id, recorded in the record's ``context``.
        decision_id: the decision record's id, once written (the outcome links to it).
        result: the decision record's result (``allow``, ``deny``, ``error``).
        secrets: the raw masked values of the call, scrubbed from its outcome record too.
    """

    call_id: str | None
    request_id: str | None = None
    decision_id: str | None = None
    result: str | None = None
    secrets: list[str] = dataclasses.field(default_factory=list)


_SLOT: contextvars.ContextVar[AuditScope | None] = contextvars.ContextVar(
    "gateway_audit_slot", default=None
)


def _recordable(value: Any) -> Any:
    # Records are plain JSON: an exact number becomes the float a reader gets back, unless no
    # finite float holds it (1e400, which admission accepts), which is kept as its exact text.
    # As an infinite float it would make the record unwritable and fail the call.
    if isinstance(value, Decimal):
        as_float = float(value)
        return as_float if math.isfinite(as_float) else str(value)
    if isinstance(value, dict):
        return {key: _recordable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_recordable(item) for item in value]
    return value


_FROM_TIMESTAMP: Final = datetime.datetime.fromtimestamp
_MODF: Final = math.modf
# The whole second last formatted, and its "YYYY-MM-DDTHH:MM:SS": records come many to a
# second. One tuple, replaced whole, so that a thread never pairs a second with another's text.
_last_second: tuple[int, str] = (0, "1970-01-01T00:00:00")


def _utc(now: float) -> str:
    # What datetime.fromtimestamp(now, UTC).isoformat(timespec="microseconds") writes
    # (measured 1.2 us against 0.6 us here). The microseconds are rounded as fromtimestamp
    # rounds them (half to even, carried into the second); the date and time of the whole
    # second are formatted once per second. A test holds the two to each other.
    global _last_second  # noqa: PLW0603 - a memo of one entry, replaced atomically
    fraction, whole = _MODF(now)
    micro = round(fraction * 1e6)
    if micro >= 1_000_000:
        whole, micro = whole + 1.0, micro - 1_000_000
    elif micro < 0:
        whole, micro = whole - 1.0, micro + 1_000_000
    second = int(whole)
    last = _last_second
    if last[0] != second:
        last = (second, _FROM_TIMESTAMP(second, datetime.UTC).isoformat()[:19])
        _last_second = last
    return f"{last[1]}.{micro:06d}+00:00"


class AuditTrail:
    """Builds and submits audit records to one sink.

    Args:
        sink: where records go.
        masker: what to mask (default: :class:`Masker` with the default key names).
        wall_clock: seconds since the epoch, for record timestamps.
        timer: a monotonic clock, for latencies.
        new_id: makes a decision id when the engine gave none.
    """

    def __init__(
        self,
        sink: AuditSink,
        *,
        masker: Masker | None = None,
        wall_clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
        new_id: Callable[[], str] = random_hex,
    ) -> None:
        self._sink = sink
        self._masker = masker or Masker()
        self._wall = wall_clock
        self._timer = timer
        self._new_id = new_id
        self._memo: cachetools.LRUCache[bytes, tuple[str, str, tuple[str, ...]]] = (
            cachetools.LRUCache(maxsize=_MEMO_ENTRIES)
        )
        self._context_memo: cachetools.LRUCache[bytes, tuple[str, tuple[str, ...]]] = (
            cachetools.LRUCache(maxsize=_CONTEXT_MEMO_ENTRIES)
        )
        self._memo_lock = threading.Lock()

    @property
    def sink(self) -> AuditSink:
        """The sink records go to."""
        return self._sink

    def guard(self, tool: Tool, authorizer: Authorizer) -> AuditedTool:
        """``tool`` behind a Guard whose every decision and outcome is recorded."""
        return AuditedTool(Guard(tool=tool, authorizer=AuditingAuthorizer(authorizer, self)), self)

    def _base(
        self, kind: str, definition_name: str, call_id: str | None, decision_id: str
    ) -> dict[str, Any]:
        return {
            "type": kind,
            "time": _utc(self._wall()),
            "decision_id": decision_id,
            "call_id": call_id,
            "tool": definition_name,
        }

    def _context(self, request_id: str | None, found: list[str]) -> Any:
        # What the policy saw, and the request id beside it (which the policy never sees).
        # A caller's context repeats call after call: its masked form and masked values are
        # remembered by its canonical bytes (bounded), and each record gets a fresh copy. The
        # masker treats each member on its own, so the request id is masked apart and added.
        caller = current_caller()
        encoded = caller.json
        if len(encoded) > _MEMO_MAX_BYTES or (
            request_id is not None and b'"request_id":' in encoded
        ):
            context = caller.as_dict()
            if request_id is not None:
                context["request_id"] = request_id
            return _recordable(self._masker.mask(context, found))
        with self._memo_lock:
            known = self._context_memo.get(encoded)
        if known is None:
            own: list[str] = []
            masked = _recordable(self._masker.mask(caller.as_dict(), own))
            known = (json.dumps(masked, ensure_ascii=False, allow_nan=False), tuple(own))
            with self._memo_lock:
                self._context_memo[encoded] = known
        masked_json, secrets = known
        found.extend(secrets)
        context = json.loads(masked_json)
        if request_id is not None:
            context.update(self._masker.mask({"request_id": request_id}, found))
        return context

    def _masked(
        self, authorization: Authorization, found: list[str], request_id: str | None
    ) -> tuple[str, Any, Any]:
        digest, masked_arguments = self._masked_arguments(
            authorization.arguments, found, decoding(authorization)
        )
        return digest, masked_arguments, self._context(request_id, found)

    def _masked_arguments(
        self, arguments: bytes, found: list[str], decoded: _json.Decoded | None = None
    ) -> tuple[str, Any]:
        # Agents repeat the same small argument documents: their digest, masked form and
        # masked values are remembered by their exact bytes (bounded). Each record gets a
        # fresh copy of the masked form.
        small = len(arguments) <= _MEMO_MAX_BYTES
        if small:
            with self._memo_lock:
                known = self._memo.get(arguments)
            if known is not None:
                digest, masked_json, secrets = known
                found.extend(secrets)
                return digest, json.loads(masked_json)
        own: list[str] = []
        try:
            if decoded is None:
                value = _json.parse(arguments, max_depth=10_000)
                encoded = _json.canonical(value)
            else:
                # Admission's decoding, and the canonical form the policy input encoded.
                value, encoded = decoded.value, decoded.canonical()
            digest = hashlib.sha256(encoded).hexdigest()
            masked_arguments = _recordable(self._masker.mask(value, own))
        except _json.StrictJSONError:
            digest = hashlib.sha256(arguments).hexdigest()
            masked_arguments = None
        found.extend(own)
        if small:
            try:
                masked_json = json.dumps(masked_arguments, ensure_ascii=False, allow_nan=False)
            except (TypeError, ValueError):  # not plain JSON: not remembered
                return digest, masked_arguments
            with self._memo_lock:
                self._memo[arguments] = (digest, masked_json, tuple(own))
        return digest, masked_arguments

    def decision_record(
        self,
        authorization: Authorization,
        *,
        call_id: str | None,
        decision: Decision | None,
        error: BaseException | None,
        latency: float,
        secrets: list[str] | None = None,
        request_id: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """The decision record for one authorization, and its decision id.

        The raw values that were masked are appended to ``secrets`` when it is given;
        ``request_id`` is recorded in the record's ``context``.
        """
        # A cached decision is reused by many calls: each authorization gets its own id, and
        # the record names the evaluation it reused.
        reused = decision.decision_id if decision is not None and decision.cached else None
        decision_id = (
            decision.decision_id if decision is not None and not decision.cached else None
        ) or self._new_id()
        found: list[str] = secrets if secrets is not None else []
        digest, arguments, context = self._masked(authorization, found, request_id)
        record = self._base("decision", authorization.definition.name, call_id, decision_id)
        if decision is not None:
            result, code = ("allow", None) if decision.allowed is True else ("deny", "denied")
        else:
            result, code = "error", str(getattr(error, "code", "no_decision"))
        record.update(
            {
                "arguments_digest": digest,
                "arguments": arguments,
                "context": context,
                "result": result,
                "code": code,
                "message": decision.message if decision else None,
                "reasons": list(decision.reasons) if decision else [],
                "detail": _detail(error),
                "revision": decision.revision if decision else None,
                "engine": decision.engine if decision else None,
                "cached": decision.cached if decision else False,
                "cached_from": reused,
                "latency_us": round(latency * 1e6),
            }
        )
        if decision is not None and decision.obligations:
            record.update(self._obligations(authorization, decision, found))
        return decision_id, self._masker.scrub(record, found)

    def _obligations(
        self, authorization: Authorization, decision: Decision, found: list[str]
    ) -> dict[str, Any]:
        # What the decision obliges, the audit fields it adds, and the digest of the
        # arguments the tool will see when it rewrites them (None: the rewrite fails, and
        # the call is refused).
        extra: dict[str, Any] = {"obligations": [describe(o) for o in decision.obligations]}
        fields: dict[str, Any] = {}
        for obligation in decision.obligations:
            if isinstance(obligation, AuditFields):
                fields.update(obligation.value())
        if fields:
            extra["fields"] = _recordable(self._masker.mask(fields, found))
        rewrites = tuple(o for o in decision.obligations if isinstance(o, RewriteArguments))
        if rewrites:
            try:
                rewritten = rewrite_arguments(authorization.arguments, rewrites)
            except UnfulfilledObligationError:
                extra["rewritten_arguments_digest"] = None
            else:
                extra["rewritten_arguments_digest"] = hashlib.sha256(rewritten).hexdigest()
        return extra

    def outcome_record(
        self,
        definition: ToolDefinition,
        *,
        call_id: str | None,
        decision_id: str | None,
        outcome: str,
        code: str | None,
        latency: float,
        message: str | None = None,
        secrets: Iterable[str] = (),
    ) -> dict[str, Any]:
        """The outcome record of one call, ``secrets`` and credentials kept out of its message."""
        record = self._base("outcome", definition.name, call_id, decision_id or self._new_id())
        record.update(
            {
                "outcome": outcome,
                "code": code,
                "message": message,
                "latency_us": round(latency * 1e6),
            }
        )
        return self._masker.scrub(record, secrets)

    def refusal(
        self, call: ToolCall, *, code: str, message: str, request_id: str | None = None
    ) -> asyncio.Future[dict[str, Any]]:
        """Record a call refused before any tool ran (unknown tool, invalid arguments).

        The arguments are not recorded (they may be anything); their digest is.
        """
        raw = (
            call.arguments.encode("utf-8", "surrogatepass")
            if isinstance(call.arguments, str)
            else bytes(call.arguments)
        )
        found: list[str] = []
        if len(raw) <= _json.DEFAULT_MAX_ARGUMENT_BYTES:
            # The arguments are not recorded, but the message may quote them (a schema
            # error citing a value): find the masked values so that they are scrubbed.
            with contextlib.suppress(_json.StrictJSONError):
                self._masker.mask(_json.parse(raw), found)
        context = self._context(request_id, found)
        record = {
            "type": "outcome",
            "time": _utc(self._wall()),
            "decision_id": self._new_id(),
            "call_id": _printable(call.id),
            "tool": _printable(call.name),
            "arguments_digest": hashlib.sha256(raw).hexdigest(),
            "context": context,
            "outcome": "invalid",
            "code": code,
            "message": message,
            "latency_us": 0,
        }
        return asyncio.wrap_future(self._sink.submit(self._masker.scrub(record, found)))

    @property
    def timer(self) -> Callable[[], float]:
        """The latency clock."""
        return self._timer


def _detail(error: BaseException | None) -> str | None:
    if error is None:
        return None
    detail = getattr(error, "detail", None)
    text = f"{type(error).__name__}: {error}" + (f" ({detail})" if detail else "")
    return text[:1000]


class AuditingAuthorizer:
    """Asks the inner authorizer, then writes the decision record before answering.

    If the record cannot be written, it raises :class:`AuditWriteError` whatever the
    decision was, so the Guard denies (code ``audit_failed``).
    """

    def __init__(self, inner: Authorizer, trail: AuditTrail) -> None:
        self._inner = inner
        self._trail = trail

    async def authorize(
        self, authorization: Authorization, *, scope: AuditScope | None = None
    ) -> bool | Decision:
        """Decide, record, then answer (with the decision id filled in).

        ``scope`` is the call's, when the caller keeps it (the service pipeline); else the
        one :class:`AuditedTool` set for the call in progress, if any.
        """
        slot = scope if scope is not None else _SLOT.get()
        started = self._trail.timer()
        error: Exception | None = None
        decision: Decision | None = None
        result: object = None
        try:
            result = await self._inner.authorize(authorization)
        except Exception as exc:  # noqa: BLE001 - recorded, then re-raised for the Guard to seal
            error = exc
        if error is None:
            try:
                decision = read_answer(result)
            except MalformedDecisionError as exc:
                error = exc
        decision_id, record = self._trail.decision_record(
            authorization,
            call_id=slot.call_id if slot else None,
            decision=decision,
            error=error,
            latency=self._trail.timer() - started,
            secrets=slot.secrets if slot else None,
            request_id=slot.request_id if slot else None,
        )
        if slot is not None:
            slot.decision_id = decision_id
            slot.result = record["result"]
        sink = self._trail.sink
        try:
            if isinstance(sink, JsonlFileSink):
                # Woken once per fsync with every other record that fsync made durable.
                await sink.write(record)
            else:
                written = sink.submit(record)
                # Already resolved (written, no fsync awaited): no hand-off through the loop.
                if not written.done():
                    await asyncio.wrap_future(written)
                written.result()
        except AuditWriteError:
            raise
        except Exception as exc:  # noqa: BLE001 - any sink failure is an audit failure
            raise AuditWriteError(f"audit write failed: {type(exc).__name__}") from None
        if error is not None:
            raise error
        assert decision is not None  # noqa: S101 - exhaustive above
        if any(isinstance(o, AuditFields) for o in decision.obligations):
            # The audit fields are in the record just written: fulfilled.
            kept = tuple(o for o in decision.obligations if not isinstance(o, AuditFields))
            return dataclasses.replace(decision, decision_id=decision_id, obligations=kept)
        # The decision was checked when it was made: only its id changes.
        return decision.identified(decision_id, decision.revision)


class AuditedTool:
    """Writes the outcome record of every call of the wrapped (guarded) tool."""

    def __init__(self, inner: Tool, trail: AuditTrail) -> None:
        self._inner = inner
        self._trail = trail
        self._definition = inner.definition()

    def definition(self) -> ToolDefinition:
        """The inner definition, taken once."""
        return self._definition

    def unwrap(self) -> Tool:
        """The inner tool."""
        return self._inner

    async def call(self, invocation: Invocation) -> ToolOutput:
        """Run the inner tool and record what happened, whatever happened."""
        slot = AuditScope(invocation.call_id)
        token = _SLOT.set(slot)
        started = self._trail.timer()
        outcome, code, message = "executed", None, None
        try:
            return await self._inner.call(invocation)
        except asyncio.CancelledError:
            outcome, code = "cancelled", "cancelled"
            raise
        except Failure as failure:
            outcome = failure.kind.value
            if failure.kind is FailureKind.REJECTED:
                code = "denied" if slot.result == "deny" else "tool_rejected"
            else:
                code = "tool_failed"
            message = failure.output.text()
            raise
        except AuthorizationError as exc:
            outcome, code = "rejected", exc.code
            raise
        except Exception:
            outcome, code = "failed", "tool_error"
            raise
        finally:
            _SLOT.reset(token)
            record = self._trail.outcome_record(
                self._definition,
                call_id=invocation.call_id,
                decision_id=slot.decision_id,
                outcome=outcome,
                code=code,
                message=message,
                latency=self._trail.timer() - started,
                secrets=slot.secrets,
            )
            # Submitted, not awaited: a cancelled call must still get its record.
            self._trail.sink.submit(record)


def _printable(value: object) -> str | None:
    # A refused call's id or name may be anything; the record must stay writable.
    if not isinstance(value, str):
        return None
    return value.encode("utf-8", "backslashreplace").decode("utf-8")

"""Human approval of exact calls: the gate before the policy, and the approver's desk.

:class:`ApprovalGate` wraps the decision of one call:

1. It looks for an approved, unexpired approval bound to this exact call (tool, argument
   digest, caller) and, when there is one, marks it used (single-use, atomically) and lets
   the policy see it as ``input.context.approval``: ``{"id", "approved_by",
   "approver_roles", "approved_at"}``. A caller's own ``approval`` member is always
   dropped first: only the gate sets it.
2. It asks for the decision.
3. An allowed decision with a ``require_approval`` obligation does not run: the gate
   records a pending approval (or finds the one already pending for this exact call) and
   raises :class:`ApprovalPendingError` (code ``approval_pending``) with its id.
   An approval used under another policy revision than the one that asked for it is void,
   and the call needs a new one.

:class:`ApprovalDesk` is what approvers use (the HTTP API and ``gateway approvals``):
list, show, approve, reject, each checked against the approver's roles and tenant and
recorded in the audit trail before it takes effect for the caller. An approval belongs to
the tenant of the caller who asked: an approver of another tenant (or of none, when it has
one) neither lists, sees nor decides it, whatever roles they hold.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import hashlib
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Final

from gateway._authorization import (
    Authorization,
    Authorizer,
    Decision,
    canonical_arguments,
    read_answer,
)
from gateway._errors import MalformedDecisionError, NoDecisionError
from gateway.approvals._store import (
    APPROVED,
    PENDING,
    REJECTED,
    VOID,
    Approval,
    ApprovalError,
    ApprovalKey,
    ApprovalStore,
)
from gateway.obligations import RequireApproval
from gateway.policy import CallerContext, caller_context, current_caller

#: The context member the policy reads an approval from.
APPROVAL_MEMBER: Final = "approval"
#: How long an approval request stays open when the obligation names no ``ttl_s``.
DEFAULT_TTL_S: Final = 900.0

Answer = bool | Decision
Ask = Callable[[], Awaitable[Answer]]


class ApprovalPendingError(NoDecisionError):
    """The call awaits a person's approval; it did not run. ``approval_id`` names it."""

    code: ClassVar[str] = "approval_pending"

    def __init__(self, approval: Approval) -> None:
        super().__init__("the call awaits approval")
        self.approval_id = approval.id
        self.public_message = approval.message or "the call awaits approval"
        self.expires_at = approval.expires_at


def _utc(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="seconds")


def tenant_of(context: CallerContext) -> str | None:
    """The caller's tenant: a non-blank ``tenant`` string, else ``None``."""
    tenant = context.get("tenant")
    return tenant if isinstance(tenant, str) and tenant.strip() else None


def same_tenant(approval: Approval, context: CallerContext) -> bool:
    """Whether ``context`` belongs to the tenant of the caller who asked for ``approval``."""
    return approval.tenant == tenant_of(context)


def may_decide(approval: Approval, approver: CallerContext) -> bool:
    """Whether ``approver`` may approve or reject ``approval`` (whatever its state).

    They need a ``subject`` other than the caller who asked, the approval's role among their
    ``roles``, and the same tenant.
    """
    subject = approver.get("subject")
    return (
        isinstance(subject, str)
        and bool(subject)
        and subject != approval.subject
        and approval.role in _strings(approver.get("roles"))
        and same_tenant(approval, approver)
    )


def call_key(authorization: Authorization, caller: CallerContext) -> ApprovalKey:
    """What an approval of this call is bound to."""
    return ApprovalKey(
        tool=authorization.definition.name,
        arguments_digest=hashlib.sha256(canonical_arguments(authorization)).hexdigest(),
        caller_digest=caller.digest,
    )


class AuditEvents:
    """Writes one audit record per approval step, and waits until it is written.

    ``sink`` is the audit trail's sink (``None``: no audit trail, nothing is recorded).
    """

    def __init__(self, sink: Any | None, *, clock: Callable[[], float]) -> None:
        self._sink = sink
        self._clock = clock

    async def record(self, event: str, approval: Approval, **extra: Any) -> None:
        """Record ``event`` (requested, approved, rejected, used, void) for ``approval``.

        Raises:
            Exception: whatever the sink raised: the step is not taken.
        """
        if self._sink is None:
            return
        record = {
            "type": "approval",
            "time": _utc(self._clock()),
            "decision_id": None,
            "call_id": None,
            "tool": approval.key.tool,
            "event": event,
            "approval_id": approval.id,
            "arguments_digest": approval.key.arguments_digest,
            "subject": approval.subject,
            "role": approval.role,
            "revision": approval.revision,
            "status": approval.status,
            "decided_by": approval.decided_by,
            "expires_at": _utc(approval.expires_at),
            **extra,
        }
        written = self._sink.submit(record)
        if not written.done():
            await asyncio.wrap_future(written)
        written.result()


class ApprovalGate:
    """Lets a call that requires approval run only once an approver has approved it.

    Args:
        store: where approvals are kept.
        events: the audit records of approval steps.
        clock: seconds since the epoch (injectable).
        new_id: makes approval ids.
        default_ttl_s: how long a request stays open when the obligation names no ``ttl_s``.
    """

    def __init__(
        self,
        store: ApprovalStore,
        *,
        events: AuditEvents | None = None,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], str] = lambda: "apr_" + secrets.token_urlsafe(18),
        default_ttl_s: float = DEFAULT_TTL_S,
    ) -> None:
        self._store = store
        self._ttl = default_ttl_s
        self._clock = clock
        self._events = events or AuditEvents(None, clock=clock)
        self._new_id = new_id

    @property
    def store(self) -> ApprovalStore:
        """Where approvals are kept."""
        return self._store

    def authorizer(self, inner: Authorizer) -> Authorizer:
        """``inner`` behind this gate, as an :class:`~gateway.Authorizer`."""
        return _GatedAuthorizer(self, inner)

    async def decide(self, authorization: Authorization, ask: Ask) -> Answer:
        """Decide one call through ``ask``, with the approval steps around it.

        Raises:
            ApprovalPendingError: the call requires an approval it does not have.
        """
        caller = current_caller().without_member(APPROVAL_MEMBER)
        key = call_key(authorization, caller)
        now = self._clock()
        used = await asyncio.to_thread(self._store.claim, key, now)
        if used is None:
            with caller_context(caller):
                answer = await ask()
        else:
            await self._events.record("used", used)
            seen = {
                "id": used.id,
                "approved_by": used.decided_by,
                "approver_roles": list(used.decided_roles),
                "approved_at": _utc(used.decided_at or now),
            }
            with caller_context(CallerContext({**caller.as_dict(), APPROVAL_MEMBER: seen})):
                answer = await ask()
        try:
            decision = read_answer(answer)
        except MalformedDecisionError:
            return answer  # the Guard refuses it
        required = next((o for o in decision.obligations if isinstance(o, RequireApproval)), None)
        if used is not None and decision.revision != used.revision:
            void = await asyncio.to_thread(
                self._store.update, used.id, lambda a: dataclasses.replace(a, status=VOID)
            )
            await self._events.record("void", void, reason="policy revision changed")
            required = required or RequireApproval(used.role, used.message)
        if decision.allowed is not True or required is None:
            return answer
        pending = await self._pending(key, caller, decision, required, now)
        raise ApprovalPendingError(pending)

    async def _pending(
        self,
        key: ApprovalKey,
        caller: CallerContext,
        decision: Decision,
        required: RequireApproval,
        now: float,
    ) -> Approval:
        known = await asyncio.to_thread(self._store.find_pending, key, now)
        if (
            known is not None
            and known.revision == decision.revision
            and known.role == required.role
        ):
            return known
        subject = caller.get("subject")
        approval = Approval(
            id=self._new_id(),
            key=key,
            revision=decision.revision,
            role=required.role,
            subject=subject if isinstance(subject, str) else None,
            tenant=tenant_of(caller),
            message=required.message,
            created_at=now,
            expires_at=now + (required.ttl_s or self._ttl),
        )
        await self._events.record("requested", approval, decision_id=decision.decision_id)
        await asyncio.to_thread(self._store.add, approval)
        return approval


class _GatedAuthorizer:
    __slots__ = ("_gate", "_inner")

    def __init__(self, gate: ApprovalGate, inner: Authorizer) -> None:
        self._gate = gate
        self._inner = inner

    async def authorize(self, authorization: Authorization) -> Answer:
        return await self._gate.decide(authorization, lambda: self._inner.authorize(authorization))


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return ()


class ApprovalDesk:
    """What approvers do: list, show, approve and reject approvals.

    An approver is an authenticated caller whose context has a ``subject`` and whose
    ``roles`` include the ``role`` the approval names. Nobody approves their own call.
    Every decision is recorded in the audit trail before it is stored.
    """

    def __init__(
        self,
        store: ApprovalStore,
        *,
        events: AuditEvents | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._clock = clock
        self._events = events or AuditEvents(None, clock=clock)

    @property
    def clock(self) -> Callable[[], float]:
        """Seconds since the epoch."""
        return self._clock

    async def pending(self, approver: CallerContext) -> list[Approval]:
        """The live pending approvals this approver may decide."""
        roles = set(_strings(approver.get("roles")))
        now = self._clock()
        every = await asyncio.to_thread(self._store.all)
        return [
            a
            for a in every
            if a.state(now) == PENDING and a.role in roles and same_tenant(a, approver)
        ]

    async def show(self, approval_id: str, viewer: CallerContext) -> Approval:
        """One approval, for the caller who asked for it or an approver of its role.

        Raises:
            ApprovalError: ``approval_not_found`` (also when the viewer may not see it).
        """
        approval = await asyncio.to_thread(self._store.get, approval_id)
        if approval is None or not self._may_see(approval, viewer):
            raise ApprovalError("approval_not_found", "no such approval")
        return approval

    @staticmethod
    def _may_see(approval: Approval, viewer: CallerContext) -> bool:
        if viewer.without_member(APPROVAL_MEMBER).digest == approval.key.caller_digest:
            return True
        return approval.role in _strings(viewer.get("roles")) and same_tenant(approval, viewer)

    async def decide(
        self,
        approval_id: str,
        approver: CallerContext,
        *,
        approve: bool,
        comment: str | None = None,
    ) -> Approval:
        """Approve or reject a pending approval.

        ``comment`` is the approver's own reason, recorded with the decision in the audit
        trail (the operator console requires one).

        Raises:
            ApprovalError: ``approval_not_found`` (also for an approver of another tenant),
                ``approver_not_allowed`` (no subject, not the role, or the caller who
                asked), ``approval_expired``,
                ``approval_decided`` (already approved, rejected or used).
        """
        subject = approver.get("subject")
        roles = _strings(approver.get("roles"))
        now = self._clock()
        current = await asyncio.to_thread(self._store.get, approval_id)
        if current is None or not same_tenant(current, approver):
            raise ApprovalError("approval_not_found", "no such approval")
        if not isinstance(subject, str) or not subject or current.role not in roles:
            raise ApprovalError("approver_not_allowed", "the approver does not hold the role")
        tenant = tenant_of(approver)
        decided = self._decided(current, subject, roles, tenant, now, approve=approve)
        # Recorded first: an approval the audit trail does not show never takes effect.
        extra = {} if comment is None else {"comment": comment}
        await self._events.record("approved" if approve else "rejected", decided, **extra)
        subject_text: str = subject
        return await asyncio.to_thread(
            self._store.update,
            approval_id,
            lambda a: self._decided(a, subject_text, roles, tenant, now, approve=approve),
        )

    @staticmethod
    def _decided(
        approval: Approval,
        subject: str,
        roles: tuple[str, ...],
        tenant: str | None,
        now: float,
        *,
        approve: bool,
    ) -> Approval:
        if approval.tenant != tenant:
            raise ApprovalError("approval_not_found", "no such approval")
        if approval.subject == subject:
            raise ApprovalError("approver_not_allowed", "nobody approves their own call")
        if approval.status != PENDING:
            raise ApprovalError("approval_decided", "the approval is already decided")
        if approval.expired(now):
            raise ApprovalError("approval_expired", "the approval has expired")
        return dataclasses.replace(
            approval,
            status=APPROVED if approve else REJECTED,
            decided_by=subject,
            decided_roles=roles,
            decided_at=now,
        )

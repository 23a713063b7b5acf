"""Human approval bound to the exact call (the ``require_approval`` obligation).

See :mod:`gateway.approvals._gate` for the steps and ``policies/README.md``, "Approvals",
for what the policy sees.
"""

from gateway.approvals._gate import (
    APPROVAL_MEMBER,
    DEFAULT_TTL_S,
    ApprovalDesk,
    ApprovalGate,
    ApprovalPendingError,
    AuditEvents,
    call_key,
    may_decide,
    same_tenant,
    tenant_of,
)
from gateway.approvals._redis import RedisApprovalStore
from gateway.approvals._store import (
    APPROVED,
    PENDING,
    REJECTED,
    UNKNOWN_TENANT,
    USED,
    VOID,
    Approval,
    ApprovalError,
    ApprovalKey,
    ApprovalStore,
    FileApprovalStore,
    MemoryApprovalStore,
)

__all__ = [
    "APPROVAL_MEMBER",
    "APPROVED",
    "DEFAULT_TTL_S",
    "PENDING",
    "REJECTED",
    "UNKNOWN_TENANT",
    "USED",
    "VOID",
    "Approval",
    "ApprovalDesk",
    "ApprovalError",
    "ApprovalGate",
    "ApprovalKey",
    "ApprovalPendingError",
    "ApprovalStore",
    "AuditEvents",
    "FileApprovalStore",
    "MemoryApprovalStore",
    "RedisApprovalStore",
    "call_key",
    "may_decide",
    "same_tenant",
    "tenant_of",
]

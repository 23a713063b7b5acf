"""Obligations of a decision (policy contract version 2): typed, must-understand.

See ``policies/README.md``, "Obligations", for the document a policy returns.
"""

from gateway.obligations._fulfil import MAX_REDACTED_BYTES, redact_output, rewrite_arguments
from gateway.obligations._model import (
    AUDIT,
    MAX_OBLIGATIONS,
    OBLIGATION_TYPES,
    REDACT_OUTPUT,
    REQUIRE_APPROVAL,
    REWRITE_ARGUMENTS,
    TYPES,
    AuditFields,
    Obligation,
    OutputWithheldError,
    RedactOutput,
    RequireApproval,
    RewriteArguments,
    RewriteOperation,
    UnfulfilledObligationError,
    UnknownObligation,
    describe,
    parse_pointer,
    read_obligations,
)

__all__ = [
    "AUDIT",
    "MAX_OBLIGATIONS",
    "MAX_REDACTED_BYTES",
    "OBLIGATION_TYPES",
    "REDACT_OUTPUT",
    "REQUIRE_APPROVAL",
    "REWRITE_ARGUMENTS",
    "TYPES",
    "AuditFields",
    "Obligation",
    "OutputWithheldError",
    "RedactOutput",
    "RequireApproval",
    "RewriteArguments",
    "RewriteOperation",
    "UnfulfilledObligationError",
    "UnknownObligation",
    "describe",
    "parse_pointer",
    "read_obligations",
    "redact_output",
    "rewrite_arguments",
]

"""The tamper-evident audit trail: records, masking, sinks, hash chain, verification."""

from gateway.audit._anchor import (
    Anchor,
    Anchorer,
    AnchorError,
    AnchorLog,
    check_anchors,
    read_anchors,
)
from gateway.audit._chain import (
    GENESIS,
    VerifyResult,
    folder_chains,
    head_path,
    record_hash,
    trail_exists,
    trail_files,
    verify,
    verify_trail,
    writer_chains,
    writer_path,
)
from gateway.audit._mask import (
    DEFAULT_MASKED_KEYS,
    DEFAULT_NAME_PATTERNS,
    DEFAULT_VALUE_PATTERNS,
    Masker,
    normalize_name,
)
from gateway.audit._sinks import AuditSink, AuditWriteError, FsyncPolicy, JsonlFileSink, MemorySink
from gateway.audit._trail import AuditedTool, AuditingAuthorizer, AuditScope, AuditTrail

__all__ = [
    "DEFAULT_MASKED_KEYS",
    "DEFAULT_NAME_PATTERNS",
    "DEFAULT_VALUE_PATTERNS",
    "GENESIS",
    "Anchor",
    "AnchorError",
    "AnchorLog",
    "Anchorer",
    "AuditScope",
    "AuditSink",
    "AuditTrail",
    "AuditWriteError",
    "AuditedTool",
    "AuditingAuthorizer",
    "FsyncPolicy",
    "JsonlFileSink",
    "Masker",
    "MemorySink",
    "VerifyResult",
    "check_anchors",
    "folder_chains",
    "head_path",
    "normalize_name",
    "read_anchors",
    "record_hash",
    "trail_exists",
    "trail_files",
    "verify",
    "verify_trail",
    "writer_chains",
    "writer_path",
]

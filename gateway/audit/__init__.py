"""The tamper-evident audit trail: records, masking, sinks, hash chain, verification."""

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
    "folder_chains",
    "head_path",
    "normalize_name",
    "record_hash",
    "trail_exists",
    "trail_files",
    "verify",
    "verify_trail",
    "writer_chains",
    "writer_path",
]

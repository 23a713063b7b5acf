"""The operator console: web pages for approvers and auditors (``[console]``, off by default).

See docs/console.md. :func:`build_console` assembles it from a configuration and the
service's components; :class:`ConsoleApp` is the ASGI app the HTTP service mounts at its path.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.audit import DEFAULT_MASKED_KEYS, DEFAULT_NAME_PATTERNS, DEFAULT_VALUE_PATTERNS, Masker
from gateway.console._app import SECURITY_HEADERS, ConsoleApp, ConsoleRoles, console_roles
from gateway.console._sessions import APPROVER, AUDITOR, Session, SessionStore
from gateway.console._trail import FilterError, Filters, TrailReader, TrailStatus

if TYPE_CHECKING:
    from gateway.service import Components, GatewayConfig

__all__ = [
    "APPROVER",
    "AUDITOR",
    "SECURITY_HEADERS",
    "ConsoleApp",
    "ConsoleRoles",
    "FilterError",
    "Filters",
    "Session",
    "SessionStore",
    "TrailReader",
    "TrailStatus",
    "build_console",
    "console_roles",
]


def build_console(config: GatewayConfig, components: Components) -> ConsoleApp | None:
    """The console of ``[console]`` over the service's parts (``None`` when it is off)."""
    table = config.console
    if not table.enabled:
        return None
    trail = None
    audit = config.audit
    if audit.enabled and audit.path is not None:
        masker = Masker(
            keys=DEFAULT_MASKED_KEYS | set(audit.mask_keys),
            patterns=DEFAULT_NAME_PATTERNS + audit.mask_patterns,
            values=DEFAULT_VALUE_PATTERNS + audit.mask_values,
            pointers=audit.mask_pointers,
        )
        trail = TrailReader(
            Path(audit.path), key=audit.key, masker=masker, limit=table.trail_records
        )
    gate = components.approvals
    return ConsoleApp(
        authenticator=components.authenticator,
        roles=console_roles(
            table.approvers, table.approver_roles, table.auditors, table.auditor_roles
        ),
        sessions=SessionStore(
            idle_timeout_s=table.idle_timeout_s,
            max_age_s=table.max_age_s,
            max_sessions=table.max_sessions,
            clock=time.monotonic,
        ),
        prefix=table.path,
        desk=components.desk,
        store=gate.store if gate is not None else None,
        trail=trail,
        replay_reports=Path(table.replay_reports) if table.replay_reports else None,
    )

"""What the call pipeline tells the operator's tools: the decision and the tool run of a call.

The pipeline (:class:`~gateway.service.Gateway`) calls one :class:`CallObserver` at two
points of every admitted call: around the policy decision (:meth:`CallObserver.deciding`)
and around the guarded tool run (:meth:`CallObserver.running`), and once when a refusal
could not be recorded (:meth:`CallObserver.audit_error`). The base class does nothing; the
service's observer (:class:`ServiceObserver`) writes the state lines of
:class:`~gateway.service._logs.ServiceLog` and, when tracing is on, the spans.

An observer sees the definition, the decision and the result code; it is handed the
argument bytes only to digest them (the span's argument digest), never to show them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Final

from gateway._authorization import Authorization, Decision
from gateway._definition import ToolDefinition
from gateway.audit import AuditWriteError
from gateway.service._logs import ENGINE_DOWN_CODES, ServiceLog


class DecisionWatch:
    """One decision being made (the base class ignores it)."""

    __slots__ = ()

    def answered(self, decision: Decision | None) -> None:
        """The policy answered (``None``: with an answer the Guard will refuse as malformed)."""

    def failed(self, error: Exception) -> None:
        """No decision could be made: ``error`` is the sealed cause (never shown)."""


class RunWatch:
    """One guarded tool run (the base class ignores it)."""

    __slots__ = ()

    def finished(self, code: str, decision: Decision | None) -> None:
        """The call ended with result ``code`` (``decision``: the policy's, if made)."""


_LOG: Final = logging.getLogger("gateway.service")
_DECISION: Final = DecisionWatch()
_RUN: Final = RunWatch()


class CallObserver:
    """Told about every call's decision and tool run; this base class ignores them."""

    @contextlib.contextmanager
    def deciding(self, authorization: Authorization) -> Iterator[DecisionWatch]:
        """Around one policy decision."""
        yield _DECISION

    @contextlib.contextmanager
    def running(self, definition: ToolDefinition, call_id: str) -> Iterator[RunWatch]:
        """Around one guarded tool run (the decision is made inside it)."""
        yield _RUN

    def audit_error(self, error: Exception) -> None:
        """A refused call's record could not be written (logged with the error's type)."""
        _LOG.error("audit: could not record a refused call (%s)", type(error).__name__)


#: The observer that ignores everything.
NO_OBSERVER: Final = CallObserver()


def error_code(error: Exception) -> str:
    """The stable code of a sealed cause (its class's ``code``), else ``no_decision``."""
    code = getattr(error, "code", None)
    return code if isinstance(code, str) else "no_decision"


class _LoggedDecision(DecisionWatch):
    __slots__ = ("_audited", "_log")

    def __init__(self, log: ServiceLog, audited: bool) -> None:
        self._log = log
        self._audited = audited

    def answered(self, decision: Decision | None) -> None:
        if self._audited:
            self._log.audit_written()
        if decision is None or not decision.cached:
            self._log.engine_answered()

    def failed(self, error: Exception) -> None:
        if isinstance(error, AuditWriteError):
            # The gateway's own message: a path, an error's name; never a record's values.
            self._log.audit_failed(str(error))
            return
        if self._audited:
            self._log.audit_written()
        code = error_code(error)
        if code in ENGINE_DOWN_CODES:
            self._log.engine_failed(code)


class ServiceObserver(CallObserver):
    """The service's observer: engine and audit state lines.

    Args:
        log: the service's state lines.
        audited: whether decisions go through an audit trail (a decision then means a
            record was written).
    """

    def __init__(self, log: ServiceLog, *, audited: bool) -> None:
        self._log = log
        self._watch = _LoggedDecision(log, audited)

    @property
    def log(self) -> ServiceLog:
        """The state lines."""
        return self._log

    @contextlib.contextmanager
    def deciding(self, authorization: Authorization) -> Iterator[DecisionWatch]:
        """Around one policy decision: its outcome feeds the engine and audit state."""
        yield self._watch

    def audit_error(self, error: Exception) -> None:
        """A refused call's record could not be written: the audit state is failing."""
        message = str(error) if isinstance(error, AuditWriteError) else type(error).__name__
        self._log.audit_failed(message)

"""Failure: one complete, definite unsuccessful outcome of a tool invocation."""

from __future__ import annotations

import enum
from typing import ClassVar

from gateway._errors import GatewayError, InvalidFailureError
from gateway._output import ToolOutput


class FailureKind(enum.StrEnum):
    """What happened to the invocation; neither kind assigns retry or control policy."""

    #: A definite unsuccessful outcome. It does not claim that execution began and may
    #: describe acknowledged partial effects.
    FAILED = "failed"
    #: The invocation was refused permission to execute.
    REJECTED = "rejected"


class Failure(GatewayError):  # noqa: N818 - the public name is fixed by the core API
    """A definite unsuccessful outcome whose ``output`` is public to the model.

    The ``cause`` is diagnostic only: it is never chained (``__cause__`` and ``__context__``
    stay ``None`` when raised by the gateway), never part of the message, and cannot change
    the kind or the output. The message is always ``tool: <kind>``.

    Args:
        kind: ``FailureKind.FAILED`` (needs a cause) or ``FailureKind.REJECTED`` (cause
            optional).
        output: the public result; text is wrapped with ``ToolOutput.from_text``.
        cause: the diagnostic exception.

    Raises:
        InvalidFailureError: unknown kind, ``failed`` without a cause, a cause that is not
            an exception, or an output that is not a ToolOutput or text.
    """

    code: ClassVar[str] = "tool_failure"

    def __init__(
        self,
        kind: FailureKind | str,
        output: ToolOutput | str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        try:
            resolved = FailureKind(kind)
        except ValueError:
            raise InvalidFailureError.because(f"kind {kind!r}") from None
        if cause is not None and not isinstance(cause, BaseException):
            raise InvalidFailureError.because("cause must be an exception")
        if resolved is FailureKind.FAILED and cause is None:
            raise InvalidFailureError.because("failed outcome requires a cause")
        if output is None:
            output = ToolOutput()
        elif isinstance(output, str):
            output = ToolOutput.from_text(output)
        elif not isinstance(output, ToolOutput):
            raise InvalidFailureError.because("output must be a ToolOutput")
        super().__init__(f"{self.prefix}: {resolved.value}")
        self._kind = resolved
        self._output = output
        self._cause = cause

    @property
    def kind(self) -> FailureKind:
        """Whether the invocation failed or was rejected."""
        return self._kind

    @property
    def output(self) -> ToolOutput:
        """The public output (immutable)."""
        return self._output

    @property
    def cause(self) -> BaseException | None:
        """The diagnostic cause, identical to the one given, or ``None``."""
        return self._cause

    def __repr__(self) -> str:
        return f"Failure(kind={self._kind.value!r}, output={self._output.text()!r})"

"""The exception hierarchy shared by every layer of the gateway.

Each class names what the caller should do, and carries a stable snake_case ``code`` that
logs, metrics, audit records and HTTP responses share::

    GatewayError
    ├── InvalidToolError            a tool or its definition cannot be bound (misconfiguration)
    │   └── InvalidDefinitionError  a ToolDefinition breaks the protocol rules
    ├── InvalidInvocationError      an untrusted call was refused at admission
    │   └── InvalidToolCallError    a ToolCall's own fields (id, name) are invalid
    ├── InvalidWrappingChainError   a decorator chain is cyclic or too deep
    ├── DuplicateToolError          a registry already holds (or was handed twice) a name
    ├── InvalidFailureError         a Failure was built from invalid parts
    ├── InvalidToolOutputError      a tool result is not a valid ToolOutput
    ├── NoDecisionError             why no decision was established (a layer above says)
    │   └── PolicyError             the policy established none (root of gateway.policy's)
    │       └── MalformedDecisionError  an answer that is not a decision
    ├── AuthorizationError          no policy decision could be established (sealed cause)
    └── Failure                     a definite unsuccessful outcome (failed / rejected)

Every message of the core starts with its class's ``prefix`` (the seed's fixed sentinel
text, such as ``tool: invalid tool``): ``InvalidToolError.because("tool is nil")`` is the
error whose message is ``tool: invalid tool: tool is nil``. ``AuthorizationError`` and
``Failure`` live in their own modules because they own behaviour.

A :class:`NoDecisionError` is how a layer above the core (the policy engines, the audit
trail, an application's authorizer) says why there is no decision: raised inside an
authorizer, it lends its ``code`` to the ``AuthorizationError`` that seals it. No other
exception does.
"""

from __future__ import annotations

from typing import ClassVar, Self


class GatewayError(Exception):
    """Root of every error the gateway raises on purpose."""

    code: ClassVar[str] = "gateway_error"
    #: How every message of this class starts (the seed's text); details follow ``": "``.
    prefix: ClassVar[str] = "tool"

    @classmethod
    def because(cls, *details: str) -> Self:
        """This error, with the message ``<prefix>: <detail>[: <detail>...]``."""
        return cls(": ".join((cls.prefix, *details)))


class InvalidToolError(GatewayError, ValueError):
    """A tool, its definition, its schema or its wrapping chain cannot be bound."""

    code: ClassVar[str] = "invalid_tool"
    prefix: ClassVar[str] = "tool: invalid tool"


class InvalidDefinitionError(InvalidToolError):
    """A ToolDefinition breaks the protocol rules (name, description or input schema)."""

    code: ClassVar[str] = "invalid_definition"
    prefix: ClassVar[str] = "tool: invalid tool definition"


class InvalidInvocationError(GatewayError, ValueError):
    """An untrusted tool call was refused before anything ran."""

    code: ClassVar[str] = "invalid_invocation"
    prefix: ClassVar[str] = "tool: invalid invocation"


class InvalidToolCallError(InvalidInvocationError):
    """A ToolCall's own fields are invalid (its id, its name, or arguments that are not text)."""

    code: ClassVar[str] = "invalid_tool_call"
    prefix: ClassVar[str] = "tool: invalid tool call"


class InvalidWrappingChainError(GatewayError, ValueError):
    """A WrappingTool chain is cyclic or deeper than the bound."""

    code: ClassVar[str] = "invalid_wrapping_chain"
    prefix: ClassVar[str] = "tool: invalid wrapping chain"


class DuplicateToolError(GatewayError, ValueError):
    """A tool name is registered twice, in one batch or across batches."""

    code: ClassVar[str] = "duplicate_tool"
    prefix: ClassVar[str] = "tool: duplicate tool"


class InvalidFailureError(GatewayError, ValueError):
    """A Failure was constructed from an invalid kind, cause or output."""

    code: ClassVar[str] = "invalid_failure"
    prefix: ClassVar[str] = "tool: invalid failure"


class InvalidToolOutputError(GatewayError, ValueError):
    """A tool result is not a valid ToolOutput (bad content item or invalid JSON details)."""

    code: ClassVar[str] = "invalid_tool_output"
    prefix: ClassVar[str] = "tool: invalid tool output"


class NoDecisionError(GatewayError):
    """Why no policy decision could be established, in a code the caller may see.

    Raised inside an authorizer, its ``code`` becomes the code of the
    :class:`gateway.AuthorizationError` that seals it; its message and ``detail`` stay
    sealed.

    Args:
        message: what went wrong, never quoting an argument value.
        detail: engine-internal text for the audit trail only; never shown to callers.
    """

    code: ClassVar[str] = "no_decision"

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        #: Engine-internal text for the audit trail only; never shown to callers.
        self.detail = detail


class PolicyError(NoDecisionError):
    """A policy (an authorizer, or the engine behind one) that established no decision."""

    code: ClassVar[str] = "policy_error"


class MalformedDecisionError(PolicyError):
    """An answer that is not a decision.

    An authorizer's answer other than exactly ``True``/``False`` or a well-formed
    :class:`gateway.Decision`, or an engine's decision document that is neither a boolean
    nor a valid decision object.
    """

    code: ClassVar[str] = "malformed_decision"

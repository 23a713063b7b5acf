"""Why a policy engine produced no decision, each with its own stable code.

These are causes sealed inside :class:`gateway.AuthorizationError`; the caller sees only the
code, never the message. Engine-internal detail (OPA's error body, a wasm trap) stays on the
exception for the audit trail. ``PolicyError`` and ``MalformedDecisionError`` are the
core's own (an authorizer's malformed answer is the same error as an engine's)::

    PolicyError (NoDecisionError)
    ├── PolicyLoadError          a policy bundle or directory that does not load
    │   └── BundleError          a bundle unreadable, unverified or refused
    ├── UndefinedDecisionError   the decision document is undefined
    ├── MalformedDecisionError   it is defined but not a boolean or a decision object
    ├── EngineUnavailableError   the engine cannot be reached (refused, reset, not loaded)
    ├── EngineTimeoutError       the engine did not answer within the deadline
    └── EngineError              the engine answered with an error
"""

from __future__ import annotations

from typing import ClassVar

from gateway._errors import MalformedDecisionError, PolicyError

__all__ = [
    "EngineError",
    "EngineTimeoutError",
    "EngineUnavailableError",
    "MalformedDecisionError",
    "PolicyError",
    "PolicyLoadError",
    "UndefinedDecisionError",
]


class PolicyLoadError(PolicyError):
    """A policy set that cannot be built, read, verified, compiled or loaded."""

    code: ClassVar[str] = "policy_load_error"


class UndefinedDecisionError(PolicyError):
    """The decision path is undefined for this input (no rule produced a value)."""

    code: ClassVar[str] = "undefined_decision"


class EngineUnavailableError(PolicyError):
    """The engine could not be reached or has no policy loaded."""

    code: ClassVar[str] = "engine_unavailable"


class EngineTimeoutError(PolicyError):
    """The engine did not answer within the configured deadline."""

    code: ClassVar[str] = "engine_timeout"


class EngineError(PolicyError):
    """The engine answered with an error (for OPA: a non-200 status)."""

    code: ClassVar[str] = "engine_error"

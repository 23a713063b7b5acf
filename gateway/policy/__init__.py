"""The policy layer: caller context, the input document, the decision cache and engines.

It plugs into the core only through the :class:`gateway.Authorizer` protocol.
"""

from gateway.policy._cache import (
    DEFAULT_MAX_TTL,
    CacheStats,
    CachingAuthorizer,
    CoalescedEvaluationError,
    DecisionCache,
    DecisionFunction,
)
from gateway.policy._context import (
    EMPTY_CONTEXT,
    CallerContext,
    InvalidContextError,
    caller_context,
    current_caller,
)
from gateway.policy._document import InputDocument
from gateway.policy._errors import (
    EngineError,
    EngineTimeoutError,
    EngineUnavailableError,
    MalformedDecisionError,
    PolicyError,
    UndefinedDecisionError,
)

__all__ = [
    "DEFAULT_MAX_TTL",
    "EMPTY_CONTEXT",
    "CacheStats",
    "CachingAuthorizer",
    "CallerContext",
    "CoalescedEvaluationError",
    "DecisionCache",
    "DecisionFunction",
    "EngineError",
    "EngineTimeoutError",
    "EngineUnavailableError",
    "InputDocument",
    "InvalidContextError",
    "MalformedDecisionError",
    "PolicyError",
    "UndefinedDecisionError",
    "caller_context",
    "current_caller",
]

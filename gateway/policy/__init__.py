"""The policy layer: caller context, the input document, the decision cache and engines.

It plugs into the core only through the :class:`gateway.Authorizer` protocol.
"""

from gateway.policy._bundle import (
    Bundle,
    BundleError,
    BundlePoller,
    PollResult,
    VerificationKey,
    build_bundle,
    read_bundle,
    read_policy_data,
)
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
from gateway.policy._decision import read_decision
from gateway.policy._document import InputDocument
from gateway.policy._engine import (
    DEFAULT_DECISION_PATH,
    BatchEngine,
    EngineAnswer,
    EngineInput,
    ItemAnswer,
    PolicyAuthorizer,
    PolicyEngine,
    evaluate_many,
    normalize_path,
)
from gateway.policy._errors import (
    EngineError,
    EngineTimeoutError,
    EngineUnavailableError,
    MalformedDecisionError,
    PolicyError,
    PolicyLoadError,
    UndefinedDecisionError,
)
from gateway.policy._facts import FACTS_VERSION, SQL_MEDIA_TYPE, facts_json, sql_locations
from gateway.policy._gate import (
    GATE_PATH,
    GateError,
    GateProblem,
    check_policy_coverage,
)
from gateway.policy._paths import PathView
from gateway.policy._rest import OpaRestEngine, OpaRestEngineSync
from gateway.policy._sql_facts import MAX_SQL_LENGTH, sql_facts
from gateway.policy._visibility import (
    DEFAULT_VISIBILITY_PATH,
    VISIBILITY_VERSION,
    ToolVisibility,
    VisibilityDocument,
)
from gateway.policy._wasm import EmbeddedEngine, WasmEngine

__all__ = [
    "DEFAULT_DECISION_PATH",
    "DEFAULT_MAX_TTL",
    "DEFAULT_VISIBILITY_PATH",
    "EMPTY_CONTEXT",
    "FACTS_VERSION",
    "GATE_PATH",
    "MAX_SQL_LENGTH",
    "SQL_MEDIA_TYPE",
    "VISIBILITY_VERSION",
    "BatchEngine",
    "Bundle",
    "BundleError",
    "BundlePoller",
    "CacheStats",
    "CachingAuthorizer",
    "CallerContext",
    "CoalescedEvaluationError",
    "DecisionCache",
    "DecisionFunction",
    "EmbeddedEngine",
    "EngineAnswer",
    "EngineError",
    "EngineInput",
    "EngineTimeoutError",
    "EngineUnavailableError",
    "GateError",
    "GateProblem",
    "InputDocument",
    "InvalidContextError",
    "ItemAnswer",
    "MalformedDecisionError",
    "OpaRestEngine",
    "OpaRestEngineSync",
    "PathView",
    "PolicyAuthorizer",
    "PolicyEngine",
    "PolicyError",
    "PolicyLoadError",
    "PollResult",
    "ToolVisibility",
    "UndefinedDecisionError",
    "VerificationKey",
    "VisibilityDocument",
    "WasmEngine",
    "build_bundle",
    "caller_context",
    "check_policy_coverage",
    "current_caller",
    "evaluate_many",
    "facts_json",
    "normalize_path",
    "read_bundle",
    "read_decision",
    "read_policy_data",
    "sql_facts",
    "sql_locations",
]

"""The service layer every surface sits on: configuration, authentication, the call pipeline.

HTTP (:mod:`gateway.server`) and MCP (:mod:`gateway.mcp`) are siblings on it and never
import each other's internals. It holds what both need: the configuration read from one
TOML file, the authenticator, the call pipeline (:class:`Gateway`), the metrics, and the
one builder that assembles engine, cache, authorizer and audit trail from a configuration.
"""

from gateway.service._auth import Authenticator, AuthFailure, Identity
from gateway.service._builder import (
    Components,
    build_components,
    build_engine,
    build_path_view,
    load_tools,
)
from gateway.service._codes import ERRORS, TOOL_RESULTS, ResultCode, result_code
from gateway.service._config import (
    ApiKey,
    AuthConfig,
    ConfigError,
    GatewayConfig,
    JwtConfig,
    McpConfig,
    McpUpstreamConfig,
    api_key_digest,
    import_tools,
    load_config,
    parse_config,
)
from gateway.service._logs import AccessLog, ServiceLog, StateLog, configure_logging
from gateway.service._metrics import GatewayMetrics
from gateway.service._middleware import (
    AUTHENTICATION_REQUIRED,
    CALLER_SCOPE_KEY,
    PRINCIPAL_SCOPE_KEY,
    REQUEST_ID_SCOPE_KEY,
    AuthenticationMiddleware,
    error_body,
    insufficient_scope,
    request_id_in,
    request_id_of,
    unauthenticated,
)
from gateway.service._pipeline import BoundTool, CallResult, CallScope, Gateway, expand
from gateway.service._stack import (
    Stack,
    loop_context,
    named_asyncio,
    run_on_fastest_loop,
    server_stack,
)
from gateway.service._tracing import (
    TraceRequests,
    active_tracer,
    extract,
    inject,
    mcp_client_span,
    mcp_server_span,
)

__all__ = [
    "AUTHENTICATION_REQUIRED",
    "CALLER_SCOPE_KEY",
    "ERRORS",
    "PRINCIPAL_SCOPE_KEY",
    "REQUEST_ID_SCOPE_KEY",
    "TOOL_RESULTS",
    "AccessLog",
    "ApiKey",
    "AuthConfig",
    "AuthFailure",
    "AuthenticationMiddleware",
    "Authenticator",
    "BoundTool",
    "CallResult",
    "CallScope",
    "Components",
    "ConfigError",
    "Gateway",
    "GatewayConfig",
    "GatewayMetrics",
    "Identity",
    "JwtConfig",
    "McpConfig",
    "McpUpstreamConfig",
    "ResultCode",
    "ServiceLog",
    "Stack",
    "StateLog",
    "TraceRequests",
    "active_tracer",
    "api_key_digest",
    "build_components",
    "build_engine",
    "build_path_view",
    "configure_logging",
    "error_body",
    "expand",
    "extract",
    "import_tools",
    "inject",
    "insufficient_scope",
    "load_config",
    "load_tools",
    "loop_context",
    "mcp_client_span",
    "mcp_server_span",
    "named_asyncio",
    "parse_config",
    "request_id_in",
    "request_id_of",
    "result_code",
    "run_on_fastest_loop",
    "server_stack",
    "unauthenticated",
]

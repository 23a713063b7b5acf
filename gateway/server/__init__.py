"""The HTTP surface: the API on the service layer, and the uvicorn stack it is served on.

The configuration, authentication, call pipeline and metrics live in :mod:`gateway.service`;
they are re-exported here under the names this package has always offered.
"""

from gateway.server._app import GatewayApp, output_json
from gateway.server._http_service import Service, build_service
from gateway.server._workers import (
    check_workers,
    serve_workers,
    worker_audit_path,
    worker_config,
)
from gateway.service import (
    Authenticator,
    AuthFailure,
    BoundTool,
    CallResult,
    ConfigError,
    Gateway,
    GatewayConfig,
    GatewayMetrics,
    Stack,
    api_key_digest,
    build_engine,
    expand,
    import_tools,
    load_config,
    load_tools,
    named_asyncio,
    parse_config,
    run_on_fastest_loop,
    server_stack,
)

__all__ = [
    "AuthFailure",
    "Authenticator",
    "BoundTool",
    "CallResult",
    "ConfigError",
    "Gateway",
    "GatewayApp",
    "GatewayConfig",
    "GatewayMetrics",
    "Service",
    "Stack",
    "api_key_digest",
    "build_engine",
    "build_service",
    "check_workers",
    "expand",
    "import_tools",
    "load_config",
    "load_tools",
    "named_asyncio",
    "output_json",
    "parse_config",
    "run_on_fastest_loop",
    "serve_workers",
    "server_stack",
    "worker_audit_path",
    "worker_config",
]

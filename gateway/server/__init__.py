"""The service surfaces: the call pipeline, the HTTP API, configuration and authentication."""

from gateway.server._app import GatewayApp, output_json
from gateway.server._auth import Authenticator, AuthFailure
from gateway.server._config import (
    ConfigError,
    GatewayConfig,
    api_key_digest,
    import_tools,
    load_config,
    parse_config,
)
from gateway.server._gateway import BoundTool, CallResult, Gateway, expand
from gateway.server._metrics import GatewayMetrics
from gateway.server._service import Service, build_engine, build_service, load_tools
from gateway.server._stack import Stack, run_on_fastest_loop, server_stack

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
    "expand",
    "import_tools",
    "load_config",
    "load_tools",
    "output_json",
    "parse_config",
    "run_on_fastest_loop",
    "server_stack",
]

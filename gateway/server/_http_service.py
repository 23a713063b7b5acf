"""The HTTP service assembled from a configuration: the shared components and the app."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.applications import Starlette

from gateway.audit import JsonlFileSink
from gateway.console import build_console
from gateway.policy import DecisionCache, PolicyEngine, ToolVisibility
from gateway.server._app import GatewayApp
from gateway.server._authzen import AuthzenApi
from gateway.service import Components, Gateway, GatewayConfig, build_components, load_tools


@dataclass(slots=True)
class Service:
    """The assembled parts, kept for tests and for the CLI."""

    config: GatewayConfig
    engine: PolicyEngine
    cache: DecisionCache | None
    sink: JsonlFileSink | None
    gateway: Gateway
    app: GatewayApp
    #: Where it is served (``http://host:port``), for the start-up line; set before serving.
    listening: str | None = None


def build_service(config: GatewayConfig) -> Service:
    """Assemble the HTTP service; the REST engine is opened by the app's lifespan.

    Raises:
        ConfigError: the policies do not load or the audit trail cannot be opened.
    """
    components = build_components(config)
    gateway = components.gateway(load_tools(config))

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await components.open()
        components.log_startup("serve", gateway, service.listening)
        try:
            yield
        finally:
            await components.close()

    app = GatewayApp(
        gateway,
        authenticator=components.authenticator,
        ready=components.ready,
        metrics=components.metrics,
        max_body_bytes=config.server.max_body_bytes,
        lifespan=lifespan,
        access_log=config.log.access,
        approvals=components.desk,
        authzen=_authzen(config, gateway, components),
        tracing=config.telemetry.enabled,
        visibility=ToolVisibility.for_engine(components.engine, cache=components.cache),
        console=build_console(config, components),
    )
    service = Service(
        config=config,
        engine=components.engine,
        cache=components.cache,
        sink=components.sink,
        gateway=gateway,
        app=app,
    )
    return service


def _authzen(config: GatewayConfig, gateway: Gateway, components: Components) -> AuthzenApi | None:
    # The AuthZEN decision API ([authzen]) on this gateway's tools, policy and audit trail.
    table = config.authzen
    if not table.enabled:
        return None
    return AuthzenApi(
        gateway,
        components.authenticator,
        audit=components.trail,
        trusted_peps=table.trusted_peps,
        base_url=table.base_url,
        max_evaluations=table.max_evaluations,
        max_body_bytes=config.server.max_body_bytes,
        metrics=components.metrics,
    )

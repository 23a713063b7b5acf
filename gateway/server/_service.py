"""Assembly of the whole service from a configuration: engine, cache, audit, tools, app."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.applications import Starlette

from gateway._contract import Tool
from gateway.audit import AuditTrail, JsonlFileSink, Masker
from gateway.audit._mask import (
    DEFAULT_MASKED_KEYS,
    DEFAULT_NAME_PATTERNS,
    DEFAULT_VALUE_PATTERNS,
)
from gateway.policy import (
    DecisionCache,
    EmbeddedEngine,
    OpaRestEngine,
    PathView,
    PolicyAuthorizer,
    PolicyEngine,
)
from gateway.server._app import GatewayApp
from gateway.server._auth import Authenticator
from gateway.server._config import ConfigError, GatewayConfig, import_tools
from gateway.server._gateway import Gateway
from gateway.server._metrics import GatewayMetrics


@dataclass(slots=True)
class Service:
    """The assembled parts, kept for tests and for the CLI."""

    config: GatewayConfig
    engine: PolicyEngine
    cache: DecisionCache | None
    sink: JsonlFileSink | None
    gateway: Gateway
    app: GatewayApp


def load_tools(config: GatewayConfig) -> list[Tool]:
    """Import every ``tools.modules`` entry (the config's directory is importable)."""
    if config.source is not None:
        root = str(config.source.parent)
        if root not in sys.path:
            sys.path.insert(0, root)
    tools: list[Tool] = []
    for spec in config.tools:
        tools.extend(import_tools(spec))
    return tools


def build_engine(config: GatewayConfig) -> PolicyEngine:
    """The configured engine (the REST engine still needs ``open()``)."""
    engine_config = config.engine
    if engine_config.kind == "embedded":
        assert engine_config.policies is not None  # noqa: S101 - validated by the config
        return EmbeddedEngine.from_directory(
            engine_config.policies,
            warm_up_path=engine_config.decision_path,
            timeout=engine_config.timeout_s,
        )
    assert engine_config.url is not None  # noqa: S101 - validated by the config
    return OpaRestEngine(
        engine_config.url,
        timeout=engine_config.timeout_s,
        revision_interval=engine_config.revision_interval_s,
    )


def build_path_view(config: GatewayConfig) -> PathView | None:
    """The view that resolves the path arguments ``[paths]`` names, if it names any."""
    if not config.paths.resolve:
        return None
    return PathView(config.paths.resolve, mounts=config.paths.mounts)


def build_service(config: GatewayConfig) -> Service:
    """Assemble the service; the REST engine is opened by the app's lifespan."""
    engine = build_engine(config)
    cache = (
        DecisionCache(
            maxsize=config.cache.max_entries,
            max_ttl=config.cache.max_ttl_s,
            default_ttl=config.cache.default_ttl_s,
        )
        if config.cache.enabled
        else None
    )
    authorizer = PolicyAuthorizer(
        engine, path=config.engine.decision_path, cache=cache, path_view=build_path_view(config)
    )
    sink: JsonlFileSink | None = None
    trail: AuditTrail | None = None
    if config.audit.enabled:
        assert config.audit.path is not None  # noqa: S101 - validated by the config
        key = config.audit.key
        try:
            sink = JsonlFileSink(
                config.audit.path,
                fsync=config.audit.fsync,
                max_bytes=config.audit.max_bytes,
                key=key,
            )
        except OSError as exc:
            raise ConfigError(
                f"audit.path: cannot open {config.audit.path}: {exc.strerror or exc}"
            ) from None
        masker = Masker(
            keys=DEFAULT_MASKED_KEYS | set(config.audit.mask_keys),
            patterns=DEFAULT_NAME_PATTERNS + config.audit.mask_patterns,
            values=DEFAULT_VALUE_PATTERNS + config.audit.mask_values,
            pointers=config.audit.mask_pointers,
        )
        trail = AuditTrail(sink, masker=masker)
    metrics = GatewayMetrics(cache)
    gateway = Gateway(load_tools(config), authorizer=authorizer, audit=trail, metrics=metrics)

    async def ready() -> bool:
        if isinstance(engine, OpaRestEngine):
            return await engine.healthy()
        return True

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if isinstance(engine, OpaRestEngine):
            await engine.open()
        try:
            yield
        finally:
            if isinstance(engine, OpaRestEngine):
                await engine.close()
            if sink is not None:
                sink.close()

    app = GatewayApp(
        gateway,
        authenticator=Authenticator(config.auth),
        ready=ready,
        metrics=metrics,
        max_body_bytes=config.server.max_body_bytes,
        lifespan=lifespan,
    )
    return Service(config=config, engine=engine, cache=cache, sink=sink, gateway=gateway, app=app)

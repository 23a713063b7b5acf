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
    PolicyLoadError,
    VerificationKey,
    normalize_path,
)
from gateway.server._app import GatewayApp
from gateway.server._auth import Authenticator
from gateway.server._config import ConfigError, EngineConfig, GatewayConfig, import_tools
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
    """The configured engine (the REST engine still needs ``open()``).

    Raises:
        ConfigError: the embedded engine's bundle or policies do not load, or cannot
            answer the decision path (named by its key; the cause only as the engine
            reports it, never a policy's text).
    """
    engine_config = config.engine
    if engine_config.kind == "embedded":
        return _embedded_engine(engine_config)
    assert engine_config.url is not None  # noqa: S101 - validated by the config
    return OpaRestEngine(
        engine_config.url,
        timeout=engine_config.timeout_s,
        revision_interval=engine_config.revision_interval_s,
    )


def _embedded_engine(engine_config: EngineConfig) -> EmbeddedEngine:
    decision_path = normalize_path(engine_config.decision_path)
    key = "engine.bundle" if engine_config.bundle is not None else "engine.policies"
    try:
        if engine_config.bundle is not None:
            verification = None
            if engine_config.verification_key is not None:
                verification = VerificationKey(
                    engine_config.verification_key,
                    algorithm=engine_config.verification_algorithm,
                    key_id=engine_config.verification_key_id,
                    scope=engine_config.verification_scope,
                )
            engine = EmbeddedEngine.from_bundle(
                engine_config.bundle, verification=verification, timeout_s=engine_config.timeout_s
            )
        else:
            assert engine_config.policies is not None  # noqa: S101 - validated by the config
            engine = EmbeddedEngine.from_directory(
                engine_config.policies,
                entrypoints=(decision_path,),
                opa_binary=engine_config.opa_binary,
                timeout_s=engine_config.timeout_s,
            )
    except PolicyLoadError as exc:
        # What the engine says (opa's compile errors name the file and line), never more.
        detail = f": {' '.join(exc.detail.split())}" if exc.detail else ""
        raise ConfigError(f"{key}: the policy does not load ({exc}){detail}") from None
    if decision_path not in engine.entrypoints:
        engine.close()
        raise ConfigError(
            f"engine.decision_path: {engine_config.decision_path!r} is not an entrypoint "
            f"of the bundle (it has: {', '.join(engine.entrypoints) or 'none'})"
        )
    return engine


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

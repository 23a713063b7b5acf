"""The one builder every surface assembles from: engine, cache, authorizer, audit, metrics.

:func:`build_components` turns a validated configuration into the parts the HTTP API and the
MCP service both serve with; each surface adds only its own front. Nothing is started: the
REST engine is opened, and the audit sink closed, by :meth:`Components.open` and
:meth:`Components.close`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass

from opentelemetry.sdk.trace import TracerProvider

from gateway._authorization import Authorizer
from gateway._contract import Tool
from gateway._registry import Registry
from gateway.approvals import (
    ApprovalDesk,
    ApprovalGate,
    ApprovalStore,
    AuditEvents,
    FileApprovalStore,
    RedisApprovalStore,
)
from gateway.audit import (
    DEFAULT_MASKED_KEYS,
    DEFAULT_NAME_PATTERNS,
    DEFAULT_VALUE_PATTERNS,
    Anchorer,
    AnchorLog,
    AuditTrail,
    JsonlFileSink,
    Masker,
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
from gateway.replay import Assembly, SettingsError, assemble
from gateway.service._auth import Authenticator
from gateway.service._config import ConfigError, EngineConfig, GatewayConfig, import_tools
from gateway.service._logs import ServiceLog, Startup, engine_name, log_startup
from gateway.service._metrics import GatewayMetrics, TimedAuthorizer
from gateway.service._observe import NO_OBSERVER, CallObserver, ServiceObserver
from gateway.service._pipeline import Gateway
from gateway.service._tracing import SCOPE as TRACING_SCOPE
from gateway.service._tracing import TracingObserver, otlp_provider, use_tracer
from gateway.state import (
    MemoryStateStore,
    RedisStateStore,
    StatefulAuthorizer,
    StateSettings,
    StateStore,
)


@dataclass(slots=True)
class Components:
    """The assembled parts of one service instance, shared by every surface on it."""

    config: GatewayConfig
    engine: PolicyEngine
    cache: DecisionCache | None
    authorizer: PolicyAuthorizer
    sink: JsonlFileSink | None
    trail: AuditTrail | None
    metrics: GatewayMetrics
    authenticator: Authenticator
    #: The replay capture and shadow evaluation (``[replay]``, ``[shadow]``), when either is on.
    replay: Assembly | None = None
    #: Told about every call's decision and tool run (the operator's state lines).
    observer: ServiceObserver | None = None
    #: The spans' provider (``[telemetry]``), when tracing is on; flushed by :meth:`close`.
    tracing: TracerProvider | None = None
    #: The approval gate of every call and the approvers' desk (``[approvals]``), when on.
    approvals: ApprovalGate | None = None
    desk: ApprovalDesk | None = None
    #: The session and quota state (``[state]``) every call's decision goes through.
    state: StateStore | None = None
    state_settings: StateSettings | None = None

    #: Anchors the chain's durable head in ``audit.anchor_path``, when one is set.
    anchorer: Anchorer | None = None

    def gateway(self, tools: Iterable[Tool | Registry]) -> Gateway:
        """A call pipeline serving ``tools`` behind this authorizer, audit trail and metrics."""
        authorizer: Authorizer = (
            self.replay.authorizer if self.replay is not None else self.authorizer
        )
        # Every decision timed in gateway_decision_seconds, by engine and cache (not state).
        authorizer = TimedAuthorizer(authorizer, self.metrics, engine=self.config.engine.kind)
        if self.state is not None:
            authorizer = StatefulAuthorizer(authorizer, self.state, settings=self.state_settings)
        observer: CallObserver = self.observer if self.observer is not None else NO_OBSERVER
        if self.tracing is not None:
            observer = TracingObserver(
                self.tracing.get_tracer(TRACING_SCOPE),
                observer,
                policy=f"{engine_name(self.engine.identity)}#{self.authorizer.path}",
                revision=self.engine.revision,
            )
        return Gateway(
            tools,
            authorizer=authorizer,
            audit=self.trail,
            metrics=self.metrics,
            observer=observer,
            approvals=self.approvals,
        )

    def log_startup(self, surface: str, gateway: Gateway, listening: str | None = None) -> None:
        """Write the start-up line: what ``gateway`` serves, where, by which engine, revision."""
        log_startup(
            Startup(
                surface=surface,
                tools=tuple(d.name for d in gateway.definitions()),
                engine=self.engine.identity,
                revision=self.engine.revision(),
                decision_path=self.authorizer.path,
                audit=str(self.config.audit.path) if self.trail is not None else None,
                listening=listening,
            )
        )

    async def open(self) -> None:
        """Open the engine when it is an OPA server; start following ``engine.bundle_url``."""
        if self.tracing is not None:
            use_tracer(self.tracing.get_tracer(TRACING_SCOPE))
        if isinstance(self.engine, OpaRestEngine):
            await self.engine.open()
            if self.observer is not None:
                self.observer.log.engine_probed(await self.engine.healthy())
        elif isinstance(self.engine, EmbeddedEngine) and self.config.engine.bundle_url:
            self.engine.start_polling()
        if self.anchorer is not None:
            self.anchorer.start()
        if self.replay is not None:
            await self.replay.open()

    async def close(self) -> None:
        """Close the engine when it is an OPA server, then the audit sink."""
        if self.anchorer is not None:
            await asyncio.to_thread(self.anchorer.stop)  # anchors the last head
        try:
            if self.replay is not None:
                await self.replay.close()  # before the sink: its last shadow records go there
            if isinstance(self.engine, OpaRestEngine):
                await self.engine.close()
            elif isinstance(self.engine, EmbeddedEngine) and self.config.engine.bundle_url:
                self.engine.stop_polling(wait=False)
        finally:
            try:
                if self.state is not None:
                    await self.state.close()
            finally:
                if self.sink is not None:
                    self.sink.close()
                if self.tracing is not None:
                    use_tracer(None)
                    self.tracing.shutdown()  # exports the spans still queued

    async def ready(self) -> bool:
        """Whether the engine can answer (an OPA server is asked; the embedded one can)."""
        if isinstance(self.engine, OpaRestEngine):
            healthy = await self.engine.healthy()
            if self.observer is not None:
                self.observer.log.engine_probed(healthy)
            return healthy
        return True


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
    verification = None
    if engine_config.verification_key is not None:
        verification = VerificationKey(
            engine_config.verification_key,
            algorithm=engine_config.verification_algorithm,
            key_id=engine_config.verification_key_id,
            scope=engine_config.verification_scope,
        )
    try:
        if engine_config.bundle_url is not None:
            key = "engine.bundle_url"
            # Polling starts with the service (Components.open), not with its assembly.
            engine = EmbeddedEngine.from_bundle_server(
                engine_config.bundle_url,
                verification=verification,
                poll_interval_s=engine_config.poll_interval_s,
                poll_max_interval_s=engine_config.poll_max_interval_s,
                headers=_bundle_headers(engine_config.bundle_token_env),
                download_timeout_s=engine_config.download_timeout_s,
                max_bundle_bytes=engine_config.max_bundle_bytes,
                start=False,
                timeout_s=engine_config.timeout_s,
            )
        elif engine_config.bundle is not None:
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


def _bundle_headers(token_env: str | None) -> dict[str, str] | None:
    # The bundle server's bearer token, from the environment: named in errors by its
    # variable, never by its value.
    if token_env is None:
        return None
    token = os.environ.get(token_env, "")
    if not token:
        raise ConfigError(f"engine.bundle_token_env: ${token_env} is not set")
    if not all(33 <= ord(char) <= 126 for char in token):
        raise ConfigError(f"engine.bundle_token_env: ${token_env} is not a bearer token")
    return {"Authorization": f"Bearer {token}"}


def build_path_view(config: GatewayConfig) -> PathView | None:
    """The view that resolves the path arguments ``[paths]`` names, if it names any."""
    if not config.paths.resolve:
        return None
    return PathView(config.paths.resolve, mounts=config.paths.mounts)


def build_approvals(
    config: GatewayConfig, trail: AuditTrail | None
) -> tuple[ApprovalGate | None, ApprovalDesk | None]:
    """The approval gate and desk over one durable store (``[approvals]``), when enabled.

    Raises:
        ConfigError: approvals without an audit trail (every approval step is recorded).
    """
    table = config.approvals
    if not table.enabled:
        return None, None
    if trail is None:
        raise ConfigError("approvals: every approval step is audited; enable [audit]")
    store: ApprovalStore
    if table.backend == "redis":
        state = config.state
        assert state.url is not None  # noqa: S101 - validated by the config
        store = RedisApprovalStore.from_url(
            state.url, prefix=state.key_prefix, timeout_s=state.timeout_s, clock=time.time
        )
    else:
        assert table.path is not None  # noqa: S101 - validated by the config
        store = FileApprovalStore(table.path, clock=time.time)
    events = AuditEvents(trail.sink, clock=time.time)
    gate = ApprovalGate(store, events=events, default_ttl_s=table.ttl_s)
    return gate, ApprovalDesk(store, events=events)


def build_state_store(config: GatewayConfig) -> StateStore:
    """The ``[state]`` backend: in this process, or the Redis server every replica shares."""
    table = config.state
    if table.backend == "redis":
        assert table.url is not None  # noqa: S101 - validated by the config
        return RedisStateStore(table.url, timeout_s=table.timeout_s, prefix=table.key_prefix)
    return MemoryStateStore(
        max_sessions=table.max_sessions, max_sessions_per_caller=table.max_sessions_per_caller
    )


def build_state_settings(config: GatewayConfig) -> StateSettings:
    """Which tools' decisions read state, the windows counted, the history kept."""
    table = config.state
    return StateSettings(
        tools=frozenset(table.tools),
        windows=tuple(table.windows_s),
        history_max=table.history_max,
        session_ttl_s=table.session_ttl_s,
    )


def build_components(config: GatewayConfig) -> Components:
    """Assemble engine, decision cache, authorizer, audit trail, metrics and authenticator.

    Raises:
        ConfigError: the engine's policies do not load, the audit trail cannot be opened, or
            the replay capture or the shadow candidate cannot be built (named by its key).
    """
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
    metrics = GatewayMetrics(cache)
    path_view = build_path_view(config)
    authorizer = PolicyAuthorizer(
        engine, path=config.engine.decision_path, cache=cache, path_view=path_view
    )
    sink: JsonlFileSink | None = None
    trail: AuditTrail | None = None
    replay: Assembly | None = None
    if config.audit.enabled:
        assert config.audit.path is not None  # noqa: S101 - validated by the config
        try:
            sink = JsonlFileSink(
                config.audit.path,
                fsync=config.audit.fsync,
                max_bytes=config.audit.max_bytes,
                key=config.audit.key,
                sync_file=metrics.timed_fsync(os.fsync),  # gateway_audit_fsync_seconds
            )
        except OSError as exc:
            if isinstance(engine, EmbeddedEngine):
                engine.close()  # nothing else holds it: its tick thread must not outlive it
            raise ConfigError(
                f"audit.path: cannot open {config.audit.path}: {exc.strerror or exc}"
            ) from None
        replay = _assemble_replay(config, authorizer, sink, path_view)
        masker = Masker(
            keys=DEFAULT_MASKED_KEYS | set(config.audit.mask_keys),
            patterns=DEFAULT_NAME_PATTERNS + config.audit.mask_patterns,
            values=DEFAULT_VALUE_PATTERNS + config.audit.mask_values,
            pointers=config.audit.mask_pointers,
        )
        trail = AuditTrail(replay.sink if replay is not None else sink, masker=masker)
    else:
        replay = _assemble_replay(config, authorizer, None, path_view)  # refuses without one
    gate, desk = build_approvals(config, trail)
    if sink is not None:
        metrics.watch_audit(sink)
    if replay is not None:
        metrics.registry.register(replay.collector)
    anchorer = None
    if sink is not None and config.audit.anchor_path is not None and config.audit.key:
        anchorer = Anchorer(
            sink.path,
            AnchorLog(config.audit.anchor_path, config.audit.key),
            writer=config.audit.anchor_name or f"{socket.gethostname()}:{sink.path.name}",
            key=config.audit.key,
            interval_s=config.audit.anchor_interval_s,
        )
    return Components(
        config=config,
        engine=engine,
        cache=cache,
        authorizer=authorizer,
        sink=sink,
        trail=trail,
        anchorer=anchorer,
        metrics=metrics,
        authenticator=Authenticator(config.auth),
        replay=replay,
        approvals=gate,
        desk=desk,
        state=build_state_store(config),
        state_settings=build_state_settings(config),
        observer=ServiceObserver(
            ServiceLog(engine.identity, interval=config.log.state_interval_s),
            audited=trail is not None,
        ),
        tracing=_tracing(config),
    )


def _assemble_replay(
    config: GatewayConfig,
    authorizer: PolicyAuthorizer,
    sink: JsonlFileSink | None,
    path_view: PathView | None,
) -> Assembly | None:
    # The capture and the shadow candidate ([replay], [shadow]); on failure nothing built
    # so far may outlive the error (the engine's tick thread, the open trail).
    try:
        return assemble(
            authorizer, sink, replay=config.replay, shadow=config.shadow, path_view=path_view
        )
    except (SettingsError, OSError) as exc:
        if isinstance(authorizer.engine, EmbeddedEngine):
            authorizer.engine.close()
        if sink is not None:
            sink.close()
        if isinstance(exc, OSError):
            raise ConfigError(
                f"replay.capture_dir: cannot open it: {exc.strerror or exc}"
            ) from None
        raise ConfigError(str(exc)) from None


def _tracing(config: GatewayConfig) -> TracerProvider | None:
    # The OTLP/HTTP exporter of [telemetry], when on (nothing is sent until a span ends).
    table = config.telemetry
    if not table.enabled:
        return None
    return otlp_provider(
        table.endpoint,
        service_name=table.service_name,
        headers=table.headers,
        timeout_s=table.timeout_s,
    )

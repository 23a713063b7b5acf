"""The service configuration: one TOML file, validated at start with errors naming the key.

The file is first read into its table models (:mod:`gateway.service._config_models`: unknown
keys and wrong types refused by dotted path), then checked for what the values mean together
and turned into the validated :class:`GatewayConfig` the builder assembles from. Relative
paths in the file are resolved against the file's own directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import ipaddress
import math
import os
import re
import secrets
import tomllib
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gateway.audit import FsyncPolicy
from gateway.policy import DEFAULT_DECISION_PATH, DEFAULT_MAX_TTL, normalize_path
from gateway.policy._bundle import DEFAULT_MAX_BUNDLE_BYTES  # not exported by gateway.policy
from gateway.policy._rest import DEFAULT_REVISION_INTERVAL  # not exported by gateway.policy yet
from gateway.policy._wasm import DEFAULT_POLL_INTERVAL_S, DEFAULT_TIMEOUT_S  # nor these yet
from gateway.replay import ReplaySettings, SettingsError, ShadowSettings, parse_replay, parse_shadow
from gateway.service._config_models import (
    DEFAULT_CACHE_ENTRIES,
    DEFAULT_DOWNLOAD_TIMEOUT_S,
    DEFAULT_JWT_CLAIMS,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_SESSIONS_PER_CALLER,
    DEFAULT_SESSION_IDLE_TIMEOUT_S,
    DEFAULT_UPSTREAM_TIMEOUT_S,
    MAX_WORKERS,
    ApiKeysFile,
    ApiKeyTable,
    ApprovalsTable,
    AuditTable,
    AuthTable,
    AuthzenTable,
    CacheTable,
    ConfigError,
    ConfigFile,
    ConsoleTable,
    EngineTable,
    JwtTable,
    LogTable,
    McpTable,
    OAuthTable,
    PathsTable,
    ServerTable,
    StateTable,
    TelemetryTable,
    UpstreamTable,
    VerificationTable,
    read_table,
)
from gateway.service._logs import check_log_table
from gateway.service._oauth import JwksCache, ResourceServer
from gateway.state import StateSettings
from gateway.state._memory import DEFAULT_MAX_SESSIONS

__all__ = ["ConfigError"]  # re-exported: the configuration's error is defined with its models

_ENGINES: Final = ("embedded", "opa")
_FSYNC: Final = tuple(policy.value for policy in FsyncPolicy)
_ALGORITHMS: Final = ("HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384")
_UPSTREAM_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TOOL_PREFIX: Final = re.compile(r"[A-Za-z0-9_-]{0,63}")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

#: The shortest audit chain key accepted, in bytes: a shorter HMAC key can be guessed.
MIN_AUDIT_KEY_BYTES: Final = 16

#: Every credential published in this repository (the README's demo keys, the examples, the
#: test and reliability suites). Anyone can read them, so a listener that is not loopback
#: refuses to start when one of them would let a caller in.
PUBLISHED_KEYS: Final = (
    "demo-key-alice",
    "demo-key-bob",
    "demo-key-carol",
    "demo-key-mallory",
    "demo-key-wendy",
    "reliability-key-alice",
    "reliability-key-bob",
    "reliability-key-carol",
    "reliability-key-mallory",
    "test-key-analyst",
    "test-key-anna",
    "test-key-clerk",
    "test-key-mallory",
    "test-key-tess",
    "test-key-theo",
    "test-key-tina",
    "test-key-treasurer",
    "alice-key",
    "bob-key",
    "carol-key",
    "good-key",
)
_PUBLISHED_DIGESTS: Final = frozenset(
    hashlib.sha256(key.encode("utf-8")).hexdigest() for key in PUBLISHED_KEYS
)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Which Rego engine decides, and how."""

    kind: str = "embedded"
    #: The embedded engine's policy: a compiled bundle (file or directory) ...
    bundle: Path | None = None
    #: ... or the bundle an OPA bundle server serves, followed as it changes ...
    bundle_url: str | None = None
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    download_timeout_s: float = DEFAULT_DOWNLOAD_TIMEOUT_S
    max_bundle_bytes: int = DEFAULT_MAX_BUNDLE_BYTES
    poll_max_interval_s: float | None = None
    #: The name of the environment variable holding the bundle server's bearer token.
    bundle_token_env: str | None = None
    #: ... or a policy directory compiled at start by the ``opa`` binary.
    policies: Path | None = None
    #: The opa binary that compiles ``policies`` (default ``$OPA_BIN``, then ``PATH``).
    opa_binary: Path | None = None
    #: A PEM public key (or HS* secret) the bundle's signature must verify against.
    verification_key: bytes | None = field(default=None, repr=False)
    verification_algorithm: str = "RS256"
    verification_key_id: str | None = None
    verification_scope: str | None = None
    url: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    revision_interval_s: float = DEFAULT_REVISION_INTERVAL
    decision_path: str = DEFAULT_DECISION_PATH


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheConfig:
    """The decision cache."""

    enabled: bool = True
    max_entries: int = DEFAULT_CACHE_ENTRIES
    max_ttl_s: float = DEFAULT_MAX_TTL
    default_ttl_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditConfig:
    """The audit trail."""

    enabled: bool = True
    path: Path | None = None
    fsync: str = FsyncPolicy.ALWAYS.value
    max_bytes: int | None = None
    key_env: str | None = None
    key_file: Path | None = None
    generate_key: bool = False
    unkeyed: bool = False
    #: The chain's HMAC key, read from ``key_env`` or ``key_file`` (``None``: unkeyed).
    key: bytes | None = field(default=None, repr=False)
    mask_keys: tuple[str, ...] = ()
    mask_patterns: tuple[str, ...] = ()
    mask_values: tuple[str, ...] = ()
    mask_pointers: tuple[str, ...] = ()
    #: Where the chain's durable head is anchored, how often, and under which writer name.
    anchor_path: Path | None = None
    anchor_interval_s: float = 60.0
    anchor_name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiKey:
    """One API key: its SHA-256 (hex), the caller context it stands for, where it was set."""

    sha256: str
    context: Mapping[str, Any]
    where: str = field(default="auth.api_keys", compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class JwtConfig:
    """JWT bearer tokens: keys, checks and the claim-to-context mapping."""

    algorithms: tuple[str, ...]
    secret: bytes | None = None
    public_key: str | None = None
    jwks: str | None = None
    issuer: str | None = None
    audience: str | None = None
    leeway_s: float = 0.0
    claims: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_JWT_CLAIMS))
    jwks_url: str | None = None
    jwks_max_age_s: float = 300.0
    jwks_min_refetch_s: float = 10.0
    max_lifetime_s: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthConfig:
    """How callers authenticate (at least one method is required)."""

    api_keys: tuple[ApiKey, ...] = ()
    jwt: JwtConfig | None = None
    #: The gateway as an OAuth protected resource (``[auth.oauth]``).
    oauth: ResourceServer | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig:
    """Where the HTTP service listens and what it accepts."""

    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: Worker processes of ``gateway serve`` (each its own cache and audit chain).
    workers: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class McpUpstreamConfig:
    """One upstream MCP server whose tools are served behind the policy (``[[mcp.upstreams]]``).

    Exactly one of ``command`` (a local server spoken to over stdio; ``args``, ``env`` and
    ``cwd`` go with it) or ``url`` (streamable HTTP; ``headers`` go with it). ``prefix`` is
    prepended verbatim to every imported tool name (``"fs__"`` makes ``fs__read_file``).
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    prefix: str = ""
    timeout_s: float = DEFAULT_UPSTREAM_TIMEOUT_S


@dataclass(frozen=True, slots=True, kw_only=True)
class McpConfig:
    """The MCP surface (``[mcp]``): the stdio caller context and the upstream servers.

    ``stdio_context`` is the caller context of every call made over the stdio transport,
    whose launcher is local and trusted; over HTTP, callers authenticate as in ``[auth]``.
    Over HTTP, each principal may hold ``max_sessions_per_caller`` sessions at once, and a
    session with no request in flight for ``session_idle_timeout_s`` seconds ends.
    """

    stdio_context: Mapping[str, Any] | None = None
    upstreams: tuple[McpUpstreamConfig, ...] = ()
    max_sessions_per_caller: int = DEFAULT_MAX_SESSIONS_PER_CALLER
    session_idle_timeout_s: float = DEFAULT_SESSION_IDLE_TIMEOUT_S


@dataclass(frozen=True, slots=True, kw_only=True)
class PathsConfig:
    """``[paths]``: path arguments the gateway resolves on its view of the tools' files."""

    # Tool name (as the policy sees it) -> JSON pointers of its path arguments.
    resolve: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Tool-side folder -> the folder where the gateway sees it.
    mounts: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayConfig:
    """The whole configuration."""

    engine: EngineConfig
    cache: CacheConfig
    audit: AuditConfig
    auth: AuthConfig
    server: ServerConfig
    tools: tuple[str, ...]
    mcp: McpConfig = field(default_factory=McpConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    #: ``[replay]``: the capture, when on.
    replay: ReplaySettings | None = None
    #: ``[shadow]``: the shadow candidate, when on.
    shadow: ShadowSettings | None = None
    #: ``[log]``: level, format, access log.
    log: LogTable = field(default_factory=LogTable)
    #: ``[authzen]``: the AuthZEN decision API.
    authzen: AuthzenTable = field(default_factory=AuthzenTable)
    #: ``[telemetry]``: OpenTelemetry traces.
    telemetry: TelemetryTable = field(default_factory=TelemetryTable)
    #: ``[approvals]``: the approval store, when on (its path resolved).
    approvals: ApprovalsTable = field(default_factory=ApprovalsTable)
    #: ``[state]``: the session and quota state (its Redis URL resolved from the env).
    state: StateTable = field(default_factory=StateTable)
    #: ``[console]``: the operator console (its replay report folder resolved).
    console: ConsoleTable = field(default_factory=ConsoleTable)
    source: Path | None = None


def _state(table: StateTable) -> StateTable:
    # The backend and its settings; a Redis URL from url_env is read here, once.
    if table.backend not in ("memory", "redis"):
        raise ConfigError('state.backend: must be "memory" or "redis"')
    url = table.url
    if table.backend == "redis":
        if (table.url is None) == (table.url_env is None):
            raise ConfigError("state.url: exactly one of url and url_env with the redis backend")
        if table.url_env is not None:
            url = os.environ.get(table.url_env)
            if not url:
                raise ConfigError(f"state.url_env: the variable {table.url_env} is not set")
        assert url is not None  # noqa: S101 - one of the two is set
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError("state.url: must be a redis://, rediss:// or unix:// URL")
    elif table.url is not None or table.url_env is not None:
        raise ConfigError('state.url: only with backend = "redis"')
    if not (math.isfinite(table.timeout_s) and 0 < table.timeout_s <= 60):
        raise ConfigError("state.timeout_s: must be positive and at most 60")
    if table.max_sessions < 1:
        raise ConfigError("state.max_sessions: must be at least 1")
    per_caller = table.max_sessions_per_caller
    if per_caller is not None and not 1 <= per_caller <= table.max_sessions:
        raise ConfigError("state.max_sessions_per_caller: must be between 1 and max_sessions")
    if table.backend == "redis" and (
        per_caller is not None or table.max_sessions != DEFAULT_MAX_SESSIONS
    ):
        raise ConfigError(
            'state.max_sessions: only with backend = "memory" (Redis is bounded by its '
            "maxmemory, with maxmemory-policy noeviction)"
        )
    try:
        StateSettings(
            tools=frozenset(table.tools),
            windows=tuple(table.windows_s),
            history_max=table.history_max,
            session_ttl_s=table.session_ttl_s,
        )
    except ValueError as exc:
        raise ConfigError(f"state: {exc}") from None
    return dataclasses.replace(table, url=url, url_env=None)


def _approvals(table: ApprovalsTable, base: Path, state: StateTable) -> ApprovalsTable:
    if table.backend not in ("file", "redis"):
        raise ConfigError('approvals.backend: must be "file" or "redis"')
    if not table.enabled:
        return table
    if not 0 < table.ttl_s <= 7 * 86400:
        raise ConfigError("approvals.ttl_s: must be positive and at most a week")
    if table.backend == "redis":
        if state.backend != "redis":
            raise ConfigError('approvals.backend: "redis" uses the Redis of [state]; set it')
        return table
    if not table.path:
        raise ConfigError("approvals.path: required when approvals are enabled")
    return dataclasses.replace(table, path=str(_path(base, table.path)))


_CONSOLE_PATH: Final = re.compile(r"/[a-z0-9][a-z0-9_-]{0,63}")
#: Paths of the HTTP service the console's may not shadow.
_SERVICE_PATHS: Final = frozenset({"/v1", "/healthz", "/readyz", "/metrics", "/access", "/mcp"})


def _console(table: ConsoleTable, base: Path, workers: int) -> ConsoleTable:
    if not table.enabled:
        return table
    if not _CONSOLE_PATH.fullmatch(table.path) or table.path in _SERVICE_PATHS:
        raise ConfigError(
            "console.path: must be one lowercase path segment (`/console`) the service does not use"
        )
    if not (table.approvers or table.approver_roles or table.auditors or table.auditor_roles):
        raise ConfigError("console: name approvers or auditors (by subject or role)")
    for name in ("approvers", "approver_roles", "auditors", "auditor_roles"):
        if any(not entry for entry in getattr(table, name)):
            raise ConfigError(f"console.{name}: an entry is empty")
    if not (math.isfinite(table.idle_timeout_s) and 0 < table.idle_timeout_s <= 86400):
        raise ConfigError("console.idle_timeout_s: must be positive and at most a day")
    if not (
        math.isfinite(table.max_age_s) and table.idle_timeout_s <= table.max_age_s <= 7 * 86400
    ):
        raise ConfigError("console.max_age_s: must be at least idle_timeout_s and at most a week")
    if not 1 <= table.max_sessions <= 100_000:
        raise ConfigError("console.max_sessions: must be 1-100000")
    if not 1 <= table.trail_records <= 1_000_000:
        raise ConfigError("console.trail_records: must be 1-1000000")
    if workers != 1:
        # Console sessions live in the serving process: another worker would not know them.
        raise ConfigError("console: needs server.workers = 1 (its sessions are one process's)")
    reports = _path(base, table.replay_reports)
    return dataclasses.replace(table, replay_reports=None if reports is None else str(reports))


def _path(base: Path, value: str | None) -> Path | None:
    if value is None:
        return None
    path = Path(value)
    return path if path.is_absolute() else (base / path).resolve()


def _positive(value: float, key: str) -> float:
    if value <= 0:
        raise ConfigError(f"{key}: must be positive")
    return value


#: The bundle signature algorithms the policy layer verifies (a test pins them equal).
_BUNDLE_ALGORITHMS: Final = (
    *("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"),
    *("HS256", "HS384", "HS512"),
)


def _verification(
    table: VerificationTable | None, given: Mapping[str, Any], base: Path
) -> dict[str, Any]:
    if table is None or not given:  # an empty [engine.verification] asks for nothing
        return {}
    key_file = _path(base, table.key_file)
    if key_file is None:
        raise ConfigError("engine.verification.key_file: required to verify bundles")
    try:
        key = key_file.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"engine.verification.key_file: cannot read {key_file}: {exc.strerror or exc}"
        ) from None
    if table.algorithm not in _BUNDLE_ALGORITHMS:
        raise ConfigError(
            f"engine.verification.algorithm: must be one of {', '.join(_BUNDLE_ALGORITHMS)}"
        )
    return {
        "verification_key": key,
        "verification_algorithm": table.algorithm,
        "verification_key_id": table.key_id,
        "verification_scope": table.scope,
    }


def _embedded_sources(
    bundle: Path | None,
    policies: Path | None,
    bundle_url: str | None,
    *,
    opa_binary: Path | None,
    verified: bool,
) -> None:
    if sum(source is not None for source in (bundle, policies, bundle_url)) != 1:
        raise ConfigError(
            "engine.bundle: the embedded engine needs a compiled bundle (bundle), "
            "a policy directory (policies) or a bundle server (bundle_url), exactly one"
        )
    if bundle_url is not None and not bundle_url.startswith(("http://", "https://")):
        raise ConfigError("engine.bundle_url: must be an http(s):// URL")
    if bundle is not None and not bundle.exists():
        raise ConfigError(f"engine.bundle: {bundle} does not exist")
    if policies is not None and not policies.is_dir():
        raise ConfigError(f"engine.policies: {policies} is not a directory")
    if policies is not None and verified:
        raise ConfigError("engine.verification: verifies bundles, not policy directories")
    if opa_binary is not None and policies is None:
        raise ConfigError("engine.opa_binary: only compiles engine.policies")


def _engine(table: EngineTable, given: Mapping[str, Any], base: Path) -> EngineConfig:
    kind = table.kind
    if kind not in _ENGINES:
        raise ConfigError(f"engine.kind: must be one of {', '.join(_ENGINES)}, got {kind!r}")
    bundle = _path(base, table.bundle)
    policies = _path(base, table.policies)
    opa_binary = _path(base, table.opa_binary)
    verification = _verification(table.verification, _subtable(given, "verification"), base)
    url = table.url
    bundle_url = table.bundle_url
    if kind == "embedded":
        _embedded_sources(
            bundle, policies, bundle_url, opa_binary=opa_binary, verified=bool(verification)
        )
    elif url is None or not url.startswith(("http://", "https://")):
        raise ConfigError("engine.url: required for the opa engine (http(s)://host:port)")
    for name in (
        "poll_interval_s",
        "download_timeout_s",
        "max_bundle_bytes",
        "poll_max_interval_s",
        "bundle_token_env",
    ):
        if name in given and (kind != "embedded" or bundle_url is None):
            raise ConfigError(f"engine.{name}: only for engine.bundle_url")
    if table.max_bundle_bytes < 1:
        raise ConfigError("engine.max_bundle_bytes: must be at least 1")
    if table.poll_max_interval_s is not None and not (
        table.poll_max_interval_s >= table.poll_interval_s
    ):
        raise ConfigError("engine.poll_max_interval_s: must be at least engine.poll_interval_s")
    if table.bundle_token_env is not None and not _ENV_NAME.fullmatch(table.bundle_token_env):
        raise ConfigError("engine.bundle_token_env: must name an environment variable")
    try:
        normalize_path(table.decision_path)
    except ValueError:
        raise ConfigError(
            f"engine.decision_path: {table.decision_path!r} is not a path like "
            "gateway/authz/decision"
        ) from None
    return EngineConfig(
        kind=kind,
        bundle=bundle,
        bundle_url=bundle_url,
        poll_interval_s=_positive(table.poll_interval_s, "engine.poll_interval_s"),
        download_timeout_s=_positive(table.download_timeout_s, "engine.download_timeout_s"),
        max_bundle_bytes=table.max_bundle_bytes,
        poll_max_interval_s=table.poll_max_interval_s,
        bundle_token_env=table.bundle_token_env,
        policies=policies,
        opa_binary=opa_binary,
        **verification,
        url=url,
        timeout_s=_positive(table.timeout_s, "engine.timeout_s"),
        revision_interval_s=table.revision_interval_s,
        decision_path=table.decision_path,
    )


def _cache(table: CacheTable) -> CacheConfig:
    if table.max_entries < 1:
        raise ConfigError("cache.max_entries: must be at least 1")
    if table.max_ttl_s < 0:
        raise ConfigError("cache.max_ttl_s: TTLs must not be negative")
    if table.default_ttl_s < 0:
        raise ConfigError("cache.default_ttl_s: TTLs must not be negative")
    return CacheConfig(
        enabled=table.enabled,
        max_entries=table.max_entries,
        max_ttl_s=table.max_ttl_s,
        default_ttl_s=table.default_ttl_s,
    )


def audit_key_from_env(name: str, *, where: str = "audit.key_env") -> bytes:
    """The audit chain key held by environment variable ``name``, as the service reads it.

    Raises:
        ConfigError: the variable is unset, empty or too short (the message never holds it).
    """
    value = os.environ.get(name, "").strip()
    if not value:
        raise ConfigError(f"{where}: environment variable {name} is not set")
    return _long_enough(value.encode("utf-8"), where, f"environment variable {name}")


def audit_key_from_file(
    path: Path, *, where: str = "audit.key_file", generate: bool = False
) -> bytes:
    """The audit chain key held by the file at ``path`` (surrounding white space dropped).

    With ``generate``, a file that does not exist yet is created first (mode 0600) holding a
    fresh random key: for a local demo, whose trail and key stay on one machine.

    Raises:
        ConfigError: the file cannot be read (or made), or holds too short a key.
    """
    if generate and not path.exists():
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # made by a process that started at the same moment: read it
        except OSError as exc:
            raise ConfigError(f"{where}: cannot create {path}: {exc.strerror}") from None
        else:
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write(secrets.token_hex(32) + "\n")
    try:
        value = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror}") from None
    return _long_enough(value, where, str(path))


def _long_enough(key: bytes, where: str, what: str) -> bytes:
    if len(key) < MIN_AUDIT_KEY_BYTES:
        raise ConfigError(f"{where}: the key in {what} is shorter than {MIN_AUDIT_KEY_BYTES} bytes")
    return key


def _audit_key(table: AuditTable, key_file: Path | None) -> bytes | None:
    # A chain without a key proves nothing against anyone who can write its files (they
    # can rewrite and rehash it), so it takes an explicit `unkeyed = true`.
    if table.key_env is not None and key_file is not None:
        raise ConfigError("audit.key_file: set key_env or key_file, not both")
    if table.generate_key and key_file is None:
        raise ConfigError("audit.generate_key: needs key_file (where the key is kept)")
    if table.unkeyed and (table.key_env is not None or key_file is not None):
        raise ConfigError("audit.unkeyed: contradicts the key_env or key_file also set")
    if table.key_env is not None:
        return audit_key_from_env(table.key_env)
    if key_file is not None and table.enabled:
        return audit_key_from_file(key_file, generate=table.generate_key)
    if table.enabled and not table.unkeyed:
        raise ConfigError(
            "audit.key_env: the audit chain must be keyed: set key_env or key_file (or "
            "unkeyed = true to accept a trail that anyone who can write it can rewrite "
            "undetected)"
        )
    return None


def _audit(table: AuditTable, base: Path) -> AuditConfig:
    path = _path(base, table.path)
    if table.enabled and path is None:
        raise ConfigError("audit.path: required when the audit trail is enabled")
    if table.fsync not in _FSYNC:
        raise ConfigError(f"audit.fsync: must be one of {', '.join(_FSYNC)}")
    if table.max_bytes is not None and table.max_bytes < 1:
        raise ConfigError("audit.max_bytes: must be at least 1")
    key_file = _path(base, table.key_file)
    key = _audit_key(table, key_file)
    anchor_path = _path(base, table.anchor_path)
    if anchor_path is not None and key is None:
        raise ConfigError("audit.anchor_path: anchors are tagged with the audit key; set one")
    if not table.anchor_interval_s > 0:
        raise ConfigError("audit.anchor_interval_s: must be positive")
    for pointer in table.mask_pointers:
        if not pointer.startswith("/"):
            raise ConfigError(f"audit.mask_pointers: {pointer!r} is not a JSON pointer")
    for name in ("mask_patterns", "mask_values"):
        for index, text in enumerate(getattr(table, name)):
            try:
                re.compile(text)
            except re.error as exc:
                # The pattern is not quoted: a value pattern may spell out a secret.
                raise ConfigError(
                    f"audit.{name}: entry {index} is not a regular expression: {exc.msg} "
                    f"at position {exc.pos}"
                ) from None
    return AuditConfig(
        enabled=table.enabled,
        path=path,
        fsync=table.fsync,
        max_bytes=table.max_bytes,
        key_env=table.key_env,
        key_file=key_file,
        generate_key=table.generate_key,
        unkeyed=table.unkeyed,
        key=key,
        mask_keys=table.mask_keys,
        mask_patterns=table.mask_patterns,
        mask_values=table.mask_values,
        mask_pointers=table.mask_pointers,
        anchor_path=anchor_path,
        anchor_interval_s=table.anchor_interval_s,
        anchor_name=table.anchor_name,
    )


def _api_keys(tables: tuple[ApiKeyTable, ...], label: str = "auth.api_keys") -> tuple[ApiKey, ...]:
    keys = []
    for index, entry in enumerate(tables):
        where = f"{label}[{index}]."
        digest = entry.sha256
        if digest is None or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ConfigError(
                f"{where}sha256: must be the 64-character lower-case hex SHA-256 of the key"
            )
        context = entry.context
        if context is None or not isinstance(context.get("subject"), str):
            raise ConfigError(f"{where}context: must be a table with a string subject")
        keys.append(ApiKey(sha256=digest, context=dict(context), where=f"{label}[{index}]"))
    return tuple(keys)


def _api_keys_file(table: AuthTable, base: Path) -> tuple[ApiKey, ...]:
    # API keys kept out of the configuration file: a secret file (a Docker secret, say)
    # holding [[api_keys]] tables in the configuration's own form.
    path = _path(base, table.api_keys_file)
    if path is None:
        return ()
    label = f"auth.api_keys_file ({path})"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"auth.api_keys_file: cannot read {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        raise ConfigError(f"auth.api_keys_file: {path} is not valid TOML") from None
    keys = read_table(ApiKeysFile, data, f"{label} ")
    return _api_keys(keys.api_keys, f"{label} api_keys")


def _read_file(value: str | None, key: str, base: Path) -> str | None:
    path = _path(base, value)
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"auth.jwt.{key}: cannot read {path}: {exc.strerror}") from None


def _oauth(table: OAuthTable | None, has_jwt: bool) -> ResourceServer | None:
    if table is None:
        return None
    if not has_jwt:
        raise ConfigError("auth.oauth: needs [auth.jwt] (the tokens' keys, issuer and claims)")
    resource = table.resource
    if resource is None:
        raise ConfigError("auth.oauth.resource: required (the audience tokens must name)")
    parsed = urllib.parse.urlsplit(resource)
    if parsed.scheme != "https" or not parsed.hostname or parsed.query or parsed.fragment:
        raise ConfigError("auth.oauth.resource: must be an https URL without query or fragment")
    if not table.authorization_servers:
        raise ConfigError("auth.oauth.authorization_servers: name at least one issuer")
    for value in (*table.authorization_servers, *table.scopes_supported):
        if not value or '"' in value or "\\" in value or not value.isprintable():
            raise ConfigError("auth.oauth: issuers and scopes must be plain printable text")
    return ResourceServer(
        resource=resource,
        authorization_servers=table.authorization_servers,
        scopes_supported=table.scopes_supported,
        metadata_url=table.metadata_url,
    )


def _check_jwks_url(table: JwtTable) -> None:
    if table.jwks_url is not None:
        try:
            JwksCache(
                table.jwks_url,
                max_age_s=table.jwks_max_age_s,
                min_refetch_s=table.jwks_min_refetch_s,
            )
        except ValueError as exc:
            raise ConfigError(f"auth.jwt.jwks_url: {exc}") from None
    if table.max_lifetime_s is not None and not table.max_lifetime_s > 0:
        raise ConfigError("auth.jwt.max_lifetime_s: must be positive")


def _jwt(table: JwtTable, base: Path, oauth: ResourceServer | None = None) -> JwtConfig:
    algorithms = table.algorithms or ("RS256",)
    for algorithm in algorithms:
        if algorithm not in _ALGORITHMS:
            raise ConfigError(f"auth.jwt.algorithms: unsupported algorithm {algorithm!r}")
    secret: bytes | None = None
    if table.secret_env is not None:
        value = os.environ.get(table.secret_env)
        if not value:
            raise ConfigError(
                f"auth.jwt.secret_env: environment variable {table.secret_env} is not set"
            )
        secret = value.encode("utf-8")
    public_key = _read_file(table.public_key_file, "public_key_file", base)
    jwks = _read_file(table.jwks_file, "jwks_file", base)
    if sum(x is not None for x in (secret, public_key, jwks, table.jwks_url)) != 1:
        raise ConfigError(
            "auth.jwt: set exactly one of secret_env, public_key_file, jwks_file, jwks_url"
        )
    _check_jwks_url(table)
    if secret is not None and not all(a.startswith("HS") for a in algorithms):
        raise ConfigError("auth.jwt.algorithms: a shared secret only works with HS* algorithms")
    if secret is None and any(a.startswith("HS") for a in algorithms):
        raise ConfigError("auth.jwt.algorithms: HS* algorithms need secret_env")
    if table.issuer is None:
        raise ConfigError("auth.jwt.issuer: required (tokens from any issuer would pass)")
    audience = table.audience if oauth is None else oauth.resource
    if audience is None:
        raise ConfigError("auth.jwt.audience: required (tokens for any service would pass)")
    if oauth is not None and table.audience not in (None, oauth.resource):
        raise ConfigError("auth.jwt.audience: must be unset or auth.oauth.resource")
    return JwtConfig(
        algorithms=algorithms,
        secret=secret,
        public_key=public_key,
        jwks=jwks,
        issuer=table.issuer,
        audience=audience,
        leeway_s=table.leeway_s,
        claims=dict(table.claims),
        jwks_url=table.jwks_url,
        jwks_max_age_s=table.jwks_max_age_s,
        jwks_min_refetch_s=table.jwks_min_refetch_s,
        max_lifetime_s=table.max_lifetime_s,
    )


def _auth(table: AuthTable, base: Path) -> AuthConfig:
    api_keys = _api_keys(table.api_keys) + _api_keys_file(table, base)
    oauth = _oauth(table.oauth, table.jwt is not None)
    jwt = _jwt(table.jwt, base, oauth) if table.jwt is not None else None
    if not api_keys and jwt is None:
        raise ConfigError("auth: configure api_keys or jwt; the service never runs unauthenticated")
    return AuthConfig(api_keys=api_keys, jwt=jwt, oauth=oauth)


def _server(table: ServerTable) -> ServerConfig:
    if not 0 <= table.port <= 65535:
        raise ConfigError("server.port: must be 0-65535")
    if table.max_body_bytes < 1024:
        raise ConfigError("server.max_body_bytes: must be at least 1024")
    if not 1 <= table.workers <= MAX_WORKERS:
        raise ConfigError(f"server.workers: must be 1-{MAX_WORKERS}")
    return ServerConfig(
        host=table.host,
        port=table.port,
        max_body_bytes=table.max_body_bytes,
        workers=table.workers,
    )


def _upstream(
    entry: UpstreamTable, index: int, given: Mapping[str, Any], base: Path
) -> McpUpstreamConfig:
    where = f"mcp.upstreams[{index}]."
    name = entry.name
    if name is None or _UPSTREAM_NAME.fullmatch(name) is None:
        raise ConfigError(f"{where}name: required, 1-64 characters of [A-Za-z0-9_-]")
    command, url = entry.command, entry.url
    if (command is None) == (url is None):
        raise ConfigError(f"{where}command: set exactly one of command (stdio) or url (HTTP)")
    if command is not None and not command.strip():
        raise ConfigError(f"{where}command: must not be empty")
    if url is not None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}url: must be an http(s):// URL")
        for key in ("args", "env", "cwd"):
            if key in given:
                raise ConfigError(f"{where}{key}: only for a command upstream, not a url")
    elif "headers" in given:
        raise ConfigError(f"{where}headers: only for a url upstream, not a command")
    if _TOOL_PREFIX.fullmatch(entry.prefix) is None:
        raise ConfigError(f"{where}prefix: must be 0-63 characters of [A-Za-z0-9_-]")
    return McpUpstreamConfig(
        name=name,
        command=command,
        args=entry.args,
        env=dict(entry.env),
        cwd=_path(base, entry.cwd),
        url=url,
        headers=dict(entry.headers),
        prefix=entry.prefix,
        timeout_s=_positive(entry.timeout_s, f"{where}timeout_s"),
    )


def _mcp(table: McpTable, given: Mapping[str, Any], base: Path) -> McpConfig:
    if table.max_sessions_per_caller < 1:
        raise ConfigError("mcp.max_sessions_per_caller: must be at least 1")
    _positive(table.session_idle_timeout_s, "mcp.session_idle_timeout_s")
    context = table.stdio_context
    if context is not None and (
        not isinstance(context.get("subject"), str) or not context["subject"].strip()
    ):
        raise ConfigError("mcp.stdio_context: must be a table with a non-blank string subject")
    entries = given.get("upstreams") or []
    upstreams: list[McpUpstreamConfig] = []
    for index, entry in enumerate(table.upstreams):
        upstream = _upstream(entry, index, entries[index], base)
        if any(other.name == upstream.name for other in upstreams):
            raise ConfigError(
                f"mcp.upstreams[{index}].name: duplicate upstream name {upstream.name!r}"
            )
        upstreams.append(upstream)
    return McpConfig(
        stdio_context=dict(context) if context is not None else None,
        upstreams=tuple(upstreams),
        max_sessions_per_caller=table.max_sessions_per_caller,
        session_idle_timeout_s=table.session_idle_timeout_s,
    )


def _paths(table: PathsTable) -> PathsConfig:
    resolve: dict[str, tuple[str, ...]] = {}
    for tool, pointers in table.resolve.items():
        key = f"paths.resolve.{tool}"
        if not isinstance(pointers, list) or not all(
            isinstance(p, str) and p.startswith("/") for p in pointers
        ):
            raise ConfigError(f'{key}: must be a list of JSON pointers such as "/path"')
        resolve[tool] = tuple(pointers)
    mounts: dict[str, str] = {}
    for outer, inner in table.mounts.items():
        if not (outer.startswith("/") and isinstance(inner, str) and inner.startswith("/")):
            raise ConfigError(f"paths.mounts.{outer}: both folders must be absolute paths")
        mounts[outer] = inner
    return PathsConfig(resolve=resolve, mounts=mounts)


def _replay(
    given: Mapping[str, Any], base: Path
) -> tuple[ReplaySettings | None, ShadowSettings | None]:
    # The replay package reads what its tables mean (key rings, the candidate); the models
    # above have already refused unknown keys and wrong types.
    try:
        return (
            parse_replay(_subtable(given, "replay"), base),
            parse_shadow(_subtable(given, "shadow"), base),
        )
    except SettingsError as exc:
        raise ConfigError(str(exc)) from None


def _subtable(given: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = given.get(name)
    return value if isinstance(value, Mapping) else {}


def parse_config(
    data: Mapping[str, Any], *, base: Path, source: Path | None = None
) -> GatewayConfig:
    """Validate a decoded configuration.

    Raises:
        ConfigError: the first invalid key, named in the message by its dotted path (an
            unknown key, a value of the wrong type, or values that do not fit together).
    """
    file = read_table(ConfigFile, data)
    modules = file.tools.modules
    mcp = _mcp(file.mcp, _subtable(data, "mcp"), base)
    if not modules and not mcp.upstreams:  # an MCP-only gateway serves its upstreams' tools
        raise ConfigError('tools.modules: list at least one "module:attribute"')
    for entry in modules:
        if entry.count(":") != 1:
            raise ConfigError(f'tools.modules: {entry!r} must look like "package.module:attribute"')
    replay, shadow = _replay(data, base)
    check_log_table(file.log)
    if not 1 <= file.authzen.max_evaluations <= 1000:
        raise ConfigError("authzen.max_evaluations: must be 1-1000")
    if file.telemetry.enabled and not file.telemetry.endpoint.startswith(("http://", "https://")):
        raise ConfigError("telemetry.endpoint: must be an http(s):// URL")
    if file.telemetry.timeout_s <= 0:
        raise ConfigError("telemetry.timeout_s: must be positive")
    config = GatewayConfig(
        engine=_engine(file.engine, _subtable(data, "engine"), base),
        cache=_cache(file.cache),
        audit=_audit(file.audit, base),
        auth=_auth(file.auth, base),
        server=_server(file.server),
        tools=modules,
        mcp=mcp,
        paths=_paths(file.paths),
        replay=replay,
        shadow=shadow,
        log=file.log,
        authzen=file.authzen,
        telemetry=file.telemetry,
        approvals=_approvals(file.approvals, base, file.state),
        state=_state(file.state),
        console=_console(file.console, base, file.server.workers),
        source=source,
    )
    check_listener(config, config.server.host)
    return config


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``.

    Any other name or address, the wildcards included, may be reachable from elsewhere.
    """
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_listener(config: GatewayConfig, host: str) -> None:
    """Refuse to serve on ``host`` when it is not loopback and a published key would pass.

    Raises:
        ConfigError: naming the configuration entry that holds a credential published in
            this repository (never the credential).
    """
    if is_loopback(host):
        return
    for key in config.auth.api_keys:
        if key.sha256 in _PUBLISHED_DIGESTS:
            raise ConfigError(
                f"{key.where}: this API key is published in the gateway's repository (a demo "
                f"or test key); refused on the non-loopback listener {host}: configure your "
                "own keys"
            )
    jwt = config.auth.jwt
    secret = jwt.secret if jwt is not None else None
    if secret is not None and hashlib.sha256(secret).hexdigest() in _PUBLISHED_DIGESTS:
        raise ConfigError(
            "auth.jwt.secret_env: this secret is published in the gateway's repository; "
            f"refused on the non-loopback listener {host}"
        )


def load_config(path: str | os.PathLike[str]) -> GatewayConfig:
    """Read and validate a TOML configuration file.

    Raises:
        ConfigError: unreadable file, invalid TOML, or an invalid key.
    """
    file = Path(path).resolve()
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"config: cannot read {file}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config: {file} is not valid TOML: {exc}") from None
    return parse_config(data, base=file.parent, source=file)


def import_tools(spec: str, *, base: Path | None = None) -> list[Any]:
    """Import ``"module:attribute"``: a Tool, a Registry, or an iterable of Tools.

    Raises:
        ConfigError: the module or attribute cannot be imported.
    """
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"tools.modules: cannot import {module_name!r}: {exc}") from None
    try:
        value = getattr(module, attribute)
    except AttributeError:
        raise ConfigError(
            f"tools.modules: {module_name!r} has no attribute {attribute!r}"
        ) from None
    from gateway._contract import Tool  # noqa: PLC0415 - avoids a cycle at import time
    from gateway._registry import Registry  # noqa: PLC0415

    if isinstance(value, Registry):
        raise ConfigError(
            f"tools.modules: {spec!r} is a Registry; export its tools (a list) instead, so the "
            "service can put each one behind the policy"
        )
    if isinstance(value, Tool):
        return [value]
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        tools = list(value)
        for index, item in enumerate(tools):
            if not isinstance(item, Tool):
                raise ConfigError(f"tools.modules: {spec!r}[{index}] is not a Tool")
        return tools
    raise ConfigError(f"tools.modules: {spec!r} is not a Tool or a list of Tools")


def api_key_digest(key: str) -> str:
    """The SHA-256 hex digest to put in ``auth.api_keys[].sha256`` for a key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()

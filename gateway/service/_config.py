"""The service configuration: one TOML file, validated at start with errors naming the key.

Relative paths in the file are resolved against the file's own directory.
"""

from __future__ import annotations

import hashlib
import importlib
import ipaddress
import math
import os
import re
import secrets
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gateway._errors import GatewayError
from gateway.policy import normalize_path

_ENGINES: Final = ("embedded", "opa")
_FSYNC: Final = ("always", "batch", "none")
_ALGORITHMS: Final = ("HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384")
_UPSTREAM_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TOOL_PREFIX: Final = re.compile(r"[A-Za-z0-9_-]{0,63}")

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
    "reliability-key-alice",
    "reliability-key-bob",
    "reliability-key-carol",
    "reliability-key-mallory",
    "test-key-tess",
    "alice-key",
    "bob-key",
    "carol-key",
    "good-key",
)
_PUBLISHED_DIGESTS: Final = frozenset(
    hashlib.sha256(key.encode("utf-8")).hexdigest() for key in PUBLISHED_KEYS
)


class ConfigError(GatewayError, ValueError):
    """The configuration is invalid; the message starts with the offending key."""

    code = "invalid_config"


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Which Rego engine decides, and how."""

    kind: str = "embedded"
    #: The embedded engine's policy: a compiled bundle (file or directory) ...
    bundle: Path | None = None
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
    timeout_s: float = 1.0
    revision_interval_s: float = 5.0
    decision_path: str = "gateway/authz/decision"


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheConfig:
    """The decision cache."""

    enabled: bool = True
    max_entries: int = 100_000
    max_ttl_s: float = 30.0
    default_ttl_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditConfig:
    """The audit trail."""

    enabled: bool = True
    path: Path | None = None
    fsync: str = "always"
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
    claims: Mapping[str, str] = field(
        default_factory=lambda: {"subject": "sub", "roles": "roles", "tenant": "tenant"}
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthConfig:
    """How callers authenticate (at least one method is required)."""

    api_keys: tuple[ApiKey, ...] = ()
    jwt: JwtConfig | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig:
    """Where the HTTP service listens and what it accepts."""

    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = 2 * 1024 * 1024


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
    timeout_s: float = 60.0


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
    max_sessions_per_caller: int = 8
    session_idle_timeout_s: float = 1800.0


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
    source: Path | None = None


def _table(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}{key}: must be a table")
    return value


def _known(data: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}{unknown[0]}: unknown key")


def _get(
    data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any, where: str
) -> Any:
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise ConfigError(f"{where}{key}: must be {_name(kind)}")
    if not isinstance(value, kind):
        raise ConfigError(f"{where}{key}: must be {_name(kind)}")
    return value


def _name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _path(base: Path, value: str | None) -> Path | None:
    if value is None:
        return None
    path = Path(value)
    return path if path.is_absolute() else (base / path).resolve()


def _positive(value: float, key: str) -> float:
    if value <= 0:
        raise ConfigError(f"{key}: must be positive")
    return value


_BUNDLE_ALGORITHMS: Final = (
    *("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"),
    *("HS256", "HS384", "HS512"),
)


def _verification(data: Mapping[str, Any], base: Path) -> dict[str, Any]:
    where = "engine.verification."
    _known(data, ("key_file", "algorithm", "key_id", "scope"), where)
    if not data:
        return {}
    key_file = _path(base, _get(data, "key_file", str, None, where))
    if key_file is None:
        raise ConfigError("engine.verification.key_file: required to verify bundles")
    try:
        key = key_file.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"engine.verification.key_file: cannot read {key_file}: {exc.strerror or exc}"
        ) from None
    algorithm = _get(data, "algorithm", str, "RS256", where)
    if algorithm not in _BUNDLE_ALGORITHMS:
        raise ConfigError(
            f"engine.verification.algorithm: must be one of {', '.join(_BUNDLE_ALGORITHMS)}"
        )
    return {
        "verification_key": key,
        "verification_algorithm": algorithm,
        "verification_key_id": _get(data, "key_id", str, None, where),
        "verification_scope": _get(data, "scope", str, None, where),
    }


def _engine(data: Mapping[str, Any], base: Path) -> EngineConfig:
    where = "engine."
    _known(
        data,
        (
            *("kind", "bundle", "policies", "opa_binary", "verification", "url"),
            *("timeout_s", "revision_interval_s", "decision_path"),
        ),
        where,
    )
    kind = _get(data, "kind", str, "embedded", where)
    if kind not in _ENGINES:
        raise ConfigError(f"engine.kind: must be one of {', '.join(_ENGINES)}, got {kind!r}")
    bundle = _path(base, _get(data, "bundle", str, None, where))
    policies = _path(base, _get(data, "policies", str, None, where))
    opa_binary = _path(base, _get(data, "opa_binary", str, None, where))
    verification = _verification(_table(data, "verification", where), base)
    url = _get(data, "url", str, None, where)
    if kind == "embedded":
        if (bundle is None) == (policies is None):
            raise ConfigError(
                "engine.bundle: the embedded engine needs a compiled bundle (bundle) "
                "or a policy directory (policies), exactly one"
            )
        if bundle is not None and not bundle.exists():
            raise ConfigError(f"engine.bundle: {bundle} does not exist")
        if policies is not None and not policies.is_dir():
            raise ConfigError(f"engine.policies: {policies} is not a directory")
        if policies is not None and verification:
            raise ConfigError("engine.verification: verifies bundles, not policy directories")
        if opa_binary is not None and policies is None:
            raise ConfigError("engine.opa_binary: only compiles engine.policies")
    elif url is None or not url.startswith(("http://", "https://")):
        raise ConfigError("engine.url: required for the opa engine (http(s)://host:port)")
    decision_path = _get(data, "decision_path", str, "gateway/authz/decision", where)
    try:
        normalize_path(decision_path)
    except ValueError:
        raise ConfigError(
            f"engine.decision_path: {decision_path!r} is not a path like gateway/authz/decision"
        ) from None
    return EngineConfig(
        kind=kind,
        bundle=bundle,
        policies=policies,
        opa_binary=opa_binary,
        **verification,
        url=url,
        timeout_s=_positive(
            float(_get(data, "timeout_s", (int, float), 1.0, where)), "engine.timeout_s"
        ),
        revision_interval_s=float(_get(data, "revision_interval_s", (int, float), 5.0, where)),
        decision_path=decision_path,
    )


def _cache(data: Mapping[str, Any]) -> CacheConfig:
    where = "cache."
    _known(data, ("enabled", "max_entries", "max_ttl_s", "default_ttl_s"), where)
    max_entries = _get(data, "max_entries", int, 100_000, where)
    if max_entries < 1:
        raise ConfigError("cache.max_entries: must be at least 1")
    max_ttl = float(_get(data, "max_ttl_s", (int, float), 30.0, where))
    default_ttl = float(_get(data, "default_ttl_s", (int, float), 0.0, where))
    if max_ttl < 0 or default_ttl < 0:
        raise ConfigError("cache.max_ttl_s: TTLs must not be negative")
    return CacheConfig(
        enabled=_get(data, "enabled", bool, True, where),
        max_entries=max_entries,
        max_ttl_s=max_ttl,
        default_ttl_s=default_ttl,
    )


def _strings(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}{key}: must be a list of strings")
    return tuple(value)


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


def _audit_key(
    data: Mapping[str, Any], base: Path, *, enabled: bool
) -> tuple[str | None, Path | None, bool, bool, bytes | None]:
    # A chain without a key proves nothing against anyone who can write its files (they
    # can rewrite and rehash it), so it takes an explicit `unkeyed = true`.
    where = "audit."
    key_env = _get(data, "key_env", str, None, where)
    key_file = _path(base, _get(data, "key_file", str, None, where))
    generate = _get(data, "generate_key", bool, False, where)
    unkeyed = _get(data, "unkeyed", bool, False, where)
    if key_env is not None and key_file is not None:
        raise ConfigError("audit.key_file: set key_env or key_file, not both")
    if generate and key_file is None:
        raise ConfigError("audit.generate_key: needs key_file (where the key is kept)")
    if unkeyed and (key_env is not None or key_file is not None):
        raise ConfigError("audit.unkeyed: contradicts the key_env or key_file also set")
    key: bytes | None = None
    if key_env is not None:
        key = audit_key_from_env(key_env)
    elif key_file is not None and enabled:
        key = audit_key_from_file(key_file, generate=generate)
    elif enabled and not unkeyed:
        raise ConfigError(
            "audit.key_env: the audit chain must be keyed: set key_env or key_file (or "
            "unkeyed = true to accept a trail that anyone who can write it can rewrite "
            "undetected)"
        )
    return key_env, key_file, generate, unkeyed, key


def _audit(data: Mapping[str, Any], base: Path) -> AuditConfig:
    where = "audit."
    _known(
        data,
        (
            "enabled",
            "path",
            "fsync",
            "max_bytes",
            "key_env",
            "key_file",
            "generate_key",
            "unkeyed",
            "mask_keys",
            "mask_patterns",
            "mask_values",
            "mask_pointers",
        ),
        where,
    )
    enabled = _get(data, "enabled", bool, True, where)
    path = _path(base, _get(data, "path", str, None, where))
    if enabled and path is None:
        raise ConfigError("audit.path: required when the audit trail is enabled")
    fsync = _get(data, "fsync", str, "always", where)
    if fsync not in _FSYNC:
        raise ConfigError(f"audit.fsync: must be one of {', '.join(_FSYNC)}")
    key_env, key_file, generate, unkeyed, key = _audit_key(data, base, enabled=enabled)
    pointers = _strings(data, "mask_pointers", where)
    for pointer in pointers:
        if not pointer.startswith("/"):
            raise ConfigError(f"audit.mask_pointers: {pointer!r} is not a JSON pointer")
    patterns = {name: _strings(data, name, where) for name in ("mask_patterns", "mask_values")}
    for name, texts in patterns.items():
        for text in texts:
            try:
                re.compile(text)
            except re.error as exc:
                raise ConfigError(
                    f"audit.{name}: {text!r} is not a regular expression: {exc}"
                ) from None
    return AuditConfig(
        enabled=enabled,
        path=path,
        fsync=fsync,
        max_bytes=_get(data, "max_bytes", int, None, where),
        key_env=key_env,
        key_file=key_file,
        generate_key=generate,
        unkeyed=unkeyed,
        key=key,
        mask_keys=_strings(data, "mask_keys", where),
        mask_patterns=patterns["mask_patterns"],
        mask_values=patterns["mask_values"],
        mask_pointers=pointers,
    )


def _api_keys(value: Any, label: str = "auth.api_keys") -> tuple[ApiKey, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{label}: must be an array of tables")
    keys = []
    for index, entry in enumerate(value):
        where = f"{label}[{index}]."
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{label}[{index}]: must be a table")
        _known(entry, ("sha256", "context"), where)
        digest = _get(entry, "sha256", str, None, where)
        if digest is None or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ConfigError(
                f"{where}sha256: must be the 64-character lower-case hex SHA-256 of the key"
            )
        context = _get(entry, "context", Mapping, None, where)
        if context is None or not isinstance(context.get("subject"), str):
            raise ConfigError(f"{where}context: must be a table with a string subject")
        keys.append(ApiKey(sha256=digest, context=dict(context), where=f"{label}[{index}]"))
    return tuple(keys)


def _api_keys_file(data: Mapping[str, Any], base: Path) -> tuple[ApiKey, ...]:
    # API keys kept out of the configuration file: a secret file (a Docker secret, say)
    # holding [[api_keys]] tables in the configuration's own form.
    path = _path(base, _get(data, "api_keys_file", str, None, "auth."))
    if path is None:
        return ()
    label = f"auth.api_keys_file ({path})"
    try:
        keys = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"auth.api_keys_file: cannot read {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        raise ConfigError(f"auth.api_keys_file: {path} is not valid TOML") from None
    _known(keys, ("api_keys",), f"{label} ")
    return _api_keys(keys.get("api_keys", []), f"{label} api_keys")


def _read_secret(data: Mapping[str, Any], base: Path, where: str) -> bytes | None:
    env = _get(data, "secret_env", str, None, where)
    if env is None:
        return None
    secret = os.environ.get(env)
    if not secret:
        raise ConfigError(f"{where}secret_env: environment variable {env} is not set")
    return secret.encode("utf-8")


def _read_file(data: Mapping[str, Any], key: str, base: Path, where: str) -> str | None:
    path = _path(base, _get(data, key, str, None, where))
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}{key}: cannot read {path}: {exc.strerror}") from None


def _jwt(data: Mapping[str, Any], base: Path) -> JwtConfig:
    where = "auth.jwt."
    _known(
        data,
        (
            "algorithms",
            "secret_env",
            "public_key_file",
            "jwks_file",
            "issuer",
            "audience",
            "leeway_s",
            "claims",
        ),
        where,
    )
    algorithms = _strings(data, "algorithms", where) or ("RS256",)
    for algorithm in algorithms:
        if algorithm not in _ALGORITHMS:
            raise ConfigError(f"auth.jwt.algorithms: unsupported algorithm {algorithm!r}")
    secret = _read_secret(data, base, where)
    public_key = _read_file(data, "public_key_file", base, where)
    jwks = _read_file(data, "jwks_file", base, where)
    if sum(x is not None for x in (secret, public_key, jwks)) != 1:
        raise ConfigError("auth.jwt: set exactly one of secret_env, public_key_file, jwks_file")
    if secret is not None and not all(a.startswith("HS") for a in algorithms):
        raise ConfigError("auth.jwt.algorithms: a shared secret only works with HS* algorithms")
    if secret is None and any(a.startswith("HS") for a in algorithms):
        raise ConfigError("auth.jwt.algorithms: HS* algorithms need secret_env")
    claims = _get(data, "claims", Mapping, None, where)
    if claims is not None and not all(isinstance(v, str) for v in claims.values()):
        raise ConfigError("auth.jwt.claims: must map context fields to claim names")
    audience = _get(data, "audience", str, None, where)
    issuer = _get(data, "issuer", str, None, where)
    if issuer is None:
        raise ConfigError("auth.jwt.issuer: required (tokens from any issuer would pass)")
    if audience is None:
        raise ConfigError("auth.jwt.audience: required (tokens for any service would pass)")
    return JwtConfig(
        algorithms=algorithms,
        secret=secret,
        public_key=public_key,
        jwks=jwks,
        issuer=issuer,
        audience=audience,
        leeway_s=float(_get(data, "leeway_s", (int, float), 0.0, where)),
        claims=dict(claims)
        if claims is not None
        else {"subject": "sub", "roles": "roles", "tenant": "tenant"},
    )


def _auth(data: Mapping[str, Any], base: Path) -> AuthConfig:
    _known(data, ("api_keys", "api_keys_file", "jwt"), "auth.")
    api_keys = _api_keys(data.get("api_keys", [])) + _api_keys_file(data, base)
    jwt = _jwt(_table(data, "jwt", "auth."), base) if "jwt" in data else None
    if not api_keys and jwt is None:
        raise ConfigError("auth: configure api_keys or jwt; the service never runs unauthenticated")
    return AuthConfig(api_keys=api_keys, jwt=jwt)


def _server(data: Mapping[str, Any]) -> ServerConfig:
    where = "server."
    _known(data, ("host", "port", "max_body_bytes"), where)
    port = _get(data, "port", int, 8080, where)
    if not 0 <= port <= 65535:
        raise ConfigError("server.port: must be 0-65535")
    limit = _get(data, "max_body_bytes", int, 2 * 1024 * 1024, where)
    if limit < 1024:
        raise ConfigError("server.max_body_bytes: must be at least 1024")
    return ServerConfig(
        host=_get(data, "host", str, "127.0.0.1", where), port=port, max_body_bytes=limit
    )


def _string_table(data: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = data.get(key, {})
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where}{key}: must be a table of strings")
    return dict(value)


def _upstream(entry: Any, index: int, base: Path) -> McpUpstreamConfig:
    where = f"mcp.upstreams[{index}]."
    if not isinstance(entry, Mapping):
        raise ConfigError(f"mcp.upstreams[{index}]: must be a table")
    _known(
        entry,
        ("name", "command", "args", "env", "cwd", "url", "headers", "prefix", "timeout_s"),
        where,
    )
    name = _get(entry, "name", str, None, where)
    if name is None or _UPSTREAM_NAME.fullmatch(name) is None:
        raise ConfigError(f"{where}name: required, 1-64 characters of [A-Za-z0-9_-]")
    command = _get(entry, "command", str, None, where)
    url = _get(entry, "url", str, None, where)
    if (command is None) == (url is None):
        raise ConfigError(f"{where}command: set exactly one of command (stdio) or url (HTTP)")
    if command is not None and not command.strip():
        raise ConfigError(f"{where}command: must not be empty")
    if url is not None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}url: must be an http(s):// URL")
        for key in ("args", "env", "cwd"):
            if key in entry:
                raise ConfigError(f"{where}{key}: only for a command upstream, not a url")
    elif "headers" in entry:
        raise ConfigError(f"{where}headers: only for a url upstream, not a command")
    prefix = _get(entry, "prefix", str, "", where)
    if _TOOL_PREFIX.fullmatch(prefix) is None:
        raise ConfigError(f"{where}prefix: must be 0-63 characters of [A-Za-z0-9_-]")
    return McpUpstreamConfig(
        name=name,
        command=command,
        args=_strings(entry, "args", where),
        env=_string_table(entry, "env", where),
        cwd=_path(base, _get(entry, "cwd", str, None, where)),
        url=url,
        headers=_string_table(entry, "headers", where),
        prefix=prefix,
        timeout_s=_positive(
            float(_get(entry, "timeout_s", (int, float), 60.0, where)), f"{where}timeout_s"
        ),
    )


def _mcp(data: Mapping[str, Any], base: Path) -> McpConfig:
    where = "mcp."
    _known(
        data,
        ("stdio_context", "upstreams", "max_sessions_per_caller", "session_idle_timeout_s"),
        where,
    )
    max_sessions = _get(data, "max_sessions_per_caller", int, 8, where)
    if max_sessions < 1:
        raise ConfigError("mcp.max_sessions_per_caller: must be at least 1")
    idle = float(_get(data, "session_idle_timeout_s", (int, float), 1800.0, where))
    if not math.isfinite(idle):
        raise ConfigError("mcp.session_idle_timeout_s: must be finite")
    _positive(idle, "mcp.session_idle_timeout_s")
    context = _get(data, "stdio_context", Mapping, None, where)
    if context is not None and (
        not isinstance(context.get("subject"), str) or not context["subject"].strip()
    ):
        raise ConfigError("mcp.stdio_context: must be a table with a non-blank string subject")
    entries = data.get("upstreams", [])
    if not isinstance(entries, list):
        raise ConfigError("mcp.upstreams: must be an array of tables")
    upstreams: list[McpUpstreamConfig] = []
    for index, entry in enumerate(entries):
        upstream = _upstream(entry, index, base)
        if any(other.name == upstream.name for other in upstreams):
            raise ConfigError(
                f"mcp.upstreams[{index}].name: duplicate upstream name {upstream.name!r}"
            )
        upstreams.append(upstream)
    return McpConfig(
        stdio_context=dict(context) if context is not None else None,
        upstreams=tuple(upstreams),
        max_sessions_per_caller=max_sessions,
        session_idle_timeout_s=idle,
    )


def _paths(data: Mapping[str, Any]) -> PathsConfig:
    where = "paths."
    _known(data, ("resolve", "mounts"), where)
    resolve: dict[str, tuple[str, ...]] = {}
    for tool, pointers in _table(data, "resolve", where).items():
        key = f"{where}resolve.{tool}"
        if not isinstance(pointers, list) or not all(
            isinstance(p, str) and p.startswith("/") for p in pointers
        ):
            raise ConfigError(f'{key}: must be a list of JSON pointers such as "/path"')
        resolve[tool] = tuple(pointers)
    mounts: dict[str, str] = {}
    for outer, inner in _table(data, "mounts", where).items():
        if not (outer.startswith("/") and isinstance(inner, str) and inner.startswith("/")):
            raise ConfigError(f"{where}mounts.{outer}: both folders must be absolute paths")
        mounts[outer] = inner
    return PathsConfig(resolve=resolve, mounts=mounts)


def parse_config(
    data: Mapping[str, Any], *, base: Path, source: Path | None = None
) -> GatewayConfig:
    """Validate a decoded configuration.

    Raises:
        ConfigError: the first invalid key, named in the message.
    """
    _known(data, ("engine", "cache", "audit", "auth", "server", "tools", "mcp", "paths"), "")
    tools = _table(data, "tools", "")
    _known(tools, ("modules",), "tools.")
    modules = _strings(tools, "modules", "tools.")
    mcp = _mcp(_table(data, "mcp", ""), base)
    if not modules and not mcp.upstreams:  # an MCP-only gateway serves its upstreams' tools
        raise ConfigError('tools.modules: list at least one "module:attribute"')
    for entry in modules:
        if entry.count(":") != 1:
            raise ConfigError(f'tools.modules: {entry!r} must look like "package.module:attribute"')
    config = GatewayConfig(
        engine=_engine(_table(data, "engine", ""), base),
        cache=_cache(_table(data, "cache", "")),
        audit=_audit(_table(data, "audit", ""), base),
        auth=_auth(_table(data, "auth", ""), base),
        server=_server(_table(data, "server", "")),
        tools=modules,
        mcp=mcp,
        paths=_paths(_table(data, "paths", "")),
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

"""The configuration file's tables as typed models: every key with its type, default and meaning.

Each TOML table is a frozen dataclass whose fields are its keys. :func:`read_table` reads a
decoded table into its model, refusing an unknown key, or a value of the wrong type, with the
key's full dotted path (``engine.verification.kid``) and the type expected, never the value
(values may be secrets). What the values mean together (exactly one policy source, a keyed
audit chain, ...) is checked after, by :mod:`gateway.service._config`. The key reference in
``docs/configuration.md`` is generated from these models (``python -m
gateway.service.config_reference``).

Defaults are the library's own constants wherever the library has one, so the service and a
program that builds the parts itself start from the same values.
"""

# ruff: noqa: RUF009 - key() is dataclasses.field() with the key's meaning in its metadata
from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from gateway._errors import GatewayError
from gateway.audit import FsyncPolicy
from gateway.policy import DEFAULT_DECISION_PATH, DEFAULT_MAX_TTL

# The policy package exports neither engine's default deadline nor the REST engine's
# revision interval yet; these are the values its constructors default to.
from gateway.policy._bundle import DEFAULT_MAX_BUNDLE_BYTES
from gateway.policy._rest import DEFAULT_REVISION_INTERVAL
from gateway.policy._wasm import DEFAULT_POLL_INTERVAL_S, DEFAULT_TIMEOUT_S
from gateway.replay._shadow import DEFAULT_BUDGET_S, DEFAULT_QUEUE_SIZE
from gateway.state import DEFAULT_HISTORY_MAX, DEFAULT_SESSION_TTL_S, DEFAULT_WINDOWS
from gateway.state._memory import DEFAULT_MAX_SESSIONS
from gateway.state._redis import DEFAULT_PREFIX as DEFAULT_STATE_PREFIX
from gateway.state._redis import DEFAULT_TIMEOUT_S as DEFAULT_STATE_TIMEOUT_S

T = TypeVar("T")

#: How long one download from a bundle server may take (``from_bundle_server``'s default).
DEFAULT_DOWNLOAD_TIMEOUT_S: Final = 10.0
#: The decision cache's default size (``DecisionCache(maxsize=...)``).
DEFAULT_CACHE_ENTRIES: Final = 100_000
#: The largest request body the HTTP surfaces accept by default.
DEFAULT_MAX_BODY_BYTES: Final = 2 * 1024 * 1024
#: The most worker processes ``gateway serve`` runs (``server.workers``).
MAX_WORKERS: Final = 64
#: The MCP surface's defaults; ``gateway.mcp`` holds the same values (the service layer sits
#: under it and cannot import it; a test pins them equal).
DEFAULT_MAX_SESSIONS_PER_CALLER: Final = 8
DEFAULT_SESSION_IDLE_TIMEOUT_S: Final = 30 * 60.0
#: How long one request to an upstream MCP server may take.
DEFAULT_UPSTREAM_TIMEOUT_S: Final = 60.0
#: The JWT claims read into the caller context when ``auth.jwt.claims`` is not set.
DEFAULT_JWT_CLAIMS: Final = types.MappingProxyType(
    {"subject": "sub", "roles": "roles", "tenant": "tenant"}
)


class ConfigError(GatewayError, ValueError):
    """The configuration is invalid; the message starts with the offending key."""

    code = "invalid_config"


def key(
    doc: str,
    default: Any = None,
    *,
    factory: Callable[[], Any] | None = None,
    shown: str | None = None,
) -> Any:
    """A key of a table model: its meaning (``doc``), its default, how the reference shows it.

    ``shown`` replaces the default in the reference (``"required"``, ``"$OPA_BIN"``, ...).
    """
    metadata = {"doc": doc, "shown": shown}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True, slots=True)
class Kind:
    """What a key holds: the name the reference shows and the phrase an error expects."""

    name: str
    expected: str
    model: type[Any] | None = None
    many: bool = False


_BOOL: Final = Kind("boolean", "bool")
_INT: Final = Kind("integer", "int")
_FLOAT: Final = Kind("number", "int or float")
_STR: Final = Kind("string", "str")
_STRINGS: Final = Kind("array of strings", "a list of strings")
_INTEGERS: Final = Kind("array of integers", "a list of integers")
_STRING_TABLE: Final = Kind("table of strings", "a table of strings")
_TABLE: Final = Kind("table", "a table")


def _kind(annotation: Any) -> Kind:
    # ``X | None`` is X that may be absent (TOML has no null).
    if isinstance(annotation, types.UnionType):
        (annotation,) = (arg for arg in typing.get_args(annotation) if arg is not type(None))
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    simple = {bool: _BOOL, int: _INT, float: _FLOAT, str: _STR}
    if annotation in simple:
        return simple[annotation]
    if origin is tuple and args[0] is str:
        return _STRINGS
    if origin is tuple and args[0] is int:
        return _INTEGERS
    if origin is tuple and dataclasses.is_dataclass(args[0]):
        return Kind("array of tables", "an array of tables", model=_model(args[0]), many=True)
    if origin is Mapping:
        return _STRING_TABLE if args[1] is str else _TABLE
    if dataclasses.is_dataclass(annotation):
        return Kind("table", "a table", model=_model(annotation))
    raise TypeError(f"no configuration kind for {annotation!r}")  # a model's own mistake


def _model(annotation: Any) -> type[Any]:
    assert isinstance(annotation, type)  # noqa: S101 - a dataclass annotation is a class
    return annotation


_KEYS: dict[type[Any], dict[str, tuple[dataclasses.Field[Any], Kind]]] = {}


def keys_of(model: type[Any]) -> dict[str, tuple[dataclasses.Field[Any], Kind]]:
    """The keys of a table model, in order, with what each holds."""
    found = _KEYS.get(model)
    if found is None:
        hints = typing.get_type_hints(model)
        found = {f.name: (f, _kind(hints[f.name])) for f in dataclasses.fields(model)}
        _KEYS[model] = found
    return found


def read_table(model: type[T], data: Mapping[str, Any], where: str = "") -> T:
    """Read the decoded table ``data`` into ``model`` (``where``: its dotted path and a dot).

    Raises:
        ConfigError: ``data`` holds a key the model does not have, or a value of another
            type than its key's (named by path and expected type, never quoting the value).
    """
    fields = keys_of(model)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}{unknown[0]}: unknown key")
    values = {
        name: _value(kind, data[name], f"{where}{name}")
        for name, (_, kind) in fields.items()
        if data.get(name) is not None
    }
    return model(**values)


def _value(kind: Kind, value: Any, path: str) -> Any:  # noqa: PLR0911, PLR0912 - one per kind
    def wrong() -> ConfigError:
        return ConfigError(f"{path}: must be {kind.expected}")

    if kind is _BOOL:
        if not isinstance(value, bool):
            raise wrong()
        return value
    if kind is _INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong()
        return value
    if kind is _FLOAT:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong()
        if not math.isfinite(value):
            raise ConfigError(f"{path}: must be finite")
        return float(value)
    if kind is _STR:
        if not isinstance(value, str):
            raise wrong()
        return value
    if kind is _STRINGS:
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise wrong()
        return tuple(value)
    if kind is _INTEGERS:
        if not isinstance(value, list) or not all(
            isinstance(item, int) and not isinstance(item, bool) for item in value
        ):
            raise wrong()
        return tuple(value)
    if kind.many:
        assert kind.model is not None  # noqa: S101 - set with many
        if not isinstance(value, list):
            raise wrong()
        items: list[Any] = []
        for index, item in enumerate(value):
            if not isinstance(item, Mapping):
                raise ConfigError(f"{path}[{index}]: must be a table")
            items.append(read_table(kind.model, item, f"{path}[{index}]."))
        return tuple(items)
    if not isinstance(value, Mapping):
        raise wrong()
    if kind.model is not None:
        return read_table(kind.model, value, f"{path}.")
    if kind is _STRING_TABLE and not all(isinstance(item, str) for item in value.values()):
        raise wrong()
    return dict(value)


# -- the tables -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class VerificationTable:
    """``[engine.verification]``: the signature a compiled bundle must carry."""

    key_file: str | None = key(
        "A PEM public key (or, for HS* algorithms, a file holding the shared secret) the "
        "bundle's signature must verify against.",
        shown="required",
    )
    algorithm: str = key("The JWS algorithm of the bundle's signature.", "RS256")
    key_id: str | None = key("The key id (`keyid`) the signature must name, if any.")
    scope: str | None = key("The scope the signature must name, if any.")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineTable:
    """``[engine]``: which Rego engine decides, and how."""

    kind: str = key(
        "`embedded` (the gateway evaluates the policy compiled to WebAssembly itself) or "
        "`opa` (an OPA server answers over HTTP).",
        "embedded",
    )
    bundle: str | None = key(
        "Embedded engine: a compiled bundle (a `.tar.gz` file or a folder). Exactly one of "
        "`bundle`, `policies` and `bundle_url`."
    )
    bundle_url: str | None = key(
        "Embedded engine: an OPA bundle server's bundle URL (`http(s)://...`). The first "
        "download must succeed and verify; the server is then polled, each new revision "
        "verified, compiled and checked before it replaces the one in force (the last good "
        "one is kept)."
    )
    poll_interval_s: float = key(
        "`bundle_url`: seconds between polls of the bundle server.", DEFAULT_POLL_INTERVAL_S
    )
    download_timeout_s: float = key(
        "`bundle_url`: the longest one download may take, in seconds.",
        DEFAULT_DOWNLOAD_TIMEOUT_S,
    )
    max_bundle_bytes: int = key(
        "`bundle_url`: the largest bundle accepted, in bytes.", DEFAULT_MAX_BUNDLE_BYTES
    )
    poll_max_interval_s: float | None = key(
        "`bundle_url`: with it, each wait between polls is drawn at random between "
        "`poll_interval_s` and this (OPA's `min_delay_seconds`/`max_delay_seconds`), so "
        "replicas do not poll the server in step.",
        shown="`poll_interval_s` (no jitter)",
    )
    bundle_token_env: str | None = key(
        "`bundle_url`: the environment variable holding a bearer token for the bundle "
        "server (`Authorization: Bearer ...`), read at start; the token itself never goes "
        "in this file. It is sent to the bundle URL's origin only."
    )
    policies: str | None = key(
        "Embedded engine: a folder of Rego policies, compiled at start by the `opa` binary."
    )
    opa_binary: str | None = key(
        "The `opa` binary that compiles `policies`.", shown="`$OPA_BIN`, then `PATH`"
    )
    verification: VerificationTable | None = key(
        "Embedded engine: the signature `bundle` (or every bundle from `bundle_url`) must "
        "carry (see `[engine.verification]`)."
    )
    url: str | None = key(
        'OPA engine: the server\'s base URL (`http(s)://host:port`); required for `kind = "opa"`.'
    )
    timeout_s: float = key(
        "The longest one evaluation may take, in seconds; a call whose decision takes "
        "longer is refused.",
        DEFAULT_TIMEOUT_S,
    )
    revision_interval_s: float = key(
        "OPA engine: how often, in seconds, the server's bundle revision is read (cached "
        "decisions are dropped when it changes).",
        DEFAULT_REVISION_INTERVAL,
    )
    decision_path: str = key(
        "The rule that decides, as a path (`gateway/authz/decision` or "
        "`data.gateway.authz.decision`).",
        DEFAULT_DECISION_PATH,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheTable:
    """``[cache]``: the decision cache (a decision is reused for the TTL the policy states)."""

    enabled: bool = key("Whether decisions are cached.", default=True)
    max_entries: int = key("The most decisions kept (at least 1).", DEFAULT_CACHE_ENTRIES)
    max_ttl_s: float = key(
        "The longest any decision is reused, in seconds, whatever the policy asks.",
        DEFAULT_MAX_TTL,
    )
    default_ttl_s: float = key(
        "The reuse time of a decision that states none (0: not cached).", 0.0
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditTable:
    """``[audit]``: the hash-chained audit trail."""

    enabled: bool = key("Whether every decision and tool outcome is recorded.", default=True)
    path: str | None = key("The trail's JSON-lines file; required when enabled.", shown="required")
    fsync: str = key(
        "When records reach the disk: `always` (before the call is answered), `batch` or `none`.",
        FsyncPolicy.ALWAYS.value,
    )
    max_bytes: int | None = key("Rotate the file once it reaches this size.", shown="never")
    key_env: str | None = key(
        "The environment variable holding the chain's HMAC key (at least 16 bytes)."
    )
    key_file: str | None = key("A file holding the chain's HMAC key (instead of `key_env`).")
    generate_key: bool = key(
        "Create `key_file` with a fresh random key (mode 0600) when it does not exist: for a "
        "local demo.",
        default=False,
    )
    unkeyed: bool = key(
        "Accept a trail without a key (anyone who can write it can rewrite it undetected).",
        default=False,
    )
    mask_keys: tuple[str, ...] = key(
        "Argument names masked in the trail, added to the built-in list.", ()
    )
    mask_patterns: tuple[str, ...] = key(
        "Regular expressions of argument names to mask, added to the built-in ones.", ()
    )
    mask_values: tuple[str, ...] = key(
        "Regular expressions of values to mask wherever they appear, added to the built-in ones.",
        (),
    )
    mask_pointers: tuple[str, ...] = key(
        "JSON pointers (`/card/number`) of arguments masked whatever their name.", ()
    )
    anchor_path: str | None = key(
        "An anchor log kept apart from the trail (another volume or host): the durable head "
        "of every writer chain is added to it every `anchor_interval_s`, so that `gateway "
        "audit verify "
        "--anchors` finds a trail deleted, cut or rolled back as a whole. Needs the audit key.",
        shown="none",
    )
    anchor_interval_s: float = key("Seconds between two anchorings of the chains' heads.", 60.0)
    anchor_name: str | None = key(
        "The writer's name in the anchor log (default: the host's name and the chain file's).",
        shown="host:file",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiKeyTable:
    """``[[auth.api_keys]]``: one API key (sent as `X-API-Key`) and the caller it stands for."""

    sha256: str | None = key(
        "The lower-case hex SHA-256 of the key (`printf %s KEY | sha256sum`); the key "
        "itself is never written down.",
        shown="required",
    )
    context: Mapping[str, Any] | None = key(
        "The caller context the key stands for: a table with a string `subject` (and, for "
        "the shipped policies, `roles` and `tenant`).",
        shown="required",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiKeysFile:
    """The file ``auth.api_keys_file`` names: ``[[api_keys]]`` tables, as in the config."""

    api_keys: tuple[ApiKeyTable, ...] = key("API keys, as `[[auth.api_keys]]`.", ())


@dataclass(frozen=True, slots=True, kw_only=True)
class JwtTable:
    """``[auth.jwt]``: JWT bearer tokens (`Authorization: Bearer ...`); `exp` is required."""

    algorithms: tuple[str, ...] = key(
        "The accepted algorithms (HS256/384/512, RS256/384/512, ES256/384).", ("RS256",)
    )
    secret_env: str | None = key(
        "The environment variable holding the HS* shared secret. Exactly one of "
        "`secret_env`, `public_key_file`, `jwks_file`."
    )
    public_key_file: str | None = key("A PEM public key (RS*, ES*).")
    jwks_file: str | None = key("A JWKS document; the token's `kid` picks the key.")
    jwks_url: str | None = key(
        "A JWKS URL (`https`, or `http` on loopback): fetched when first needed, kept for "
        "`jwks_max_age_s`, fetched again for an unknown `kid` at most once per "
        "`jwks_min_refetch_s`; a token is refused while the keys cannot be fetched."
    )
    jwks_max_age_s: float = key("How long keys fetched from `jwks_url` are used.", 300.0)
    jwks_min_refetch_s: float = key("The least time between two fetches of `jwks_url`.", 10.0)
    max_lifetime_s: float | None = key(
        "The longest lifetime (`exp - iat`) a token may have; `iat` is then required."
    )
    issuer: str | None = key("The `iss` every token must carry.", shown="required")
    audience: str | None = key("The `aud` every token must carry.", shown="required")
    leeway_s: float = key("Clock skew allowed on `exp` and `nbf`, in seconds.", 0.0)
    claims: Mapping[str, str] = key(
        "Caller context field -> claim name.", factory=lambda: dict(DEFAULT_JWT_CLAIMS)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class OAuthTable:
    """``[auth.oauth]``: the gateway as an OAuth 2.1 resource server (MCP authorization).

    Needs `[auth.jwt]` for the tokens' keys, issuer and claims. The metadata (RFC 9728) is
    served at `/.well-known/oauth-protected-resource` and named in every 401.
    """

    resource: str | None = key(
        "The resource identifier (an `https` URL, e.g. `https://gw.example.com/mcp`): "
        "every token must name it as its audience (RFC 8707); `auth.jwt.audience` must "
        "be unset or the same.",
        shown="required",
    )
    authorization_servers: tuple[str, ...] = key(
        "The issuers clients get tokens from (named in the metadata).", shown="required"
    )
    scopes_supported: tuple[str, ...] = key("The scopes the policies know.", ())
    metadata_url: str | None = key(
        "Where clients fetch the metadata (default: the well-known URL of `resource`)."
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthTable:
    """``[auth]``: how callers authenticate; at least one method is required."""

    api_keys: tuple[ApiKeyTable, ...] = key("API keys (see `[[auth.api_keys]]`).", ())
    api_keys_file: str | None = key(
        "A file (a mounted secret, say) holding more `[[api_keys]]` tables in the same form."
    )
    jwt: JwtTable | None = key("JWT bearer tokens (see `[auth.jwt]`).")
    oauth: OAuthTable | None = key(
        "The gateway as an OAuth 2.1 protected resource (see `[auth.oauth]`)."
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerTable:
    """``[server]``: where the HTTP service listens and what it accepts."""

    host: str = key(
        "The address listened on. On any address that is not loopback, a key or secret "
        "published in the gateway's repository is refused.",
        "127.0.0.1",
    )
    port: int = key("The TCP port (0: any free port).", 8080)
    max_body_bytes: int = key(
        "The largest request body accepted (at least 1024).", DEFAULT_MAX_BODY_BYTES
    )
    workers: int = key(
        "Worker processes of `gateway serve` on the one listening socket (1-64). Each has "
        "its own decision cache and audit chain: with more than one, worker N writes "
        "`audit.path` with `.N` before its suffix (`audit.jsonl` -> `audit.1.jsonl`).",
        1,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolsTable:
    """``[tools]``: the Python tools served."""

    modules: tuple[str, ...] = key(
        'Entries `"package.module:attribute"` naming a Tool or a list of Tools; the '
        "config's folder is importable. Required unless `[[mcp.upstreams]]` serve the tools.",
        (),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamTable:
    """``[[mcp.upstreams]]``: an upstream MCP server whose tools are served behind the policy."""

    name: str | None = key(
        "The upstream's name, 1-64 characters of `[A-Za-z0-9_-]`.", shown="required"
    )
    command: str | None = key(
        "A local server spoken to over stdio. Exactly one of `command` and `url`."
    )
    args: tuple[str, ...] = key("`command`'s arguments.", ())
    env: Mapping[str, str] = key("`command`'s environment variables.", factory=dict)
    cwd: str | None = key("`command`'s working folder.")
    url: str | None = key("A streamable-HTTP server (`http(s)://...`).")
    headers: Mapping[str, str] = key("HTTP headers sent to a `url` upstream.", factory=dict)
    prefix: str = key('Prepended to every imported tool name (`"fs__"` makes `fs__read_file`).', "")
    timeout_s: float = key(
        "The longest one request to the upstream may take, in seconds.",
        DEFAULT_UPSTREAM_TIMEOUT_S,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class McpTable:
    """``[mcp]``: the MCP surface."""

    stdio_context: Mapping[str, Any] | None = key(
        "The caller context of every call over the stdio transport (whose launcher is local "
        "and trusted): a table with a non-blank string `subject`."
    )
    upstreams: tuple[UpstreamTable, ...] = key("Upstream servers (see `[[mcp.upstreams]]`).", ())
    max_sessions_per_caller: int = key(
        "Over HTTP, the sessions one principal may hold at once.",
        DEFAULT_MAX_SESSIONS_PER_CALLER,
    )
    session_idle_timeout_s: float = key(
        "Over HTTP, a session with no request in flight for this many seconds ends.",
        DEFAULT_SESSION_IDLE_TIMEOUT_S,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PathsTable:
    """``[paths]``: path arguments the gateway resolves on its view of the tools' files."""

    resolve: Mapping[str, Any] = key(
        'Tool name -> JSON pointers of its path arguments (`read_file = ["/path"]`).',
        factory=dict,
    )
    mounts: Mapping[str, Any] = key(
        "Tool-side folder -> the folder where the gateway sees it (both absolute).",
        factory=dict,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayTable:
    """``[replay]``: the encrypted capture of decision inputs for `gateway replay`."""

    capture: bool = key("Whether the capture is on.", default=False)
    capture_dir: str | None = key(
        "Where the capture is written (apart from the audit trail); required when on."
    )
    key_env: str | None = key(
        "The environment variable holding the capture's key ring. Exactly one of `key_env` "
        "and `key_file`."
    )
    key_file: str | None = key("A file (mode 0600) holding the capture's key ring.")


@dataclass(frozen=True, slots=True, kw_only=True)
class ShadowTable:
    """``[shadow]``: a candidate policy evaluated beside the enforced one, never enforced."""

    enabled: bool = key("Whether shadow evaluation is on.", default=False)
    policies: str | None = key(
        "The candidate as a policy folder. Exactly one of `policies`, `bundle`, `url`."
    )
    bundle: str | None = key("The candidate as a compiled bundle.")
    url: str | None = key("The candidate as an OPA server (`http(s)://host:port`).")
    decision_path: str = key("The candidate's decision rule.", DEFAULT_DECISION_PATH)
    opa_binary: str | None = key(
        "The `opa` binary that compiles `policies`.", shown="`$OPA_BIN`, then `PATH`"
    )
    queue_size: int = key(
        "Calls waiting for the candidate; more are dropped and counted.", DEFAULT_QUEUE_SIZE
    )
    budget_s: float = key("The longest one shadow evaluation may take.", DEFAULT_BUDGET_S)
    workers: int = key("Candidate evaluations at once.", 1)
    timeout_s: float = key("The candidate engine's own deadline.", DEFAULT_TIMEOUT_S)


@dataclass(frozen=True, slots=True, kw_only=True)
class LogTable:
    """``[log]``: the service's log lines (never an argument value, at any level)."""

    level: str = key("`debug`, `info`, `warning` or `error`.", "info")
    format: str = key("`text` (one line each) or `json` (one JSON object a line).", "text")
    access: bool = key(
        "Whether every HTTP request gets an access line (method, path without its query, "
        "status, duration, request id).",
        default=False,
    )
    state_interval_s: float = key(
        "The fewest seconds between two lines about one component's state (the engine, the "
        "audit trail, an upstream); the next line counts the changes not logged.",
        10.0,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalsTable:
    """``[approvals]``: calls a policy makes wait for a person's approval (`require_approval`)."""

    enabled: bool = key(
        "Whether calls may wait for approval; off, a decision requiring one refuses the call.",
        default=False,
    )
    path: str | None = key(
        "The file pending and decided approvals are kept in (durable across restarts); "
        "required when enabled.",
        shown="required",
    )
    ttl_s: float = key(
        "How long an approval request stays open when the policy names no `ttl_s`.", 900.0
    )
    backend: str = key(
        "`file` (the approvals in `path`, one host) or `redis` (the Redis of `[state]`, "
        'shared by every replica; needs `state.backend = "redis"`).',
        "file",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsoleTable:
    """``[console]``: the operator console, web pages for approvers and auditors."""

    enabled: bool = key("Whether `gateway serve` serves the console (at `path`).", default=False)
    path: str = key("Where the console is served (`/console`: one path segment).", "/console")
    approvers: tuple[str, ...] = key(
        "Caller subjects who may approve and reject (and read everything an auditor reads).",
        (),
    )
    approver_roles: tuple[str, ...] = key(
        "Caller roles (the context's `roles`: an API key's context, a token's roles claim) "
        "whose holders are approvers.",
        (),
    )
    auditors: tuple[str, ...] = key(
        "Caller subjects who may read approvals, decisions and replay results, never decide.",
        (),
    )
    auditor_roles: tuple[str, ...] = key("Caller roles whose holders are auditors.", ())
    idle_timeout_s: float = key("A console session ends after this long unused.", 900.0)
    max_age_s: float = key(
        "A console session ends this long after sign-in, used or not (and a bearer "
        "token's session when the token expires).",
        28800.0,
    )
    max_sessions: int = key(
        "The most console sessions at once; the oldest ends when one more signs in.", 1000
    )
    trail_records: int = key(
        "How many of the trail's most recent records the decision views read.", 5000
    )
    replay_reports: str | None = key(
        "A folder of `gateway replay --json` reports the replay view shows.",
        shown="none",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthzenTable:
    """``[authzen]``: the OpenID AuthZEN Authorization API 1.0 on the same policies."""

    enabled: bool = key(
        "Whether `POST /access/v1/evaluation(s)` and `GET /.well-known/authzen-configuration` "
        "are served (by `gateway serve`).",
        default=False,
    )
    trusted_peps: tuple[str, ...] = key(
        "Caller subjects (from their own credentials) trusted to name the subject in the "
        "request body; any other caller is always the subject.",
        (),
    )
    base_url: str | None = key(
        "The `policy_decision_point` identifier in the metadata (`https://pdp.example`).",
        shown="the request's own scheme and host",
    )
    max_evaluations: int = key("The most evaluations one batch may hold (1-1000).", 64)


@dataclass(frozen=True, slots=True, kw_only=True)
class StateTable:
    """``[state]``: session history, labels and quotas for the policy (`input.state`)."""

    backend: str = key(
        "`memory` (this process only) or `redis` (shared by every replica).", "memory"
    )
    url: str | None = key(
        "The Redis server (`redis://host:port/db`, `rediss://`, `unix://`). Exactly one of "
        '`url` and `url_env` with `backend = "redis"`.'
    )
    url_env: str | None = key(
        "The environment variable holding the Redis URL (when it carries a password)."
    )
    timeout_s: float = key(
        "The longest one Redis command may take; a call that needs state then fails "
        "closed (`state_unavailable`).",
        DEFAULT_STATE_TIMEOUT_S,
    )
    key_prefix: str = key("The prefix of every Redis key.", DEFAULT_STATE_PREFIX)
    tools: tuple[str, ...] = key(
        'The tools whose decisions read state (`input.state`); `"*"` means every tool. A '
        "decision with `labels` or `quotas` is reserved for any tool.",
        (),
    )
    windows_s: tuple[int, ...] = key(
        "The fixed windows counted, in seconds; a decision's quota names one of them.",
        DEFAULT_WINDOWS,
    )
    history_max: int = key("The calls kept per session (1-10000).", DEFAULT_HISTORY_MAX)
    session_ttl_s: int = key(
        "How long a session is kept after its last call, in seconds.", DEFAULT_SESSION_TTL_S
    )
    max_sessions: int = key(
        "The live sessions the `memory` backend keeps at most; when all are live a new "
        "session is refused (`state_unavailable`), never an old one forgotten.",
        DEFAULT_MAX_SESSIONS,
    )
    max_sessions_per_caller: int | None = key(
        "The live sessions one caller (tenant and subject) may hold in the `memory` backend, "
        "so that one caller cannot fill it for the others (default: no bound but "
        "`max_sessions`).",
        shown="none",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetryTable:
    """``[telemetry]``: OpenTelemetry traces of every call, exported over OTLP/HTTP."""

    enabled: bool = key("Whether spans are made and exported.", default=False)
    endpoint: str = key(
        "The OTLP/HTTP traces endpoint (`http(s)://collector:4318/v1/traces`).",
        "http://127.0.0.1:4318/v1/traces",
    )
    service_name: str = key("The `service.name` of the spans' resource.", "gateway")
    headers: Mapping[str, str] = key(
        "HTTP headers sent with every export (a collector's API key, say).", factory=dict
    )
    timeout_s: float = key("The longest one export may take, in seconds.", 10.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigFile:
    """The whole file: one table per surface and part."""

    engine: EngineTable = key("The policy engine.", factory=EngineTable)
    cache: CacheTable = key("The decision cache.", factory=CacheTable)
    audit: AuditTable = key("The audit trail.", factory=AuditTable)
    auth: AuthTable = key("Authentication.", factory=AuthTable)
    server: ServerTable = key("The HTTP listener.", factory=ServerTable)
    tools: ToolsTable = key("The Python tools.", factory=ToolsTable)
    mcp: McpTable = key("The MCP surface.", factory=McpTable)
    paths: PathsTable = key("Path arguments.", factory=PathsTable)
    replay: ReplayTable = key("The replay capture.", factory=ReplayTable)
    shadow: ShadowTable = key("Shadow evaluation.", factory=ShadowTable)
    log: LogTable = key("Logging.", factory=LogTable)
    authzen: AuthzenTable = key("The AuthZEN decision API.", factory=AuthzenTable)
    telemetry: TelemetryTable = key("OpenTelemetry traces.", factory=TelemetryTable)
    approvals: ApprovalsTable = key("Approvals.", factory=ApprovalsTable)
    console: ConsoleTable = key("The operator console.", factory=ConsoleTable)
    state: StateTable = key("Session and quota state.", factory=StateTable)

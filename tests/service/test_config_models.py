"""The configuration's models: defaults are the library's, every key is typed, none is unknown."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gateway.audit import JsonlFileSink
from gateway.mcp import McpFront
from gateway.mcp._sessions import (
    DEFAULT_MAX_SESSIONS_PER_CALLER,
    DEFAULT_SESSION_IDLE_TIMEOUT_S,
    SessionTable,
)
from gateway.policy import (
    DEFAULT_DECISION_PATH,
    DEFAULT_MAX_TTL,
    DecisionCache,
    EmbeddedEngine,
    OpaRestEngine,
    PolicyAuthorizer,
    VerificationKey,
)
from gateway.policy._bundle import _ALGORITHMS as LIBRARY_BUNDLE_ALGORITHMS
from gateway.policy._rest import DEFAULT_REVISION_INTERVAL, DEFAULT_TIMEOUT
from gateway.policy._wasm import DEFAULT_TIMEOUT_S
from gateway.replay import ShadowSettings
from gateway.replay._shadow import ShadowEvaluator
from gateway.server._app import GatewayApp
from gateway.service import ConfigError, GatewayConfig, load_config, parse_config
from gateway.service import _config as config_module
from gateway.service import _config_models as models
from tests.server.conftest import ALICE, POLICIES, key_digest, toml_value

Data = dict[str, Any]
_PEM = (
    ec.generate_private_key(ec.SECP256R1())
    .public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    .decode("ascii")
)
AUDIT_KEY = b"a-test-audit-key-of-32-bytes-ok!"


def _default_of(function: Callable[..., object], name: str) -> object:
    return inspect.signature(function).parameters[name].default


def _key_default(model: type[Any], name: str) -> object:
    spec = models.keys_of(model)[name][0]
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return spec.default


# (key, the config's default, the library's): each config default is the library's own.
LIBRARY_DEFAULTS: list[tuple[str, object, object]] = [
    (
        "engine.timeout_s (embedded)",
        _key_default(models.EngineTable, "timeout_s"),
        DEFAULT_TIMEOUT_S,
    ),
    (
        "engine.timeout_s (embedded constructor)",
        _key_default(models.EngineTable, "timeout_s"),
        _default_of(EmbeddedEngine, "timeout_s"),
    ),
    ("engine.timeout_s (REST)", _key_default(models.EngineTable, "timeout_s"), DEFAULT_TIMEOUT),
    (
        "engine.timeout_s (REST constructor)",
        _key_default(models.EngineTable, "timeout_s"),
        _default_of(OpaRestEngine, "timeout"),
    ),
    (
        "engine.revision_interval_s",
        _key_default(models.EngineTable, "revision_interval_s"),
        DEFAULT_REVISION_INTERVAL,
    ),
    (
        "engine.revision_interval_s (constructor)",
        _key_default(models.EngineTable, "revision_interval_s"),
        _default_of(OpaRestEngine, "revision_interval"),
    ),
    (
        "engine.decision_path",
        _key_default(models.EngineTable, "decision_path"),
        DEFAULT_DECISION_PATH,
    ),
    (
        "engine.decision_path (authorizer)",
        _key_default(models.EngineTable, "decision_path"),
        _default_of(PolicyAuthorizer, "path"),
    ),
    (
        "engine.verification.algorithm",
        _key_default(models.VerificationTable, "algorithm"),
        VerificationKey.__dataclass_fields__["algorithm"].default,
    ),
    (
        "cache.max_entries",
        _key_default(models.CacheTable, "max_entries"),
        _default_of(DecisionCache, "maxsize"),
    ),
    ("cache.max_ttl_s", _key_default(models.CacheTable, "max_ttl_s"), DEFAULT_MAX_TTL),
    (
        "cache.max_ttl_s (constructor)",
        _key_default(models.CacheTable, "max_ttl_s"),
        _default_of(DecisionCache, "max_ttl"),
    ),
    (
        "cache.default_ttl_s",
        _key_default(models.CacheTable, "default_ttl_s"),
        _default_of(DecisionCache, "default_ttl"),
    ),
    (
        "audit.fsync",
        _key_default(models.AuditTable, "fsync"),
        str(getattr(_default_of(JsonlFileSink, "fsync"), "value", "")),
    ),
    (
        "audit.max_bytes",
        _key_default(models.AuditTable, "max_bytes"),
        _default_of(JsonlFileSink, "max_bytes"),
    ),
    (
        "server.max_body_bytes (HTTP API)",
        _key_default(models.ServerTable, "max_body_bytes"),
        _default_of(GatewayApp, "max_body_bytes"),
    ),
    (
        "server.max_body_bytes (MCP over HTTP)",
        _key_default(models.ServerTable, "max_body_bytes"),
        _default_of(McpFront.http_app, "max_body_bytes"),
    ),
    (
        "server.host (MCP over HTTP)",
        _key_default(models.ServerTable, "host"),
        _default_of(McpFront.http_app, "host"),
    ),
    (
        "mcp.max_sessions_per_caller",
        _key_default(models.McpTable, "max_sessions_per_caller"),
        DEFAULT_MAX_SESSIONS_PER_CALLER,
    ),
    (
        "mcp.max_sessions_per_caller (constructor)",
        _key_default(models.McpTable, "max_sessions_per_caller"),
        _default_of(SessionTable, "max_per_caller"),
    ),
    (
        "mcp.session_idle_timeout_s",
        _key_default(models.McpTable, "session_idle_timeout_s"),
        DEFAULT_SESSION_IDLE_TIMEOUT_S,
    ),
    (
        "mcp.session_idle_timeout_s (constructor)",
        _key_default(models.McpTable, "session_idle_timeout_s"),
        _default_of(SessionTable, "idle_timeout"),
    ),
    (
        "shadow.decision_path",
        _key_default(models.ShadowTable, "decision_path"),
        _default_of(ShadowEvaluator, "path"),
    ),
    (
        "shadow.queue_size",
        _key_default(models.ShadowTable, "queue_size"),
        _default_of(ShadowEvaluator, "queue_size"),
    ),
    (
        "shadow.budget_s",
        _key_default(models.ShadowTable, "budget_s"),
        _default_of(ShadowEvaluator, "budget_s"),
    ),
    (
        "shadow.workers",
        _key_default(models.ShadowTable, "workers"),
        _default_of(ShadowEvaluator, "workers"),
    ),
    ("shadow.timeout_s", _key_default(models.ShadowTable, "timeout_s"), DEFAULT_TIMEOUT_S),
    (
        "engine.poll_interval_s",
        _key_default(models.EngineTable, "poll_interval_s"),
        _default_of(EmbeddedEngine.from_bundle_server, "poll_interval_s"),
    ),
    (
        "engine.download_timeout_s",
        _key_default(models.EngineTable, "download_timeout_s"),
        _default_of(EmbeddedEngine.from_bundle_server, "download_timeout_s"),
    ),
    (
        "engine.max_bundle_bytes",
        _key_default(models.EngineTable, "max_bundle_bytes"),
        _default_of(EmbeddedEngine.from_bundle_server, "max_bundle_bytes"),
    ),
]


@pytest.mark.parametrize(
    ("key", "configured", "library"), LIBRARY_DEFAULTS, ids=[row[0] for row in LIBRARY_DEFAULTS]
)
def test_each_config_default_is_the_librarys_own(
    key: str, configured: object, library: object
) -> None:
    assert configured == library, key


# (table model, the validated config it becomes): a key both have defaults to the same value.
MODEL_PAIRS: list[tuple[type[Any], type[Any]]] = [
    (models.EngineTable, config_module.EngineConfig),
    (models.CacheTable, config_module.CacheConfig),
    (models.AuditTable, config_module.AuditConfig),
    (models.JwtTable, config_module.JwtConfig),
    (models.ServerTable, config_module.ServerConfig),
    (models.UpstreamTable, config_module.McpUpstreamConfig),
    (models.McpTable, config_module.McpConfig),
    (models.ShadowTable, ShadowSettings),
]


def _defaults(model: type[Any]) -> dict[str, object]:
    found: dict[str, object] = {}
    for spec in dataclasses.fields(model):
        if spec.default_factory is not dataclasses.MISSING:
            found[spec.name] = spec.default_factory()
        elif spec.default is not dataclasses.MISSING:
            found[spec.name] = spec.default
    return found


@pytest.mark.parametrize(
    ("table", "validated"), MODEL_PAIRS, ids=[pair[1].__name__ for pair in MODEL_PAIRS]
)
def test_a_validated_config_defaults_as_its_table_does(
    table: type[Any], validated: type[Any]
) -> None:
    keys, values = _defaults(table), _defaults(validated)
    shared = sorted(set(keys) & set(values) - {"verification", "upstreams"})

    assert shared  # the pair shares keys
    assert {name: values[name] for name in shared} == {name: keys[name] for name in shared}


def test_the_bundle_algorithms_the_config_accepts_are_the_ones_the_policy_layer_verifies() -> None:
    assert set(config_module._BUNDLE_ALGORITHMS) == set(LIBRARY_BUNDLE_ALGORITHMS)


def test_a_config_that_sets_nothing_optional_serves_the_librarys_cache_bound(
    tmp_path: Path,
) -> None:
    config = parse_config(_minimal(tmp_path), base=tmp_path)

    assert config.cache.max_ttl_s == DEFAULT_MAX_TTL
    assert config.engine.timeout_s == DEFAULT_TIMEOUT_S
    assert config.mcp.max_sessions_per_caller == DEFAULT_MAX_SESSIONS_PER_CALLER


# -- a valid configuration with every table in it ---------------------------------------------


def _minimal(tmp_path: Path) -> Data:
    (tmp_path / "audit.key").write_bytes(AUDIT_KEY)
    return {
        "engine": {"kind": "embedded", "policies": str(POLICIES)},
        "audit": {"path": str(tmp_path / "audit.jsonl"), "key_file": str(tmp_path / "audit.key")},
        "auth": {"api_keys": [{"sha256": key_digest(ALICE), "context": {"subject": "alice"}}]},
        "tools": {"modules": ["examples.example_tools:TOOLS"]},
    }


def _every_table(tmp_path: Path) -> Data:
    (tmp_path / "k.pem").write_text(_PEM, encoding="utf-8")
    data = _minimal(tmp_path)
    data["engine"]["verification"] = {}
    data["cache"] = {"enabled": True, "max_ttl_s": 5}
    data["auth"]["jwt"] = {
        "algorithms": ["ES256"],
        "public_key_file": "k.pem",
        "issuer": "i",
    }
    data["auth"]["oauth"] = {
        "resource": "https://gw.example.com/mcp",
        "authorization_servers": ["https://as.example.com"],
    }
    data["server"] = {"port": 0}
    data["mcp"] = {
        "stdio_context": {"subject": "local"},
        "upstreams": [{"name": "fs", "command": "true", "prefix": "fs__"}],
    }
    data["paths"] = {"resolve": {"read_file": ["/path"]}}
    data["replay"] = {"capture": False}
    data["shadow"] = {"enabled": False}
    data["log"] = {"format": "json", "access": True}
    data["approvals"] = {"enabled": False, "ttl_s": 60}
    data["state"] = {"backend": "redis", "url": "redis://127.0.0.1:6379/0", "windows_s": [60]}
    data["authzen"] = {"enabled": True, "trusted_peps": ["pep"]}
    data["telemetry"] = {"enabled": True, "headers": {"x-key": "k"}}
    data["console"] = {"enabled": False, "approvers": ["treasurer"]}
    return data


def _tables(model: type[Any], node: Any, path: str) -> Iterator[tuple[type[Any], str, Data]]:
    # Every table of ``node`` that a model reads, as (model, dotted path and separator, table).
    yield model, path, node
    for name, (_, kind) in models.keys_of(model).items():
        if kind.model is None or name not in node:
            continue
        if kind.many:
            for index, item in enumerate(node[name]):
                yield from _tables(kind.model, item, f"{path}{name}[{index}].")
        else:
            yield from _tables(kind.model, node[name], f"{path}{name}.")


def _all_models(model: type[Any]) -> set[type[Any]]:
    found = {model}
    for _, kind in models.keys_of(model).values():
        if kind.model is not None:
            found |= _all_models(kind.model)
    return found


def test_the_valid_config_used_below_holds_every_table_the_models_have(tmp_path: Path) -> None:
    data = _every_table(tmp_path)

    assert isinstance(parse_config(data, base=tmp_path), GatewayConfig)
    assert {model for model, _, _ in _tables(models.ConfigFile, data, "")} == _all_models(
        models.ConfigFile
    )


_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,20}", fullmatch=True)
_VALUES = st.one_of(st.integers(), st.text(max_size=5), st.booleans(), st.just({"a": 1}))


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(choice=st.integers(min_value=0), name=_NAMES, value=_VALUES)
def test_an_unknown_key_anywhere_is_refused_naming_its_full_path(
    tmp_path: Path, choice: int, name: str, value: object
) -> None:
    data = _every_table(tmp_path)
    tables = list(_tables(models.ConfigFile, data, ""))
    model, path, _ = tables[choice % len(tables)]
    if name in models.keys_of(model):
        return
    changed = copy.deepcopy(data)
    _, _, table = list(_tables(models.ConfigFile, changed, ""))[choice % len(tables)]
    table[name] = value

    with pytest.raises(ConfigError) as caught:
        parse_config(changed, base=tmp_path)

    assert str(caught.value) == f"{path}{name}: unknown key"


def _typed_keys(data: Data) -> Iterator[tuple[str, Data, str, models.Kind]]:
    for model, path, table in _tables(models.ConfigFile, data, ""):
        for name, (_, kind) in models.keys_of(model).items():
            if kind.model is None:
                yield f"{path}{name}", table, name, kind


_WRONG: dict[str, list[object]] = {
    "boolean": ["secret-value-1", 1, [True]],
    "integer": ["secret-value-1", 1.5, True, {"a": 1}],
    "number": ["secret-value-1", True, [1.0]],
    "string": [12345678, True, ["secret-value-1"], {"secret": "secret-value-1"}],
    "array of strings": ["secret-value-1", [1], ["ok", 7], {"a": "b"}],
    "array of integers": ["secret-value-1", ["secret-value-1"], [1, True], [1.5], {"a": 1}],
    "table of strings": ["secret-value-1", {"a": 1}, [["secret-value-1"]]],
    "table": ["secret-value-1", ["secret-value-1"], 3],
}


def test_a_value_of_the_wrong_type_is_refused_naming_key_and_type_never_the_value(
    tmp_path: Path,
) -> None:
    data = _every_table(tmp_path)
    checked = 0
    for index, (dotted, _, name, kind) in enumerate(list(_typed_keys(data))):
        for wrong in _WRONG[kind.name]:
            changed = copy.deepcopy(data)
            _, table, _, _ = list(_typed_keys(changed))[index]
            table[name] = wrong

            with pytest.raises(ConfigError) as caught:
                parse_config(changed, base=tmp_path)

            message = str(caught.value)
            assert message == f"{dotted}: must be {kind.expected}", (dotted, wrong)
            assert "secret-value" not in message
            checked += 1
    assert checked > 150


@pytest.mark.parametrize("number", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize(
    "dotted",
    ["engine.timeout_s", "engine.revision_interval_s", "cache.max_ttl_s", "auth.jwt.leeway_s"],
)
def test_a_number_that_is_not_finite_is_refused(tmp_path: Path, dotted: str, number: float) -> None:
    data = _every_table(tmp_path)
    *parents, last = dotted.split(".")
    node: Any = data
    for part in parents:
        node = node[part]
    node[last] = number

    with pytest.raises(ConfigError, match=rf"^{dotted}: must be finite$"):
        parse_config(data, base=tmp_path)


def test_a_negative_audit_rotation_size_is_refused(tmp_path: Path) -> None:
    data = _minimal(tmp_path)
    data["audit"]["max_bytes"] = 0

    with pytest.raises(ConfigError, match=r"^audit\.max_bytes: must be at least 1$"):
        parse_config(data, base=tmp_path)


def test_an_invalid_value_pattern_is_refused_without_quoting_it(tmp_path: Path) -> None:
    data = _minimal(tmp_path)
    data["audit"]["mask_values"] = ["ok", "(secret-value-1"]

    with pytest.raises(ConfigError) as caught:
        parse_config(data, base=tmp_path)

    assert str(caught.value).startswith("audit.mask_values: entry 1 is not a regular expression")
    assert "secret-value" not in str(caught.value)


# -- fuzzing the loader -----------------------------------------------------------------------

# generate_key writes a key file where key_file says: generated documents never ask for it.
_KNOWN = sorted(
    {name for model in _all_models(models.ConfigFile) for name in models.keys_of(model)}
    - {"generate_key"}
)


def _asks_to_write(value: object) -> bool:
    if isinstance(value, dict):
        return "generate_key" in value or any(_asks_to_write(item) for item in value.values())
    if isinstance(value, list):
        return any(_asks_to_write(item) for item in value)
    return False


_SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(["embedded", "opa", "always", "RS256", "HS256", "/x", "a:b", "http://h"]),
)


def _toml_document(data: Data) -> str:
    lines = []
    for name, value in data.items():
        lines.append(f"{toml_value(name)} = {_inline(value)}")
    return "\n".join(lines) + "\n"


def _inline(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_value(k)} = {_inline(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_inline(item) for item in value) + "]"
    return toml_value(value)


_DOCUMENTS = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.one_of(st.sampled_from(_KNOWN), _NAMES), children, max_size=4),
    ),
    max_leaves=25,
)
_ROOTS = st.dictionaries(
    st.sampled_from([*models.keys_of(models.ConfigFile), "extra"]),
    st.one_of(
        st.dictionaries(st.one_of(st.sampled_from(_KNOWN), _NAMES), _DOCUMENTS, max_size=6),
        _DOCUMENTS,
    ),
    max_size=10,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(document=_ROOTS)
def test_the_loader_refuses_any_generated_document_with_a_config_error_only(
    tmp_path: Path, document: Data
) -> None:
    assume(not _asks_to_write(document))
    path = tmp_path / "fuzz.toml"
    path.write_text(_toml_document(document), encoding="utf-8")
    with contextlib.suppress(ConfigError):
        load_config(path)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(choice=st.integers(min_value=0), value=_DOCUMENTS)
def test_any_value_at_any_key_of_a_valid_config_loads_or_is_a_config_error(
    tmp_path: Path, choice: int, value: object
) -> None:
    data = _every_table(tmp_path)
    keys = list(_typed_keys(data))
    _, table, name, _ = keys[choice % len(keys)]
    assume(name != "generate_key" and not _asks_to_write(value))
    table[name] = value
    path = tmp_path / "fuzz.toml"
    path.write_text(_toml_document(data), encoding="utf-8")
    with contextlib.suppress(ConfigError):
        load_config(path)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(max_size=200))
def test_the_loader_refuses_arbitrary_text_with_a_config_error_only(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "fuzz.toml"
    path.write_text(text, encoding="utf-8")
    with contextlib.suppress(ConfigError):
        load_config(path)


def test_a_negative_default_ttl_is_refused_naming_its_own_key(tmp_path: Path) -> None:
    data = _minimal(tmp_path)
    data["cache"] = {"default_ttl_s": -1}

    with pytest.raises(ConfigError, match=r"^cache\.default_ttl_s: "):
        parse_config(data, base=tmp_path)


def test_the_shadow_and_replay_tables_become_part_of_the_validated_config(tmp_path: Path) -> None:
    data = _minimal(tmp_path)
    data["shadow"] = {"enabled": True, "policies": str(POLICIES), "queue_size": 8}
    data["replay"] = {"capture": False, "capture_dir": "capture"}

    config = parse_config(data, base=tmp_path)

    assert config.replay is None  # the capture is off
    assert config.shadow is not None
    assert (config.shadow.policies, config.shadow.queue_size) == (POLICIES, 8)
    assert config.shadow.budget_s == _key_default(models.ShadowTable, "budget_s")


def test_an_invalid_shadow_setting_is_a_config_error_naming_its_key(tmp_path: Path) -> None:
    data = _minimal(tmp_path)
    data["shadow"] = {"enabled": True}

    with pytest.raises(ConfigError, match=r"^shadow\.policies: name exactly one candidate"):
        parse_config(data, base=tmp_path)


def _following(tmp_path: Path, **engine: object) -> Data:
    data = _minimal(tmp_path)
    data["engine"] = {"kind": "embedded", "bundle_url": "http://127.0.0.1:1/b.tar.gz", **engine}
    return data


def test_the_embedded_engine_may_follow_a_bundle_server(tmp_path: Path) -> None:
    config = parse_config(_following(tmp_path, poll_interval_s=0.5), base=tmp_path)

    assert config.engine.bundle_url == "http://127.0.0.1:1/b.tar.gz"
    assert (config.engine.bundle, config.engine.policies) == (None, None)
    assert config.engine.poll_interval_s == 0.5
    assert config.engine.max_bundle_bytes == _key_default(models.EngineTable, "max_bundle_bytes")


BUNDLE_SERVER_ERRORS: list[tuple[str, Callable[[Path], Data], str]] = [
    (
        "with policies too",
        lambda tmp: _following(tmp, policies=str(POLICIES)),
        "engine.bundle: ",
    ),
    ("not http", lambda tmp: _following(tmp, bundle_url="file:///b.tar.gz"), "engine.bundle_url: "),
    ("interval zero", lambda tmp: _following(tmp, poll_interval_s=0), "engine.poll_interval_s: "),
    (
        "download timeout negative",
        lambda tmp: _following(tmp, download_timeout_s=-1),
        "engine.download_timeout_s: ",
    ),
    ("size zero", lambda tmp: _following(tmp, max_bundle_bytes=0), "engine.max_bundle_bytes: "),
    (
        "polling without a bundle server",
        lambda tmp: {**_minimal(tmp), "engine": {"policies": str(POLICIES), "poll_interval_s": 1}},
        "engine.poll_interval_s: only for engine.bundle_url",
    ),
]


@pytest.mark.parametrize(
    ("case", "make", "prefix"), BUNDLE_SERVER_ERRORS, ids=[row[0] for row in BUNDLE_SERVER_ERRORS]
)
def test_an_invalid_bundle_server_setting_names_its_key(
    tmp_path: Path, case: str, make: Callable[[Path], Data], prefix: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(make(tmp_path), base=tmp_path)

    assert str(caught.value).startswith(prefix), (case, str(caught.value))

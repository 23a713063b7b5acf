"""The TOML configuration: every invalid key is named, valid files load, paths resolve."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.server import ConfigError, GatewayConfig, api_key_digest, load_config, parse_config
from gateway.server._config import import_tools
from tests.server.conftest import ALICE, EXAMPLE_CONFIG, POLICIES, JwtKeys, key_digest

Data = dict[str, Any]


def valid(tmp_path: Path) -> Data:
    """A minimal valid configuration (embedded engine, one API key)."""
    return {
        "engine": {"kind": "embedded", "policies": str(POLICIES)},
        "audit": {"path": str(tmp_path / "audit.jsonl")},
        "auth": {"api_keys": [{"sha256": key_digest(ALICE), "context": {"subject": "alice"}}]},
        "tools": {"modules": ["examples.example_tools:TOOLS"]},
    }


def at(data: Data, dotted: str, value: object) -> Data:
    """``data`` with the value at a dotted path set (``...`` deletes it)."""
    changed = copy.deepcopy(data)
    *parents, last = dotted.split(".")
    node: Any = changed
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if value is ...:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return changed


Change = Callable[[Data], Data]


def jwt_table(**values: object) -> Change:
    def change(data: Data) -> Data:
        base: Data = {"algorithms": ["RS256"], "issuer": "i", "audience": "a"}
        base.update(values)
        return at(data, "auth.jwt", {k: v for k, v in base.items() if v is not None})

    return change


def setting(dotted: str, value: object) -> Change:
    return lambda data: at(data, dotted, value)


A_DIGEST = "a" * 64

INVALID: list[tuple[str, Change, str]] = [
    # (case, change to a valid config, the key the message must start with)
    ("unknown top-level key", setting("listen", "x"), "listen: unknown key"),
    ("engine not a table", setting("engine", "embedded"), "engine: must be a table"),
    ("engine unknown key", setting("engine.policy", "x"), "engine.policy: unknown key"),
    ("engine.kind unknown", setting("engine.kind", "wasm"), "engine.kind: "),
    ("engine.kind not a string", setting("engine.kind", 1), "engine.kind: "),
    ("engine.policies missing", setting("engine.policies", ...), "engine.policies: "),
    (
        "engine.policies not a folder",
        setting("engine.policies", "/no/such/dir"),
        "engine.policies: ",
    ),
    ("engine.policies a number", setting("engine.policies", 3), "engine.policies: "),
    ("engine.url missing for opa", setting("engine.kind", "opa"), "engine.url: "),
    (
        "engine.url not http",
        lambda d: at(at(d, "engine.kind", "opa"), "engine.url", "unix:///opa.sock"),
        "engine.url: ",
    ),
    ("engine.timeout_s zero", setting("engine.timeout_s", 0), "engine.timeout_s: "),
    ("engine.timeout_s negative", setting("engine.timeout_s", -1.5), "engine.timeout_s: "),
    ("engine.timeout_s text", setting("engine.timeout_s", "1"), "engine.timeout_s: "),
    ("engine.timeout_s bool", setting("engine.timeout_s", True), "engine.timeout_s: "),
    (
        "engine.decision_path invalid",
        setting("engine.decision_path", "a b/c"),
        "engine.decision_path: ",
    ),
    ("engine.decision_path empty", setting("engine.decision_path", ""), "engine.decision_path: "),
    ("cache unknown key", setting("cache.size", 1), "cache.size: unknown key"),
    ("cache.enabled not bool", setting("cache.enabled", "yes"), "cache.enabled: "),
    ("cache.max_entries zero", setting("cache.max_entries", 0), "cache.max_entries: "),
    ("cache.max_entries float", setting("cache.max_entries", 1.5), "cache.max_entries: "),
    ("cache.max_ttl_s negative", setting("cache.max_ttl_s", -1), "cache.max_ttl_s: "),
    ("audit unknown key", setting("audit.file", "x"), "audit.file: unknown key"),
    ("audit.path missing", setting("audit.path", ...), "audit.path: "),
    ("audit.fsync unknown", setting("audit.fsync", "sometimes"), "audit.fsync: "),
    ("audit.fsync not text", setting("audit.fsync", True), "audit.fsync: "),
    ("audit.enabled not bool", setting("audit.enabled", 1), "audit.enabled: "),
    ("audit.max_bytes float", setting("audit.max_bytes", 1.5), "audit.max_bytes: "),
    ("audit.key_env unset", setting("audit.key_env", "GATEWAY_TEST_UNSET_KEY"), "audit.key_env: "),
    ("audit.mask_keys not a list", setting("audit.mask_keys", "iban"), "audit.mask_keys: "),
    (
        "audit.mask_pointers not pointers",
        setting("audit.mask_pointers", ["iban"]),
        "audit.mask_pointers: ",
    ),
    ("auth missing", setting("auth", ...), "auth: "),
    ("auth empty", setting("auth", {}), "auth: "),
    ("auth not a table", setting("auth", "keys"), "auth: must be a table"),
    ("auth unknown key", setting("auth.oauth", {}), "auth.oauth: unknown key"),
    ("auth.api_keys not a list", setting("auth.api_keys", "k"), "auth.api_keys: "),
    ("auth.api_keys entry not a table", setting("auth.api_keys", ["k"]), "auth.api_keys[0]: "),
    ("sha256 upper case", setting("auth.api_keys.0.sha256", "A" * 64), "auth.api_keys[0].sha256: "),
    ("sha256 too short", setting("auth.api_keys.0.sha256", "a" * 63), "auth.api_keys[0].sha256: "),
    ("sha256 not hex", setting("auth.api_keys.0.sha256", "g" * 64), "auth.api_keys[0].sha256: "),
    ("sha256 the plain key", setting("auth.api_keys.0.sha256", ALICE), "auth.api_keys[0].sha256: "),
    ("sha256 missing", setting("auth.api_keys.0.sha256", ...), "auth.api_keys[0].sha256: "),
    ("api key unknown member", setting("auth.api_keys.0.key", ALICE), "auth.api_keys[0].key: "),
    ("context missing", setting("auth.api_keys.0.context", ...), "auth.api_keys[0].context: "),
    (
        "context without subject",
        setting("auth.api_keys.0.context", {"roles": []}),
        "auth.api_keys[0].context: ",
    ),
    (
        "second key invalid",
        lambda d: at(d, "auth.api_keys", [*d["auth"]["api_keys"], {"sha256": "x", "context": {}}]),
        "auth.api_keys[1].sha256: ",
    ),
    ("jwt not a table", setting("auth.jwt", "yes"), "auth.jwt: must be a table"),
    ("jwt without a key source", jwt_table(), "auth.jwt: "),
    ("jwt unknown key", jwt_table(secret="s"), "auth.jwt.secret: unknown key"),  # noqa: S106
    (
        "jwt algorithm none",
        jwt_table(algorithms=["none"], public_key_file="k.pem"),
        "auth.jwt.algorithms: ",
    ),
    ("jwt algorithms not a list", jwt_table(algorithms="RS256"), "auth.jwt.algorithms: "),
    (
        "jwt public key file missing",
        jwt_table(public_key_file="missing.pem"),
        "auth.jwt.public_key_file: ",
    ),
    ("jwt jwks file missing", jwt_table(jwks_file="missing.json"), "auth.jwt.jwks_file: "),
    (
        "jwt secret env unset",
        jwt_table(algorithms=["HS256"], secret_env="GATEWAY_TEST_UNSET"),  # noqa: S106
        "auth.jwt.secret_env: ",
    ),
    ("jwt two key sources", jwt_table(public_key_file="k.pem", jwks_file="k.pem"), "auth.jwt: "),
    (
        "jwt HS256 with a public key",
        jwt_table(algorithms=["HS256"], public_key_file="k.pem"),
        "auth.jwt.algorithms: ",
    ),
    ("jwt issuer missing", jwt_table(issuer=None, public_key_file="k.pem"), "auth.jwt.issuer: "),
    (
        "jwt audience missing",
        jwt_table(audience=None, public_key_file="k.pem"),
        "auth.jwt.audience: ",
    ),
    ("jwt issuer not text", jwt_table(issuer=3, public_key_file="k.pem"), "auth.jwt.issuer: "),
    (
        "jwt claims not names",
        jwt_table(claims={"subject": 1}, public_key_file="k.pem"),
        "auth.jwt.claims: ",
    ),
    ("jwt leeway text", jwt_table(leeway_s="5", public_key_file="k.pem"), "auth.jwt.leeway_s: "),
    ("server unknown key", setting("server.address", "x"), "server.address: unknown key"),
    ("server.port too large", setting("server.port", 65536), "server.port: "),
    ("server.port negative", setting("server.port", -1), "server.port: "),
    ("server.port text", setting("server.port", "8080"), "server.port: "),
    ("server.port bool", setting("server.port", True), "server.port: "),
    ("server.host not text", setting("server.host", 127), "server.host: "),
    ("server.max_body_bytes tiny", setting("server.max_body_bytes", 10), "server.max_body_bytes: "),
    ("tools missing", setting("tools", ...), "tools.modules: "),
    ("tools.modules empty", setting("tools.modules", []), "tools.modules: "),
    ("tools.modules not a list", setting("tools.modules", "a:b"), "tools.modules: "),
    (
        "tools.modules without attribute",
        setting("tools.modules", ["example_tools"]),
        "tools.modules: ",
    ),
    ("tools.modules two colons", setting("tools.modules", ["a:b:c"]), "tools.modules: "),
    ("tools unknown key", setting("tools.paths", []), "tools.paths: unknown key"),
]


@pytest.mark.parametrize(("case", "change", "prefix"), INVALID, ids=[c[0] for c in INVALID])
def test_an_invalid_config_names_its_key(
    tmp_path: Path, jwt_keys: JwtKeys, case: str, change: Change, prefix: str
) -> None:
    (tmp_path / "k.pem").write_text(jwt_keys.rsa_public_pem(), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        parse_config(change(valid(tmp_path)), base=tmp_path)
    assert str(caught.value).startswith(prefix), (case, str(caught.value))
    assert caught.value.code == "invalid_config"


def test_the_minimal_config_loads_with_defaults(tmp_path: Path) -> None:
    config = parse_config(valid(tmp_path), base=tmp_path)
    assert isinstance(config, GatewayConfig)
    assert config.engine.kind == "embedded"
    assert config.engine.decision_path == "gateway/authz/decision"
    assert config.engine.timeout_s == 1.0
    assert config.cache.enabled is True
    assert config.audit.fsync == "always"
    assert config.server.host == "127.0.0.1"
    assert config.server.port == 8080
    assert config.server.max_body_bytes == 2 * 1024 * 1024
    assert config.auth.jwt is None
    assert config.auth.api_keys[0].sha256 == key_digest(ALICE)
    assert config.auth.api_keys[0].context == {"subject": "alice"}
    assert config.tools == ("examples.example_tools:TOOLS",)


def test_a_full_config_file_loads(tmp_path: Path, jwt_keys: JwtKeys) -> None:
    (tmp_path / "jwks.json").write_text(jwt_keys.jwks(), encoding="utf-8")
    path = tmp_path / "gateway.toml"
    path.write_text(
        f"""
[engine]
kind = "opa"
url = "http://127.0.0.1:8181"
timeout_s = 0.5
revision_interval_s = 2
decision_path = "data.gateway.authz.decision"

[cache]
enabled = false
max_entries = 10
max_ttl_s = 5
default_ttl_s = 1.5

[audit]
enabled = true
path = "audit/trail.jsonl"
fsync = "batch"
max_bytes = 1048576
mask_keys = ["iban"]
mask_pointers = ["/card/number"]

[server]
host = "0.0.0.0"
port = 0
max_body_bytes = 4096

[[auth.api_keys]]
sha256 = "{api_key_digest(ALICE)}"
context = {{ subject = "alice", roles = ["reader"], tenant = "acme" }}

[auth.jwt]
algorithms = ["RS256", "ES256"]
jwks_file = "jwks.json"
issuer = "https://issuer.test"
audience = "gateway"
leeway_s = 5
claims = {{ subject = "email", roles = "groups" }}

[tools]
modules = ["examples.example_tools:TOOLS", "tests.server.conftest:TEST_TOOLS"]
""",
        encoding="utf-8",
    )
    config = load_config(path)
    assert config.source == path
    assert config.engine.kind == "opa"
    assert config.engine.url == "http://127.0.0.1:8181"
    assert config.engine.timeout_s == 0.5
    assert config.engine.decision_path == "data.gateway.authz.decision"
    assert (config.cache.enabled, config.cache.max_entries, config.cache.default_ttl_s) == (
        False,
        10,
        1.5,
    )
    assert config.audit.path == tmp_path / "audit" / "trail.jsonl"
    assert config.audit.fsync == "batch"
    assert config.audit.mask_pointers == ("/card/number",)
    assert (config.server.host, config.server.port, config.server.max_body_bytes) == (
        "0.0.0.0",  # noqa: S104 - a value read back from the file
        0,
        4096,
    )
    assert config.auth.jwt is not None
    assert config.auth.jwt.algorithms == ("RS256", "ES256")
    assert config.auth.jwt.jwks == jwt_keys.jwks()
    assert config.auth.jwt.leeway_s == 5.0
    assert config.auth.jwt.claims == {"subject": "email", "roles": "groups"}
    assert len(config.tools) == 2


def test_the_shipped_example_config_loads() -> None:
    config = load_config(EXAMPLE_CONFIG)
    assert config.engine.policies == POLICIES
    assert config.audit.path == (EXAMPLE_CONFIG.parent / "../.demo/audit/audit.jsonl").resolve()
    assert len(config.auth.api_keys) == 3
    digests = {key.sha256: key.context for key in config.auth.api_keys}
    assert digests[api_key_digest("demo-key-bob")] == {
        "subject": "bob",
        "roles": ["clerk"],
        "tenant": "globex",
    }


def test_relative_paths_resolve_against_the_config_folder(
    tmp_path: Path, jwt_keys: JwtKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "etc" / "gateway"
    (folder / "rego").mkdir(parents=True)
    (folder / "rego" / "p.rego").write_text("package p\n", encoding="utf-8")
    (folder / "keys").mkdir()
    (folder / "keys" / "jwt.pem").write_text(jwt_keys.rsa_public_pem(), encoding="utf-8")
    (folder / "gateway.toml").write_text(
        f"""
[engine]
policies = "rego"
[audit]
path = "../../var/audit.jsonl"
[auth.jwt]
public_key_file = "keys/jwt.pem"
issuer = "i"
audience = "a"
[[auth.api_keys]]
sha256 = "{key_digest(ALICE)}"
context = {{ subject = "alice" }}
[tools]
modules = ["m:t"]
""",
        encoding="utf-8",
    )
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    config = load_config(os.path.relpath(folder / "gateway.toml", elsewhere))
    assert config.engine.policies == folder / "rego"
    assert config.audit.path == tmp_path / "var" / "audit.jsonl"
    assert config.auth.jwt is not None
    assert config.auth.jwt.public_key == jwt_keys.rsa_public_pem()
    assert config.source == folder / "gateway.toml"


def test_unreadable_or_broken_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^config: cannot read"):
        load_config(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text('[engine\nkind = "embedded"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^config: .* is not valid TOML"):
        load_config(broken)


def test_secrets_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_TEST_SECRET", "s3cret-s3cret-s3cret-s3cret-s3cret")
    monkeypatch.setenv("GATEWAY_TEST_AUDIT_KEY", "audit-key")
    with_hmac = jwt_table(algorithms=["HS256", "HS512"], secret_env="GATEWAY_TEST_SECRET")  # noqa: S106
    data = with_hmac(at(valid(tmp_path), "audit.key_env", "GATEWAY_TEST_AUDIT_KEY"))
    config = parse_config(data, base=tmp_path)
    assert config.auth.jwt is not None
    assert config.auth.jwt.secret == b"s3cret-s3cret-s3cret-s3cret-s3cret"
    assert config.audit.key_env == "GATEWAY_TEST_AUDIT_KEY"
    monkeypatch.setenv("GATEWAY_TEST_SECRET", "")
    with pytest.raises(ConfigError, match=r"^auth\.jwt\.secret_env: "):
        parse_config(data, base=tmp_path)


def test_jwt_alone_is_enough_authentication(tmp_path: Path, jwt_keys: JwtKeys) -> None:
    (tmp_path / "k.pem").write_text(jwt_keys.rsa_public_pem(), encoding="utf-8")
    data = jwt_table(public_key_file="k.pem")(at(valid(tmp_path), "auth.api_keys", ...))
    config = parse_config(data, base=tmp_path)
    assert config.auth.api_keys == ()
    assert config.auth.jwt is not None
    assert config.auth.jwt.algorithms == ("RS256",)


def test_api_key_digest_is_the_sha256_hex() -> None:
    assert api_key_digest("demo-key-alice") == (
        "f80024220afd493b4d9592af870de7afe98061992d28fdb75480c9b717783fa2"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gateway_no_such_module:TOOLS", "tools.modules: cannot import 'gateway_no_such_module'"),
        ("examples.example_tools:NOPE", "tools.modules: 'examples.example_tools' has no attribute"),
        (
            "tests.server.test_config:A_DIGEST",
            "tools.modules: 'tests.server.test_config:A_DIGEST' is",
        ),
        (
            "tests.server.test_config:INVALID",
            "tools.modules: 'tests.server.test_config:INVALID'[0]",
        ),
    ],
)
def test_tool_imports_that_fail_name_tools_modules(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        import_tools(spec)
    assert str(caught.value).startswith(message), str(caught.value)


def test_tool_imports_accept_a_tool_or_a_list() -> None:
    assert [t.definition().name for t in import_tools("examples.example_tools:add")] == ["add"]
    assert len(import_tools("examples.example_tools:TOOLS")) == 6
    assert [t.definition().name for t in import_tools("tests.server.conftest:TEST_TOOLS")] == [
        "echo",
        "fail",
        "boom",
    ]
